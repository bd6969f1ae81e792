"""ScaleTrain operator: the ScaleTrainJob API, its CRD, pure rendering of children, and the CLI."""

__version__ = "0.1.0"
