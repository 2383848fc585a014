"""ResNet-50 v1.5, ResNeXt-101 32x4d and SE-ResNeXt-101 32x4d as NVIDIA DLE defines them.

Source: NVIDIA/DeepLearningExamples ``PyTorch/Classification/ConvNets/image_classification/
models/resnet.py`` and ``models/common.py`` (re-implemented here, same module structure):

* stem: conv7x7/2 (no bias) -> BN -> ReLU -> maxpool3x3/2;
* four stages of bottlenecks; the stride sits in the 3x3 conv ("v1.5", as torchvision's
  resnet50); the first block of a stage has a 1x1/stride conv + BN shortcut;
* bottleneck: 1x1 (in -> w) -> 3x3 grouped (w -> w, ``groups=cardinality``) -> 1x1 (w -> w*exp);
* SE (SE-ResNeXt): ``mean(x, [2,3]) -> Linear(C, 16) -> ReLU -> Linear(16, C) -> sigmoid``. DLE
  passes ``se_squeeze=16`` as the *number of hidden units* (``nn.Linear(in_channels, squeeze)``),
  not as a reduction ratio; the SE output is fused with the residual via
  ``torch.addcmul(residual, out, se(out))``;
* head: global average pool -> Linear(widths[-1] * expansion, 1000).

| arch                | layers        | widths                 | expansion | cardinality |
|---------------------|---------------|------------------------|-----------|-------------|
| resnet50            | 3, 4, 6, 3    | 64, 128, 256, 512      | 4         | 1           |
| resnext101-32x4d    | 3, 4, 23, 3   | 128, 256, 512, 1024    | 2         | 32          |
| se-resnext101-32x4d | as resnext101 + SE after each bottleneck                       |
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.vision.classify import build_classifier
from whichgpu.workload.zoo.vision.common import SqueezeExcitation, conv


@dataclass(frozen=True)
class ResNetArch:
    layers: tuple[int, int, int, int]
    widths: tuple[int, int, int, int]
    expansion: int
    cardinality: int = 1
    se: bool = False
    se_hidden: int = 16  # DLE SEBottleneck: se_squeeze=16 hidden units
    stem_width: int = 64
    num_classes: int = 1000


RESNET50 = ResNetArch(layers=(3, 4, 6, 3), widths=(64, 128, 256, 512), expansion=4)
RESNEXT101_32X4D = ResNetArch(layers=(3, 4, 23, 3), widths=(128, 256, 512, 1024), expansion=2,
                              cardinality=32)
SE_RESNEXT101_32X4D = ResNetArch(layers=(3, 4, 23, 3), widths=(128, 256, 512, 1024), expansion=2,
                                 cardinality=32, se=True)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, expansion: int, stride: int, cardinality: int,
                 downsample: nn.Module | None, se_hidden: int | None) -> None:
        super().__init__()
        cout = width * expansion
        self.conv1 = conv(1, cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv(3, width, width, stride=stride, groups=cardinality)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv(1, width, cout)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.squeeze = SqueezeExcitation(cout, se_hidden, nn.ReLU(inplace=True)) if se_hidden else None

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))  # (B, w, H, W)
        out = self.relu(self.bn2(self.conv2(out)))  # (B, w, H/s, W/s)
        out = self.bn3(self.conv3(out))  # (B, w*exp, H/s, W/s)
        if self.downsample is not None:
            residual = self.downsample(x)
        if self.squeeze is None:
            out += residual
        else:
            out = torch.addcmul(residual, out, self.squeeze(out), value=1)
        result: Tensor = self.relu(out)
        return result


class ResNet(nn.Module):
    def __init__(self, arch: ResNetArch) -> None:
        super().__init__()
        self.conv1 = conv(7, 3, arch.stem_width, stride=2)
        self.bn1 = nn.BatchNorm2d(arch.stem_width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin, stages = arch.stem_width, []
        for i, (width, blocks) in enumerate(zip(arch.widths, arch.layers, strict=True)):
            stage, cin = make_stage(arch, cin, width, blocks, stride=1 if i == 0 else 2)
            stages.append(stage)
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(arch.widths[-1] * arch.expansion, arch.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # (B, 64, S/4, S/4)
        x = self.layers(x)  # (B, C, S/32, S/32)
        x = self.avgpool(x)
        logits: Tensor = self.fc(x.view(x.size(0), -1))  # (B, 1000)
        return logits


def make_stage(arch: ResNetArch, cin: int, width: int, blocks: int, stride: int) -> tuple[nn.Sequential, int]:
    """DLE ``ResNet._make_layer``: returns the stage and its output channels."""
    cout = width * arch.expansion
    downsample = None
    if stride != 1 or cin != cout:
        downsample = nn.Sequential(conv(1, cin, cout, stride=stride), nn.BatchNorm2d(cout))
    se = arch.se_hidden if arch.se else None
    layers = [Bottleneck(cin, width, arch.expansion, stride, arch.cardinality, downsample, se)]
    layers += [Bottleneck(cout, width, arch.expansion, 1, arch.cardinality, None, se)
               for _ in range(1, blocks)]
    return nn.Sequential(*layers), cout


_NOTE = ("DLE benchmark step: NLLMultiLabelSmooth(0.1) on mixup soft targets; AMP runs used "
         "channels_last (memory_format nhwc), not modelled separately")


def build_resnet50(req: BuildRequest) -> Built:
    return build_classifier(req, lambda: ResNet(RESNET50), 224, [_NOTE])


def build_resnext101_32x4d(req: BuildRequest) -> Built:
    return build_classifier(req, lambda: ResNet(RESNEXT101_32X4D), 224, [_NOTE])


def build_se_resnext101_32x4d(req: BuildRequest) -> Built:
    return build_classifier(req, lambda: ResNet(SE_RESNEXT101_32X4D), 224, [_NOTE])
