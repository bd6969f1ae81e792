"""Test doubles plugged into the trainer through its public import-path mechanism."""
