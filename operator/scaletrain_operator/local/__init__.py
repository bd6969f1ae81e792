"""The local room: `scaletrain run-local`. The pod executor runs pods as local processes with a
kubelet's semantics (executor, with pod_spec, expansion, pod_network and processes); the Job
controller's indexed pods (job_controller); one gang generation at a time under the gang policy
(gang), a progress view (view) and the closing summary (report)."""
