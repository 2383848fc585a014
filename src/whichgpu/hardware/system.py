"""Systems as data: the node a GPU sits in, and the links between its GPUs and between nodes.

One TOML file per system in ``hardware/systems/`` (schema ``whichgpu.system/1``) gives the GPUs
per node, the scale-up link among them (NVLink through NVSwitch, Infinity Fabric; absent when
the GPUs talk over PCIe only), their PCIe attachment, and the scale-out network between nodes
(absent for a single-node machine). ``[sources]`` names a source for every figure:
``"section.field" = "URL or document"``; a ``section`` or ``default`` key covers the figures
without a key of their own.

Users add systems, or change fields of a packaged one, with files in the GPU catalog's user
directories (``user_catalog_dirs``): GPU and system files share them and ``schema`` tells them
apart, so a system file, an override included, carries ``schema = "whichgpu.system/1"``. An
override names the system with ``id`` and holds only what changes; ``scaleup = "none"`` or
``scaleout = "none"`` removes a link. A GPU whose default no system claims (``default_for``)
gets one synthesised from its catalog entry (`synthesised_system`).

Every problem is a ``CatalogError(file, field, what would be valid)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import SYSTEM_SCHEMA, user_catalog_dirs
from whichgpu.hardware.names import NamedEntries
from whichgpu.hardware.spec import GpuSpec

SYSTEMS_DIR = Path(__file__).parent / "systems"
SCHEMA = SYSTEM_SCHEMA
KINDS = ("dgx", "hgx", "cloud", "server", "workstation", "rack")
SCALEUP_GENERATIONS = ("nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5", "infinity-fabric",
                       "roce", "ici", "pcie", "other")
SCALEOUT_KINDS = ("infiniband-edr", "infiniband-hdr", "infiniband-ndr", "infiniband-xdr", "roce", "efa",
                  "ethernet", "gpudirect-tcpx", "gpudirect-tcpxo")

# What the performance model assumed before systems were data (the former perf/comm.py and perf/plan.py);
# `synthesised_system` keeps them so that a GPU without a packaged system predicts as before.
ASSUMED_GPUS_PER_NODE = 8
ASSUMED_INTRA_LATENCY_US = 4.0  # one ring step inside a node (RING_STEP_LATENCY_S["intra"])
ASSUMED_INTER_LATENCY_US = 10.0  # one ring step between nodes (RING_STEP_LATENCY_S["inter"])
ASSUMED_NETWORK_GBPS_PER_GPU = 25.0  # InfiniBand HDR, 200 Gb/s per GPU = 25 GB/s ("ib-hdr-200")

@dataclass(frozen=True, kw_only=True)
class ScaleUp:
    """The link among the GPUs of one scale-up domain: what collectives inside it run over."""

    link: str
    """The product, e.g. "NVLink 4.0 via 4 NVSwitch chips"."""
    generation: str
    """One of SCALEUP_GENERATIONS ("nvlink2".."nvlink5", "infinity-fabric", ...)."""
    gbps_per_direction: float
    """GB/s each way per GPU, all its links together (H100 SXM: 18 links x 25 GB/s = 450)."""
    domain_gpus: int
    """GPUs in one all-to-all domain (8 on an HGX board, 72 in an NVL72 rack; 1 = no peers)."""
    latency_us: float
    """Latency of one ring step over the link, microseconds."""
    topology: str = "switch"
    """One of spec.SCALEUP_TOPOLOGIES; "full-mesh": `gbps_per_direction` is spread over direct links to
    the domain's other GPUs, and a group inside it uses its members' share (``group_share``)."""

    def group_share(self, group: int) -> float:
        """The part of `gbps_per_direction` a group of `group` GPUs of the domain runs its
        collectives over: all of it through a switch; on a full mesh the links to the group's own
        members, (group - 1) / (domain - 1)."""
        if self.topology != "full-mesh" or self.domain_gpus <= 2 or group >= self.domain_gpus:
            return 1.0
        return max(1, group - 1) / (self.domain_gpus - 1)


@dataclass(frozen=True, kw_only=True)
class Pcie:
    """How each GPU attaches to the host (and, without a scale-up link, to its peers)."""

    gen: int
    """PCIe generation, 3..6 (8/16/32/64 GT/s per lane)."""
    lanes: int
    """Lanes per GPU: 16 in servers, 8 when two desktop cards share a CPU's x16."""
    p2p: bool
    """GPUs read and write each other's memory over PCIe (through a switch or the root complex);
    false: every peer transfer is staged through host memory."""
    latency_us: float
    """Latency of one ring step over PCIe, microseconds."""


@dataclass(frozen=True, kw_only=True)
class ScaleOut:
    """The network between nodes."""

    kind: str
    """One of SCALEOUT_KINDS ("infiniband-ndr", "efa", "roce", ...)."""
    gbps_per_gpu: float
    """GB/s per direction available to each GPU: the node's compute-fabric total / GPUs per node
    (8 x 400 Gb/s NICs for 8 GPUs = 50 GB/s)."""
    rails: int
    """Compute-fabric NICs per node (storage and management NICs not counted)."""
    latency_us: float
    """Latency of one ring step over the network, microseconds."""


@dataclass(frozen=True, kw_only=True)
class MeasuredAllReduce:
    """NCCL all-reduce times measured on this system for one group size (nccl-tests
    all_reduce_perf, out of place): what its collectives take at the sizes measured, in place of
    the analytic link model (parallel/comm.py ``measured_allreduce_s``)."""

    gpus: int
    """GPUs in the all-reduce (all in one node)."""
    sizes_bytes: tuple[float, ...]
    """Message sizes, bytes, increasing."""
    times_us: tuple[float, ...]
    """Time of one all-reduce at each size, microseconds."""
    source: str
    """Where the times come from (the measurement, its date or commit)."""


@dataclass(frozen=True, kw_only=True)
class System:
    """A machine GPUs run in: a node type, its links, and where each figure comes from."""

    id: str
    """Catalog id: lowercase letters, digits, '-' and '.'."""
    name: str
    """Product name, e.g. "NVIDIA DGX H100"."""
    kind: str
    """One of KINDS: dgx, hgx, cloud, server, workstation, rack."""
    gpu: str | None
    """Catalog id of the GPU the system is built from; None: a generic chassis for PCIe cards."""
    gpus_per_node: int
    """GPUs in one node (for a rack-scale NVLink system, the whole rack)."""
    scaleup: ScaleUp | None
    """The scale-up link; None: the GPUs talk over PCIe only."""
    pcie: Pcie
    """Each GPU's PCIe attachment."""
    scaleout: ScaleOut | None
    """The network between nodes; None: a single-node machine."""
    sources: dict[str, str]
    """Figure ("section.field"), section or "default" -> source; see `source_of`."""
    notes: str = ""
    """Modelling choices and caveats."""
    default_for: tuple[str, ...] = ()
    """GPU ids whose default system this is; they may also be variants of `gpu` the system
    ships with (DGX-1: V100 SXM2 16 GB and 32 GB), and the system accepts them."""
    aliases: tuple[str, ...] = ()
    """Other names it resolves by ("p5.48xlarge", "DGX H100")."""
    path: str = ""
    """The file it was loaded from; "" when synthesised."""
    overridden_by: tuple[str, ...] = ()
    """User files that changed it."""
    measured_allreduce: tuple[MeasuredAllReduce, ...] = ()
    """NCCL all-reduce times measured inside one node, one table per group size (``[[measured_allreduce]]``)."""

    def source_of(self, key: str) -> str:
        """Source of a figure: the most specific of [sources] 'section.field', 'section', 'default'."""
        for k in (key, key.split(".", 1)[0], "default"):
            if k in self.sources:
                return self.sources[k]
        return ""

    def figures(self) -> dict[str, object]:
        """Every figure by its path ("scaleup.gbps_per_direction"), absent links left out."""
        out: dict[str, object] = {"gpus_per_node": self.gpus_per_node}
        for name, sec in (("scaleup", self.scaleup), ("pcie", self.pcie), ("scaleout", self.scaleout)):
            if sec is not None:
                out.update({f"{name}.{k}": v for k, v in vars(sec).items()})
        return out

    def accepts(self, gpu: GpuSpec) -> bool:
        """Whether `gpu` can run in this system: its own GPU (or a listed variant), or any PCIe
        card for a generic chassis."""
        if self.gpu is None:
            return is_pcie_card(gpu)
        return gpu.id == self.gpu or gpu.id in self.default_for

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view; `sources` holds the source of every figure."""
        return {
            "id": self.id, "name": self.name, "kind": self.kind, "gpu": self.gpu,
            "gpus_per_node": self.gpus_per_node,
            "scaleup": None if self.scaleup is None else dict(vars(self.scaleup)),
            "pcie": dict(vars(self.pcie)),
            "scaleout": None if self.scaleout is None else dict(vars(self.scaleout)),
            "default_for": list(self.default_for), "aliases": list(self.aliases), "notes": self.notes,
            "measured_allreduce": [{"gpus": m.gpus, "sizes_bytes": list(m.sizes_bytes), "times_us": list(m.times_us),
                                    "source": m.source} for m in self.measured_allreduce],
            "sources": {k: self.source_of(k) for k in self.figures()},
            "file": self.path, "overridden_by": list(self.overridden_by),
        }


def is_packaged(s: System) -> bool:
    """The system comes from the package's own files (not a user directory)."""
    return Path(s.path).parent == SYSTEMS_DIR


def is_pcie_card(gpu: GpuSpec) -> bool:
    """A card for a PCIe slot (the test parallel/comm.py applies to the form factor)."""
    return "pcie" in gpu.form_factor.lower()


@dataclass
class Systems(NamedEntries[System]):
    """All systems, resolvable by id, name or alias."""

    systems: list[System]
    user_dirs: tuple[str, ...] = ()
    kind = "system"
    hint = "'whichgpu systems'"

    def __post_init__(self) -> None:
        super().__init__(self.systems)

    def for_gpu(self, gpu: GpuSpec) -> list[System]:
        """The systems `gpu` can run in."""
        return [s for s in self.systems if s.accepts(gpu)]

    def default_of(self, gpu_id: str) -> System | None:
        """The system whose `default_for` lists `gpu_id`, or None. A claim from a user file (a
        new system, or an override of a packaged one) wins over a packaged claim."""
        found = [s for s in self.systems if gpu_id in s.default_for]
        found.sort(key=lambda s: bool(s.overridden_by) or not is_packaged(s))
        return found[-1] if found else None


# --------------------------------------------------------------------------- choosing one


def _generation(link: str) -> str:
    low = link.lower()
    m = re.search(r"nvlink\s*(\d)", low)
    if m and m.group(1) in "12345":
        return f"nvlink{m.group(1)}"
    for word, gen in (("infinity fabric", "infinity-fabric"), ("roce", "roce"), ("ici", "ici")):
        if word in low:
            return gen
    return "other"


# GeForce cards from the Ada generation on (RTX 40 and 50 series): NVIDIA's driver reports no CUDA
# peer access between them over PCIe, so NCCL stages every transfer in host memory
NO_PEER_ACCESS = "GeForce RTX 40 and 50 series: NVIDIA's driver gives them no CUDA peer access over PCIe"


def peer_access(gpu: GpuSpec) -> bool:
    """Whether the card allows CUDA peer access over PCIe (NO_PEER_ACCESS)."""
    return not (gpu.vendor == "NVIDIA" and gpu.segment == "consumer" and gpu.architecture in ("ada", "blackwell"))


def with_gpu(system: System, gpu: GpuSpec) -> System:
    """`system` as `gpu` runs in it: a chassis's PCIe peer-to-peer off for a card without peer access."""
    if not system.pcie.p2p or peer_access(gpu):
        return system
    hit = _NO_P2P.get((system.id, gpu.id))
    if hit is None or hit[0] is not system:  # the same object each time, as default_system's
        hit = _NO_P2P[(system.id, gpu.id)] = (system, replace(
            system, pcie=replace(system.pcie, p2p=False),
            sources={**system.sources, "pcie.p2p": f"{gpu.name}: {NO_PEER_ACCESS}"}))
    return hit[1]


def synthesised_system(gpu: GpuSpec) -> System:
    """A system built from the GPU's catalog entry with the assumptions the performance model
    made before systems were data (the former perf/comm.py and perf/plan.py), so predictions do not move:
    8 GPUs per node; the GPU's scale-up link over its domain (given, else 1 for a PCIe card
    and 8 for a module); PCIe as the GPU states (else 4.0 x16) with peer-to-peer; InfiniBand
    HDR 200 Gb/s per GPU; ring steps of 4 us inside a node and 10 us between nodes."""
    pcie_card = is_pcie_card(gpu)
    domain = gpu.scaleup_domain_gpus or (1 if pcie_card else 8)
    before = "the performance model's assumption before systems were data (parallel/comm.py)"

    def from_gpu(f: str) -> str:
        return f"GPU catalog entry {gpu.id}, interconnect.{f}: {gpu.source_of('interconnect.' + f)}"

    sources = {
        "default": f"synthesised from GPU catalog entry {gpu.id}: no packaged system lists it in default_for",
        "gpus_per_node": f"assumed: {ASSUMED_GPUS_PER_NODE} GPUs per node, {before}",
        "pcie.gen": from_gpu("pcie_gen") if gpu.pcie_gen else f"assumed: PCIe 4.0 (the entry gives none), {before}",
        "pcie.lanes": from_gpu("pcie_lanes") if gpu.pcie_lanes else f"assumed: x16 (the entry gives none), {before}",
        "pcie.p2p": f"assumed: peer-to-peer allowed, {before}" if peer_access(gpu) else NO_PEER_ACCESS,
        "pcie.latency_us": f"assumed: {ASSUMED_INTRA_LATENCY_US:g} us per ring step inside a node, {before}",
        "scaleout.kind": f"assumed: InfiniBand HDR, {before}",
        "scaleout.gbps_per_gpu": f"assumed: one 200 Gb/s HDR link per GPU = 25 GB/s, {before}",
        "scaleout.rails": f"assumed: one NIC per GPU ({ASSUMED_GPUS_PER_NODE} per node)",
        "scaleout.latency_us": f"assumed: {ASSUMED_INTER_LATENCY_US:g} us per ring step between nodes, {before}",
    }
    scaleup = None
    if gpu.scaleup_gbps_per_direction:
        scaleup = ScaleUp(link=gpu.scaleup_link or "scale-up link", generation=_generation(gpu.scaleup_link),
                          gbps_per_direction=gpu.scaleup_gbps_per_direction, domain_gpus=domain,
                          latency_us=ASSUMED_INTRA_LATENCY_US, topology=gpu.scaleup_topology)
        sources |= {
            "scaleup.link": from_gpu("scaleup"),
            "scaleup.generation": f"read from the entry's link name {gpu.scaleup_link!r}",
            "scaleup.gbps_per_direction": from_gpu("scaleup_gbps_per_direction"),
            "scaleup.domain_gpus": from_gpu("scaleup_domain_gpus") if gpu.scaleup_domain_gpus else
            f"assumed: {domain} ({'a PCIe card has no scale-up peers' if pcie_card else 'an 8-GPU baseboard'}), {before}",
            "scaleup.latency_us": f"assumed: {ASSUMED_INTRA_LATENCY_US:g} us per ring step inside a node, {before}",
            "scaleup.topology": from_gpu("scaleup_topology") if gpu.scaleup_topology != "switch" else
            "assumed: a switched domain (any group of its GPUs gets each GPU's whole link bandwidth)",
        }
    return System(
        id=f"{gpu.id}-default", name=f"assumed {ASSUMED_GPUS_PER_NODE} x {gpu.name} server", kind="server", gpu=gpu.id,
        gpus_per_node=ASSUMED_GPUS_PER_NODE, scaleup=scaleup,
        pcie=Pcie(gen=gpu.pcie_gen or 4, lanes=gpu.pcie_lanes or 16, p2p=peer_access(gpu),
                  latency_us=ASSUMED_INTRA_LATENCY_US),
        scaleout=ScaleOut(kind="infiniband-hdr", gbps_per_gpu=ASSUMED_NETWORK_GBPS_PER_GPU,
                          rails=ASSUMED_GPUS_PER_NODE, latency_us=ASSUMED_INTER_LATENCY_US),
        sources=sources, default_for=(gpu.id,),
        notes="No packaged system is this GPU's default; built from its catalog entry with the "
              "assumptions the model made before systems were data.",
    )


_LOADED: dict[tuple[str, ...], Systems] = {}
_SYNTHESISED: dict[str, tuple[GpuSpec, System]] = {}
_NO_P2P: dict[tuple[str, str], tuple[System, System]] = {}


def load_systems(catalog_dir: str | None = None) -> Systems:
    """Packaged systems plus the user directories' (``--catalog DIR``, ``$WHICHGPU_CATALOG``);
    the files are read once per set of directories (hardware/system_files.py)."""
    from whichgpu.hardware.system_files import read_systems

    dirs = user_catalog_dirs(catalog_dir)
    if dirs:
        return read_systems(catalog_dir)
    if () not in _LOADED:
        _LOADED[()] = read_systems(None)
    return _LOADED[()]


def default_system(gpu: GpuSpec, systems: Systems | None = None) -> System:
    """The system whose `default_for` lists the GPU, else one synthesised from its entry (the same
    object for the same GPU entry, so that estimates keyed by it are reused)."""
    found = load_systems() if systems is None else systems
    packaged = found.default_of(gpu.id)
    if packaged is not None:
        return packaged
    hit = _SYNTHESISED.get(gpu.id)
    if hit is None or hit[0] is not gpu:
        hit = (gpu, synthesised_system(gpu))
        _SYNTHESISED[gpu.id] = hit
    return hit[1]


def resolve_system(gpu: GpuSpec, system: System | str | None, systems: Systems | None = None) -> System:
    """The system given or named (None: the GPU's default), which must accept the GPU."""
    found = load_systems() if systems is None else systems
    if system is None:
        return default_system(gpu, found)
    chosen = found.get(system) if isinstance(system, str) else system
    if chosen.accepts(gpu):
        return with_gpu(chosen, gpu)
    others = ", ".join(s.id for s in found.for_gpu(gpu)) or "none packaged (the default one is synthesised)"
    what = (f"takes PCIe cards and {gpu.id} is {gpu.form_factor}" if chosen.gpu is None
            else f"is built from {chosen.gpu}, not {gpu.id}")
    raise InputError(f"system {chosen.id!r} {what}; systems with {gpu.id}: {others}", field="system")
