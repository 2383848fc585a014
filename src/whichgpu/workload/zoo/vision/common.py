"""Layers shared by the NVIDIA DLE ConvNets models (ResNet family, EfficientNet).

Source: NVIDIA/DeepLearningExamples ``PyTorch/Classification/ConvNets/image_classification/
models/common.py`` (``LayerBuilder.conv``, ``SqueezeAndExcitation``,
``SequentialSqueezeAndExcitation``), re-implemented with the same module structure.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def conv(k: int, cin: int, cout: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """DLE ``LayerBuilder.conv``: 'same' padding, no bias."""
    return nn.Conv2d(cin, cout, k, stride=stride, padding=(k - 1) // 2, groups=groups, bias=False)


class SqueezeExcitation(nn.Module):
    """DLE ``SqueezeAndExcitation``: mean over H, W -> Linear(C, hidden) -> activation ->
    Linear(hidden, C) -> sigmoid; returns the (B, C, 1, 1) gate, the caller multiplies (the
    ResNets fuse it with the residual: ``addcmul``). ``hidden`` is a number of units, not a
    reduction ratio."""

    def __init__(self, channels: int, hidden: int, activation: nn.Module) -> None:
        super().__init__()
        self.squeeze = nn.Linear(channels, hidden)
        self.expand = nn.Linear(hidden, channels)
        self.activation = activation
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: Tensor) -> Tensor:
        out = torch.mean(x, [2, 3])  # (B, C)
        out = self.activation(self.squeeze(out))  # (B, hidden)
        gate: Tensor = self.sigmoid(self.expand(out))  # (B, C)
        return gate.unsqueeze(2).unsqueeze(3)  # (B, C, 1, 1)


class SequentialSqueezeExcitation(SqueezeExcitation):
    """DLE ``SequentialSqueezeAndExcitation`` (EfficientNet): the gate times the input."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x) * x  # (B, C, H, W)
