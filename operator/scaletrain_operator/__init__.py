"""ScaleTrain operator: the ScaleTrainJob API and its validation, the rendering of a job's children, the policy
both the operator and run-local decide by, the kopf operator, run-local, convert, and the CLI."""

__version__ = "0.1.0"
