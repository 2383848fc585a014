"""Prices (catalog, files, --price), staleness and the cost model's arithmetic."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.recommend.cost import (
    CostModel,
    break_even_hours,
    buy_usd_per_hour,
    energy_kwh,
    job_hours,
    rent_usd_per_hour,
)
from whichgpu.recommend.prices import (
    PricesError,
    UserPrice,
    catalog_prices,
    is_stale,
    load_prices_file,
    merge,
    parse_price_args,
    resolve_prices,
)

CAT = load_catalog()
TODAY = dt.date(2026, 11, 22)


# ---- cost model -------------------------------------------------------------------------------

def test_buy_cost_per_hour_of_use() -> None:
    m = CostModel("buy", hours_per_month=200, years=3, usd_per_kwh=0.20)
    # 2 cards x $1600 over 3 x 12 x 200 = 7200 h: $0.4444/h; electricity 2 x 0.45 kW x $0.20 = $0.18/h
    assert buy_usd_per_hour(1600, 2, 450, m) == pytest.approx(3200 / 7200 + 0.18)
    assert buy_usd_per_hour(1600, 1, None, m) == pytest.approx(1600 / 7200)  # power unknown: no electricity
    assert rent_usd_per_hour(0.74, 4) == pytest.approx(2.96)


def test_break_even_hours() -> None:
    # $1600 card vs $0.80/h: each hour of use saves 0.80 - 0.45 kW x $0.20 = $0.71 -> 2253.5 h
    assert break_even_hours(1600, 0.80, 450, 0.20) == pytest.approx(2253.52, rel=1e-5)
    assert break_even_hours(1600, 0.80, None, 0.20) == pytest.approx(2000)
    # renting for less than the electricity: buying never pays off
    assert break_even_hours(1600, 0.05, 450, 0.20) is None


def test_job_arithmetic() -> None:
    assert job_hours(3.6e6, 1000) == pytest.approx(1.0)
    assert job_hours(1, 0) == float("inf")
    assert energy_kwh(4, 700, 2.0) == pytest.approx(5.6)


@pytest.mark.parametrize("bad", [CostModel(mode="lease"), CostModel(hours_per_month=0), CostModel(years=0),
                                 CostModel(usd_per_kwh=-0.1), CostModel(hours_per_month=731)])
def test_cost_model_validation(bad: CostModel) -> None:
    with pytest.raises(InputError, match=r"must|mode"):
        bad.validate()


# ---- catalog prices and staleness ----------------------------------------------------------------

def test_staleness_is_older_than_a_year_certainly() -> None:
    assert is_stale("2023-10", TODAY)
    assert not is_stale("2025-11", TODAY)  # may be 2025-11-30: within a year
    assert is_stale("2025-10", TODAY)
    assert not is_stale("2026-09-25", TODAY)
    assert is_stale("", TODAY) and is_stale("soon", TODAY)


def test_catalog_prices_fall_back_to_msrp_and_carry_dates() -> None:
    p = catalog_prices(CAT.get("rtx-4090"), TODAY)
    assert p.buy.kind == "street" and p.buy.usd == 1704 and p.buy.date == "2023-10" and p.buy.stale
    assert p.rent.kind == "cloud" and p.rent.usd == pytest.approx(0.74) and not p.rent.stale
    t4 = catalog_prices(CAT.get("t4"), TODAY)
    assert t4.buy.kind == "street"
    no_price = catalog_prices(CAT.get("gh200"), TODAY)
    assert no_price.buy.usd is None and no_price.rent.usd is None


def test_user_prices_override() -> None:
    g = CAT.get("rtx-4090")
    p = resolve_prices(g, {"rtx-4090": UserPrice(buy_usd=1500, source="shop")}, TODAY)
    assert p.buy.usd == 1500 and p.buy.kind == "user" and not p.buy.stale
    assert p.rent.kind == "cloud"  # not overridden


# ---- --price and prices files --------------------------------------------------------------------

def test_price_args() -> None:
    got = parse_price_args(["RTX 4090=1,650", "h100 sxm=2.49/h", "rtx-4090=0.69/hr"], CAT)
    assert got["rtx-4090"] == UserPrice(buy_usd=1650, rent_usd_per_hour=0.69, source="--price")
    assert got["h100-sxm5-80gb"].rent_usd_per_hour == pytest.approx(2.49)


@pytest.mark.parametrize(("arg", "message"), [
    ("rtx-4090", "expected NAME=USD"),
    ("rtx-4090=-5", "expected NAME=USD"),
    ("rtx-4090=0", "must be > 0"),
    ("rtx-9999=100", "unknown GPU"),
])
def test_bad_price_args(arg: str, message: str) -> None:
    with pytest.raises(PricesError, match=message) as e:
        parse_price_args([arg], CAT)
    assert "\n" not in str(e.value)


def test_prices_files_toml_and_csv(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text('["RTX 4090"]\nbuy_usd = 1650\nrent_usd_per_hour = 0.69\ndate = "2026-11-01"\nsource = "shop"\n'
                    '[t4]\nrent_usd_per_hour = 0.35\n')
    got = load_prices_file(str(toml), CAT)
    assert got["rtx-4090"] == UserPrice(1650, 0.69, "2026-11-01", "shop")
    assert got["t4"].rent_usd_per_hour == pytest.approx(0.35) and got["t4"].buy_usd is None
    csv = tmp_path / "p.csv"
    csv.write_text("gpu,buy_usd,rent_usd_per_hour,date,source\nRTX 4090,1600,,2026-11,quote\nA100 SXM4 80GB,,1.2,,\n")
    got2 = load_prices_file(str(csv), CAT)
    assert got2["rtx-4090"].buy_usd == 1600 and got2["a100-sxm4-80gb"].rent_usd_per_hour == pytest.approx(1.2)
    both = merge(got, got2, parse_price_args(["rtx-4090=1400"], CAT))
    assert both["rtx-4090"].buy_usd == 1400 and both["rtx-4090"].rent_usd_per_hour == pytest.approx(0.69)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("p.csv", "gpu,buy_usd\nRTX 9999,100\n", "line 2: unknown GPU 'RTX 9999'"),
    ("p.csv", "gpu,buy_usd\nRTX 4090,cheap\n", "buy_usd must be a number"),
    ("p.csv", "gpu,buy_usd\nRTX 4090,-3\n", "buy_usd must be > 0"),
    ("p.csv", "gpu,buy_usd,colour\nRTX 4090,3,red\n", "unknown field 'colour'; valid: gpu, buy_usd"),
    ("p.csv", "name,price\nRTX 4090,3\n", "header with a 'gpu' column"),
    ("p.csv", "gpu,buy_usd\nRTX 4090,,\n", "more cells than header columns"),
    ("p.csv", "gpu,buy_usd\nRTX 4090,\n", "give buy_usd"),
    ("p.csv", "gpu,buy_usd,date\nRTX 4090,5,last week\n", "date must be YYYY-MM"),
    ("p.csv", "", "header with a 'gpu' column"),
    ("p.toml", "[rtx-4090\nbuy_usd = 1", "not valid TOML"),
    ("p.toml", "rtx-4090 = 1500\n", "must be a table"),
    ("p.toml", "", "no prices found"),
    ("p.json", "{}", "must be .toml or .csv"),
])
def test_bad_prices_files_are_one_line_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(PricesError, match=message) as e:
        load_prices_file(str(f), CAT)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


def test_missing_prices_file(tmp_path: Path) -> None:
    with pytest.raises(PricesError, match="cannot read"):
        load_prices_file(str(tmp_path / "nope.csv"), CAT)
