"""A custom model and data set for ScaleTrain, named by import path in a ScaleTrainJob.

    training:
      model: {name: "my_models:mlp_classifier", options: {features: 16, classes: 4}}
      data:  {source: "my_models:GaussianBlobs", options: {features: 16, classes: 4}}

The trainer calls each function with the `options` as keyword arguments. A model returns logits; a
data set yields (inputs, target) pairs, and the trainer applies cross entropy (targets of -100 are
ignored). Put the module in your image (or on PYTHONPATH). Try it on one machine:

    PYTHONPATH=examples/custom python -m scaletrain_trainer --config examples/custom-model.yaml
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset


def mlp_classifier(features: int = 16, classes: int = 4, hidden: int = 64, layers: int = 2) -> nn.Module:
    """An MLP whose hidden layers sit in `blocks`, so FSDP shards them and checkpointing recomputes them."""
    model = nn.Module()
    model.blocks = nn.ModuleList(
        nn.Sequential(nn.Linear(features if i == 0 else hidden, hidden), nn.ReLU()) for i in range(layers)
    )
    model.head = nn.Linear(hidden, classes)

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        for block in model.blocks:
            inputs = block(inputs)
        return model.head(inputs)

    model.forward = forward
    return model


class GaussianBlobs(Dataset):
    """`classes` Gaussian clusters in `features` dimensions; deterministic per index."""

    def __init__(self, samples: int = 4096, features: int = 16, classes: int = 4, seed: int = 0):
        self.samples, self.features, self.classes, self.seed = samples, features, classes, seed
        self.centers = torch.randn(classes, features, generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 7919 + index)
        label = index % self.classes
        point = self.centers[label] + torch.randn(self.features, generator=generator)
        return point, torch.tensor(label)
