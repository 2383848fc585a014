"""Region proposal network of maskrcnn-benchmark (NVIDIA DLE Mask R-CNN), with static shapes.

Sources (``PyTorch/Segmentation/MaskRCNN/pytorch/maskrcnn_benchmark/modeling/rpn``): ``rpn.py``
(``RPNHead``: shared 3x3 conv + ReLU, 1x1 objectness and box-delta convs over P2..P6),
``inference.py`` (``RPNPostProcessor``), ``loss.py`` and ``modeling/utils.py``
(``concat_box_prediction_layers``), ``modeling/box_coder.py`` (``BoxCoder.decode``).

Proposal selection (under ``no_grad`` as in the reference), per level: sigmoid of the
objectness, ``topk(PRE_NMS_TOP_N)``, decode the kept deltas against their anchors, NMS with
``POST_NMS_TOP_N`` kept (``whichgpu::nms``, static count). Then over all levels: test time keeps
the per-image top 1000; training keeps the top ``1000 x images`` over the whole batch (the
maskrcnn-benchmark per-batch top-N), assumed spread evenly over the images.
DLE's CUDA fast path fuses decode, clip and small-box removal into one kernel
(``GeneratePreNMSUprightBoxes``); they are written here as the plain decode of ``box_coder.py``.
Anchors are generated once per image size and cached; their values are irrelevant on meta.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.vision import nms as _nms  # noqa: F401  (registers whichgpu::nms)
from whichgpu.workload.zoo.vision.maskrcnn_config import MaskRCNNConfig

BBOX_XFORM_CLIP = math.log(1000.0 / 16)


class RPNHead(nn.Module):
    def __init__(self, channels: int, anchors: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.cls_logits = nn.Conv2d(channels, anchors, 1)
        self.bbox_pred = nn.Conv2d(channels, anchors * 4, 1)

    def forward(self, feats: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        logits, deltas = [], []
        for f in feats:
            t = F.relu(self.conv(f))
            logits.append(self.cls_logits(t))  # (N, A, H, W)
            deltas.append(self.bbox_pred(t))  # (N, 4A, H, W)
        return logits, deltas


def decode(deltas: Tensor, anchors: Tensor, weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)) -> Tensor:
    """``BoxCoder.decode`` (TO_REMOVE = 1 pixel convention). deltas (..., 4k), anchors (..., 4)."""
    wx, wy, ww, wh = weights
    wh_a = anchors[..., 2:4] - anchors[..., 0:2] + 1  # (..., 2)
    ctr = anchors[..., 0:2] + 0.5 * wh_a
    d = deltas.view(*deltas.shape[:-1], -1, 4)  # (..., k, 4)
    dxy = d[..., 0:2] / d.new_tensor([wx, wy])
    dwh = (d[..., 2:4] / d.new_tensor([ww, wh])).clamp(max=BBOX_XFORM_CLIP)
    pred_ctr = dxy * wh_a.unsqueeze(-2) + ctr.unsqueeze(-2)
    pred_wh = torch.exp(dwh) * wh_a.unsqueeze(-2)
    boxes = torch.cat([pred_ctr - 0.5 * pred_wh, pred_ctr + 0.5 * pred_wh - 1], dim=-1)
    return boxes.flatten(-2)  # (..., 4k)


def flatten_level(t: Tensor, c: int) -> Tensor:
    """``permute_and_flatten``: (N, A*c, H, W) -> (N, H*W*A, c)."""
    n, _, h, w = t.shape
    return t.view(n, -1, c, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, c)


@torch.no_grad()
def select_proposals(logits: list[Tensor], deltas: list[Tensor], cfg: MaskRCNNConfig,
                     training: bool) -> Tensor:
    """RPNPostProcessor: returns proposals (N, P, 4), P = 1000 per image (see module docstring)."""
    pre = cfg.pre_nms_top_n_train if training else cfg.pre_nms_top_n_test
    post = cfg.post_nms_top_n_train if training else cfg.post_nms_top_n_test
    boxes, scores = [], []
    for obj, reg in zip(logits, deltas, strict=True):
        n = obj.shape[0]
        obj = obj.permute(0, 2, 3, 1).reshape(n, -1).sigmoid()  # (N, HWA)
        k = min(pre, obj.shape[1])
        top, idx = obj.topk(k, dim=1, sorted=True)  # (N, k)
        reg = flatten_level(reg, 4)  # (N, HWA, 4)
        anchors = reg.new_empty(reg.shape)  # cached grid anchors of this level
        gather = idx.unsqueeze(-1).expand(n, k, 4)
        props = decode(torch.gather(reg, 1, gather), torch.gather(anchors, 1, gather))  # (N, k, 4)
        kept, kept_scores = torch.ops.whichgpu.nms(props, top, cfg.rpn_nms_thresh, post)
        boxes.append(kept)
        scores.append(kept_scores)
    all_boxes, all_scores = torch.cat(boxes, dim=1), torch.cat(scores, dim=1)  # (N, S, 4), (N, S)
    n, s = all_scores.shape
    if training:
        per_image = min(cfg.fpn_post_nms_per_image_train, s)
        _, idx = all_scores.reshape(-1).topk(per_image * n, dim=0, sorted=True)  # over the batch
        return all_boxes.reshape(-1, 4)[idx].view(n, per_image, 4)
    per_image = min(cfg.fpn_post_nms_per_image_test, s)
    _, idx = all_scores.topk(per_image, dim=1, sorted=True)
    return torch.gather(all_boxes, 1, idx.unsqueeze(-1).expand(n, per_image, 4))


def concat_predictions(logits: list[Tensor], deltas: list[Tensor]) -> tuple[Tensor, Tensor]:
    """``concat_box_prediction_layers``: (N*A_total,) objectness and (N*A_total, 4) deltas."""
    obj = torch.cat([flatten_level(o, 1) for o in logits], dim=1).reshape(-1)
    reg = torch.cat([flatten_level(r, 4) for r in deltas], dim=1).reshape(-1, 4)
    return obj, reg


def smooth_l1(x: Tensor, target: Tensor, beta: float) -> Tensor:
    """``maskrcnn_benchmark/layers/smooth_l1_loss.py`` (sum reduction)."""
    n = torch.abs(x - target)
    loss = torch.where(n < beta, 0.5 * n**2 / beta, n - 0.5 * beta)
    return loss.sum()
