"""The plan: how a workload runs (the third input, beside workload and hardware). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import InputError

NETWORKS: dict[str, float] = {
    # Per-GPU network bandwidth between nodes, GB/s per direction.
    "ib-ndr-400": 50.0,   # 400 Gb/s InfiniBand NDR per GPU (DGX H100)
    "ib-hdr-200": 25.0,   # 200 Gb/s InfiniBand HDR per GPU (DGX A100) -- the default
    "ib-edr-100": 12.5,   # 100 Gb/s InfiniBand EDR per GPU (DGX-1/DGX-2 era)
    "eth-100": 12.5,      # 100 Gb/s Ethernet (RoCE) per GPU
    "eth-25": 3.125,      # 25 Gb/s Ethernet per node shared... modelled per GPU
    "efa-400": 50.0,      # AWS EFA v3/v4 400 Gb/s per GPU (p5/p6)
}
DEFAULT_NETWORK = "ib-hdr-200"


@dataclass(frozen=True)
class Plan:
    """Execution switches, each echoed in reports.

    gpus: data-parallel (DDP) replicas; gpus_per_node: GPUs sharing the scale-up link;
    network: the inter-node fabric (see NETWORKS); engine: the execution engine profile
    (hardware/engines/*.toml: eager PyTorch, torch.compile, CUDA graphs, TensorRT-LLM,
    llama.cpp, ...: launch costs, fusion, kernels); overlap: per-kernel compute/memory overlap policy
    ("max": a kernel takes the longer of its compute and memory time; "sum": no overlap);
    ddp_overlap: overlap gradient all-reduce with backward; use_measured: use measured matmul
    ceilings from the catalog where present; grad_accum: micro-batches per optimizer step (the
    optimizer step and the gradient all-reduce happen once per grad_accum micro-batches; times
    are reported per micro-batch); p2p: NCCL peer-to-peer between GPUs (NCCL_P2P_DISABLE=1
    stages every transfer through host memory).
    """

    gpus: int = 1
    gpus_per_node: int = 8
    network: str = DEFAULT_NETWORK
    engine: str = "pytorch"
    overlap: str = "max"
    ddp_overlap: bool = True
    use_measured: bool = True
    bucket_mb: float = 25.0
    power_limit_w: float | None = None
    grad_accum: int = 1
    p2p: bool = True
    sharding: str = "ddp"  # ddp | zero1 | zero2 | zero3 | fsdp-full | fsdp-grad-op (communication: perf/sharding.py)

    def validate(self) -> None:
        if self.gpus < 1:
            raise InputError(f"--gpus must be >= 1, got {self.gpus}")
        if self.gpus_per_node < 1:
            raise InputError(f"--gpus-per-node must be >= 1, got {self.gpus_per_node}")
        if self.network not in NETWORKS:
            raise InputError(f"unknown --network {self.network!r}; valid: " + ", ".join(NETWORKS))
        from whichgpu.hardware.engine import get_engine

        get_engine(self.engine)  # an unknown engine is a one-line error with suggestions
        if self.overlap not in ("max", "sum"):
            raise InputError(f"--overlap must be 'max' or 'sum', got {self.overlap!r}")
        if self.grad_accum < 1:
            raise InputError(f"--grad-accum must be >= 1, got {self.grad_accum}")
        if self.power_limit_w is not None and self.power_limit_w <= 0:
            raise InputError(f"--power-limit-w must be > 0, got {self.power_limit_w}")
        from whichgpu.perf.sharding import SHARDINGS

        if self.sharding not in SHARDINGS:
            raise InputError(f"unknown sharding {self.sharding!r}; valid: " + ", ".join(SHARDINGS))

    @property
    def compile(self) -> bool:
        """The engine fuses kernels (torch.compile, XLA, TensorRT-LLM, ...)."""
        from whichgpu.hardware.engine import get_engine

        return get_engine(self.engine).fuses

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)
