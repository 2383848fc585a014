"""Memory a step needs beyond its tensors: CUDA context, library workspaces, communication
buffers and allocator fragmentation. Each is a named constant with its source; the plan can
override the two that vary most (context and fragmentation).
"""

from __future__ import annotations

from whichgpu.hardware.spec import GpuSpec
from whichgpu.workload.trace import Trace

MiB = 1024**2

# CUDA context (driver state, the kernels of the loaded modules) per process per GPU, outside
# PyTorch's allocator. PyTorch sets CUDA_MODULE_LOADING=LAZY (pytorch/pytorch#86509, measured
# 287,047,680 B with lazy loading vs 666,632,192 B eager for a minimal program); a training step
# lazily loads further cuBLAS/cuDNN/ATen kernels on top. 0.4 GB is the middle of the 0.3-0.5 GB
# seen with CUDA 12 on Ampere/Hopper. Not visible to torch.cuda.memory_allocated().
CUDA_CONTEXT_BYTES = 0.4e9

# cuBLAS workspace per (handle, stream), allocated by PyTorch through its caching allocator
# (aten/src/ATen/cuda/CublasHandlePool.cpp, default CUBLAS_WORKSPACE_CONFIG): ":4096:8" =
# 4096 KiB x 8 = 32 MiB on Hopper/Blackwell (sm90+), ":4096:2:16:8" = 4096 KiB x 2 + 16 KiB x 8
# = 8.125 MiB before. cuBLASLt shares it (TORCH_CUBLASLT_UNIFIED_WORKSPACE, the default).
CUBLAS_WORKSPACE_BYTES = {"hopper": 32 * MiB, "blackwell": 32 * MiB}
CUBLAS_WORKSPACE_DEFAULT_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8

# NCCL communicator buffers (allocated by NCCL, outside PyTorch's allocator) once a collective has
# run. Channels x peers x protocol FIFOs (NCCL_BUFFSIZE = 4 MiB for the Simple protocol): about
# 1 GB per rank on 8-GPU NVLink nodes (NVIDIA/nccl#1685: 1.06 GB before the first all-to-all on
# 8 x H100; NVIDIA/nccl#864: ~1.6 GB with one communicator after an all-reduce). Fewer channels
# (PCIe systems) use less.
NCCL_BUFFER_BYTES = 1.0e9

# PyTorch's caching allocator cannot always reuse freed blocks for new sizes (block splitting,
# 2 MiB small-block pools, 20 MiB rounding of large segments): reserved memory exceeds allocated
# memory. GMLake (Guo et al., ASPLOS 2024, arXiv:2401.08156) measures 15% of reserved memory
# lost to fragmentation on average (up to 33%) across eight LLMs on A100-80GB with memory-saving
# techniques (recompute, offload, ZeRO, LoRA), which fragment most. We apply 10% to the memory
# that churns during the step (activations, gradients, temporaries); long-lived states allocated
# once (weights, optimizer states) do not fragment.
FRAGMENTATION_FRACTION = 0.10

# cuDNN picks convolution algorithms at run time (cudnn.benchmark) among those whose workspace
# fits in free memory; the fastest implicit-GEMM / FFT algorithms want a workspace of the order
# of one operand. Allowance: the largest single convolution operand (input or output) of the step.
CONV_WORKSPACE_NOTE = "cuDNN: largest convolution operand (algorithms with workspace are picked to fit)"


def cublas_workspace_bytes(gpu: GpuSpec) -> float:
    return float(CUBLAS_WORKSPACE_BYTES.get(gpu.architecture, CUBLAS_WORKSPACE_DEFAULT_BYTES))


def conv_workspace_bytes(trace: Trace) -> float:
    """Largest convolution operand of the step (0 for models without convolutions)."""
    best = 0.0
    for o in trace.ops:
        if o.category == "conv":
            best = max(best, max(o.in_bytes, default=0.0), max(o.out_bytes, default=0.0))
    return best


def workspace(gpu: GpuSpec, trace: Trace) -> tuple[float, str]:
    """(bytes, assumption) of the library workspaces."""
    cublas = cublas_workspace_bytes(gpu)
    conv = conv_workspace_bytes(trace)
    text = f"cuBLAS workspace {cublas / MiB:g} MiB ({gpu.architecture}, PyTorch default CUBLAS_WORKSPACE_CONFIG)"
    if conv:
        text += f" + {CONV_WORKSPACE_NOTE}"
    return cublas + conv, text
