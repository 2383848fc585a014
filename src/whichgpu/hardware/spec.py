"""The GPU spec: a frozen record loaded from one catalog file.

Peaks are *dense* (never 2:4-sparse) and per dtype. `fp16` means FP16 inputs with FP32
accumulate, the rate PyTorch AMP and cuBLAS use; consumer GeForce cards run it at half the
FP16-accumulate rate, and the catalog stores the halved figure (see shared/reference/gpus.md).

Unknown and unsupported are different: a dtype listed in `unsupported` has no hardware path on
the card; a dtype in neither `peak_tflops` nor `unsupported` is simply not known.

A card whose tensor cores run a dtype (`tensor_core_dtypes`) but whose peak for it no source gives
gets an estimate (`with_estimated_peaks`), from physics: a tensor core does a fixed number of dense
operations per SM per clock for each dtype and architecture, so

    peak = (FLOP per SM per clock of its architecture) x SMs x boost clock

where the first factor is read off the cards of the same architecture (the same chip, and the
same rate class: GeForce cards run FP16/BF16 with FP32 accumulation at half rate) whose peak, SM
count and boost clock the catalog gives. The estimate is in `peak_tflops` like any peak (so every
consumer sees it) and `estimated_peaks` holds its caveat, shown wherever it is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

GIB = 1024.0**3

# GPU memory comes in power-of-two devices: an "80 GB" card has 80 GiB (nvidia-smi: H100 SXM 81,559
# MiB, H200 143,771 MiB, B200 183,359 MiB, A100 80GB 81,920 MiB). The driver keeps a little:
# cudaMemGetInfo totals (PyTorch's OOM message "total capacity", vLLM's start-up log) are 79.18 of
# 80 GiB (H100), 23.68 of 24 GiB (RTX 4090) and 7.78 of 8 GiB (RTX 3070).
USABLE_FRACTION = 0.985
# Datacenter GDDR cards keep ECC on by default, inside the memory: 1/16 of it holds the check bits
# (nvidia-smi totals: T4 15,360 of 16,384 MiB, L4 23,034 and A10/A10G 23,028 of 24,576, A40 and L40S
# 46,068 of 49,152; PyTorch's "total capacity" on a T4, 14.75 GiB).
INLINE_ECC_FRACTION = 15 / 16

# Compute dtypes a kernel can run in. Order = from widest to narrowest.
COMPUTE_DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")

# Peak field name in the [peak_dense] section for each compute dtype.
PEAK_FIELDS: dict[str, str] = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tflops",
    "fp16": "fp16_tflops",
    "bf16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "int8": "int8_tops",
    "int4": "int4_tops",
    "fp4": "fp4_tflops",
}

# Architecture generations, in order. Efficiency parameters are per generation.
ARCHITECTURES: tuple[str, ...] = (
    "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell",
    "cdna2", "cdna3", "cdna4", "gaudi", "tpu",
)
VENDORS: tuple[str, ...] = ("NVIDIA", "AMD", "Intel", "Google")
SEGMENTS: tuple[str, ...] = ("datacenter", "workstation", "consumer")


# How a scale-up domain joins its GPUs: through switches (NVSwitch: any group gets each GPU's whole
# bandwidth), or each GPU with a direct link to every other (AMD's MI300 and MI350 series 8-GPU
# platforms: a group of g reaches its peers over g - 1 of the n - 1 links, two GPUs over one).
SCALEUP_TOPOLOGIES = ("switch", "full-mesh")

@dataclass(frozen=True)
class MeasuredCeiling:
    """A measured achievable matmul rate (e.g. from shared/validation/kernels.csv)."""

    dtype: str
    matmul_tflops: float
    source: str
    shape: str = ""
    notes: str = ""


@dataclass(frozen=True)
class Price:
    """The [price] table of a catalog file: prices with their dates and sources. None = unknown.
    (recommend/prices.py turns them into the quotes a recommendation uses.)"""

    launch_msrp_usd: float | None = None
    """List price per card at launch, USD; dated by the launch year."""
    launch_source: str = ""
    street_usd: float | None = None
    """What a card sells for, new or used, USD."""
    street_date: str = ""
    """When that was: YYYY-MM or YYYY-MM-DD (more than a year ago: stale)."""
    street_source: str = ""
    cloud_usd_per_hour: float | None = None
    """Rent per GPU-hour (not per instance), USD."""
    cloud_provider: str = ""
    """Who rents it at that price."""
    cloud_date: str = ""
    cloud_source: str = ""


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. Units live in field names; sources in `sources`."""

    id: str
    name: str
    vendor: str
    architecture: str
    chip: str
    year: int
    form_factor: str
    segment: str
    memory_gb: float
    memory_type: str
    memory_bandwidth_gbps: float
    peak_tflops: dict[str, float]
    unsupported: frozenset[str]
    aliases: tuple[str, ...] = ()
    l2_cache_mb: float | None = None
    sm_count: int | None = None
    boost_clock_mhz: float | None = None
    base_clock_mhz: float | None = None
    shared_mem_per_sm_kb: float | None = None
    l1_cache_per_sm_kb: float | None = None
    fp16_acc16_tflops: float | None = None
    sparsity_2to4: bool | None = None
    tensor_core_dtypes: tuple[str, ...] = ()
    tdp_w: float | None = None
    scaleup_link: str = ""
    scaleup_gbps_per_direction: float | None = None
    pcie_gen: int | None = None
    pcie_lanes: int | None = None
    scaleup_domain_gpus: int | None = None  # GPUs sharing the scale-up link in the usual system
    scaleup_topology: str = "switch"  # how the usual system's domain joins its GPUs (SCALEUP_TOPOLOGIES)
    price: Price = field(default_factory=Price)
    measured: tuple[MeasuredCeiling, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    path: str = ""
    overridden_by: tuple[str, ...] = ()
    inline_ecc: bool = False
    """ECC on by default and kept inside the GDDR itself (datacenter GDDR cards: T4, A10, A40, L4,
    L40, L40S): 1/16 of the memory holds the check bits (`usable_memory_bytes`)."""
    estimated_peaks: dict[str, str] = field(default_factory=dict)
    """dtype -> caveat, for each peak in `peak_tflops` that no source gives and the catalog
    estimated from the card's SMs and clock (`with_estimated_peaks`)."""

    @property
    def device_memory_mib(self) -> float:
        """The device's memory as nvidia-smi totals it, in MiB: `memory_gb` GiB, less the 1/16
        inline ECC keeps on GDDR cards that have it on (`inline_ecc`)."""
        return self.memory_gb * 1024 * (INLINE_ECC_FRACTION if self.inline_ecc else 1.0)

    @property
    def usable_memory_bytes(self) -> float:
        """The memory a process can allocate, as cudaMemGetInfo reports the total (what vLLM's
        gpu_memory_utilization multiplies, what a training job fills): `memory_gb` GiB, less the
        1/16 inline ECC keeps on GDDR cards that have it on (`inline_ecc`), less the driver's share
        (`USABLE_FRACTION`)."""
        return self.device_memory_mib * 2**20 * USABLE_FRACTION

    @property
    def usable_memory_text(self) -> str:
        """How `usable_memory_bytes` is reckoned, for assumption lines: "80 GiB x 0.985 usable"."""
        ecc = " x 15/16 (inline ECC on)" if self.inline_ecc else ""
        return f"{self.memory_gb:g} GiB{ecc} x {USABLE_FRACTION} usable"

    def peak(self, dtype: str) -> float | None:
        """Dense peak in TFLOP/s (TOP/s for integer dtypes), None if unknown or unsupported
        (an estimated peak is returned too: `peak_caveat` says so)."""
        return self.peak_tflops.get(dtype)

    def peak_caveat(self, dtype: str) -> str:
        """How the peak of `dtype` was estimated, or "" when a source gives it (or it is unknown)."""
        return self.estimated_peaks.get(dtype, "")

    def supports(self, dtype: str) -> bool | None:
        """True / False / None (unknown)."""
        if dtype in self.peak_tflops:
            return True
        if dtype in self.unsupported:
            return False
        return None

    def measured_tflops(self, dtype: str) -> MeasuredCeiling | None:
        for m in self.measured:
            if m.dtype == dtype:
                return m
        return None

    def has_tensor_cores(self) -> bool:
        return bool(self.tensor_core_dtypes)

    def source_of(self, key: str) -> str:
        """Source of a figure: the most specific entry of [sources] ('section.field',
        'section', then 'default'); an estimated peak's is its caveat (no source gives it)."""
        section, _, name = key.partition(".")
        if section == "peak_dense":
            for dt, fname in PEAK_FIELDS.items():
                if fname == name and dt in self.estimated_peaks:
                    return self.estimated_peaks[dt]
        if key in self.sources:
            return self.sources[key]
        section = key.split(".", 1)[0]
        return self.sources.get(section, self.sources.get("default", ""))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view with every field, unknowns as null and 'n/a' for unsupported."""
        peaks: dict[str, Any] = {}
        for dt, fname in PEAK_FIELDS.items():
            if dt in self.peak_tflops:
                peaks[fname] = self.peak_tflops[dt]
            elif dt in self.unsupported:
                peaks[fname] = "n/a"
            else:
                peaks[fname] = None
        return {
            "id": self.id,
            "name": self.name,
            "vendor": self.vendor,
            "architecture": self.architecture,
            "chip": self.chip,
            "year": self.year,
            "form_factor": self.form_factor,
            "segment": self.segment,
            "aliases": list(self.aliases),
            "memory_gb": self.memory_gb,
            "memory_type": self.memory_type,
            "inline_ecc": self.inline_ecc,
            "usable_memory_gib": round(self.usable_memory_bytes / GIB, 3),
            "memory_bandwidth_gbps": self.memory_bandwidth_gbps,
            "l2_cache_mb": self.l2_cache_mb,
            "sm_count": self.sm_count,
            "boost_clock_mhz": self.boost_clock_mhz,
            "base_clock_mhz": self.base_clock_mhz,
            "shared_mem_per_sm_kb": self.shared_mem_per_sm_kb,
            "l1_cache_per_sm_kb": self.l1_cache_per_sm_kb,
            "peak_dense": peaks,
            "estimated_peaks": {PEAK_FIELDS[dt]: c for dt, c in self.estimated_peaks.items()},
            "fp16_acc16_tflops": self.fp16_acc16_tflops,
            "sparsity_2to4": self.sparsity_2to4,
            "tensor_core_dtypes": list(self.tensor_core_dtypes),
            "tdp_w": self.tdp_w,
            "scaleup_link": self.scaleup_link,
            "scaleup_gbps_per_direction": self.scaleup_gbps_per_direction,
            "pcie_gen": self.pcie_gen,
            "pcie_lanes": self.pcie_lanes,
            "scaleup_domain_gpus": self.scaleup_domain_gpus,
            "scaleup_topology": self.scaleup_topology,
            "price": {
                "launch_msrp_usd": self.price.launch_msrp_usd,
                "launch_source": self.price.launch_source,
                "street_usd": self.price.street_usd,
                "street_date": self.price.street_date,
                "street_source": self.price.street_source,
                "cloud_usd_per_hour": self.price.cloud_usd_per_hour,
                "cloud_provider": self.price.cloud_provider,
                "cloud_date": self.price.cloud_date,
                "cloud_source": self.price.cloud_source,
            },
            "measured": [
                {"dtype": m.dtype, "matmul_tflops": m.matmul_tflops, "shape": m.shape,
                 "source": m.source, "notes": m.notes}
                for m in self.measured
            ],
            "sources": dict(self.sources),
            "notes": self.notes,
            "file": self.path,
            "overridden_by": list(self.overridden_by),
        }


# --------------------------------------------------------------------------- estimated peaks


def _per_sm_clock(s: GpuSpec, dtype: str) -> float | None:
    """Dense operations per SM per clock a published peak implies: peak / (SMs x boost clock)
    (A10: 125 TFLOP/s BF16 / (72 SMs x 1695 MHz) = 1024 FLOP per SM per clock)."""
    peak = s.peak_tflops.get(dtype)
    if peak is None or dtype in s.estimated_peaks or not s.sm_count or not s.boost_clock_mhz:
        return None
    return peak * 1e12 / (s.sm_count * s.boost_clock_mhz * 1e6)


def _rate_class(s: GpuSpec) -> str:
    """GeForce cards run FP16/BF16 with FP32 accumulation at half the rate of the same chip's
    professional cards; the per-SM rates of the two are not interchangeable."""
    return "consumer" if s.vendor == "NVIDIA" and s.segment == "consumer" else "datacenter and workstation"


def _references(card: GpuSpec, dtype: str, specs: list[GpuSpec]) -> tuple[str, list[GpuSpec]]:
    """The cards a missing peak is read from, with how they were chosen: the same architecture,
    narrowed to the same chip and rate class, else the same rate class, where there are such."""
    same_arch = [r for r in specs if r.id != card.id and r.architecture == card.architecture
                 and dtype in r.tensor_core_dtypes and _per_sm_clock(r, dtype) is not None]
    cls = _rate_class(card)
    tiers: tuple[tuple[str, list[GpuSpec]], ...] = (
        (f"{card.chip} {cls} cards", [r for r in same_arch if r.chip == card.chip and _rate_class(r) == cls]),
        (f"{card.architecture} {cls} cards", [r for r in same_arch if _rate_class(r) == cls]),
        (f"{card.architecture} cards", same_arch),
    )
    return next(((label, refs) for label, refs in tiers if refs), ("", []))


def _median(v: list[float]) -> float:
    s = sorted(v)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def estimated_peak(card: GpuSpec, dtype: str, specs: list[GpuSpec]) -> tuple[float, str] | None:
    """(peak, caveat) for a tensor-core dtype whose peak `card` does not give, from the median
    per-SM-per-clock rate of its references (`_references`) x its SMs x its boost clock; None
    when the card has no SM count or clock, or no card of its architecture gives the rate."""
    if not card.sm_count or not card.boost_clock_mhz:
        return None
    label, refs = _references(card, dtype, specs)
    if not refs:
        return None
    rates = [r for r in (_per_sm_clock(x, dtype) for x in refs) if r is not None]
    rate = _median(rates)
    peak = round(rate * card.sm_count * card.boost_clock_mhz * 1e6 / 1e12, 1)
    unit, op = ("TOP/s", "OP") if dtype.startswith("int") else ("TFLOP/s", "FLOP")
    spread = f"; they range {min(rates):.0f}-{max(rates):.0f}" if max(rates) > 1.05 * min(rates) else ""
    caveat = (f"{dtype.upper()} peak {peak:g} {unit} estimated (no source gives it), derived as {rate:.0f} dense "
              f"{op} per SM per clock ({label} {', '.join(sorted(r.id for r in refs))}{spread}) x {card.sm_count} "
              f"SMs x {card.boost_clock_mhz:g} MHz boost, the SM count and clock as this catalog entry gives them")
    return peak, caveat


def with_estimated_peaks(specs: list[GpuSpec]) -> list[GpuSpec]:
    """The specs, each tensor-core dtype with no peak (neither given nor "n/a") estimated where
    it can be (`estimated_peak`); references are always cards with the figure given."""
    out = []
    for s in specs:
        missing = [d for d in s.tensor_core_dtypes if d not in s.peak_tflops and d not in s.unsupported]
        found = {d: e for d in missing if (e := estimated_peak(s, d, specs)) is not None}
        if found:
            s = replace(s, peak_tflops={**s.peak_tflops, **{d: p for d, (p, _) in found.items()}},
                        estimated_peaks={**s.estimated_peaks, **{d: c for d, (_, c) in found.items()}})
        out.append(s)
    return out
