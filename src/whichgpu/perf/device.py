"""What a GPU offers a kernel: peak rate per compute dtype (with fallbacks), achievable ceilings,
bandwidth, L2, SM count. Derived from a catalog GpuSpec and the fitted parameters.

Sustained clock under the power budget. Running the tensor cores at the rated clock takes about
need = w(family) x (dense FP16 tensor TFLOP/s) watts, w fitted per die family (Volta, Turing,
GA100, GA10x, Ada, Hopper: hardware/process.toml). A card whose budget (TDP, or a power limit) is below that runs slower
clocks, clock ~ (budget / need)^a with a = 0.325 (below); otherwise datacenter parts run their
rated (maximum) boost and consumer/workstation cards up to `consumer_clock` above their rated
(typical) boost. Compute rates follow the clock; DRAM bandwidth does not. Measured matmul
ceilings are efficiencies of short benchmarks (50 warm-up and 100 timed iterations): sustained
work runs at the sustained clock, so the clock scales them too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from whichgpu.hardware.process import process_of
from whichgpu.hardware.spec import GpuSpec
from whichgpu.perf.params import PerfParams

TENSOR_DTYPES = ("tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")
# What a kernel falls back to when the card has no path (or no known peak) for a dtype.
FALLBACK: dict[str, tuple[str, ...]] = {
    "tf32": ("fp32",),
    "bf16": ("fp32",),  # BF16 data cannot use FP16 tensor cores
    "fp16": ("fp32",),
    "fp8": ("bf16", "fp16", "fp32"),
    "int8": ("fp16", "fp32"),
    "int4": ("int8", "fp16", "fp32"),
    "fp4": ("fp8", "bf16", "fp16", "fp32"),
    "fp32": (),
}
DEFAULT_SMS = 100  # for accelerators without a published SM/CU count (TPUs)
# NVIDIA rates consumer and workstation cards at a typical boost clock that GPU Boost exceeds
# under load while power and temperature allow; datacenter parts are rated at their maximum.
BOOSTED_SEGMENTS = frozenset({"consumer", "workstation"})


def is_hbm(memory_type: str) -> bool:
    """HBM stacks (HBM, HBM2, HBM2e, HBM3, HBM3e) versus GDDR/LPDDR."""
    return memory_type.strip().upper().startswith("HBM")

# Throughput-vs-power-limit: Tim Dettmers measured ~7% lower training throughput on an
# RTX 2080 Ti at 200 W instead of its 250 W limit (80% power). Modelled as
# perf ~ (P / TDP) ** a, a = ln(0.93) / ln(0.80) = 0.325, applied to compute rates only.
POWER_EXPONENT = math.log(0.93) / math.log(0.80)


@dataclass(frozen=True)
class Rate:
    flops: float  # FLOP/s, dense peak of the path used
    dtype: str  # the dtype whose path is used
    ceiling: float  # achievable fraction for a large GEMM on this path
    ceiling_source: str
    note: str = ""


LOW_PRECISION = ("fp8", "int8", "fp4")  # tensor paths below 16 bits


@dataclass
class Device:
    spec: GpuSpec
    params: PerfParams
    use_measured: bool = True
    power_limit_w: float | None = None
    _rates: dict[str, Rate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s, p = self.spec, self.params
        self.bw = s.memory_bandwidth_gbps * 1e9
        self.hbm = is_hbm(s.memory_type)
        self.mem_ceiling = p.mem_ceiling_hbm if self.hbm else p.mem_ceiling_gddr
        # A memory-bound kernel reaches half its ceiling when it moves BW x ramp bytes.
        self.mem_half_bytes = self.bw * p.mem_ramp_us * 1e-6
        self.l2 = (s.l2_cache_mb or 0.0) * 1e6
        self.sms = s.sm_count or DEFAULT_SMS
        headroom = p.consumer_clock if s.segment in BOOSTED_SEGMENTS and s.vendor == "NVIDIA" else 1.0
        proc = process_of(s.chip)
        self.node = proc.family if proc else ""
        w = float(getattr(p, f"w_per_tflops_{self.node}", 0.0)) if self.node else 0.0
        # The tensor load of the precisions frameworks run (FP16/BF16 with FP32 accumulation: half
        # the FP16-accumulate rate on GeForce cards, which also draws about half the power).
        tensor = max((x for x in (s.peak("fp16"), s.peak("bf16")) if x), default=0.0)
        self.power_need_w = w * tensor
        budget = self.power_limit_w if self.power_limit_w is not None else s.tdp_w
        if self.power_need_w > 0 and budget and s.tdp_w:
            at_budget = (budget / self.power_need_w) ** POWER_EXPONENT
            at_tdp = (s.tdp_w / self.power_need_w) ** POWER_EXPONENT
            self.clock_scale = min(headroom, at_budget)
            self.power_scale = min(1.0, at_budget) / min(1.0, at_tdp)  # what a limit below TDP costs
        else:
            # No power model for this die: a power limit scales compute as Dettmers measured.
            self.power_scale = 1.0
            if self.power_limit_w is not None and s.tdp_w:
                self.power_scale = min(1.0, (self.power_limit_w / s.tdp_w) ** POWER_EXPONENT)
            self.clock_scale = headroom * self.power_scale
        self.vector_flops = (s.peak("fp32") or 1.0) * 1e12 * self.clock_scale
        # The clock of work that does not load the tensor cores (the power budget binds on them):
        # the rated boost and, on consumer cards, what GPU Boost adds. 0: no published clock.
        self.light_clock_hz = (s.boost_clock_mhz or 0.0) * 1e6 * headroom

    def rate(self, dtype: str) -> Rate:
        r = self._rates.get(dtype)
        if r is None:
            r = self._resolve(dtype)
            self._rates[dtype] = r
        return r

    def _resolve(self, dtype: str) -> Rate:
        s, p = self.spec, self.params
        if dtype == "fp16acc16":
            # FP16 GEMMs accumulating in FP16: twice the FP32-accumulate rate on GeForce cards;
            # the same path elsewhere (where the catalog has no separate figure).
            base = self._resolve("fp16")
            if s.fp16_acc16_tflops and base.dtype == "fp16":
                ratio = s.fp16_acc16_tflops / (s.peak("fp16") or s.fp16_acc16_tflops)
                return Rate(base.flops * ratio, "fp16", base.ceiling, base.ceiling_source,
                            "FP16 GEMMs with FP16 accumulation")
            return base
        chain = (dtype, *FALLBACK.get(dtype, ("fp32",)))
        for i, dt in enumerate(chain):
            peak = s.peak(dt)
            if peak is None:
                continue
            if dt != "fp32" and s.tensor_core_dtypes and dt not in s.tensor_core_dtypes and dt in TENSOR_DTYPES:
                continue
            note = ""
            if i > 0:
                why = "no hardware path" if s.supports(dtype) is False else "peak unknown"
                note = f"{dtype} matmuls run at the {dt} rate on {s.name} ({why} for {dtype})"
            ceiling, src = self._ceiling(dt)
            if dt == "tf32":
                ceiling *= p.tf32_factor
                src += f" x tf32_factor {p.tf32_factor:.2f}"
            return Rate(peak * 1e12 * self.clock_scale, dt, ceiling, src, note)
        peak = s.peak("fp32") or 1.0
        return Rate(peak * 1e12 * self.clock_scale, "fp32", p.fp32_ceiling, "fitted fp32_ceiling",
                    f"no known peak for {dtype} on {s.name}; FP32 rate used")

    def _ceiling(self, dt: str) -> tuple[float, str]:
        p = self.params
        if dt == "fp32":
            return p.fp32_ceiling, "fitted fp32_ceiling"
        if not self.use_measured:
            return p.mm_ceiling, "fitted mm_ceiling (no measured ceiling for this GPU)"
        # A measured ceiling of the same tensor path (fp16/bf16/tf32 share it; fp8 its own).
        own = self._measured(dt) if dt in LOW_PRECISION else self._measured(dt, "bf16", "fp16")
        ceiling, source = own or (p.mm_ceiling, "fitted mm_ceiling (no measured ceiling for this GPU)")
        if dt in LOW_PRECISION:
            # FP8/INT8/FP4 GEMMs run on the tensor cores that run BF16, at the same clocks: their
            # fraction of peak is at least the 16-bit path's measured one (_measured's note)
            c16 = self._measured("bf16", "fp16")
            if c16 is not None and c16[0] > ceiling:
                return c16[0], f"the 16-bit path's measured efficiency, {c16[1]}, above {source}"
        return ceiling, source

    def _measured(self, *dtypes: str) -> tuple[float, str] | None:
        """The first measured matmul ceiling among `dtypes`, as a fraction of that dtype's peak, and
        its source. The catalog's FP8 ceilings come from torch._scaled_mm shape sweeps, which fall
        short of cuBLASLt's own FP8 GEMMs on Hopper (H100 70.9 % of the FP8 peak against 80.3 % for
        BF16 in the same table; a public cross-check measured 1,170-1,180 TFLOP/s through _scaled_mm
        and 1,599-1,630 through a direct cuBLASLt FP8 GEMM on the same GPUs: README, Accuracy),
        hence the 16-bit floor in _ceiling."""
        for d in dtypes:
            m = self.spec.measured_tflops(d)
            peak = self.spec.peak(d)
            if m is not None and peak:
                return min(1.0, m.matmul_tflops / peak), f"measured {d} matmul {m.matmul_tflops:g} TFLOP/s ({m.source})"
        return None
