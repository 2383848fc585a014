"""The packaged GPU catalog: every file loads, and physical and bookkeeping invariants hold for
every entry. Also name resolution (validation-set and nvidia-smi spellings) and user override
directories (``--catalog`` / ``$WHICHGPU_CATALOG``)."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from whichgpu.errors import AmbiguousNameError, CatalogError, UnknownNameError
from whichgpu.hardware.catalog import (
    ENV_VAR,
    FP4_ARCHITECTURES,
    FP8_ARCHITECTURES,
    SPECS_DIR,
    Catalog,
    load_catalog,
    read_toml,
    validate_raw,
)
from whichgpu.hardware.names import NameIndex, squash
from whichgpu.hardware.spec import GpuSpec

REPO = Path(__file__).resolve().parents[2]
# Shared project data lives beside the repository (../shared); a clean clone may not have it.
SHARED = REPO.parent / "shared"
VALIDATION = SHARED / "validation"


def _packaged_catalog() -> Catalog:
    saved = os.environ.pop(ENV_VAR, None)
    try:
        return load_catalog()
    finally:
        if saved is not None:
            os.environ[ENV_VAR] = saved


CATALOG = _packaged_catalog()
SPECS = list(CATALOG)
TENSOR_DTYPES = ("tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")


def by_id(spec: GpuSpec) -> str:
    return spec.id


@pytest.fixture
def no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# --------------------------------------------------------------------------- loading


def test_every_packaged_file_validates_and_is_named_after_its_id() -> None:
    files = sorted(SPECS_DIR.glob("*.toml"))
    assert len(files) == len(CATALOG)
    for p in files:
        raw = read_toml(p)
        validate_raw(str(p), raw)
        assert p.stem == raw["id"], f"{p.name} holds id {raw['id']!r}"


def test_catalog_has_at_least_55_unique_accelerators() -> None:
    ids = CATALOG.ids()
    assert len(ids) >= 55
    assert len(set(ids)) == len(ids)


REQUIRED_IDS = {
    # every row of shared/reference/gpus.csv
    "p100-sxm2-16gb", "v100-sxm2-32gb", "t4", "a10", "a100-sxm4-40gb", "a100-sxm4-80gb",
    "a100-pcie-80gb", "l4", "l40s", "h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb", "b200",
    "gb200", "rtx-2060", "rtx-2070", "rtx-2080-ti", "rtx-3060-12gb", "rtx-3070", "rtx-3080-10gb",
    "rtx-3090", "rtx-4060-ti-16gb", "rtx-4070-ti", "rtx-4080", "rtx-4090", "rtx-5090", "rtx-a6000",
    "rtx-6000-ada", "mi250x", "mi300x", "tpu-v4", "tpu-v5e", "tpu-v6e",
    # the validation set
    "v100-sxm2-16gb", "v100-sxm3-32gb", "v100-pcie-16gb", "a100-pcie-40gb", "quadro-rtx-8000",
    # cards users compare
    "a10g", "a40", "a30", "l40", "h100-nvl", "h200-nvl", "gh200", "b300", "rtx-3080-ti",
    "rtx-3090-ti", "rtx-4060", "rtx-4070", "rtx-4070-ti-super", "rtx-4080-super",
    "rtx-5060-ti-16gb", "rtx-5070", "rtx-5070-ti", "rtx-5080", "rtx-a5000", "rtx-4000-ada",
    "tesla-p40", "p100-pcie-16gb", "mi210", "mi250", "mi325x", "mi355x", "gaudi2", "gaudi3",
    "tpu-v5p",
}


def test_required_accelerators_are_present() -> None:
    assert REQUIRED_IDS - set(CATALOG.ids()) == set()


# --------------------------------------------------------------------------- per-entry properties


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_peaks_bandwidth_and_memory_are_positive(spec: GpuSpec) -> None:
    assert spec.memory_bandwidth_gbps > 0
    assert spec.memory_gb > 0
    assert spec.peak_tflops, "every accelerator has at least one known peak"
    for dt, v in spec.peak_tflops.items():
        assert v > 0, dt
        assert dt not in spec.unsupported
    if spec.fp16_acc16_tflops is not None:
        assert spec.fp16_acc16_tflops > 0


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_fp8_and_fp4_only_on_architectures_that_have_them(spec: GpuSpec) -> None:
    if spec.architecture not in FP8_ARCHITECTURES:
        assert spec.peak("fp8") is None
        assert "fp8" not in spec.tensor_core_dtypes
    if spec.architecture not in FP4_ARCHITECTURES:
        assert spec.peak("fp4") is None
        assert "fp4" not in spec.tensor_core_dtypes


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_tensor_dtypes_match_the_peaks(spec: GpuSpec) -> None:
    if spec.architecture == "pascal":
        assert spec.tensor_core_dtypes == ()
        assert not any(dt in spec.peak_tflops for dt in TENSOR_DTYPES)
    for dt in TENSOR_DTYPES:
        if dt in spec.peak_tflops:
            assert dt in spec.tensor_core_dtypes, f"{dt} has a peak but is not a tensor dtype"
    for dt in spec.tensor_core_dtypes:
        assert dt not in spec.unsupported, f"{dt} is both a tensor dtype and unsupported"


# Dense FP16 tensor-core FLOP per clock per SM (FP16 inputs, FP16 accumulate), from the
# architecture whitepapers (tensor cores per SM x FMA per clock x 2):
#   Volta GV100   8 x  64 x 2 = 1024   V100 SXM2: 80 SM x 1530 MHz x 1024 = 125 TFLOPS
#   Turing        8 x  64 x 2 = 1024   T4: 40 SM x 1590 MHz x 1024 = 65 TFLOPS
#   Ampere GA100  4 x 256 x 2 = 2048   A100: 108 SM x 1410 MHz x 2048 = 312 TFLOPS
#   Ampere GA10x  4 x 128 x 2 = 1024   RTX 3090: 82 SM x 1695 MHz x 1024 = 142 TFLOPS
#   Ada           4 x 128 x 2 = 1024   RTX 4090: 128 SM x 2520 MHz x 1024 = 330 TFLOPS
#   Hopper        4 x 512 x 2 = 4096   H100 SXM: 132 SM x 1830 MHz x 4096 = 989 TFLOPS
#   Blackwell sm_100          = 8192   B200: 2250 TFLOPS from 148 SM at ~1.86 GHz
#   Blackwell sm_120 (RTX)    = 1024   RTX 5090: 170 SM x 2407 MHz x 1024 = 419 TFLOPS
# Per dtype: TF32 = 1/2, FP16/BF16 = 1, FP8/INT8 = 2, INT4/FP4 = 4 times the FP16 rate.
# A 2:4-sparse figure stored by mistake is 2x the dense one and breaks the bound below.
DTYPE_MULTIPLIER = {"tf32": 0.5, "fp16": 1.0, "bf16": 1.0, "fp8": 2.0, "int8": 2.0, "int4": 4.0, "fp4": 4.0}
SLACK = 1.10


def fp16_flop_per_clock_per_sm(spec: GpuSpec) -> int | None:
    if spec.architecture == "ampere":
        return 2048 if spec.chip.startswith("GA100") else 1024
    if spec.architecture == "blackwell":
        return 1024 if spec.chip.startswith("GB20") else 8192
    return {"volta": 1024, "turing": 1024, "ada": 1024, "hopper": 4096}.get(spec.architecture)


BOUNDED = [s for s in SPECS if s.vendor == "NVIDIA" and s.sm_count and s.boost_clock_mhz
           and fp16_flop_per_clock_per_sm(s)]


def test_the_sparsity_bound_covers_most_nvidia_parts() -> None:
    assert len(BOUNDED) >= 40


@pytest.mark.parametrize("spec", BOUNDED, ids=by_id)
def test_no_sparse_figure_in_dense_fields(spec: GpuSpec) -> None:
    rate = fp16_flop_per_clock_per_sm(spec)
    assert rate is not None and spec.sm_count and spec.boost_clock_mhz
    fp16_bound = spec.sm_count * spec.boost_clock_mhz * 1e6 * rate / 1e12 * SLACK
    for dt, mult in DTYPE_MULTIPLIER.items():
        v = spec.peak(dt)
        if v is not None:
            assert v <= fp16_bound * mult, f"{dt} {v} exceeds {fp16_bound * mult:.1f}"
    if spec.fp16_acc16_tflops is not None:
        assert spec.fp16_acc16_tflops <= fp16_bound


def test_the_sparsity_bound_rejects_a_sparse_h100_figure() -> None:
    h100 = CATALOG.get("h100-sxm5-80gb")
    bound = 132 * 1980e6 * 4096 / 1e12 * SLACK  # 1177 TFLOPS
    bf16 = h100.peak("bf16")
    assert bf16 == pytest.approx(989.4)
    assert bf16 is not None and bf16 <= bound < 1978.9  # the datasheet's sparse BF16 would not fit


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_precision_ordering(spec: GpuSpec) -> None:
    def le(a: str, b: str) -> None:
        va, vb = spec.peak(a), spec.peak(b)
        if va is not None and vb is not None:
            assert va <= vb * 1.001, f"{a} {va} > {b} {vb}"

    le("tf32", "fp16")
    le("tf32", "bf16")
    le("fp16", "fp8")
    le("bf16", "fp8")
    le("fp8", "fp4")
    fp16 = spec.peak("fp16")
    if spec.fp16_acc16_tflops is not None and fp16 is not None:
        assert fp16 <= spec.fp16_acc16_tflops * 1.001


@pytest.mark.parametrize("spec", [s for s in SPECS if s.vendor == "NVIDIA" and s.fp16_acc16_tflops], ids=by_id)
def test_geforce_fp32_accumulate_convention(spec: GpuSpec) -> None:
    """GeForce stores the half-rate FP32-accumulate figure in fp16; other segments run full rate."""
    fp16, acc16 = spec.peak("fp16"), spec.fp16_acc16_tflops
    assert fp16 is not None and acc16 is not None
    if spec.segment == "consumer":
        assert fp16 == pytest.approx(acc16 / 2, rel=0.01)
    else:
        assert fp16 == pytest.approx(acc16, rel=0.01)


CITATION = re.compile(r"https?://|@[0-9a-f]{7,}|gpus\.csv|whitepaper|datasheet|derived", re.I)


def _present_fields(spec: GpuSpec) -> list[str]:
    keys = ["memory.size_gb", "memory.type", "memory.bandwidth_gbps"]
    optional = {
        "memory.l2_cache_mb": spec.l2_cache_mb, "compute.sm_count": spec.sm_count,
        "compute.boost_clock_mhz": spec.boost_clock_mhz, "compute.base_clock_mhz": spec.base_clock_mhz,
        "compute.shared_mem_per_sm_kb": spec.shared_mem_per_sm_kb,
        "compute.l1_cache_per_sm_kb": spec.l1_cache_per_sm_kb, "compute.sparsity_2to4": spec.sparsity_2to4,
        "peak_dense.fp16_acc16_tflops": spec.fp16_acc16_tflops, "power.tdp_w": spec.tdp_w,
        "interconnect.scaleup": spec.scaleup_link or None,
        "interconnect.scaleup_gbps_per_direction": spec.scaleup_gbps_per_direction,
        "interconnect.pcie_gen": spec.pcie_gen, "interconnect.pcie_lanes": spec.pcie_lanes,
    }
    keys += [k for k, v in optional.items() if v is not None]
    from whichgpu.hardware.spec import PEAK_FIELDS

    keys += [f"peak_dense.{f}" for dt, f in PEAK_FIELDS.items() if dt in spec.peak_tflops or dt in spec.unsupported]
    return keys


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_every_figure_has_a_source(spec: GpuSpec) -> None:
    for key in _present_fields(spec):
        src = spec.source_of(key)
        assert src, key
        assert CITATION.search(src), f"{key}: {src!r} does not cite a document"
    for m in spec.measured:
        assert CITATION.search(m.source), m.source
    for k, v in spec.sources.items():
        assert v.strip(), k


@pytest.mark.parametrize("spec", SPECS, ids=by_id)
def test_prices_are_dated_and_sourced(spec: GpuSpec) -> None:
    p = spec.price
    date = re.compile(r"^(19|20)\d{2}-(0[1-9]|1[0-2])(-\d{2})?$")
    if p.launch_msrp_usd is not None:
        assert p.launch_source
    if p.street_usd is not None:
        assert date.match(p.street_date) and p.street_source
        assert "TODO" not in p.street_source
    if p.cloud_usd_per_hour is not None:
        assert date.match(p.cloud_date) and p.cloud_provider and p.cloud_source
        assert "TODO" not in p.cloud_source
        assert p.cloud_usd_per_hour < 100  # per GPU-hour, not per instance-month


@pytest.mark.parametrize("spec", [s for s in SPECS if s.measured], ids=by_id)
def test_measured_matmul_is_below_the_dense_peak(spec: GpuSpec) -> None:
    dtypes = [m.dtype for m in spec.measured]
    assert len(dtypes) == len(set(dtypes))
    for m in spec.measured:
        peak = spec.peak(m.dtype)
        assert peak is not None, f"measured {m.dtype} but no {m.dtype} peak"
        assert 0.3 * peak < m.matmul_tflops <= peak, (m.dtype, m.matmul_tflops, peak)


# kernels.csv matmul rows: accelerator -> catalog ids that carry the measurement.
KERNEL_MEASUREMENTS = {
    ("gaudi2", "bf16"): 418.7, ("gaudi2", "fp8"): 826.5,
    ("a100-sxm4-80gb", "bf16"): 271.2, ("a100-sxm4-40gb", "bf16"): 271.2,
    ("gh200", "bf16"): 828.6, ("gh200", "fp8"): 1535.0,
    ("a100-pcie-40gb", "bf16"): 252.9, ("a100-pcie-80gb", "bf16"): 252.9,
    ("h100-sxm5-80gb", "bf16"): 794.5, ("h100-sxm5-80gb", "fp8"): 1402.6,
    ("h200-sxm-141gb", "bf16"): 794.5, ("h200-sxm-141gb", "fp8"): 1453.4,
    ("b300", "bf16"): 1769.0, ("b300", "fp8"): 3353.3,
    ("b200", "bf16"): 1745.0, ("b200", "fp8"): 3432.5,
    ("gaudi3", "bf16"): 1243.0, ("gaudi3", "fp8"): 1289.5,
    ("gb200", "bf16"): 1822.0, ("gb200", "fp8"): 3615.6,
    ("mi355x", "bf16"): 1565.0, ("mi325x", "bf16"): 784.9, ("mi300x", "bf16"): 668.4,
}


@pytest.mark.parametrize(("gpu", "dtype"), sorted(KERNEL_MEASUREMENTS))
def test_kernel_measurements_are_stored(gpu: str, dtype: str) -> None:
    m = CATALOG.get(gpu).measured_tflops(dtype)
    assert m is not None
    assert m.matmul_tflops == KERNEL_MEASUREMENTS[(gpu, dtype)]
    assert "744d01e18b" in m.source and m.shape


def test_h200_bf16_measurement_cites_the_same_as_h100_note() -> None:
    m = CATALOG.get("h200-sxm-141gb").measured_tflops("bf16")
    assert m is not None and "H200 is the same" in m.notes


# --------------------------------------------------------------------------- names

# Every GPU spelling in shared/validation (throughput.csv, llm_training.csv, README's list), kept
# here as well so that resolution is tested in a clean clone without ../shared.
VALIDATION_SPELLINGS = {
    "A10 (Lambda Cloud)": "a10",
    "A100-PCIe-40GB": "a100-pcie-40gb",
    "A100-PCIe-80GB": "a100-pcie-80gb",
    "A100-SXM4-40GB": "a100-sxm4-40gb",
    "A100-SXM4-80GB": "a100-sxm4-80gb",
    "A100-SXM4-80GB (Selene DGX A100)": "a100-sxm4-80gb",
    "A100-80GB (Selene)": "a100-sxm4-80gb",
    "H100-PCIe-80GB": "h100-pcie-80gb",
    "H100-SXM5-80GB": "h100-sxm5-80gb",
    "H100": "h100-sxm5-80gb",
    "H100 (per script name train_llama3_8b_h100_fp8.sh)": "h100-sxm5-80gb",
    "H200-SXM-141GB": "h200-sxm-141gb",
    "B200": "b200",
    "GB200": "gb200",
    "Quadro RTX 8000": "quadro-rtx-8000",
    "RTX 3090": "rtx-3090",
    "RTX 4090": "rtx-4090",
    "RTX 6000 Ada": "rtx-6000-ada",
    "RTX A6000": "rtx-a6000",
    "T4": "t4",
    "V100-16GB (Lambda Cloud)": "v100-sxm2-16gb",
    "V100-SXM2-16GB": "v100-sxm2-16gb",
    "V100-SXM2-32GB": "v100-sxm2-32gb",
    "V100-SXM3-32GB": "v100-sxm3-32gb",
}

# Exact strings nvidia-smi (or rocm-smi / hl-smi) prints.
SMI_NAMES = {
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb",
    "NVIDIA H100 PCIe": "h100-pcie-80gb",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200-sxm-141gb",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA B200": "b200",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "NVIDIA GeForce RTX 5090": "rtx-5090",
    "Tesla V100-SXM2-16GB": "v100-sxm2-16gb",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "Tesla V100-PCIE-16GB": "v100-pcie-16gb",
    "Tesla P100-PCIE-16GB": "p100-pcie-16gb",
    "Tesla T4": "t4",
    "Tesla P40": "tesla-p40",
    "NVIDIA A10G": "a10g",
    "NVIDIA A10": "a10",
    "NVIDIA A40": "a40",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA RTX A6000": "rtx-a6000",
    "NVIDIA RTX 6000 Ada Generation": "rtx-6000-ada",
    "Quadro RTX 8000": "quadro-rtx-8000",
    "AMD Instinct MI300X": "mi300x",
    "HL-325L": "gaudi3",
}

OTHER_QUERIES = {
    "4090": "rtx-4090",
    "rtx4090": "rtx-4090",
    "a100 80gb sxm": "a100-sxm4-80gb",
    "h100-sxm5-80gb": "h100-sxm5-80gb",
    "Intel Gaudi 2": "gaudi2",
    "NVIDIA GH200 SXM": "gh200",
    "AMD MI355X": "mi355x",
    "tpu v5e": "tpu-v5e",
}


@pytest.mark.parametrize(("query", "expected"), sorted({**VALIDATION_SPELLINGS, **SMI_NAMES, **OTHER_QUERIES}.items()))
def test_name_resolves(query: str, expected: str) -> None:
    assert CATALOG.get(query).id == expected


def _shared_spellings() -> list[str]:
    names: set[str] = set()
    for fname in ("throughput.csv", "llm_training.csv"):
        with open(VALIDATION / fname, newline="") as fh:
            names |= {row["gpu"] for row in csv.DictReader(fh) if row["gpu"]}
    readme = (VALIDATION / "README.md").read_text()
    m = re.search(r"^- GPUs:(.*?)^- precisions:", readme, re.S | re.M)
    assert m, "README.md has no '- GPUs:' list"
    names |= {" ".join(n.split()) for n in m.group(1).split(";") if n.strip()}
    return sorted(names)


@pytest.mark.skipif(not VALIDATION.is_dir(), reason=f"shared validation data not found at {VALIDATION} (clean clone without ../shared)")
def test_every_shared_validation_spelling_resolves() -> None:
    names = _shared_spellings()
    assert len(names) >= 18
    unresolved = []
    for n in names:
        try:
            CATALOG.get(n)
        except (UnknownNameError, AmbiguousNameError) as e:
            unresolved.append(f"{n}: {e}")
    assert unresolved == []


@pytest.mark.skipif(not VALIDATION.is_dir(), reason=f"shared validation data not found at {VALIDATION} (clean clone without ../shared)")
def test_embedded_spellings_cover_the_shared_data_seen_so_far() -> None:
    """Spellings in ../shared that the embedded copy lacks are resolved, but should be copied in."""
    missing = [n for n in _shared_spellings() if n not in VALIDATION_SPELLINGS]
    for n in missing:  # the held-out set may add names: they must at least resolve
        CATALOG.get(n)
    known = [n for n in _shared_spellings() if n in VALIDATION_SPELLINGS]
    assert len(known) >= 18


def test_a100_alone_is_ambiguous_and_lists_candidates() -> None:
    with pytest.raises(AmbiguousNameError) as ei:
        CATALOG.get("a100")
    assert {"a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb"} <= set(ei.value.matches)
    assert "ambiguous" in str(ei.value)


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(UnknownNameError) as ei:
        CATALOG.get("rtx 9090")
    assert "did you mean" in str(ei.value)
    assert ei.value.suggestions


def test_no_two_entries_share_a_spelling() -> None:
    owner: dict[str, str] = {}
    clashes = []
    for s in SPECS:
        for n in {s.id, s.name, *s.aliases}:
            key = squash(n)
            if key in owner and owner[key] != s.id:
                clashes.append(f"{n!r}: {owner[key]} and {s.id}")
            owner[key] = s.id
    assert clashes == []


def test_every_id_name_and_alias_resolves_to_its_own_entry() -> None:
    wrong = [f"{n!r} -> {CATALOG.get(n).id}, not {s.id}" for s in SPECS for n in (s.id, s.name, *s.aliases)
             if CATALOG.get(n).id != s.id]
    assert wrong == []


# How published benchmark tables name GPUs: a memory size checked against memory.size_gb, a
# parenthesised qualifier narrowing the name before it (names.py, rules 4-7).
BENCHMARK_TABLE_SPELLINGS = {
    "3070 8GB": "rtx-3070",
    "3080 Ti 12GB": "rtx-3080-ti",
    "3090 24GB": "rtx-3090",  # the base model: RTX 3090 Ti (also 24 GB) is a variant of it
    "4080 16GB": "rtx-4080",  # likewise RTX 4080 SUPER (also 16 GB)
    "RTX 4000 Ada 20GB": "rtx-4000-ada",
    "RTX A6000 48GB": "rtx-a6000",
    "L40S 48GB": "l40s",
    "A100 SXM 80GB": "a100-sxm4-80gb",
    "H100 (H100-HBM3-80GB)": "h100-sxm5-80gb",  # HBM3 and 80 GB: SXM5 (PCIe is HBM2e, NVL 94 GB)
    "MI250X (one GCD)": "mi250x-gcd",
    # bare GeForce model numbers
    "3070": "rtx-3070",
    "4080": "rtx-4080",
    "3090": "rtx-3090",
    # the qualifier picks a variant of the name before it, by name or by memory type
    "H100 (PCIe)": "h100-pcie-80gb",
    "H100 (HBM2e)": "h100-pcie-80gb",
    "RTX 3090 (24 GB)": "rtx-3090",
    "A100 (SXM4 80GB)": "a100-sxm4-80gb",
    "MI250X 64GB": "mi250x-gcd",
    "MI250X 128GB": "mi250x",
}


@pytest.mark.parametrize(("query", "expected"), sorted(BENCHMARK_TABLE_SPELLINGS.items()))
def test_benchmark_table_spelling_resolves(query: str, expected: str) -> None:
    assert CATALOG.get(query).id == expected


def test_a_qualifier_that_says_nothing_about_the_part_keeps_the_name() -> None:
    assert CATALOG.get("V100-16GB (Lambda Cloud)").id == "v100-sxm2-16gb"  # as before (an alias)
    assert CATALOG.get("A10 (Lambda Cloud)").id == "a10"
    assert CATALOG.get("H100 (330W cap)").id == "h100-sxm5-80gb"  # "H100" alone is the SXM5
    assert CATALOG.get("RTX 4090 (Lambda Cloud)").id == "rtx-4090"


def test_a100_80gb_with_a_power_cap_is_ambiguous_between_pcie_and_sxm4() -> None:
    with pytest.raises(AmbiguousNameError) as ei:
        CATALOG.get("A100-80GB (330W cap)")
    assert ei.value.matches == ["a100-pcie-80gb", "a100-sxm4-80gb"]  # the name does not say which


def test_a_memory_size_no_candidate_has_is_unknown() -> None:
    with pytest.raises(UnknownNameError):
        CATALOG.get("3070 16GB")  # the RTX 3070 has 8 GB
    with pytest.raises(UnknownNameError):
        CATALOG.get("H100 (16GB)")


def test_a_name_is_not_read_as_a_longer_one_it_is_a_prefix_of() -> None:
    # "MI250" is an entry of its own: a 64 GB "MI250" is not the MI250X GCD
    with pytest.raises(UnknownNameError):
        CATALOG.get("MI250 64GB")
    assert CATALOG.get("MI250").id == "mi250"
    assert CATALOG.get("MI250X").id == "mi250x"


def test_errors_for_names_that_did_not_resolve_are_unchanged() -> None:
    with pytest.raises(AmbiguousNameError) as amb:
        CATALOG.get("a100")
    assert str(amb.value) == ("ambiguous GPU 'a100': matches a100-pcie-40gb, a100-pcie-80gb, a100-sxm4-40gb, "
                              "a100-sxm4-80gb; be more specific")
    with pytest.raises(UnknownNameError) as unk:
        CATALOG.get("rtx 9090")
    assert str(unk.value) == "unknown GPU 'rtx 9090'; did you mean 'rtx-5090', 'rtx-4090', 'rtx-3090'?"
    assert "\n" not in str(amb.value) + str(unk.value)


def test_an_index_without_memory_reads_names_only() -> None:
    """The model zoo's index (no memory): sizes and qualifiers are not read."""
    idx = NameIndex([("m-3090", ["Model 3090"]), ("m-3090-ti", ["Model 3090 Ti"])])
    with pytest.raises(UnknownNameError):
        idx.resolve("Model 3090 (tuned)")
    with pytest.raises(AmbiguousNameError):
        idx.resolve("3090")


# --------------------------------------------------------------------------- MI250X GCD


def test_mi250x_gcd_is_half_an_mi250x() -> None:
    pkg, gcd = CATALOG.get("mi250x"), CATALOG.get("mi250x-gcd")
    assert (gcd.vendor, gcd.architecture, gcd.year, gcd.memory_type) == (pkg.vendor, pkg.architecture, pkg.year, pkg.memory_type)
    # per package: halved (the MI250X notes: each GCD 64 GB / 1.6 TB/s / 8 MB L2 / 110 CUs)
    assert gcd.memory_gb == pkg.memory_gb / 2 == 64
    assert gcd.memory_bandwidth_gbps == pkg.memory_bandwidth_gbps / 2 == 1638.4
    assert gcd.l2_cache_mb == (pkg.l2_cache_mb or 0) / 2 == 8
    assert gcd.sm_count == (pkg.sm_count or 0) // 2 == 110
    assert gcd.tdp_w == (pkg.tdp_w or 0) / 2 == 250  # an even split of the package's 500 W
    assert set(gcd.peak_tflops) == set(pkg.peak_tflops)
    for dt, v in pkg.peak_tflops.items():
        assert gcd.peak_tflops[dt] == pytest.approx(v / 2), dt  # e.g. BF16 383 / 2 = 191.5
    assert gcd.unsupported == pkg.unsupported
    # per CU, per clock or per dtype: the package's
    assert (gcd.boost_clock_mhz, gcd.shared_mem_per_sm_kb, gcd.l1_cache_per_sm_kb) == (
        pkg.boost_clock_mhz, pkg.shared_mem_per_sm_kb, pkg.l1_cache_per_sm_kb)
    assert (gcd.tensor_core_dtypes, gcd.sparsity_2to4) == (pkg.tensor_core_dtypes, pkg.sparsity_2to4)
    assert "even split" in gcd.source_of("power.tdp_w")
    assert "Seen by software as 2 GPUs (GCDs)" in gcd.source_of("memory.size_gb") + gcd.sources["default"]


def test_mi250x_gcd_has_no_prices() -> None:
    """A GCD is not sold alone: no purchase or rental price, like the mi250x itself."""
    p = CATALOG.get("mi250x-gcd").price
    assert (p.launch_msrp_usd, p.street_usd, p.cloud_usd_per_hour) == (None, None, None)


# --------------------------------------------------------------------------- user override directories

NEW_GPU = """\
schema = "whichgpu.gpu/1"
id = "acme-x1"
name = "Acme X1 Test Accelerator"
vendor = "NVIDIA"
architecture = "{arch}"
chip = "ACME1"
year = 2026
form_factor = "PCIe"
segment = "datacenter"
aliases = ["Acme X1"]

[memory]
size_gb = 64
type = "HBM3"
bandwidth_gbps = {bandwidth}
{memory_extra}
[compute]
sm_count = 100
boost_clock_mhz = 1500
tensor_core_dtypes = ["fp16"]

[peak_dense]
fp32_tflops = 50
fp16_tflops = 200
{peak_extra}
[sources]
default = "test fixture, https://example.com/acme-x1"
"""


def _new_gpu(arch: str = "hopper", bandwidth: str = "3000", memory_extra: str = "", peak_extra: str = "") -> str:
    return NEW_GPU.format(arch=arch, bandwidth=bandwidth, memory_extra=memory_extra, peak_extra=peak_extra)


def test_partial_override_changes_only_the_given_fields(tmp_path: Path, no_env_catalog: None) -> None:
    f = tmp_path / "my-h100-price.toml"
    f.write_text('id = "h100-sxm5-80gb"\n\n[price]\nstreet_usd = 21000\nstreet_date = "2026-11"\n'
                 'street_source = "our negotiated quote, 2026-11"\n')
    cat = load_catalog(str(tmp_path))
    h = cat.get("H100 SXM5")
    packaged = CATALOG.get("h100-sxm5-80gb")
    assert h.price.street_usd == 21000
    assert h.price.street_source == "our negotiated quote, 2026-11"
    assert h.price.cloud_usd_per_hour == packaged.price.cloud_usd_per_hour  # merged, not replaced
    assert h.peak("bf16") == packaged.peak("bf16")
    assert h.overridden_by == (str(f),)
    assert h.path == packaged.path
    assert len(cat) == len(CATALOG)
    assert CATALOG.get("h100-sxm5-80gb").price.street_usd == packaged.price.street_usd


def test_override_may_name_an_entry_by_any_spelling(tmp_path: Path, no_env_catalog: None) -> None:
    (tmp_path / "t4.toml").write_text('override = "Tesla T4"\n\n[[measured]]\ndtype = "fp16"\n'
                                      'matmul_tflops = 40.5\nsource = "our mamf-finder run, 2026-11"\n')
    t4 = load_catalog(str(tmp_path)).get("t4")
    m = t4.measured_tflops("fp16")
    assert m is not None and m.matmul_tflops == 40.5
    assert t4.overridden_by


def test_new_complete_accelerator_is_added(tmp_path: Path, no_env_catalog: None) -> None:
    f = tmp_path / "acme-x1.toml"
    f.write_text(_new_gpu())
    cat = load_catalog(str(tmp_path))
    assert len(cat) == len(CATALOG) + 1
    x = cat.get("Acme X1")
    assert x.id == "acme-x1" and x.path == str(f) and x.peak("fp16") == 200
    assert x.overridden_by == ()


def test_env_var_names_catalog_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acme-x1.toml").write_text(_new_gpu())
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    cat = load_catalog()
    assert cat.get("acme-x1").memory_gb == 64
    assert cat.user_dirs == (str(tmp_path),)


def _load_error(tmp_path: Path, name: str, text: str) -> CatalogError:
    (tmp_path / name).write_text(text)
    with pytest.raises(CatalogError) as ei:
        load_catalog(str(tmp_path))
    assert name in str(ei.value), "the error names the file"
    return ei.value


def test_malformed_toml_names_the_file_and_line(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "broken.toml", 'id = "acme-x1"\n[memory\nsize_gb = 1\n')
    assert "not valid TOML" in str(e)
    assert "line 2" in str(e)


def test_unknown_field_is_named(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "acme-x1.toml", _new_gpu(memory_extra="size_gib = 64\n"))
    assert e.field == "memory.size_gib"
    assert "memory.size_gib" in str(e) and "unknown field" in str(e) and "size_gb" in str(e)


def test_negative_bandwidth_is_rejected(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "acme-x1.toml", _new_gpu(bandwidth="-3000"))
    assert e.field == "memory.bandwidth_gbps"
    assert "must be > 0" in str(e)


def test_negative_bandwidth_in_a_partial_override_is_rejected(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "fast-h100.toml", 'id = "h100-sxm5-80gb"\n[memory]\nbandwidth_gbps = -1\n')
    assert e.field == "memory.bandwidth_gbps"


def test_fp8_on_a_volta_card_is_rejected(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "acme-x1.toml", _new_gpu(arch="volta", peak_extra="fp8_tflops = 400\n"))
    assert e.field == "peak_dense.fp8_tflops"
    assert "volta" in str(e)


def test_missing_required_field_is_named(tmp_path: Path, no_env_catalog: None) -> None:
    e = _load_error(tmp_path, "acme-x1.toml", _new_gpu().replace('vendor = "NVIDIA"\n', ""))
    assert e.field == "vendor"
    assert "required field is missing" in str(e)


def test_missing_catalog_directory_is_an_error(tmp_path: Path, no_env_catalog: None) -> None:
    with pytest.raises(CatalogError) as ei:
        load_catalog(str(tmp_path / "nope"))
    assert "nope" in str(ei.value)


def test_usable_memory_is_gib_less_inline_ecc_and_the_drivers_share() -> None:
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.spec import USABLE_FRACTION

    cat = load_catalog()
    # nvidia-smi totals (MiB) of cards whose ECC lives in the GDDR: 15/16 of the memory
    for gid, smi_mib in (("t4", 15_360), ("l4", 23_034), ("a10", 23_028), ("a10g", 23_028), ("a40", 46_068),
                         ("l40s", 46_068)):
        g = cat.get(gid)
        assert g.inline_ecc, gid
        assert g.usable_memory_bytes == pytest.approx(smi_mib * 2**20 * USABLE_FRACTION, rel=0.001), gid
        assert "15/16 (inline ECC on)" in g.usable_memory_text
    # HBM (side-band ECC) and GeForce cards keep all of it: 80 GiB, not 80e9 bytes. nvidia-smi totals
    # (MiB) from public captures; the driver's share puts the usable memory 1-1.5 % under them
    for gid, smi_mib in (("h100-sxm5-80gb", 81_559), ("a100-sxm4-80gb", 81_920), ("h200-sxm-141gb", 143_771),
                         ("b200", 183_359), ("rtx-4090", 24_564)):
        g = cat.get(gid)
        assert not g.inline_ecc, gid
        assert 0.98 < g.usable_memory_bytes / (smi_mib * 2**20) < 0.995, gid
        assert g.usable_memory_bytes > g.memory_gb * 1e9 * 1.05, gid  # GiB, not decimal GB
    assert cat.get("h100-sxm5-80gb").to_dict()["usable_memory_gib"] == 78.8
