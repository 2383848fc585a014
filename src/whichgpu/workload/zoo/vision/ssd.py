"""SSD300 v1.1 with a ResNet-50 backbone, as NVIDIA DLE defines it.

Source: NVIDIA/DeepLearningExamples ``PyTorch/Detection/SSD/ssd/model.py`` (re-implemented):

* backbone: torchvision resnet50 ``children()[:7]`` (stem, layer1-3; conv5_x, pool and fc
  removed) with every stride of conv4_x's first block set to 1, so a 300x300 image gives a
  38x38x1024 map;
* five extra blocks (1x1 conv -> BN -> ReLU -> 3x3 conv -> BN -> ReLU, no conv bias), the first
  three with stride 2 and padding 1, the last two unpadded: 38 -> 19 -> 10 -> 5 -> 3 -> 1;
* six 3x3 heads per map for locations (4 per default box) and classes (81 per box), with
  4, 6, 6, 6, 4, 4 default boxes per cell: 38²·4 + 19²·6 + 10²·6 + 5²·6 + 3²·4 + 1²·4 = 8732.

Training loss (DLE ``Loss``): smooth L1 on the encoded boxes of positive defaults plus cross
entropy with hard negative mining (negatives ranked by a double ``sort``; three negatives per
positive), divided by the positives of each image. ``con_neg[mask] = 0`` (a boolean-index write)
is expressed as ``masked_fill``, the same kernel without data-dependent shapes. Ground-truth
encoding (default-box matching) runs in the DALI input pipeline and is not traced.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.vision.checks import check_request
from whichgpu.workload.zoo.vision.classify import count_params
from whichgpu.workload.zoo.vision.resnet import RESNET50, Bottleneck, ResNet

NUM_CLASSES = 81  # 80 COCO classes + background
NUM_DEFAULTS = (4, 6, 6, 6, 4, 4)
OUT_CHANNELS = (1024, 512, 512, 256, 256, 256)  # resnet50 entry of DLE ResNet.out_channels
EXTRA_MID = (256, 256, 128, 128, 128)
SCALE_XY = 1.0 / 0.1  # DLE dboxes300_coco(): scale_xy = 0.1, scale_wh = 0.2
SCALE_WH = 1.0 / 0.2
IMAGE = 300
FEATURE_SIZES = (38, 19, 10, 5, 3, 1)  # map sides for a 300x300 input


def resnet50_backbone() -> nn.Sequential:
    r = ResNet(RESNET50)
    layer1, layer2, layer3 = r.layers[0], r.layers[1], r.layers[2]
    block = cast(Bottleneck, cast(nn.Sequential, layer3)[0])
    block.conv1.stride = (1, 1)
    block.conv2.stride = (1, 1)
    cast(nn.Conv2d, cast(nn.Sequential, block.downsample)[0]).stride = (1, 1)
    return nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, layer1, layer2, layer3)


def extra_block(cin: int, mid: int, cout: int, padded: bool) -> nn.Sequential:
    stride, pad = (2, 1) if padded else (1, 0)
    return nn.Sequential(
        nn.Conv2d(cin, mid, kernel_size=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
        nn.Conv2d(mid, cout, kernel_size=3, padding=pad, stride=stride, bias=False),
        nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class SSD300(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.feature_extractor = resnet50_backbone()
        self.additional_blocks = nn.ModuleList(
            extra_block(cin, mid, cout, padded=i < 3)
            for i, (cin, cout, mid) in enumerate(zip(OUT_CHANNELS[:-1], OUT_CHANNELS[1:], EXTRA_MID, strict=True))
        )
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for n, c in zip(NUM_DEFAULTS, OUT_CHANNELS, strict=True))
        self.conf = nn.ModuleList(nn.Conv2d(c, n * NUM_CLASSES, 3, padding=1)
                                  for n, c in zip(NUM_DEFAULTS, OUT_CHANNELS, strict=True))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.feature_extractor(x)  # (B, 1024, 38, 38)
        feeds = [x]
        for block in self.additional_blocks:
            x = block(x)
            feeds.append(x)  # 19, 10, 5, 3, 1
        b = feeds[0].size(0)
        locs = [loc(f).view(b, 4, -1) for f, loc in zip(feeds, self.loc, strict=True)]
        confs = [conf(f).view(b, NUM_CLASSES, -1) for f, conf in zip(feeds, self.conf, strict=True)]
        # (B, 4, 8732), (B, 81, 8732)
        return torch.cat(locs, 2).contiguous(), torch.cat(confs, 2).contiguous()


def ssd_loss(ploc: Tensor, plabel: Tensor, gloc: Tensor, glabel: Tensor, dboxes: Tensor) -> Tensor:
    """DLE ``Loss.forward``. ploc/gloc (B, 4, D), plabel (B, 81, D), glabel (B, D), dboxes (1, 4, D)."""
    mask = glabel > 0  # (B, D)
    pos_num = mask.sum(dim=1)  # (B,)
    gxy = SCALE_XY * (gloc[:, :2, :] - dboxes[:, :2, :]) / dboxes[:, 2:, :]
    gwh = SCALE_WH * (gloc[:, 2:, :] / dboxes[:, 2:, :]).log()
    vec_gd = torch.cat((gxy, gwh), dim=1).contiguous()  # (B, 4, D)
    sl1 = nn.functional.smooth_l1_loss(ploc, vec_gd, reduction="none").sum(dim=1)  # (B, D)
    sl1 = (mask.float() * sl1).sum(dim=1)  # (B,)
    con = nn.functional.cross_entropy(plabel, glabel, reduction="none")  # (B, D)
    con_neg = con.clone().masked_fill_(mask, 0)
    _, con_idx = con_neg.sort(dim=1, descending=True)
    _, con_rank = con_idx.sort(dim=1)
    neg_num = torch.clamp(3 * pos_num, max=mask.size(1)).unsqueeze(-1)  # (B, 1)
    neg_mask = con_rank < neg_num
    closs = (con * (mask + neg_mask).float()).sum(dim=1)  # (B,)
    total = sl1 + closs
    num_mask = (pos_num > 0).float()
    pos = pos_num.float().clamp(min=1e-6)
    return (total * num_mask / pos).mean(dim=0)


def build_ssd300(req: BuildRequest) -> Built:
    image = check_request(req, IMAGE, min_image=IMAGE)
    if image != IMAGE:
        # The extra blocks and the 8732 default boxes are tied to a 300x300 input.
        raise InputError(f"SSD300 takes 300x300 images only, got image_size {image}")
    n = req.batch_size
    with torch.device("meta"):
        model = SSD300()
        images = torch.empty(n, 3, IMAGE, IMAGE)
        defaults = sum(c * c * d for c, d in zip(FEATURE_SIZES, NUM_DEFAULTS, strict=True))
        gloc = torch.empty(n, 4, defaults)  # encoded by the DALI pipeline (xywh)
        glabel = torch.zeros(n, defaults, dtype=torch.long)
        dboxes = torch.empty(1, 4, defaults)  # Loss.dboxes, a frozen parameter of the loss module
    loss_fn = None
    if req.task == "train":
        model.train()

        def loss_fn(output: tuple[Tensor, Tensor], inputs: dict[str, Tensor]) -> Tensor:
            ploc, plabel = output
            # DLE train loop: ploc, plabel = ploc.float(), plabel.float() before the loss
            return ssd_loss(ploc.float(), plabel.float(), gloc, glabel, dboxes)
    else:
        model.eval()
    return Built(model=model, inputs={"x": images}, loss_fn=loss_fn, samples=n, tokens=0,
                 full_params=count_params(model),
                 notes=["DALI box encoding and NMS post-processing are outside the benchmarked step"])
