"""``whichgpu::roi_align``: the ROIAlign kernel of Mask R-CNN, as a meta-only custom op.

ROIAlign (He et al., "Mask R-CNN", 2017, §3) pools each region of interest to a fixed
``pooled_h x pooled_w`` grid. Each output bin averages ``s x s`` bilinear samples (``s`` =
``sampling_ratio``, 2 in the DLE R-50-FPN config); each sample reads four neighbouring feature
values. maskrcnn-benchmark's CUDA kernel (``csrc/cuda/ROIAlign_cuda.cu``) runs one thread per
output element; the backward kernel zero-fills the feature gradient and scatters each bin's
gradient to the same four neighbours with ``atomicAdd``.

FLOPs per output element (counted as the interpolation arithmetic, the address and weight
computation is integer/addressing work and not counted):

    s*s samples * (4 mul + 3 add) + 1 divide (the average)       =  7 s^2 + 1

Bytes: a kernel reads the gathered neighbourhood, not the whole feature map. The distinct
feature values one bin row touches are bounded by ``(ph*s + 1) * (pw*s + 1)`` per ROI and
channel, and by the feature map itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from whichgpu.workload.costs import Cost, register
from whichgpu.workload.ops import meta_op

BILINEAR_FLOPS = 7  # 4 multiplies + 3 adds per bilinear sample


@meta_op("whichgpu::roi_align")
def roi_align(features: Tensor, rois: Tensor, spatial_scale: float, pooled_h: int, pooled_w: int,
              sampling_ratio: int, aligned: bool) -> Tensor:
    """features (N, C, H, W), rois (R, 5) = (image index, x1, y1, x2, y2) -> (R, C, ph, pw)."""
    return features.new_empty((rois.shape[0], features.shape[1], pooled_h, pooled_w))


@meta_op("whichgpu::roi_align_backward")
def roi_align_backward(grad: Tensor, rois: Tensor, spatial_scale: float, pooled_h: int,
                       pooled_w: int, batch: int, channels: int, height: int, width: int,
                       sampling_ratio: int, aligned: bool) -> Tensor:
    """grad (R, C, ph, pw) -> grad of the features (N, C, H, W)."""
    return grad.new_empty((batch, channels, height, width))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    features, rois, scale, ph, pw, sr, aligned = inputs
    ctx.save_for_backward(rois)
    ctx.shape = tuple(features.shape)
    ctx.args = (scale, ph, pw, sr, aligned)


def _backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    (rois,) = ctx.saved_tensors
    scale, ph, pw, sr, aligned = ctx.args
    n, c, h, w = ctx.shape
    dfeat = torch.ops.whichgpu.roi_align_backward(grad, rois, scale, ph, pw, n, c, h, w, sr, aligned)
    return dfeat, None, None, None, None, None, None


roi_align.register_autograd(_backward, setup_context=_setup)


# --------------------------------------------------------------------------------------------
# Cost formulas
# --------------------------------------------------------------------------------------------

def roi_align_flops(rois: int, channels: int, pooled_h: int, pooled_w: int, sampling_ratio: int) -> float:
    """(7 s^2 + 1) FLOPs per output element (see module docstring)."""
    s2 = sampling_ratio * sampling_ratio
    return float(rois * channels * pooled_h * pooled_w * (BILINEAR_FLOPS * s2 + 1))


def roi_align_gathered(rois: int, channels: int, pooled_h: int, pooled_w: int, sampling_ratio: int,
                       feature_numel: int) -> float:
    """Distinct feature elements read: (ph*s+1)(pw*s+1) per ROI and channel, at most the map."""
    per_roi = (pooled_h * sampling_ratio + 1) * (pooled_w * sampling_ratio + 1)
    return float(min(rois * channels * per_roi, feature_numel))


def _nbytes(t: Tensor) -> float:
    return float(t.numel() * t.element_size())


@register("whichgpu.roi_align")
def _roi_align_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    features, rois, _, ph, pw, sr = args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5])
    r, c = int(rois.shape[0]), int(features.shape[1])
    gathered = roi_align_gathered(r, c, ph, pw, sr, features.numel())
    return Cost(roi_align_flops(r, c, ph, pw, sr), "embedding",
                bytes_read=gathered * features.element_size() + _nbytes(rois),
                bytes_written=_nbytes(out), tags=("roi_align",))


@register("whichgpu.roi_align_backward")
def _roi_align_backward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    grad, rois = args[0], args[1]
    ph, pw, sr = int(args[3]), int(args[4]), int(args[9])
    r, c = int(grad.shape[0]), int(grad.shape[1])
    # Zero-fill of the feature gradient, then atomicAdd scatter of every sample's 4 weights.
    scattered = roi_align_gathered(r, c, ph, pw, sr, out.numel()) * out.element_size()
    flops = roi_align_flops(r, c, ph, pw, sr)
    return Cost(flops, "embedding", kernels=2.0, bytes_read=_nbytes(grad) + _nbytes(rois),
                bytes_written=_nbytes(out) + scattered, tags=("roi_align", "atomic"))


def level_split(total: int, levels: int) -> list[int]:
    """A static split of ``total`` ROIs over FPN levels (the real split depends on box sizes).

    FLOPs and bytes of ROIAlign depend on the number of ROIs, not on the level they read from,
    so an even split keeps the totals exact; only the per-level kernel sizes are approximate.
    """
    base = total // levels
    return [base + (1 if i < total - base * levels else 0) for i in range(levels)]

