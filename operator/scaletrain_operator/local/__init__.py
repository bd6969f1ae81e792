"""The local wing: `scaletrain run-local`. A job's pods as local processes (pods), one gang generation
at a time under the gang policy (gang), a progress view (view) and the closing summary (report)."""
