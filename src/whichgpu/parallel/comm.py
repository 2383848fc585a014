"""Collective communication: data-parallel gradient all-reduce (NCCL ring) and the
tensor-parallel collectives of a trace (all-reduce / all-gather of activations).

Ring all-reduce moves 2 (n-1)/n of the buffer through every GPU's link (reduce-scatter then
all-gather), so t = 2 (n-1)/n * bytes / bus_bandwidth + per-step latency. Inside a node the bus
is the scale-up link (NVLink / Infinity Fabric, GB/s per direction) or PCIe; across nodes the
per-GPU network bandwidth bounds it. Bus bandwidth is the link rate times an efficiency: NCCL
measured 78-82% of NVLink spec for all-reduce on 8x A100 and 8x H200 (shared/validation/kernels.csv).

All-reduce has three algorithms, and NCCL runs the fastest for the message (``allreduce_time``):
* ring: 2 (n-1)/n of the message over the bus, 2 (n-1) latency steps;
* tree (NCCL's double binary tree, across nodes only): the same bandwidth term for large messages
  (the two trees each carry half), but latency in 2 log2(nodes) network hops plus a chain through
  each node's GPUs: what wins at scale for small and medium messages;
* NVLS (NVLink SHARP, NVSwitch 3rd generation and later: NVLink 4 and 5 switch fabrics): the
  switch reduces, each GPU sends and receives the message once; measured bus bandwidth over the
  ring's on the same node is the generation's ``NVLS_SPEEDUP``.
Reduce-scatter and all-gather (ZeRO, FSDP, sequence parallelism) run as rings.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whichgpu.errors import InputError
from whichgpu.hardware.system import ScaleOut, System
from whichgpu.parallel.plan import Plan

if TYPE_CHECKING:  # perf/ imports this package; the parameters are only read here
    from whichgpu.perf.params import PerfParams

# PCIe bandwidth per direction, GB/s, for x16 links (PCI-SIG: 8/16/32/64 GT/s per lane).
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
# Peer traffic through PCIe switches or the CPU root complex reaches less of the link than a
# point-to-point transfer; staged through host memory (NCCL_P2P_DISABLE=1) each hop crosses PCIe
# twice. Both are rough factors, named here so that a measured system can replace them.
PCIE_PEER_FACTOR = 0.75
PCIE_HOST_STAGED_FACTOR = 0.5
PCIE_STEP_LATENCY_S = 4e-6  # a ring step over PCIe, as over NVLink (NCCL's small-message latency)


# NVLS all-reduce bus bandwidth over the ring's on the same node, by NVLink generation: nccl-tests
# all_reduce_perf at 8-16 GiB, NVLS on vs off (shared/validation/kernels.csv, stas00/ml-engineering
# network/README.md): 8x H200 480.0 / 367.2 GB/s = 1.31, 8x B200 838.0 / 682.2 GB/s = 1.23.
NVLS_SPEEDUP = {"nvlink4": 480.0 / 367.2, "nvlink5": 838.0 / 682.2}
# Bus bandwidth (GB/s) of NCCL's ring all-reduce inside a Blackwell NVLink domain as NCCL's AUTO
# tuning runs it: Ring with the LL128 protocol, which NCCL's model rates above the Simple protocol
# there; measured 382-386 GB/s on every pair of an 8x B200 node at 32 MiB-1 GiB (NVIDIA/nccl pull
# request 2343, NCCL 2.31.2: AUTO keeps LL128 over that whole range, about half of the Simple ring's
# 682 GB/s over 8 ranks in kernels.csv; LL128 over 3 ranks 479 GB/s). Where an engine keeps NVLS off
# (vLLM and SGLang, hardware/engines/*.toml nvls = false) its NCCL all-reduces get this rate.
# Measured at 2 ranks; at 4 and 8 the serving dev rows agree (Llama-3.1-70B on vLLM on B200, TTFT
# signed median at TP 2 / 4 / 8: -16 / -25 / -30 % with the 720 GB/s ring, -10 / -16 / -20 % with
# this cap, TP 1 -12 % either way; 320 GB/s would fit them a little better, not taken).
RING_ALLREDUCE_GBPS = {"nvlink5": 384.0}


def ring_allreduce_cap(system: System, group: int) -> float:
    """Bytes/s NCCL's ring all-reduce reaches at most over `group` GPUs of one scale-up domain of
    `system` (RING_ALLREDUCE_GBPS; inf where nothing is measured)."""
    su = system.scaleup
    if su is None or group > su.domain_gpus or su.generation not in RING_ALLREDUCE_GBPS:
        return math.inf
    return RING_ALLREDUCE_GBPS[su.generation] * 1e9


def nvls_speedup(system: System, group: int) -> float:
    """NVLS's all-reduce bandwidth factor for `group` GPUs inside one switched NVLink domain of
    `system` (1.0: no NVLS: older NVLink, point-to-point bridges, PCIe, or a group past the domain)."""
    su = system.scaleup
    if su is None or group <= 2 or group > su.domain_gpus or su.domain_gpus <= 2:
        return 1.0
    return NVLS_SPEEDUP.get(su.generation, 1.0)


@dataclass(frozen=True)
class CommEstimate:
    total_s: float  # all-reduce of all gradients, not overlapped
    exposed_s: float  # what remains after overlapping with backward
    bus_gbps: float
    link: str
    bytes: float


@dataclass(frozen=True)
class Link:
    """The bottleneck link of a ring: bus bytes/s (after NCCL's efficiency), per-step latency, words."""

    bytes_per_s: float
    step_latency_s: float
    text: str


def _pcie(system: System, factor: float, params: PerfParams) -> tuple[float, str]:
    pc = system.pcie
    return PCIE_GBPS.get(pc.gen, 31.5) * pc.lanes / 16 * params.nccl_efficiency * factor * 1e9, f"PCIe {pc.gen}.0 x{pc.lanes}"


def on_scaleup(system: System, group: int) -> bool:
    """Whether `group` GPUs of one node all share the system's scale-up link (NVLink, Infinity Fabric)."""
    su = system.scaleup
    return su is not None and bool(su.gbps_per_direction) and group <= su.domain_gpus


def node_link(system: System, group: int, params: PerfParams, p2p: bool = True) -> Link:
    """A ring of `group` GPUs inside one node: the scale-up link (NVLink, Infinity Fabric) when
    the group fits its domain, else PCIe; with P2P disabled (NCCL_P2P_DISABLE=1, or a PCIe system
    without peer-to-peer) every hop is staged in host memory."""
    su = system.scaleup
    scaleup_ring = on_scaleup(system, group)
    if group > 1 and (not p2p or (not scaleup_ring and not system.pcie.p2p)):
        bw, _ = _pcie(system, PCIE_HOST_STAGED_FACTOR, params)
        return Link(bw, su.latency_us * 1e-6 if su else PCIE_STEP_LATENCY_S,
                    f"host-staged PCIe {system.pcie.gen}.0 ({'NCCL P2P disabled' if not p2p else 'no PCIe peer-to-peer'})")
    if su is not None and scaleup_ring:
        share = su.group_share(group)
        text = su.link if share == 1.0 else f"{su.link} ({group - 1} of each GPU's {su.domain_gpus - 1} direct links)"
        return Link(su.gbps_per_direction * share * params.nccl_efficiency * 1e9, su.latency_us * 1e-6, text)
    bw, text = _pcie(system, PCIE_PEER_FACTOR, params)
    return Link(bw, su.latency_us * 1e-6 if su else PCIE_STEP_LATENCY_S, text)


def _placement(system: System, gpus: int, params: PerfParams, p2p: bool,
               span: int | None) -> tuple[int, Link, ScaleOut | None]:
    """(GPUs of the group in one node, the link among them, the scale-out network when the group
    spans nodes, else None) for `gpus` GPUs placed over `span` GPUs of `system` (default `gpus`)."""
    span = max(span or gpus, gpus)
    per_node = min(gpus, max(1, system.gpus_per_node * gpus // span))
    intra = node_link(system, per_node, params, p2p)
    if span <= system.gpus_per_node:
        return per_node, intra, None
    if system.scaleout is None:
        raise InputError(f"{span} GPUs span {-(-span // system.gpus_per_node)} nodes of {system.name}, which has no "
                         f"scale-out network (at most {system.gpus_per_node} GPUs)", field="system")
    return per_node, intra, system.scaleout


def ring_link(system: System, gpus: int, params: PerfParams, p2p: bool = True, span: int | None = None,
              striped: bool = True) -> Link:
    """The bottleneck of a ring over `gpus` GPUs of `system` (placed over `span` GPUs, default
    `gpus`): inside a node, or across nodes through the scale-out network when slower.

    NCCL's ring collectives (``striped``) run one ring per network rail: each of the group's GPUs in
    a node drives its own NIC, so the bus bandwidth across nodes is the node's share of the group
    times the per-GPU network (4 nodes of 8x B200 with 50 GB/s EFA per GPU measured 382 GB/s
    all-reduce bus bandwidth, shared/validation/kernels.csv), capped by the link inside the node. A
    ring of point-to-point sends (not striped: context parallelism passing K/V to the next rank)
    sends each rank's whole chunk to one neighbour, so a hop that leaves the node goes through that
    GPU's own rail."""
    per_node, intra, so = _placement(system, gpus, params, p2p, span)
    if so is None:
        return intra
    rails = per_node if striped else 1
    net = rails * so.gbps_per_gpu * params.nccl_efficiency * 1e9
    lat = so.latency_us * 1e-6
    if net < intra.bytes_per_s:
        return Link(net, lat, f"network {so.kind} ({so.gbps_per_gpu:g} GB/s per GPU"
                    + (f" x {per_node} rail(s) per node)" if striped else ")"))
    return Link(intra.bytes_per_s, lat, intra.text)


def neighbour_link(system: System, gpus: int, params: PerfParams, p2p: bool = True, span: int | None = None) -> Link:
    """The slowest hop of a ring of point-to-point sends (`ring_link`, not striped over rails)."""
    return ring_link(system, gpus, params, p2p, span, striped=False)


def measured_allreduce_s(system: System, gpus: int, nbytes: float) -> float | None:
    """Seconds of one NCCL all-reduce of `nbytes` over `gpus` GPUs of one node of `system` from the
    times measured on it (``System.measured_allreduce``, nccl-tests), or None where none were
    measured for that group size. Between two measured sizes the time is interpolated linearly
    (a latency plus bytes over a bandwidth, segment by segment); below the smallest it is the
    smallest's time (latency-bound there: no faster than measured); above the largest it grows at
    the last segment's rate. The times stand for the algorithm and protocol NCCL chose on that
    machine, whatever the analytic model would pick."""
    if nbytes <= 0 or gpus <= 1:
        return None
    m = next((t for t in system.measured_allreduce if t.gpus == gpus), None)
    if m is None:
        return None
    xs, ys = m.sizes_bytes, m.times_us
    if nbytes <= xs[0]:
        return ys[0] * 1e-6
    i = min(len(xs) - 1, bisect.bisect_left(xs, nbytes))
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return (y0 + (nbytes - x0) * (y1 - y0) / (x1 - x0)) * 1e-6


def measured_buckets_s(system: System, gpus: int, nbytes: float, bucket_bytes: float, p2p: bool = True,
                       span: int | None = None) -> float | None:
    """Seconds of an all-reduce of `nbytes` in buckets of `bucket_bytes` over `gpus` GPUs placed
    over `span` GPUs of `system` (default `gpus`), from the times measured on it
    (`measured_allreduce_s`, per bucket), or None: none measured for the group, the group spans
    nodes, or peer-to-peer is off (the measurement ran with it)."""
    if not p2p or max(span or gpus, gpus) > system.gpus_per_node:
        return None
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    one = measured_allreduce_s(system, gpus, nbytes / buckets)
    return None if one is None else one * buckets


def allreduce_time(nbytes: float, gpus: int, link: Link, bucket_bytes: float, system: System,
                   span: int | None = None, p2p: bool = True) -> tuple[float, str]:
    """(seconds, algorithm) of an all-reduce of `nbytes` in buckets of `bucket_bytes` over a ring
    of `gpus` GPUs placed over `span` GPUs of `system`, bottlenecked by `link`: the fastest of ring,
    tree (across nodes) and NVLS (inside a switched NVLink domain), or inside one node the times
    measured on the system where it has them (`measured_allreduce_s`; not with peer-to-peer off)."""
    if nbytes <= 0 or gpus <= 1:
        return 0.0, "none"
    measured = measured_buckets_s(system, gpus, nbytes, bucket_bytes, p2p, span)
    if measured is not None:
        return measured, "measured"
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    moved = 2.0 * (gpus - 1) / gpus * nbytes / link.bytes_per_s
    best = (moved + 2 * (gpus - 1) * link.step_latency_s * buckets, "ring")
    span = max(span or gpus, gpus)
    nodes = -(-span // system.gpus_per_node)
    if nodes > 1:
        per_node = max(1, gpus // nodes)
        su = system.scaleup
        intra_lat = su.latency_us * 1e-6 if su else system.pcie.latency_us * 1e-6
        lat = 2 * (math.ceil(math.log2(nodes)) * link.step_latency_s + (per_node - 1) * intra_lat)
        best = min(best, (moved + lat * buckets, "tree"))
    else:
        f = nvls_speedup(system, gpus)
        if f > 1.0:
            best = min(best, (moved / f + 2 * link.step_latency_s * buckets, "NVLS"))
    return best


def collective_time(kind: str, nbytes: float, group: int, system: System, params: PerfParams,
                    nvls: bool = True) -> float:
    """Seconds of one tensor-parallel collective of a `nbytes` message over `group` GPUs of one
    node: a latency plus the ring's traffic over the bus: all-reduce 2 (n-1)/n of the message,
    all-gather (n-1)/n of the gathered result (NCCL's bus-bandwidth definitions, nccl-tests
    PERFORMANCE.md). The latency (launch, the group's synchronisation, the protocol's hops) grows
    with the group as log2(n) rounds of a tree or recursive-doubling exchange, each
    `tp_collective_us` (fitted): one round for 2 GPUs, three for 8. ``nvls``: whether NCCL may run
    NVLS (an engine that turns it off, as vLLM and SGLang do, all-reduces over the ring, at most
    at `ring_allreduce_cap`: NCCL's LL128 ring on Blackwell NVLink)."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    bw = node_link(system, group, params).bytes_per_s
    if kind == "all_reduce" and nvls:  # NCCL runs NVLS where the switch fabric has it
        bw *= nvls_speedup(system, group)
    elif kind == "all_reduce":  # NCCL's ring, whose protocol caps it on some fabrics
        bw = min(bw, ring_allreduce_cap(system, group))
    moved = 2.0 * (group - 1) / group * nbytes if kind == "all_reduce" else (group - 1) * nbytes
    return collective_latency_s(group, params) + moved / bw


def all_to_all_time(nbytes: float, gpus: int, system: System, params: PerfParams, p2p: bool = True,
                    span: int | None = None) -> float:
    """Seconds of one all-to-all (expert-parallel dispatch or combine) in which each of `gpus` ranks,
    placed over `span` GPUs of `system` (default `gpus`), sends `nbytes` spread evenly over the
    group: (n-1)/n of it leaves the GPU. Inside a node the scale-up link carries it. Across nodes
    every rank's share for the other nodes, (n - g)/n of it with g ranks in a node, leaves through
    that GPU's own network rail (where a ring collective stripes over all the node's rails) while
    its share for the g - 1 peers in the node crosses the scale-up link: the slower of the two. The
    latency: one step per peer, as the ring's."""
    if gpus <= 1 or nbytes <= 0:
        return 0.0
    per_node, intra, so = _placement(system, gpus, params, p2p, span)
    if so is None:
        return (gpus - 1) / gpus * nbytes / intra.bytes_per_s + intra.step_latency_s * (gpus - 1)
    on_node = (per_node - 1) / gpus * nbytes / intra.bytes_per_s if per_node > 1 else 0.0
    off_node = (gpus - per_node) / gpus * nbytes / (so.gbps_per_gpu * params.nccl_efficiency * 1e9)
    return max(on_node, off_node) + so.latency_us * 1e-6 * (gpus - 1)


def collective_latency_s(group: int, params: PerfParams) -> float:
    """The fixed part of one tensor-parallel collective over `group` GPUs of a node."""
    return params.tp_collective_us * 1e-6 * math.log2(max(2, group))


def dp_link(system: System, plan: Plan, params: PerfParams) -> Link:
    """The ring of the data-parallel collectives: `plan.dp` ranks spread over the plan's GPUs (with
    tensor parallelism inside a node, the data-parallel ranks of a node are gpus_per_node / tp)."""
    return ring_link(system, plan.dp, params, plan.p2p, span=plan.gpus)


def allreduce(nbytes: float, system: System, plan: Plan, params: PerfParams, backward_s: float) -> CommEstimate:
    n = plan.dp
    if n <= 1 or nbytes <= 0:
        return CommEstimate(0.0, 0.0, 0.0, "", 0.0)
    link = dp_link(system, plan, params)
    bw = link.bytes_per_s
    factor = 2.0 * (n - 1) / n
    bucket = plan.bucket_mb * 1e6
    measured = measured_buckets_s(system, n, nbytes, bucket, plan.p2p, plan.gpus)
    if measured is not None:  # measured on this system (nccl-tests)
        total = measured
        last = measured_buckets_s(system, n, min(nbytes, bucket), bucket, plan.p2p, plan.gpus) or measured
        bw = factor * nbytes / total
    else:
        buckets = max(1, math.ceil(nbytes / bucket))
        lat = link.step_latency_s * 2 * (n - 1) * buckets
        total = factor * nbytes / bw + lat
        last = factor * min(nbytes, bucket) / bw + lat / buckets
    if plan.comm_overlap:
        exposed = max(last, total - params.ddp_overlap * backward_s)
    else:
        exposed = total
    text = link.text + (" (all-reduce times measured on the system, nccl-tests)" if measured is not None else "")
    return CommEstimate(total, min(exposed, total), bw / 1e9, text, nbytes)
