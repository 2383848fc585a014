"""Zoo entries (torch-free metadata): the vision models of the validation set.

Per-GPU training batches come from the reference configs (not the README tables):
NVIDIA/DeepLearningExamples ``PyTorch/Classification/ConvNets/configs.yml`` (ConvNets),
``PyTorch/Detection/SSD/README.md`` performance tables and
``PyTorch/Segmentation/MaskRCNN/pytorch/scripts/train_benchmark.sh`` (12 images per GPU).
ConvNets configs.yml picks the batch per platform; ``batch_by_precision`` keeps the DGX A100
(AMP, TF32) and DGX-1 V100 (FP32) values, and the notes list the others.
"""

from __future__ import annotations

from whichgpu.workload.zoo.base import ZooEntry

# NVIDIA DLE ConvNets configs.yml / README: AMP runs use `memory_format: nhwc`; FP32/TF32 NCHW.

_V = "whichgpu.workload.zoo.vision"
_DLE_CONVNETS = "NVIDIA DLE PyTorch/Classification/ConvNets image_classification/models"

ENTRIES: list[ZooEntry] = [
    ZooEntry(
        id="resnet50-v1.5",
        title="ResNet-50 v1.5",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.resnet:build_resnet50",
        definition=f"torchvision resnet50 architecture (= {_DLE_CONVNETS}/resnet.py 'resnet50', "
                   "stride in the 3x3 conv), re-implemented; parameter count verified (25,557,032)",
        default_batch_size=256,
        default_image_size=224,
        default_optimizer="sgd",
        batch_by_precision=(("amp", 256), ("tf32", 256), ("fp32", 112), ("fp16", 256)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("ResNet-50 v1.5",),
        aliases=("resnet50", "rn50", "resnet-50", "resnet50v1.5", "resnet50_v1_5"),
        params_reference=25_557_032,
        throughput_unit="images/s",
        notes="DLE configs.yml: batch 256 (AMP, TF32; DGX-1V/DGX A100/T4 AMP), FP32 112 (DGX-1V), "
              "128 (T4), 256 (DGX-2V). SGD momentum 0.875, label smoothing 0.1, mixup 0.2 "
              "(NLLMultiLabelSmooth loss).",
    ),
    ZooEntry(
        id="resnext101-32x4d",
        title="ResNeXt-101 32x4d",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.resnet:build_resnext101_32x4d",
        definition=f"{_DLE_CONVNETS}/resnet.py 'resnext101-32x4d' (widths 128..1024, expansion 2, "
                   "32 groups; same as timm resnext101_32x4d), re-implemented; parameter count "
                   "verified (44,177,704)",
        default_batch_size=128,
        default_image_size=224,
        default_optimizer="sgd",
        batch_by_precision=(("amp", 128), ("tf32", 128), ("fp32", 64), ("fp16", 128)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("ResNeXt-101 32x4d",),
        aliases=("resnext101", "resnext-101", "resnext101_32x4d", "rnxt101"),
        params_reference=44_177_704,
        throughput_unit="images/s",
        notes="DLE configs.yml: batch 128 (AMP, TF32), 64 (FP32). SGD momentum 0.875, label "
              "smoothing 0.1, mixup 0.2.",
    ),
    ZooEntry(
        id="se-resnext101-32x4d",
        title="SE-ResNeXt-101 32x4d",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.resnet:build_se_resnext101_32x4d",
        definition=f"{_DLE_CONVNETS}/resnet.py 'se-resnext101-32x4d' (ResNeXt-101 32x4d + SE with "
                   "16 hidden units per block, fused addcmul), re-implemented; parameter count "
                   "derived from the definition (45,251,128)",
        default_batch_size=128,
        default_image_size=224,
        default_optimizer="sgd",
        batch_by_precision=(("amp", 128), ("tf32", 128), ("fp32", 64), ("fp16", 128)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("SE-ResNeXt-101 32x4d",),
        aliases=("seresnext101", "se-resnext-101", "se-resnext101_32x4d", "seresnext101_32x4d"),
        params_reference=45_251_128,
        throughput_unit="images/s",
        notes="DLE's SE uses Linear(C, 16): 16 hidden units, not C/16 (so fewer parameters than "
              "the paper's SE-ResNeXt, 48.96M). configs.yml: batch 128 (AMP/TF32 DGX A100, AMP "
              "T4), 112 (AMP DGX-1V), 64 (FP32).",
    ),
    ZooEntry(
        id="efficientnet-b0",
        title="EfficientNet-B0",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.efficientnet:build_b0",
        definition=f"{_DLE_CONVNETS}/efficientnet.py 'efficientnet-b0', re-implemented; parameter "
                   "count verified (5,288,548, = torchvision efficientnet_b0)",
        default_batch_size=256,
        default_image_size=224,
        default_optimizer="rmsprop",
        batch_by_precision=(("amp", 256), ("tf32", 256), ("fp32", 128), ("fp16", 256)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("EfficientNet-b0",),
        aliases=("effnet-b0", "efficientnet_b0", "efficientnetb0"),
        params_reference=5_288_548,
        throughput_unit="images/s",
        notes="DLE optimizer: RMSprop (alpha 0.9, eps 0.01, momentum 0.9). configs.yml batch: "
              "DGX A100 256 (AMP, TF32); DGX-1V 32GB 256 AMP / 128 FP32; DGX-1V 16GB 128 AMP / "
              "64 FP32; T4 128 / 64.",
    ),
    ZooEntry(
        id="efficientnet-b4",
        title="EfficientNet-B4",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.efficientnet:build_b4",
        definition=f"{_DLE_CONVNETS}/efficientnet.py 'efficientnet-b4' (b0 scaled 1.4 wide, 1.8 "
                   "deep, 380 px, stochastic depth 0.8), re-implemented; parameter count verified "
                   "(19,341,616, = torchvision efficientnet_b4)",
        default_batch_size=128,
        default_image_size=380,
        default_optimizer="rmsprop",
        batch_by_precision=(("amp", 128), ("tf32", 64), ("fp32", 32), ("fp16", 128)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("EfficientNet-b4",),
        aliases=("effnet-b4", "efficientnet_b4", "efficientnetb4"),
        params_reference=19_341_616,
        throughput_unit="images/s",
        notes="DLE optimizer: RMSprop. configs.yml batch: DGX A100 128 AMP / 64 TF32; DGX-1V "
              "32GB 64 AMP / 32 FP32; DGX-1V 16GB 32 AMP / 16 FP32; T4 32 / 16.",
    ),
    ZooEntry(
        id="efficientnet-widese-b0",
        title="EfficientNet-WideSE-B0",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.efficientnet:build_widese_b0",
        definition=f"{_DLE_CONVNETS}/efficientnet.py 'efficientnet-widese-b0' (SE width 1/4 of the "
                   "depthwise channels), re-implemented; parameter count derived (8,423,848)",
        default_batch_size=256,
        default_image_size=224,
        default_optimizer="rmsprop",
        batch_by_precision=(("amp", 256), ("tf32", 256), ("fp32", 128), ("fp16", 256)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("EfficientNet-widese-b0",),
        aliases=("effnet-widese-b0", "efficientnet_widese_b0", "widese-b0"),
        params_reference=8_423_848,
        throughput_unit="images/s",
        notes="Same batches and optimizer (RMSprop) as efficientnet-b0 in DLE configs.yml.",
    ),
    ZooEntry(
        id="efficientnet-widese-b4",
        title="EfficientNet-WideSE-B4",
        family="cnn",
        input_kind="image",
        builder=f"{_V}.efficientnet:build_widese_b4",
        definition=f"{_DLE_CONVNETS}/efficientnet.py 'efficientnet-widese-b4', re-implemented; "
                   "parameter count derived (34,927,246)",
        default_batch_size=128,
        default_image_size=380,
        default_optimizer="rmsprop",
        batch_by_precision=(("amp", 128), ("tf32", 64), ("fp32", 32), ("fp16", 128)),
        channels_last_precisions=("amp-fp16", "amp-bf16"),
        validation_names=("EfficientNet-widese-b4",),
        aliases=("effnet-widese-b4", "efficientnet_widese_b4", "widese-b4"),
        params_reference=34_927_246,
        throughput_unit="images/s",
        notes="Same batches and optimizer (RMSprop) as efficientnet-b4 in DLE configs.yml.",
    ),
    ZooEntry(
        id="ssd300",
        title="SSD300 v1.1 (ResNet-50)",
        family="detection",
        input_kind="image",
        builder=f"{_V}.ssd:build_ssd300",
        definition="NVIDIA DLE PyTorch/Detection/SSD ssd/model.py (torchvision resnet50 up to "
                   "conv4_x with stride 1, 5 extra blocks, 8732 default boxes, 81 classes), "
                   "re-implemented; parameter count derived (22,894,902)",
        default_batch_size=64,
        default_image_size=300,
        default_optimizer="sgd",
        batch_by_precision=(("amp", 64), ("tf32", 64), ("fp32", 32), ("fp16", 64)),
        validation_names=("SSD300 (ResNet-50 backbone)",),
        aliases=("ssd", "ssd300-resnet50", "ssd300 v1.1", "ssd-resnet50"),
        params_reference=22_894_902,
        throughput_unit="images/s",
        notes="DLE README benchmarks: 64 and 128 per GPU on A100 (AMP, TF32), 32 and 64 on V100 "
              "16GB (FP32 32 only). SGD momentum 0.9, weight decay 5e-4. Loss: smooth L1 + "
              "cross entropy with hard negative mining (static double sort).",
    ),
    ZooEntry(
        id="maskrcnn-r50-fpn",
        title="Mask R-CNN R-50-FPN",
        family="detection",
        input_kind="image",
        builder=f"{_V}.maskrcnn:build_maskrcnn",
        definition="NVIDIA DLE PyTorch/Segmentation/MaskRCNN (maskrcnn-benchmark) "
                   "e2e_mask_rcnn_R_50_FPN_1x: MSRA ResNet-50 (stride in 1x1, frozen BN, stem+res2 "
                   "frozen), FPN P2-P6, RPN, ROIAlign (whichgpu::roi_align), 2-FC box head, "
                   "4-conv mask head, 81 classes; re-implemented; parameter count verified "
                   "(44,347,573 = torchvision maskrcnn_resnet50_fpn 44,401,393 with 81 classes)",
        default_batch_size=12,
        default_image_size=800,
        default_optimizer="sgd",
        validation_names=("Mask R-CNN (ResNet-50 FPN)",),
        aliases=("maskrcnn", "mask-rcnn", "mask r-cnn", "maskrcnn_resnet50_fpn", "mask_rcnn_r50_fpn"),
        params_reference=44_347_573,
        throughput_unit="images/s",
        notes="Input 800x1344 (min side 800, max 1333, padded to /32); image_size sets the short "
              "side. Static counts: RPN keeps 1000 proposals/image; training samples 512 ROIs "
              "and 128 positive (mask) ROIs per image (config caps; options rois_per_image, "
              "masks_per_image); inference runs the mask head on 100 detections/image. "
              "train_benchmark.sh: 12 images per GPU, FusedSGD momentum 0.9.",
    ),
]
