"""R-50-FPN backbone of maskrcnn-benchmark (NVIDIA DLE Mask R-CNN).

Sources (NVIDIA/DeepLearningExamples ``PyTorch/Segmentation/MaskRCNN/pytorch/maskrcnn_benchmark``):
``modeling/backbone/resnet.py``, ``modeling/backbone/fpn.py``, ``layers/batch_norm.py``.

* ResNet-50 body with ``FrozenBatchNorm2d`` (scale and shift are buffers, applied as
  ``x * scale + bias``) and ``STRIDE_IN_1X1 = True``: the MSRA layout, stride 2 in the first
  1x1 conv of a stage (not in the 3x3 as in v1.5). Stem and res2 are frozen
  (``FREEZE_CONV_BODY_AT = 2``: ``requires_grad = False``).
* FPN: 1x1 lateral convs (with bias) on C2..C5 to 256 channels, top-down nearest 2x upsampling
  and add, 3x3 output convs (with bias); P6 = ``max_pool2d(P5, 1, stride 2)``
  (``LastLevelMaxPool``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

STAGES = ((3, 64, 256), (4, 128, 512), (6, 256, 1024), (3, 512, 2048))  # (blocks, width, out)


class FrozenBatchNorm2d(nn.Module):
    weight: Tensor
    bias: Tensor
    running_mean: Tensor
    running_var: Tensor

    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x: Tensor) -> Tensor:
        scale = self.weight * self.running_var.rsqrt()  # (C,)
        bias = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


def conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=(k - 1) // 2, bias=False)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, cout: int, stride: int) -> None:
        super().__init__()
        self.downsample = None
        if cin != cout:
            self.downsample = nn.Sequential(conv(cin, cout, 1, stride), FrozenBatchNorm2d(cout))
        self.conv1 = conv(cin, width, 1, stride)  # stride in the 1x1 (MSRA)
        self.bn1 = FrozenBatchNorm2d(width)
        self.conv2 = conv(width, width, 3)
        self.bn2 = FrozenBatchNorm2d(width)
        self.conv3 = conv(width, cout, 1)
        self.bn3 = FrozenBatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = F.relu_(self.bn1(self.conv1(x)))
        out = F.relu_(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return F.relu_(out)


class Stem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = FrozenBatchNorm2d(64)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu_(self.bn1(self.conv1(x)))
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class ResNet50Body(nn.Module):
    def __init__(self, freeze_at: int = 2) -> None:
        super().__init__()
        self.stem = Stem()
        cin, names = 64, []
        for i, (blocks, width, cout) in enumerate(STAGES):
            stride = 1 if i == 0 else 2
            layer = [Bottleneck(cin, width, cout, stride)]
            layer += [Bottleneck(cout, width, cout, 1) for _ in range(1, blocks)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*layer))
            names.append(f"layer{i + 1}")
            cin = cout
        self.stages = names
        # _freeze_backbone: stage 0 is the stem, stage i the i-th layer
        for m in [self.stem, *(getattr(self, n) for n in names)][:freeze_at]:
            for p in m.parameters():
                p.requires_grad = False

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)  # (B, 64, H/4, W/4)
        outs = []
        for name in self.stages:
            x = getattr(self, name)(x)
            outs.append(x)  # C2..C5: strides 4, 8, 16, 32
        return outs


class FPN(nn.Module):
    def __init__(self, in_channels: tuple[int, ...] = (256, 512, 1024, 2048), out: int = 256) -> None:
        super().__init__()
        self.inner_blocks = nn.ModuleList(nn.Conv2d(c, out, 1) for c in in_channels)
        self.layer_blocks = nn.ModuleList(nn.Conv2d(out, out, 3, padding=1) for _ in in_channels)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        last_inner = self.inner_blocks[-1](feats[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for feat, inner, layer in zip(feats[-2::-1], self.inner_blocks[-2::-1], self.layer_blocks[-2::-1], strict=True):
            top_down = F.interpolate(last_inner, scale_factor=2.0, mode="nearest")
            last_inner = inner(feat) + top_down
            results.insert(0, layer(last_inner))
        results.append(F.max_pool2d(results[-1], 1, 2, 0))  # P6 (LastLevelMaxPool)
        return results  # P2..P6, 256 channels each


class Backbone(nn.Module):
    def __init__(self, freeze_at: int = 2, fpn_channels: int = 256) -> None:
        super().__init__()
        self.body = ResNet50Body(freeze_at)
        self.fpn = FPN(out=fpn_channels)

    def forward(self, x: Tensor) -> list[Tensor]:
        pyramid: list[Tensor] = self.fpn(self.body(x))
        return pyramid
