"""Shared builder for the ImageNet classifiers of NVIDIA DeepLearningExamples (DLE) ConvNets.

Training loss (DLE ``PyTorch/Classification/ConvNets/main.py``): the benchmark configs in
``configs.yml`` set ``mixup: 0.2`` and ``label_smoothing: 0.1``, so the criterion is
``NLLMultiLabelSmooth(0.1)`` (``image_classification/mixup.py``) applied to mixed soft targets:

    logprobs = log_softmax(x.float(), -1)                       # (B, 1000)
    loss = mean( 0.9 * sum(-logprobs * target, -1) + 0.1 * mean(-logprobs, -1) )

The mixup blend of the input batch itself happens in the data loader (two elementwise kernels on
the images) and is not part of the traced step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.vision.checks import check_request

NUM_CLASSES = 1000
LABEL_SMOOTHING = 0.1


def multilabel_smooth_loss(logits: Tensor, target: Tensor, smoothing: float = LABEL_SMOOTHING) -> Tensor:
    """DLE ``NLLMultiLabelSmooth.forward`` in training mode (soft targets from mixup)."""
    logprobs = F.log_softmax(logits.float(), dim=-1)  # (B, C)
    nll = (-logprobs * target.float()).sum(-1)  # (B,)
    smooth = -logprobs.mean(dim=-1)  # (B,)
    return ((1.0 - smoothing) * nll + smoothing * smooth).mean()


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_classifier(req: BuildRequest, make_model: Callable[[], nn.Module], default_image: int,
                     notes: list[str] | None = None) -> Built:
    """Build ``make_model()`` on meta with a (B, 3, S, S) image batch and the DLE training loss."""
    image = check_request(req, default_image)
    with torch.device("meta"):
        model = make_model()
        images = torch.empty(req.batch_size, 3, image, image)  # (B, 3, S, S)
        # Mixed one-hot targets: c * onehot + (1 - c) * onehot[perm], dense (B, 1000) floats.
        target = torch.empty(req.batch_size, NUM_CLASSES)
    loss_fn = None
    if req.task == "train":
        model.train()

        def loss_fn(output: Tensor, inputs: dict[str, Tensor]) -> Tensor:
            return multilabel_smooth_loss(output, target)
    else:
        model.eval()
    return Built(model=model, inputs={"x": images}, loss_fn=loss_fn, samples=req.batch_size,
                 tokens=0, full_params=count_params(model), notes=list(notes or []))
