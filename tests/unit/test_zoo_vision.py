"""Vision models of the zoo: names, exact parameter counts, forward FLOPs, train/infer steps.

FLOP figures: FlopCounterMode counts 2 FLOPs per multiply-add of convs and matmuls; the
published "GFLOPs" of torchvision / timm / the EfficientNet paper are multiply-adds (GMACs).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from whichgpu.errors import InputError
from whichgpu.workload.registry import REGISTRY
from whichgpu.workload.zoo import get_entry, load_entries
from whichgpu.workload.zoo.base import BuildRequest, Built, ZooEntry
from whichgpu.workload.zoo.vision.nms import nms_flops
from whichgpu.workload.zoo.vision.roi_align import roi_align_flops

ENTRIES = load_entries("vision")
IDS = [e.id for e in ENTRIES]
# Spellings of throughput.csv's `model` column (shared/validation/README.md) -> zoo id.
VALIDATION = {
    "ResNet-50 v1.5": "resnet50-v1.5", "ResNeXt-101 32x4d": "resnext101-32x4d",
    "SE-ResNeXt-101 32x4d": "se-resnext101-32x4d", "EfficientNet-b0": "efficientnet-b0",
    "EfficientNet-b4": "efficientnet-b4", "EfficientNet-widese-b0": "efficientnet-widese-b0",
    "EfficientNet-widese-b4": "efficientnet-widese-b4", "SSD300 (ResNet-50 backbone)": "ssd300",
    "Mask R-CNN (ResNet-50 FPN)": "maskrcnn-r50-fpn",
}


def entry(eid: str) -> ZooEntry:
    return next(e for e in ENTRIES if e.id == eid)


def build(eid: str, task: str = "infer", batch: int = 1, **kw: object) -> Built:
    return entry(eid).load_builder()(BuildRequest(task=task, batch_size=batch, **kw))  # type: ignore[arg-type]


def forward_macs(built: Built, skip: str = "") -> float:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        built.model(**built.inputs)
    total = counter.get_total_flops()
    if skip:
        total -= sum(counter.get_flop_counts().get(skip, {}).values())
    return total / 2.0


# ---------------------------------------------------------------------------------------------
# Independent parameter arithmetic (weights + biases; BN has 2 parameters per channel)
# ---------------------------------------------------------------------------------------------

def resnet_params(layers: tuple[int, ...], widths: tuple[int, ...], exp: int, groups: int,
                  se_hidden: int = 0, fc: bool = True, bn: bool = True) -> int:
    """Stem conv7x7 + bottlenecks (1x1, 3x3/groups, 1x1, 1x1 shortcut on the first) + fc."""
    b = 2 if bn else 0
    total, cin = 3 * 64 * 49 + b * 64, 64
    for n, w in zip(layers, widths, strict=True):
        cout = w * exp
        for i in range(n):
            total += cin * w + w * w * 9 // groups + w * cout + b * (2 * w + cout)
            if i == 0:
                total += cin * cout + b * cout
            if se_hidden:  # Linear(C, h) + Linear(h, C)
                total += cout * se_hidden + se_hidden + se_hidden * cout + cout
            cin = cout
    return total + (cin * 1000 + 1000 if fc else 0)


def test_resnet_arithmetic_matches_torchvision() -> None:
    # torchvision ResNet50_Weights.IMAGENET1K_V1 meta: num_params 25,557,032
    assert resnet_params((3, 4, 6, 3), (64, 128, 256, 512), 4, 1) == 25_557_032


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eid", IDS)
def test_entry_resolves_by_every_name(eid: str) -> None:
    e = entry(eid)
    assert e.input_kind == "image" and e.throughput_unit == "images/s"
    assert e.family in ("cnn", "detection")
    for name in (e.id, e.title, *e.validation_names, *e.aliases):
        assert get_entry(name).id == eid, name


def test_validation_spellings_resolve() -> None:
    for name, eid in VALIDATION.items():
        assert get_entry(name).id == eid
        assert name in entry(eid).validation_names


def test_entries_are_torch_free() -> None:
    code = "import sys, whichgpu.workload.zoo as z; z.all_entries(); sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_default_batches_follow_dle_configs() -> None:
    # ConvNets/configs.yml: resnet50 DGXA100 AMP/TF32 256, DGX1V FP32 112
    rn50 = entry("resnet50-v1.5")
    assert [rn50.default_batch(p) for p in ("amp-fp16", "tf32", "fp32")] == [256, 256, 112]
    # efficientnet-b4 DGXA100 AMP 128, TF32 64; DGX1V-32G FP32 32
    b4 = entry("efficientnet-b4")
    assert [b4.default_batch(p) for p in ("amp-fp16", "tf32", "fp32")] == [128, 64, 32]
    assert entry("efficientnet-b0").default_optimizer == "rmsprop"
    assert entry("maskrcnn-r50-fpn").default_batch_size == 12  # train_benchmark.sh: 12 * GPUs


# ---------------------------------------------------------------------------------------------
# Parameter counts
# ---------------------------------------------------------------------------------------------

def widese_extra(arch_b: str) -> int:
    """WideSE minus original SE parameters: hidden int(hid/4) instead of int(cin/4) per block."""
    from whichgpu.workload.zoo.vision.efficientnet import B0, B4

    arch = {"b0": B0, "b4": B4}[arch_b]
    extra, cin = 0, arch.stem
    for r, e, c in zip(arch.repeats, arch.expansion, arch.channels, strict=True):
        for i in range(r):
            block_in = cin if i == 0 else c
            hid = block_in * e
            d = int(hid * 0.25) - int(block_in * 0.25)
            extra += 2 * hid * d + d  # two weight matrices + squeeze bias
        cin = c
    return extra


SSD_EXTRAS = ((1024, 256, 512), (512, 256, 512), (512, 128, 256), (256, 128, 256), (256, 128, 256))
SSD_HEADS = ((1024, 4), (512, 6), (512, 6), (256, 6), (256, 4), (256, 4))

EXPECTED_PARAMS = {
    # torchvision docs, ResNet50_Weights.IMAGENET1K_V1: 25,557,032
    "resnet50-v1.5": 25_557_032,
    # timm resnext101_32x4d model card: 44.2 M; exact value from the definition's arithmetic
    "resnext101-32x4d": resnet_params((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32),
    # DLE SE: Linear(C, 16) + Linear(16, C) after every bottleneck
    "se-resnext101-32x4d": resnet_params((3, 4, 23, 3), (128, 256, 512, 1024), 2, 32, se_hidden=16),
    # torchvision docs, EfficientNet_B0_Weights / EfficientNet_B4_Weights: 5,288,548 / 19,341,616
    "efficientnet-b0": 5_288_548,
    "efficientnet-b4": 19_341_616,
    "efficientnet-widese-b0": 5_288_548 + widese_extra("b0"),
    "efficientnet-widese-b4": 19_341_616 + widese_extra("b4"),
    # ResNet-50 through layer3 (no fc) + 5 extra blocks (1x1 + 3x3, no bias, BN) + 3x3 heads
    "ssd300": resnet_params((3, 4, 6), (64, 128, 256), 4, 1, fc=False)
    + sum(cin * mid + 2 * mid + mid * cout * 9 + 2 * cout for cin, mid, cout in SSD_EXTRAS)
    + sum((c * 9 + 1) * n * (4 + 81) for c, n in SSD_HEADS),
    # torchvision MaskRCNN_ResNet50_FPN_Weights: 44,401,393 with 91 classes (frozen BN as buffers);
    # DLE uses 81: cls_score and bbox_pred lose 10 and 40 outputs of 1024+1, the mask logits 10 x 257
    "maskrcnn-r50-fpn": 44_401_393 - 10 * 1025 - 40 * 1025 - 10 * 257,
}


@pytest.mark.parametrize("eid", IDS)
def test_parameter_count_is_exact(eid: str) -> None:
    built = build(eid)
    n = sum(p.numel() for p in built.model.parameters())
    assert n == EXPECTED_PARAMS[eid] == built.full_params == entry(eid).params_reference


# ---------------------------------------------------------------------------------------------
# Forward FLOPs
# ---------------------------------------------------------------------------------------------

PUBLISHED_GMACS = {
    # (GMACs, relative tolerance, source)
    "resnet50-v1.5": (4.09, 0.01),  # torchvision docs, ResNet50_Weights: 4.09 GFLOPS @224
    "resnext101-32x4d": (8.0, 0.01),  # timm resnext101_32x4d model card: GMACs 8.0 @224
    "se-resnext101-32x4d": (8.0, 0.01),  # timm seresnext101_32x4d: 8.0 (SE adds < 0.1 %)
    "efficientnet-b0": (0.39, 0.02),  # torchvision EfficientNet_B0_Weights: 0.39 GFLOPS @224
    "efficientnet-b4": (4.39, 0.01),  # torchvision EfficientNet_B4_Weights: 4.39 GFLOPS @380
    "efficientnet-widese-b0": (0.39, 0.02),  # SE layers act on 1x1 vectors: same as B0 within 1 %
    "efficientnet-widese-b4": (4.39, 0.01),
}


@pytest.mark.parametrize("eid", list(PUBLISHED_GMACS))
def test_classifier_flops_match_published(eid: str) -> None:
    gmacs, tol = PUBLISHED_GMACS[eid]
    assert forward_macs(build(eid)) / 1e9 == pytest.approx(gmacs, rel=tol)


def conv_macs(cin: int, cout: int, k: int, side: int, groups: int = 1) -> int:
    return cin // groups * cout * k * k * side * side


def test_ssd300_flops_match_hand_count() -> None:
    # No published GFLOPs for DLE's SSD300-R50: count the convs by hand at 300x300.
    # Backbone: stem 7x7/2 -> 150, maxpool -> 75; layer1 @75, layer2 @38 (stride in the 3x3),
    # layer3 @38 (strides set to 1).
    macs = conv_macs(3, 64, 7, 150)
    cin = 64
    for n, w, side_in, side in ((3, 64, 75, 75), (4, 128, 75, 38), (6, 256, 38, 38)):
        for i in range(n):
            s_in = side_in if i == 0 else side
            macs += conv_macs(cin, w, 1, s_in) + conv_macs(w, w, 3, side) + conv_macs(w, 4 * w, 1, side)
            macs += conv_macs(cin, 4 * w, 1, side) if i == 0 else 0
            cin = 4 * w
    sides = (38, 19, 10, 5, 3, 1)
    for (c_in, mid, c_out), s_in, s_out in zip(SSD_EXTRAS, sides[:-1], sides[1:], strict=True):
        macs += conv_macs(c_in, mid, 1, s_in) + conv_macs(mid, c_out, 3, s_out)
    macs += sum(conv_macs(c, n * 85, 3, s) for (c, n), s in zip(SSD_HEADS, sides, strict=True))
    built = build("ssd300")
    assert forward_macs(built) == pytest.approx(macs, rel=1e-9)
    ploc, plabel = built.model(**built.inputs)
    # SSD paper: 8732 default boxes for SSD300; 81 COCO classes incl. background
    assert tuple(ploc.shape) == (1, 4, 8732) and tuple(plabel.shape) == (1, 81, 8732)


def test_maskrcnn_flops_match_torchvision() -> None:
    # torchvision MaskRCNN_ResNet50_FPN_Weights: 134.38 GFLOPS (GMACs), measured on an 800x800
    # input whose random-weight detections are all filtered out (mask head idle). torchvision's
    # ResNet-50 puts the stride in the 3x3 conv; DLE's MSRA body puts it in the first 1x1, which
    # then runs at a quarter of the pixels in the first block of res3, res4 and res5. At 800x800
    # each of those strided 1x1s costs 327.68 M MACs (256x128 @100^2 = 512x256 @50^2 =
    # 1024x512 @25^2), torchvision's unstrided ones 4x that: 3 stages x 3 x 327.68 M more.
    built = build("maskrcnn-r50-fpn", options=(("height", 800), ("width", 800)))
    macs = forward_macs(built, skip="MaskRCNN.mask_head") + 3 * 3 * 327_680_000
    assert macs / 1e9 == pytest.approx(134.38, rel=0.01)


def test_maskrcnn_static_roi_counts() -> None:
    built = build("maskrcnn-r50-fpn", task="train", batch=2)
    assert tuple(built.inputs["images"].shape) == (2, 3, 800, 1344)  # 800 x 1333 padded to /32
    out = built.model(**built.inputs)
    assert out["class_logits"].shape == (2 * 512, 81)  # ROI_HEADS.BATCH_SIZE_PER_IMAGE
    assert out["mask_logits"].shape == (2 * 128, 81, 28, 28)  # 512 x POSITIVE_FRACTION 0.25


def test_custom_op_cost_formulas() -> None:
    # ROIAlign, 1 ROI x 1 channel x 7x7 bins, 2x2 samples: 49 x (4 x 7 + 1) = 1421 FLOPs
    assert roi_align_flops(1, 1, 7, 7, 2) == 1421
    # NMS over 3 boxes: 3 pairs x 13 FLOPs
    assert nms_flops(1, 3) == 39
    with torch.device("meta"):
        feats, rois = torch.empty(2, 256, 50, 84), torch.empty(10, 5)
        out = torch.ops.whichgpu.roi_align(feats, rois, 0.0625, 7, 7, 2, False)
    formula = REGISTRY["whichgpu.roi_align"].formula
    assert formula is not None
    cost = formula((feats, rois, 0.0625, 7, 7, 2, False), {}, out)
    assert cost.flops == roi_align_flops(10, 256, 7, 7, 2)
    assert cost.bytes_read == 10 * 256 * 15 * 15 * 4 + 10 * 5 * 4  # (7*2+1)^2 per ROI-channel


# ---------------------------------------------------------------------------------------------
# Training and inference steps on meta
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eid", IDS)
def test_train_step_reaches_every_trainable_parameter(eid: str) -> None:
    built = build(eid, task="train", batch=2)
    assert built.samples == 2 and built.tokens == 0 and built.loss_fn is not None
    loss = built.loss_fn(built.model(**built.inputs), built.inputs)
    assert loss.dim() == 0
    loss.backward()
    params = list(built.model.named_parameters())
    missing = [n for n, p in params if p.requires_grad and p.grad is None]
    assert not missing
    frozen = [n for n, p in params if not p.requires_grad]
    if eid == "maskrcnn-r50-fpn":  # FREEZE_CONV_BODY_AT = 2: stem and res2
        assert frozen and all(n.startswith(("backbone.body.stem", "backbone.body.layer1")) for n in frozen)
    else:
        assert not frozen


@pytest.mark.parametrize("eid", IDS)
def test_infer_step_runs_without_grad(eid: str) -> None:
    built = build(eid, task="infer", batch=2)
    assert built.loss_fn is None and not built.model.training
    with torch.no_grad():
        out = built.model(**built.inputs)
    if entry(eid).family == "cnn":
        assert tuple(out.shape) == (2, 1000)
    elif eid == "maskrcnn-r50-fpn":
        assert tuple(out["masks"].shape) == (2 * 100, 1, 28, 28)  # DETECTIONS_PER_IMG = 100


@pytest.mark.parametrize("eid", IDS)
@pytest.mark.parametrize("batch", [0, -3])
def test_bad_batch_is_an_input_error(eid: str, batch: int) -> None:
    with pytest.raises(InputError):
        build(eid, batch=batch)


@pytest.mark.parametrize(("task", "image"), [("eval", 224), ("train", 8)])
def test_bad_task_or_image_is_an_input_error(task: str, image: int) -> None:
    with pytest.raises(InputError):
        build("resnet50-v1.5", task=task, image_size=image)


def test_model_specific_bad_requests() -> None:
    with pytest.raises(InputError):
        build("ssd300", image_size=320)  # 8732 default boxes need 300x300
    with pytest.raises(InputError):
        build("maskrcnn-r50-fpn", options=(("masks_per_image", 600),))
    with pytest.raises(InputError):
        build("maskrcnn-r50-fpn", options=(("rois_per_image", "many"),))
