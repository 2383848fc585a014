"""Static configuration of the DLE Mask R-CNN R-50-FPN 1x model (torch-free).

Sources: NVIDIA/DeepLearningExamples ``PyTorch/Segmentation/MaskRCNN/pytorch/``
``maskrcnn_benchmark/config/defaults.py`` and ``configs/e2e_mask_rcnn_R_50_FPN_1x.yaml``.
Where the reference algorithm produces a data-dependent count (proposals kept by NMS, sampled
positives, detections above the score threshold), the static value below is the configured
cap, which the real counts approach on COCO:

* proposals per image after RPN selection = ``FPN_POST_NMS_TOP_N``: 1000 at test time; in
  training the top-N runs over the whole GPU batch (maskrcnn-benchmark quirk) with
  ``FPN_POST_NMS_TOP_N_TRAIN`` = 1000 x images per GPU in the DLE configs (4000 for 4 images,
  8000 for 8, 12000 for the 12-image benchmark batch), i.e. 1000 per image;
* NMS keeps ``POST_NMS_TOP_N`` boxes per level (2000 train / 1000 test), i.e. removes nothing
  beyond the cap (upper bound);
* ROIs per image for the box head in training = ``ROI_HEADS.BATCH_SIZE_PER_IMAGE`` = 512;
  positives (mask head ROIs) = 512 x ``POSITIVE_FRACTION`` 0.25 = 128 (an upper bound: fewer
  when fewer proposals overlap a ground-truth box by IoU >= 0.5);
* RPN loss: ``RPN.BATCH_SIZE_PER_IMAGE`` = 256 sampled anchors, of which at most 128 positive;
* inference: ``DETECTIONS_PER_IMG`` = 100 boxes per image go to the mask head.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaskRCNNConfig:
    num_classes: int = 81  # ROI_BOX_HEAD.NUM_CLASSES (80 COCO classes + background)
    min_size: int = 800  # INPUT.MIN_SIZE_TRAIN / _TEST
    max_size: int = 1333  # INPUT.MAX_SIZE_TRAIN / _TEST
    size_divisibility: int = 32  # DATALOADER.SIZE_DIVISIBILITY
    fpn_channels: int = 256  # BACKBONE.OUT_CHANNELS
    anchors_per_location: int = 3  # RPN.ASPECT_RATIOS (0.5, 1, 2), one size per level
    anchor_strides: tuple[int, ...] = (4, 8, 16, 32, 64)  # RPN.ANCHOR_STRIDE (P2..P6)
    pre_nms_top_n_train: int = 2000  # per level (R_50_FPN_1x.yaml)
    pre_nms_top_n_test: int = 1000
    post_nms_top_n_train: int = 2000  # RPN.POST_NMS_TOP_N_TRAIN (default)
    post_nms_top_n_test: int = 1000
    fpn_post_nms_per_image_train: int = 1000  # FPN_POST_NMS_TOP_N_TRAIN / images per GPU
    fpn_post_nms_per_image_test: int = 1000  # FPN_POST_NMS_TOP_N_TEST
    rpn_nms_thresh: float = 0.7
    rpn_batch_per_image: int = 256  # RPN.BATCH_SIZE_PER_IMAGE
    rpn_positive_fraction: float = 0.5
    roi_batch_per_image: int = 512  # ROI_HEADS.BATCH_SIZE_PER_IMAGE
    roi_positive_fraction: float = 0.25
    detections_per_image: int = 100  # ROI_HEADS.DETECTIONS_PER_IMG
    box_pool: int = 7  # ROI_BOX_HEAD.POOLER_RESOLUTION
    mask_pool: int = 14  # ROI_MASK_HEAD.POOLER_RESOLUTION
    sampling_ratio: int = 2  # POOLER_SAMPLING_RATIO
    pooler_scales: tuple[float, ...] = (0.25, 0.125, 0.0625, 0.03125)  # P2..P5
    mlp_dim: int = 1024  # ROI_BOX_HEAD.MLP_HEAD_DIM
    mask_convs: tuple[int, ...] = (256, 256, 256, 256)  # ROI_MASK_HEAD.CONV_LAYERS
    freeze_at: int = 2  # BACKBONE.FREEZE_CONV_BODY_AT: stem and res2 frozen
    rpn_smooth_l1_beta: float = 1.0 / 9  # rpn/loss.py

    @property
    def rpn_positives(self) -> int:
        return int(self.rpn_batch_per_image * self.rpn_positive_fraction)

    @property
    def roi_positives(self) -> int:
        return int(self.roi_batch_per_image * self.roi_positive_fraction)


def padded_size(height: int, width: int, divisor: int) -> tuple[int, int]:
    """Batch padding of maskrcnn-benchmark ``to_image_list``: round each side up to ``divisor``."""
    return -(-height // divisor) * divisor, -(-width // divisor) * divisor


DEFAULT = MaskRCNNConfig()
# An 800 x 1333 image (the largest COCO resize, and the usual padded size of a multi-image batch)
# padded to multiples of 32: 800 x 1344.
DEFAULT_HW = padded_size(DEFAULT.min_size, DEFAULT.max_size, DEFAULT.size_divisibility)
