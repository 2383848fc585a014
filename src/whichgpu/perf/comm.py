"""Collective communication: data-parallel gradient all-reduce (NCCL ring) and the
tensor-parallel collectives of a trace (all-reduce / all-gather of activations).

Ring all-reduce moves 2 (n-1)/n of the buffer through every GPU's link (reduce-scatter then
all-gather), so t = 2 (n-1)/n * bytes / bus_bandwidth + per-step latency. Inside a node the bus
is the scale-up link (NVLink / Infinity Fabric, GB/s per direction) or PCIe; across nodes the
per-GPU network bandwidth bounds it. Bus bandwidth is the link rate times an efficiency: NCCL
measured 78-82% of NVLink spec for all-reduce on 8x A100 and 8x H200 (shared/validation/kernels.csv).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from whichgpu.hardware.spec import GpuSpec
from whichgpu.perf.params import PerfParams
from whichgpu.perf.plan import NETWORKS, Plan

# PCIe bandwidth per direction, GB/s, for x16 links (PCI-SIG: 8/16/32/64 GT/s per lane).
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
RING_STEP_LATENCY_S = {"intra": 4e-6, "inter": 10e-6}


@dataclass(frozen=True)
class CommEstimate:
    total_s: float  # all-reduce of all gradients, not overlapped
    exposed_s: float  # what remains after overlapping with backward
    bus_gbps: float
    link: str
    bytes: float


def bus_bandwidth(spec: GpuSpec, plan: Plan, params: PerfParams) -> tuple[float, str]:
    """(bytes/s, description) of the ring's bottleneck link."""
    n = plan.gpus
    per_node = min(n, plan.gpus_per_node)
    pcie_form = "pcie" in spec.form_factor.lower()
    domain = spec.scaleup_domain_gpus or (1 if pcie_form else 8)
    if not plan.p2p and per_node > 1:
        # NCCL_P2P_DISABLE=1: every hop is staged through host memory over PCIe (two PCIe
        # crossings per hop), and NVLink is not used.
        gen = spec.pcie_gen or 4
        intra = PCIE_GBPS.get(gen, 31.5) * (spec.pcie_lanes or 16) / 16 * params.nccl_efficiency * 0.5
        link = f"host-staged PCIe {gen}.0 (NCCL P2P disabled)"
    elif spec.scaleup_gbps_per_direction and 1 < per_node <= domain:
        intra = spec.scaleup_gbps_per_direction * params.nccl_efficiency
        link = spec.scaleup_link or "scale-up link"
    else:
        gen = spec.pcie_gen or 4
        lanes = spec.pcie_lanes or 16
        # Peer traffic through PCIe switches / the CPU root complex reaches less of the link.
        intra = PCIE_GBPS.get(gen, 31.5) * lanes / 16 * params.nccl_efficiency * 0.75
        link = f"PCIe {gen}.0 x{lanes}"
    if plan.nodes > 1:
        net = NETWORKS[plan.network] * params.nccl_efficiency
        if net < intra:
            return net * 1e9, f"network {plan.network} ({NETWORKS[plan.network]:g} GB/s per GPU)"
    return intra * 1e9, link


def group_link(spec: GpuSpec, group: int, params: PerfParams) -> tuple[float, str]:
    """(bytes/s of bus bandwidth, description) for a tensor-parallel group inside one node: the
    scale-up link (NVLink, Infinity Fabric) when the group fits its domain, else PCIe."""
    pcie_form = "pcie" in spec.form_factor.lower()
    domain = spec.scaleup_domain_gpus or (1 if pcie_form else 8)
    if spec.scaleup_gbps_per_direction and group <= domain:
        return spec.scaleup_gbps_per_direction * params.nccl_efficiency * 1e9, spec.scaleup_link or "scale-up link"
    gen = spec.pcie_gen or 4
    lanes = spec.pcie_lanes or 16
    return (PCIE_GBPS.get(gen, 31.5) * lanes / 16 * params.nccl_efficiency * 0.75 * 1e9,
            f"PCIe {gen}.0 x{lanes}")


def collective_time(kind: str, nbytes: float, group: int, spec: GpuSpec, params: PerfParams) -> float:
    """Seconds of one tensor-parallel collective of a `nbytes` message over `group` GPUs:
    a fixed latency (launch and synchronisation of a small-message collective, fitted) plus the
    ring's traffic over the bus: all-reduce 2 (n-1)/n of the message, all-gather (n-1)/n of the
    gathered result (NCCL's bus-bandwidth definitions, nccl-tests PERFORMANCE.md)."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    bw, _ = group_link(spec, group, params)
    moved = 2.0 * (group - 1) / group * nbytes if kind == "all_reduce" else (group - 1) * nbytes
    return params.tp_collective_us * 1e-6 + moved / bw


def allreduce(nbytes: float, spec: GpuSpec, plan: Plan, params: PerfParams, backward_s: float) -> CommEstimate:
    n = plan.gpus
    if n <= 1 or nbytes <= 0:
        return CommEstimate(0.0, 0.0, 0.0, "", 0.0)
    bw, link = bus_bandwidth(spec, plan, params)
    factor = 2.0 * (n - 1) / n
    buckets = max(1, math.ceil(nbytes / (plan.bucket_mb * 1e6)))
    lat = RING_STEP_LATENCY_S["inter" if plan.nodes > 1 else "intra"] * 2 * (n - 1) * buckets
    total = factor * nbytes / bw + lat
    last = factor * min(nbytes, plan.bucket_mb * 1e6) / bw + lat / buckets
    if plan.ddp_overlap:
        exposed = max(last, total - params.ddp_overlap * backward_s)
    else:
        exposed = total
    return CommEstimate(total, min(exposed, total), bw / 1e9, link, nbytes)
