"""EfficientNet-B0/B4 and the WideSE variants as NVIDIA DLE defines them.

Source: NVIDIA/DeepLearningExamples ``PyTorch/Classification/ConvNets/image_classification/
models/efficientnet.py`` (re-implemented, same structure and rounding):

* stem conv3x3/2 -> BN -> SiLU; 7 stages of MBConv blocks; features conv1x1 -> BN -> SiLU;
  classifier avgpool -> dropout -> Linear(features, 1000). BN eps 1e-3, momentum 0.01.
* MBConv: [1x1 expand -> BN -> SiLU] -> kxk depthwise -> BN -> SiLU -> SE -> 1x1 project -> BN,
  residual add when stride 1 and in == out channels.
* SE (``SequentialSqueezeAndExcitation``): mean over H, W -> Linear -> SiLU -> Linear -> sigmoid,
  times the input. Hidden units ``int(base * 0.25)``: base = block *input* channels for the
  original EfficientNet, the *expanded* (depthwise) channels for WideSE ("the width of SE module
  is proportional to the width of Depthwise Separable Convolutions", DLE efficientnet README).
* Width scaling rounds to multiples of 8 (never more than 10% down); depth scaling is ceil.
* B4 uses stochastic depth (survival 0.8, linearly decayed per block): DLE's
  ``StochasticDepthResidual`` runs ``F.dropout`` on a scalar mask (its result is discarded in
  the reference) and then ``torch.addcmul(residual, mask, x)``; reproduced as-is.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.vision.classify import build_classifier
from whichgpu.workload.zoo.vision.common import SequentialSqueezeExcitation, conv

BN_EPS = 1e-3
BN_MOMENTUM = 0.01


@dataclass(frozen=True)
class EffNetArch:
    stem: int
    features: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    repeats: tuple[int, ...]
    expansion: tuple[int, ...]
    channels: tuple[int, ...]
    image_size: int
    dropout: float
    survival_prob: float = 1.0
    wide_se: bool = False
    se_ratio: float = 0.25
    num_classes: int = 1000


B0 = EffNetArch(stem=32, features=1280, kernel=(3, 3, 5, 3, 5, 5, 3), stride=(1, 2, 2, 2, 1, 2, 1),
                repeats=(1, 2, 2, 3, 3, 4, 1), expansion=(1, 6, 6, 6, 6, 6, 6),
                channels=(16, 24, 40, 80, 112, 192, 320), image_size=224, dropout=0.2)


def scale_width(channels: int, coeff: float, divisor: int = 8) -> int:
    """DLE ``EffNetArch._scale_width``."""
    c = channels * coeff
    rounded = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * c else rounded


def scale(arch: EffNetArch, width: float, depth: float, image: int, dropout: float,
          survival_prob: float) -> EffNetArch:
    return replace(arch, stem=scale_width(arch.stem, width), features=scale_width(arch.features, width),
                   channels=tuple(scale_width(c, width) for c in arch.channels),
                   repeats=tuple(math.ceil(r * depth) for r in arch.repeats), image_size=image,
                   dropout=dropout, survival_prob=survival_prob)


# DLE: effnet_b4_layers = b0.scale(wc=1.4, dc=1.8, dis=380); EffNetParams(dropout=0.4, survival_prob=0.8)
B4 = scale(B0, width=1.4, depth=1.8, image=380, dropout=0.4, survival_prob=0.8)
WIDESE_B0 = replace(B0, wide_se=True)
WIDESE_B4 = replace(B4, wide_se=True)


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    """DLE ``LayerBuilder.conv(..., bn=True, act=...)``: conv (no bias) -> BN [-> SiLU]."""
    layers: list[tuple[str, nn.Module]] = [
        ("conv", conv(k, cin, cout, stride=stride, groups=groups)),
        ("bn", nn.BatchNorm2d(cout, eps=BN_EPS, momentum=BN_MOMENTUM)),
    ]
    if act:
        layers.append(("activation", nn.SiLU(inplace=True)))
    return nn.Sequential(OrderedDict(layers))


class StochasticDepthResidual(nn.Module):
    mask: Tensor

    def __init__(self, survival_prob: float) -> None:
        super().__init__()
        self.survival_prob = survival_prob
        self.register_buffer("mask", torch.ones(()), persistent=False)

    def forward(self, residual: Tensor, x: Tensor) -> Tensor:
        if not self.training:
            return torch.add(residual, x)
        with torch.no_grad():
            F.dropout(self.mask, p=1 - self.survival_prob, training=True)
        return torch.addcmul(residual, self.mask, x)


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, expand: int, stride: int, arch: EffNetArch,
                 survival_prob: float) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        se_hidden = max(1, int((hidden if arch.wide_se else cin) * arch.se_ratio))
        self.expand = None if hidden == cin else conv_bn(cin, hidden, 1)
        self.depsep = conv_bn(hidden, hidden, k, stride=stride, groups=hidden)
        self.se = SequentialSqueezeExcitation(hidden, se_hidden, nn.SiLU(inplace=True))
        self.proj = conv_bn(hidden, cout, 1, act=False)
        self.residual_add = StochasticDepthResidual(survival_prob) if survival_prob < 1.0 else None

    def forward(self, x: Tensor) -> Tensor:
        h: Tensor = x if self.expand is None else self.expand(x)  # (B, hidden, H, W)
        b: Tensor = self.proj(self.se(self.depsep(h)))  # (B, cout, H/s, W/s)
        if not self.residual:
            return b
        if self.residual_add is None:
            return torch.add(x, b)
        out: Tensor = self.residual_add(x, b)
        return out


class EfficientNet(nn.Module):
    def __init__(self, arch: EffNetArch) -> None:
        super().__init__()
        self.stem = conv_bn(3, arch.stem, 3, stride=2)
        total, done, cin = sum(arch.repeats), 0, arch.stem
        stages = []
        for k, s, r, e, c in zip(arch.kernel, arch.stride, arch.repeats, arch.expansion, arch.channels, strict=True):
            blocks = []
            for i in range(r):
                # DLE _get_survival_prob: 1 - (1 - p) * block_id / num_blocks; the first block of
                # a stage only gets it when it has a residual (stride 1, in == out).
                sp = 1.0 - (1.0 - arch.survival_prob) * (done + i) / total
                block_in, stride = (cin, s) if i == 0 else (c, 1)
                if i == 0 and not (s == 1 and cin == c):
                    sp = 1.0
                blocks.append((f"block{i}", MBConv(block_in, c, k, e, stride, arch, sp)))
            stages.append(nn.Sequential(OrderedDict(blocks)))
            done, cin = done + r, c
        self.layers = nn.Sequential(*stages)
        self.features = conv_bn(cin, arch.features, 1)
        self.classifier = nn.Sequential(OrderedDict([
            ("pooling", nn.AdaptiveAvgPool2d(1)),
            ("squeeze", nn.Flatten()),
            ("dropout", nn.Dropout(arch.dropout)),
            ("fc", nn.Linear(arch.features, arch.num_classes)),
        ]))

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)  # (B, stem, S/2, S/2)
        x = self.features(self.layers(x))  # (B, features, S/32, S/32)
        logits: Tensor = self.classifier(x)  # (B, 1000)
        return logits


_NOTE = ("DLE EfficientNet benchmark step: RMSprop (alpha 0.9, eps 0.01, momentum 0.9), "
         "NLLMultiLabelSmooth(0.1) on mixup soft targets")


def _build(req: BuildRequest, arch: EffNetArch) -> Built:
    return build_classifier(req, lambda: EfficientNet(arch), arch.image_size, [_NOTE])


def build_b0(req: BuildRequest) -> Built:
    return _build(req, B0)


def build_b4(req: BuildRequest) -> Built:
    return _build(req, B4)


def build_widese_b0(req: BuildRequest) -> Built:
    return _build(req, WIDESE_B0)


def build_widese_b4(req: BuildRequest) -> Built:
    return _build(req, WIDESE_B4)
