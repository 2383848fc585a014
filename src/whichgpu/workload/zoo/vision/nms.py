"""``whichgpu::nms``: greedy box non-maximum suppression with a static output size.

Real NMS keeps a data-dependent number of boxes. maskrcnn-benchmark (and torchvision) run the
bitmask algorithm of Faster R-CNN's ``nms_kernel``: one CUDA kernel computes, for the score-sorted
boxes, the IoU of every pair (i < j) against the threshold and writes a K x ceil(K/64) 64-bit
mask; the greedy sweep over that mask then runs on the host after a device-to-host copy (a
synchronisation point), and the kept indices gather the boxes.

Static stand-in: the op returns the first ``min(max_out, K)`` boxes/scores per image, i.e. it
assumes NMS removes nothing beyond the configured post-NMS top-N (an upper bound on the work
that follows). FLOPs per pair (IoU test): 4 min/max + 2 sub + 2 clamp + 1 mul for the
intersection, 2 add/sub for the union (areas precomputed), 1 divide and 1 compare = 13.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from whichgpu.workload.costs import Cost, register
from whichgpu.workload.ops import meta_op

IOU_FLOPS = 13


@meta_op("whichgpu::nms")
def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, max_out: int) -> tuple[Tensor, Tensor]:
    """boxes (N, K, 4), scores (N, K), sorted by score -> kept boxes (N, M, 4), scores (N, M)."""
    n, k = int(scores.shape[0]), int(scores.shape[1])
    m = min(max_out, k)
    return boxes.new_empty((n, m, 4)), scores.new_empty((n, m))


def nms_flops(images: int, boxes: int) -> float:
    """IoU of every pair (i < j) of the sorted boxes of each image."""
    return float(images * boxes * (boxes - 1) / 2 * IOU_FLOPS)


def nms_mask_bytes(images: int, boxes: int) -> float:
    """The K x ceil(K/64) 64-bit suppression mask written per image."""
    return float(images * boxes * -(-boxes // 64) * 8)


@register("whichgpu.nms")
def _nms_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    boxes, scores = args[0], args[1]
    n, k = int(scores.shape[0]), int(scores.shape[1])
    out_bytes = sum(float(t.numel() * t.element_size()) for t in out)
    read = float(boxes.numel() * boxes.element_size() + scores.numel() * scores.element_size())
    # Per image: mask kernel + gather of the kept boxes (maskrcnn-benchmark loops over images).
    return Cost(nms_flops(n, k), "other", kernels=2.0 * n, bytes_read=read,
                bytes_written=nms_mask_bytes(n, k) + out_bytes, tags=("nms", "host-sync"))
