"""What the operator and the trainer agree on, and the only part of the trainer the operator imports.

Torch-free, because the operator image has no torch: the training config and its validation, YAML read
as Kubernetes reads it, the exit codes and results a pod reports, and `wire` (the environment, the
termination message and rank 0's progress report, each field defined once).
"""
