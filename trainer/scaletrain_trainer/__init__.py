"""ScaleTrain trainer: what every pod runs under torchrun.

This package's top level and its `config` and `validation` modules import without torch, because
the operator image (which reads the training config) has no torch.
"""

__version__ = "0.1.0"
