"""ROI heads of maskrcnn-benchmark (NVIDIA DLE Mask R-CNN R-50-FPN).

Sources (``PyTorch/Segmentation/MaskRCNN/pytorch/maskrcnn_benchmark/modeling``): ``poolers.py``,
``roi_heads/box_head/roi_box_feature_extractors.py`` (``FPN2MLPFeatureExtractor``),
``roi_box_predictors.py`` (``FPNPredictor``), ``roi_heads/mask_head/
roi_mask_feature_extractors.py`` (``MaskRCNNFPNFeatureExtractor``) and ``roi_mask_predictors.py``
(``MaskRCNNC4Predictor``).

* Pooler: ROIs are assigned to P2..P5 by the FPN level rule (k = floor(4 + log2(sqrt(area)/224)))
  and pooled per level with ROIAlign (``whichgpu::roi_align``) into a zero-initialised result
  (``result[idx_in_level] = pooler(level, rois_in_level)``). The level of a box depends on its
  size; here the ROIs are split evenly over the four levels (same FLOPs and bytes in total).
* Box head: 256x7x7 -> fc6 1024 -> ReLU -> fc7 1024 -> ReLU -> cls_score 81, bbox_pred 81x4.
* Mask head: 256x14x14 -> 4 x (3x3 conv 256 + ReLU) -> 2x2/2 transposed conv 256 + ReLU ->
  1x1 conv 81 -> (R, 81, 28, 28) mask logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.vision import roi_align as _roi  # registers whichgpu::roi_align
from whichgpu.workload.zoo.vision.maskrcnn_config import MaskRCNNConfig


def to_rois(boxes: Tensor) -> Tensor:
    """``Pooler.convert_to_roi_format``: (N, R, 4) boxes -> (N*R, 5) rows (image index, box)."""
    n, r, _ = boxes.shape
    ids = torch.arange(n, dtype=boxes.dtype, device=boxes.device).view(n, 1, 1).expand(n, r, 1)
    return torch.cat([ids, boxes], dim=2).reshape(n * r, 5)


class Pooler(nn.Module):
    def __init__(self, size: int, scales: tuple[float, ...], sampling_ratio: int) -> None:
        super().__init__()
        self.size, self.scales, self.sampling_ratio = size, scales, sampling_ratio

    def forward(self, feats: list[Tensor], rois: Tensor) -> Tensor:
        r, c = int(rois.shape[0]), int(feats[0].shape[1])
        result = feats[0].new_zeros((r, c, self.size, self.size))  # (R, C, p, p)
        start = 0
        for feat, scale, count in zip(feats[: len(self.scales)], self.scales, _roi.level_split(r, len(self.scales)), strict=True):
            idx = torch.arange(start, start + count, device=rois.device)
            pooled = torch.ops.whichgpu.roi_align(feat, rois[idx], scale, self.size, self.size,
                                                  self.sampling_ratio, False)
            result[idx] = pooled.to(result.dtype)
            start += count
        return result


class BoxHead(nn.Module):
    def __init__(self, cfg: MaskRCNNConfig) -> None:
        super().__init__()
        self.pooler = Pooler(cfg.box_pool, cfg.pooler_scales, cfg.sampling_ratio)
        self.fc6 = nn.Linear(cfg.fpn_channels * cfg.box_pool**2, cfg.mlp_dim)
        self.fc7 = nn.Linear(cfg.mlp_dim, cfg.mlp_dim)
        self.cls_score = nn.Linear(cfg.mlp_dim, cfg.num_classes)
        self.bbox_pred = nn.Linear(cfg.mlp_dim, cfg.num_classes * 4)

    def forward(self, feats: list[Tensor], rois: Tensor) -> tuple[Tensor, Tensor]:
        x = self.pooler(feats, rois)  # (R, 256, 7, 7)
        x = F.relu(self.fc6(x.view(x.size(0), -1)))  # (R, 1024)
        x = F.relu(self.fc7(x))
        return self.cls_score(x), self.bbox_pred(x)  # (R, 81), (R, 324)


class MaskHead(nn.Module):
    def __init__(self, cfg: MaskRCNNConfig) -> None:
        super().__init__()
        self.pooler = Pooler(cfg.mask_pool, cfg.pooler_scales, cfg.sampling_ratio)
        cin, convs = cfg.fpn_channels, []
        for c in cfg.mask_convs:
            convs.append(nn.Conv2d(cin, c, 3, padding=1))
            cin = c
        self.convs = nn.ModuleList(convs)
        self.conv5_mask = nn.ConvTranspose2d(cin, cin, 2, 2)
        self.mask_fcn_logits = nn.Conv2d(cin, cfg.num_classes, 1)

    def forward(self, feats: list[Tensor], rois: Tensor) -> Tensor:
        x = self.pooler(feats, rois)  # (R, 256, 14, 14)
        for conv in self.convs:
            x = F.relu(conv(x))
        x = F.relu(self.conv5_mask(x))  # (R, 256, 28, 28)
        logits: Tensor = self.mask_fcn_logits(x)  # (R, 81, 28, 28)
        return logits
