"""Hardware, prices and name input a hostile user might give (issue 15): files that are not UTF-8,
numbers that are infinite, vanishing or absurd, names with invisible characters. Each is refused
with one line naming the file, the field and what is valid, never a traceback or a silent value."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whichgpu.errors import CatalogError, InputError, WhichGPUError
from whichgpu.hardware.catalog import ENV_VAR, load_catalog
from whichgpu.hardware.engine import load_engines
from whichgpu.hardware.names import name_problem
from whichgpu.hardware.system import load_systems
from whichgpu.recommend.prices import PricesError, load_prices_file, parse_price_args

CATALOG = load_catalog()
SYSTEM = 'schema = "whichgpu.system/1"\nid = "dgx-h100"\n'
ENGINE = 'schema = "whichgpu.engine/1"\nid = "pytorch"\n'


@pytest.fixture(autouse=True)
def no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("WHICHGPU_ENGINES", raising=False)


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg and msg == msg.strip(), msg
    assert msg[:1] == msg[:1].lower() or msg.startswith("/"), msg
    return msg


def _write(tmp_path: Path, name: str, body: str | bytes) -> Path:
    f = tmp_path / name
    if isinstance(body, bytes):
        f.write_bytes(body)
    else:
        f.write_text(body, encoding="utf-8")
    return f


# --------------------------------------------------------------------------- not UTF-8


@pytest.mark.parametrize("load", [load_catalog, load_systems, lambda d: load_engines((d,))],
                         ids=["gpu", "system", "engine"])
def test_a_data_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, load: Callable[[str], object]) -> None:
    f = _write(tmp_path, "latin1.toml", 'id = "a10"\nnotes = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(CatalogError) as err:
        load(str(tmp_path))
    msg = one_line(err.value)
    assert str(f) in msg and "not UTF-8" in msg and "save it as UTF-8" in msg


def test_a_toml_integer_past_4300_digits_is_invalid_toml_not_a_traceback(tmp_path: Path) -> None:
    # tomllib raises a bare ValueError (Python's int() digit limit), not TOMLDecodeError.
    f = _write(tmp_path, "huge.toml", 'id = "a10"\n[memory]\nsize_gb = ' + "9" * 5000 + "\n")
    with pytest.raises(CatalogError) as err:
        load_catalog(str(tmp_path))
    assert str(f) in one_line(err.value) and "not valid TOML" in str(err.value)


@pytest.mark.parametrize("suffix", [".toml", ".csv"])
def test_a_prices_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, suffix: str) -> None:
    body = ('["RTX 4090"]\nbuy_usd = 1650\nsource = "caf\xe9"\n' if suffix == ".toml"
            else "gpu,buy_usd,source\nRTX 4090,1650,caf\xe9\n")
    f = _write(tmp_path, "prices" + suffix, body.encode("latin-1"))
    with pytest.raises(PricesError) as err:
        load_prices_file(str(f), CATALOG)
    msg = one_line(err.value)
    assert str(f) in msg and "not UTF-8" in msg


# --------------------------------------------------------------------------- numbers


GPU_BAD = [
    ("memory", "bandwidth_gbps", "inf"), ("memory", "bandwidth_gbps", "1e-300"), ("memory", "bandwidth_gbps", "0"),
    ("memory", "size_gb", "inf"), ("memory", "size_gb", "1e-300"), ("memory", "size_gb", "1e9"),
    ("peak_dense", "bf16_tflops", "inf"), ("peak_dense", "bf16_tflops", "1e-300"), ("peak_dense", "fp32_tflops", "1e300"),
    ("compute", "boost_clock_mhz", "inf"), ("compute", "sm_count", "99999999999999999999999"),
    ("power", "tdp_w", "1e-300"), ("power", "tdp_w", "1e6"),
    ("interconnect", "scaleup_gbps_per_direction", "inf"), ("interconnect", "pcie_lanes", "4096"),
    ("price", "street_usd", "1e308"), ("price", "cloud_usd_per_hour", "inf"),
]


@pytest.mark.parametrize(("section", "key", "value"), GPU_BAD)
def test_an_implausible_gpu_figure_names_file_field_and_valid_range(tmp_path: Path, section: str, key: str,
                                                                   value: str) -> None:
    f = _write(tmp_path, "a10.toml", f'id = "a10"\n[{section}]\n{key} = {value}\n')
    with pytest.raises(CatalogError) as err:
        load_catalog(str(tmp_path))
    msg = one_line(err.value)
    assert err.value.path == str(f) and err.value.field == f"{section}.{key}", msg
    assert "must be > 0" in msg or " to " in msg or "at most" in msg, msg  # what is valid


def test_the_gpu_range_error_says_the_range_and_unit(tmp_path: Path) -> None:
    _write(tmp_path, "a10.toml", 'id = "a10"\n[memory]\nbandwidth_gbps = inf\n')
    with pytest.raises(CatalogError, match=r"'memory.bandwidth_gbps': expected a number from 10 to 100000 GB/s, got inf$"):
        load_catalog(str(tmp_path))


def test_a_measured_ceiling_is_bounded_too(tmp_path: Path) -> None:
    _write(tmp_path, "t4.toml", 'id = "t4"\n[[measured]]\ndtype = "fp16"\nmatmul_tflops = inf\nsource = "x"\n')
    with pytest.raises(CatalogError) as err:
        load_catalog(str(tmp_path))
    assert err.value.field == "measured[0].matmul_tflops"


@pytest.mark.parametrize(("section", "key", "value"), [
    ("scaleup", "gbps_per_direction", "inf"), ("scaleup", "gbps_per_direction", "1e-300"),
    ("scaleup", "latency_us", "1e300"), ("scaleout", "gbps_per_gpu", "1e-300"), ("scaleout", "rails", "10000000"),
])
def test_an_implausible_system_figure_names_file_and_field(tmp_path: Path, section: str, key: str,
                                                           value: str) -> None:
    f = _write(tmp_path, "dgx.toml", f"{SYSTEM}[{section}]\n{key} = {value}\n")
    with pytest.raises(CatalogError) as err:
        load_systems(str(tmp_path))
    msg = one_line(err.value)
    assert (err.value.path, err.value.field) == (str(f), f"{section}.{key}")
    assert "expected" in msg and "got" in msg


def test_gpus_per_node_past_the_range_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "dgx.toml", f"{SYSTEM}gpus_per_node = 10000000\n")
    with pytest.raises(CatalogError, match=r"'gpus_per_node': expected a whole number from 1 to 100000 GPUs"):
        load_systems(str(tmp_path))


@pytest.mark.parametrize(("section", "key", "value"), [
    ("launch", "host_op_us", "1e300"), ("launch", "step_host_ms_train", "1e9"),
    ("kernels", "quantized_bandwidth", "1e-300"), ("kernels", "quantized_bandwidth", "1e6"),
])
def test_an_implausible_engine_figure_names_file_and_field(tmp_path: Path, section: str, key: str,
                                                           value: str) -> None:
    f = _write(tmp_path, "pt.toml", f"{ENGINE}[{section}]\n{key} = {value}\n")
    with pytest.raises(CatalogError) as err:
        load_engines((str(tmp_path),))
    assert (err.value.path, err.value.field) == (str(f), f"{section}.{key}")
    assert "expected a number" in one_line(err.value)


@pytest.mark.parametrize(("arg", "valid"), [("a10=1e308", "at most 10,000,000 USD"),
                                            ("a10=99999/h", "at most 10,000 USD per GPU-hour")])
def test_an_absurd_price_is_refused(arg: str, valid: str) -> None:
    with pytest.raises(PricesError, match=valid):
        parse_price_args([arg.replace("1e308", "1" + "0" * 308)], CATALOG)


def test_a_prices_file_value_that_is_a_table_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    f = _write(tmp_path, "p.toml", '["RTX 4090"]\nbuy_usd = [1650]\n')
    with pytest.raises(PricesError, match="buy_usd must be a number of US dollars"):
        load_prices_file(str(f), CATALOG)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(allow_nan=False), st.integers(min_value=-(10**30), max_value=10**30)))
def test_any_bandwidth_loads_in_range_or_is_refused_naming_the_field(x: float) -> None:
    """Property: a user figure either lands in the plausible range or is a CatalogError on its field."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "a10.toml").write_text(f'id = "a10"\n[memory]\nbandwidth_gbps = {x!r}\n')
        try:
            bw = load_catalog(d).get("a10").memory_bandwidth_gbps
        except CatalogError as e:
            assert e.field == "memory.bandwidth_gbps"
        else:
            assert 10 <= bw <= 100_000


# --------------------------------------------------------------------------- names


BAD_NAMES = ["a10\u200b", "\u200ba10", "a\t10", "a10\t", "-a10", " -a10", "", "   ", "a10\n", "a1\u20280"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_typed_gpu_name_with_invisible_characters_or_a_dash_is_refused(name: str) -> None:
    with pytest.raises(InputError) as err:
        CATALOG.get(name)
    msg = one_line(err.value)
    assert msg.startswith("invalid GPU name ") and repr(name) in msg


def test_the_name_error_says_which_character_and_where() -> None:
    with pytest.raises(InputError, match=r"\(U\+0009 TAB\) at position 2"):
        CATALOG.get("a\t10")
    with pytest.raises(InputError, match=r"\(U\+200B ZERO WIDTH SPACE\) at position 4"):
        CATALOG.get("a10\u200b")


@pytest.mark.parametrize("names", ["a10,\u200ba10g", "a10,a10g\t", "a10,-a10g"])
def test_a_gpu_list_refuses_a_bad_name_before_stripping(names: str) -> None:
    with pytest.raises(InputError, match="invalid GPU name"):
        CATALOG.get_many(names)


def test_clean_names_still_resolve() -> None:
    assert [g.id for g in CATALOG.get_many("a10, a10g")] == ["a10", "a10g"]
    assert CATALOG.get(" A10 ").id == "a10"
    assert CATALOG.get("H100 (H100-HBM3-80GB)").id == "h100-sxm5-80gb"  # benchmark spellings keep working


def test_system_and_engine_names_are_checked_the_same_way() -> None:
    with pytest.raises(InputError, match=r"invalid system name 'dgx-h100\\u200b'"):
        load_systems().get("dgx-h100\u200b")
    with pytest.raises(InputError, match=r"invalid engine name '-pytorch'"):
        load_engines(()).get("-pytorch")


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=12), st.sampled_from([c for c in map(chr, range(0x2100))
                                                           if unicodedata.category(c).startswith("C")]))
def test_any_name_with_a_control_or_format_character_is_refused(base: str, bad: str) -> None:
    name = base[: len(base) // 2] + bad + base[len(base) // 2:]
    assert name_problem(name) is not None
    with pytest.raises(InputError):
        CATALOG.get(name)


@pytest.mark.parametrize(("field", "line"), [
    ("aliases", 'aliases = ["A\u200b10"]'), ("aliases", 'aliases = ["-a10"]'), ("aliases", 'aliases = ["  "]'),
    ("name", 'name = "NVIDIA\tA10"'), ("override", 'override = "-a10"'),
])
def test_names_in_a_catalog_file_are_checked_naming_the_field(tmp_path: Path, field: str, line: str) -> None:
    f = _write(tmp_path, "a10.toml", f'id = "a10"\n{line}\n')
    with pytest.raises(CatalogError) as err:
        load_catalog(str(tmp_path))
    msg = one_line(err.value)
    assert (err.value.path, err.value.field) == (str(f), field), msg


@pytest.mark.parametrize(("field", "line"), [("aliases", 'aliases = ["DGX\u200bH100"]'),
                                             ("name", 'name = "-dgx"')])
def test_names_in_a_system_file_are_checked(tmp_path: Path, field: str, line: str) -> None:
    _write(tmp_path, "dgx.toml", f"{SYSTEM}{line}\n")
    with pytest.raises(CatalogError) as err:
        load_systems(str(tmp_path))
    assert err.value.field == field


def test_names_in_an_engine_file_are_checked(tmp_path: Path) -> None:
    _write(tmp_path, "pt.toml", f'{ENGINE}aliases = ["eager\u200b"]\n')
    with pytest.raises(CatalogError) as err:
        load_engines((str(tmp_path),))
    assert err.value.field == "aliases"


def test_an_engines_vendors_must_be_a_list_of_names(tmp_path: Path) -> None:
    _write(tmp_path, "pt.toml", f'{ENGINE}vendors = "NVIDIA"\n')
    with pytest.raises(CatalogError) as err:
        load_engines((str(tmp_path),))
    assert err.value.field == "vendors"


def test_every_error_here_is_a_whichgpu_error_with_exit_code_2() -> None:
    for cls in (CatalogError, InputError, PricesError):
        assert issubclass(cls, WhichGPUError) and cls.exit_code == 2
