"""Mask R-CNN R-50-FPN 1x as NVIDIA DLE trains and benchmarks it (maskrcnn-benchmark based).

Source: NVIDIA/DeepLearningExamples ``PyTorch/Segmentation/MaskRCNN/pytorch/maskrcnn_benchmark/
modeling/detector/generalized_rcnn.py`` and ``modeling/roi_heads/*``; configuration in
`maskrcnn_config`. Static shapes throughout (see `maskrcnn_config` for the counts used where the
reference is data-dependent).

Training step (per GPU batch of N images, padded to H x W):
  backbone + FPN -> RPN head on P2..P6 -> proposals (no grad) -> 512 sampled ROIs per image ->
  box head -> 128 positive ROIs per image -> mask head; loss = RPN objectness BCE + RPN box
  smooth L1 (beta 1/9) + ROI cross entropy + ROI box smooth L1 + mask BCE (the five losses of
  maskrcnn-benchmark, summed by ``train_net``).
Inference step: 1000 proposals per image -> box head -> softmax + per-class box decode -> the
top 100 detections per image (a static top-k stands in for the per-class score threshold and
NMS) -> mask head on them -> sigmoid of the predicted class channel.

Not traced (data-pipeline or data-dependent bookkeeping of small cost): anchor / ROI matching
(IoU with ~7 ground-truth boxes per image), balanced sampling, target encoding, GPU mask-target
rasterisation, the FPN level mapping and per-class detection NMS.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.vision.checks import check_request, int_option
from whichgpu.workload.zoo.vision.classify import count_params
from whichgpu.workload.zoo.vision.maskrcnn_backbone import Backbone
from whichgpu.workload.zoo.vision.maskrcnn_config import (
    DEFAULT,
    DEFAULT_HW,
    MaskRCNNConfig,
    padded_size,
)
from whichgpu.workload.zoo.vision.maskrcnn_heads import BoxHead, MaskHead, to_rois
from whichgpu.workload.zoo.vision.maskrcnn_rpn import (
    RPNHead,
    concat_predictions,
    decode,
    select_proposals,
    smooth_l1,
)

BOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # ROI_HEADS.BBOX_REG_WEIGHTS


class MaskRCNN(nn.Module):
    def __init__(self, cfg: MaskRCNNConfig = DEFAULT, rois_per_image: int = 512, masks_per_image: int = 128) -> None:
        super().__init__()
        self.cfg = cfg
        self.rois_per_image = rois_per_image
        self.masks_per_image = masks_per_image
        self.backbone = Backbone(cfg.freeze_at, cfg.fpn_channels)
        self.rpn = RPNHead(cfg.fpn_channels, cfg.anchors_per_location)
        self.box_head = BoxHead(cfg)
        self.mask_head = MaskHead(cfg)

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        feats = self.backbone(images)  # P2..P6
        logits, deltas = self.rpn(feats)
        proposals = select_proposals(logits, deltas, self.cfg, self.training)  # (N, 1000, 4)
        roi_feats = feats[:4]  # the poolers read P2..P5
        n = images.shape[0]
        if self.training:
            obj, reg = concat_predictions(logits, deltas)  # (N*A,), (N*A, 4)
            sampled = proposals[:, : self.rois_per_image]  # balanced sampler (static count)
            class_logits, box_regression = self.box_head(roi_feats, to_rois(sampled))
            positives = sampled[:, : self.masks_per_image]  # keep_only_positive_boxes
            mask_logits = self.mask_head(roi_feats, to_rois(positives))
            return {"rpn_objectness": obj, "rpn_regression": reg, "class_logits": class_logits,
                    "box_regression": box_regression, "mask_logits": mask_logits}
        class_logits, box_regression = self.box_head(roi_feats, to_rois(proposals))
        return self.detect(n, proposals, class_logits, box_regression, roi_feats)

    def detect(self, n: int, proposals: Tensor, class_logits: Tensor, box_regression: Tensor,
               feats: list[Tensor]) -> dict[str, Tensor]:
        """PostProcessor + MaskPostProcessor with a static top-k of detections."""
        k = self.cfg.detections_per_image
        c = self.cfg.num_classes
        prob = F.softmax(class_logits, -1).view(n, -1, c)  # (N, P, 81)
        boxes = decode(box_regression.view(n, -1, c * 4), proposals, BOX_REG_WEIGHTS)  # (N, P, 324)
        scores, idx = prob[:, :, 1:].reshape(n, -1).topk(k, dim=1)  # (N, 100)
        det = torch.gather(boxes.view(n, -1, 4), 1, idx.unsqueeze(-1).expand(n, k, 4))  # (N, 100, 4)
        labels = idx % (c - 1) + 1
        mask_logits = self.mask_head(feats, to_rois(det))  # (N*100, 81, 28, 28)
        probs = mask_logits.sigmoid()
        rows = torch.arange(n * k, device=probs.device)
        masks = probs[rows, labels.reshape(-1)][:, None]  # (N*100, 1, 28, 28)
        return {"boxes": det, "scores": scores, "labels": labels, "masks": masks}


def maskrcnn_loss(out: dict[str, Tensor], t: dict[str, Tensor], cfg: MaskRCNNConfig) -> Tensor:
    """The five maskrcnn-benchmark losses, on the statically sampled anchors and ROIs."""
    obj = out["rpn_objectness"][t["rpn_sampled"]]  # (N*256,)
    loss_objectness = F.binary_cross_entropy_with_logits(obj, t["rpn_labels"].to(obj.dtype))
    rpn_reg = out["rpn_regression"][t["rpn_positive"]]  # (N*128, 4)
    loss_rpn_box = smooth_l1(rpn_reg, t["rpn_targets"].to(rpn_reg.dtype), cfg.rpn_smooth_l1_beta)
    loss_rpn_box = loss_rpn_box / t["rpn_sampled"].numel()
    class_logits = out["class_logits"]  # (N*512, 81)
    loss_classifier = F.cross_entropy(class_logits, t["roi_labels"])
    # box_regression[sampled_pos_inds_subset[:, None], map_inds]: the 4 deltas of the true class
    map_inds = 4 * t["pos_labels"][:, None] + torch.arange(4, device=class_logits.device)
    box = out["box_regression"][t["roi_positive"][:, None], map_inds]  # (N*128, 4)
    loss_box_reg = smooth_l1(box, t["box_targets"].to(box.dtype), 1.0) / t["roi_labels"].numel()
    mask_logits = out["mask_logits"]  # (N*128, 81, 28, 28)
    rows = torch.arange(mask_logits.shape[0], device=mask_logits.device)
    mask = mask_logits[rows, t["pos_labels"]]  # (N*128, 28, 28)
    loss_mask = F.binary_cross_entropy_with_logits(mask, t["mask_targets"].to(mask.dtype))
    return loss_objectness + loss_rpn_box + loss_classifier + loss_box_reg + loss_mask


def _targets(n: int, rois: int, masks: int, cfg: MaskRCNNConfig, anchors: int) -> dict[str, Tensor]:
    """Matched and sampled targets as the reference computes them before the loss (values unused)."""
    s, p = n * cfg.rpn_batch_per_image, n * cfg.rpn_positives
    long = torch.long
    return {
        "rpn_sampled": torch.randint(0, n * anchors, (s,), dtype=long),
        "rpn_labels": torch.empty(s),
        "rpn_positive": torch.randint(0, n * anchors, (p,), dtype=long),
        "rpn_targets": torch.empty(p, 4),
        "roi_labels": torch.zeros(n * rois, dtype=long),
        "roi_positive": torch.randint(0, n * rois, (n * masks,), dtype=long),
        "pos_labels": torch.ones(n * masks, dtype=long),
        "box_targets": torch.empty(n * masks, 4),
        "mask_targets": torch.empty(n * masks, 28, 28),
    }


def num_anchors(h: int, w: int, cfg: MaskRCNNConfig) -> int:
    """Anchors over P2..P6: A per cell of each level (P6 = ceil of P5 / 2, max-pool stride 2)."""
    total, fh, fw = 0, h, w
    for stride in cfg.anchor_strides:
        fh, fw = -(-h // stride), -(-w // stride)
        total += fh * fw * cfg.anchors_per_location
    return total


def build_maskrcnn(req: BuildRequest) -> Built:
    """Options: ("height", H), ("width", W) padded input (default 800 x 1344, or image_size x
    image_size*1344/800 when image_size is set), ("rois_per_image", 512), ("masks_per_image", 128)."""
    short = check_request(req, DEFAULT.min_size, min_image=64)
    cfg = DEFAULT
    default_w = DEFAULT_HW[1] if short == DEFAULT.min_size else round(short * DEFAULT.max_size / DEFAULT.min_size)
    h, w = padded_size(int_option(req, "height", short), int_option(req, "width", default_w), cfg.size_divisibility)
    rois = int_option(req, "rois_per_image", cfg.roi_batch_per_image)
    masks = int_option(req, "masks_per_image", cfg.roi_positives)
    if masks > rois or rois > cfg.fpn_post_nms_per_image_train:
        raise InputError(f"need masks_per_image <= rois_per_image <= {cfg.fpn_post_nms_per_image_train}, "
                         f"got {masks} and {rois}")
    n = req.batch_size
    with torch.device("meta"):
        model = MaskRCNN(cfg, rois, masks)
        images = torch.empty(n, 3, h, w)
        targets = _targets(n, rois, masks, cfg, num_anchors(h, w, cfg))
    loss_fn: Any = None
    if req.task == "train":
        model.train()

        def loss_fn(output: dict[str, Tensor], inputs: dict[str, Tensor]) -> Tensor:
            return maskrcnn_loss(output, targets, cfg)
    else:
        model.eval()
    notes = [f"padded input {h}x{w}; static counts: 1000 proposals/image, "
             f"{rois} ROIs and {masks} mask ROIs per image (train), 100 detections (infer)"]
    return Built(model=model, inputs={"images": images}, loss_fn=loss_fn, samples=n, tokens=0,
                 full_params=count_params(model), notes=notes)
