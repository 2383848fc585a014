"""Prices: the catalog's dated, sourced figures, a user's prices file and ``--price`` overrides.

Buying uses, in order: a user price, the catalog's street price (new or used, dated), the launch
MSRP (dated by the card's launch year). Renting uses a user price or the catalog's cloud price per
GPU-hour. A price older than a year is *stale* and flagged in every output.

A prices file is TOML or CSV (docs/presets.md, "Prices"):

    # prices.toml: one table per GPU (any name the catalog knows)
    ["RTX 4090"]
    buy_usd = 1650
    rent_usd_per_hour = 0.69
    date = "2026-11-01"          # optional, YYYY-MM or YYYY-MM-DD
    source = "local shop quote"  # optional

    # prices.csv: a header row, then one GPU per row (empty cells = not given)
    gpu,buy_usd,rent_usd_per_hour,date,source
    RTX 4090,1650,0.69,2026-11-01,local shop quote

``--price NAME=USD`` sets a purchase price per card; ``--price NAME=USD/h`` a rental price per
GPU-hour. Later sources override earlier ones: catalog < prices file < --price.
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import math
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import Catalog
from whichgpu.hardware.spec import GpuSpec

STALE_DAYS = 365
# Plausible prices (as the catalog's [price] fields): a larger one is a typo or an overflow
# (1e308 would make every cost infinite).
MAX_BUY_USD = 10_000_000.0
MAX_RENT_USD_PER_HOUR = 10_000.0
FILE_FIELDS = ("gpu", "buy_usd", "rent_usd_per_hour", "date", "source")
_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")
_PRICE_ARG = re.compile(r"^(?P<name>.+?)=\s*\$?(?P<usd>[0-9][0-9_,]*(?:\.[0-9]*)?)\s*(?P<hourly>/\s*h(?:ou)?r?)?\s*$")


class PricesError(InputError):
    """A malformed prices file or --price argument."""


@dataclass(frozen=True)
class Quote:
    """One price with where it comes from. ``usd`` None: unknown."""

    usd: float | None
    kind: str = ""  # "street" | "msrp" | "cloud" | "user"
    date: str = ""  # YYYY, YYYY-MM or YYYY-MM-DD
    source: str = ""
    stale: bool = False

    @property
    def known(self) -> bool:
        return self.usd is not None

    def to_dict(self) -> dict[str, Any]:
        return {"usd": self.usd, "kind": self.kind, "date": self.date, "source": self.source, "stale": self.stale}


@dataclass(frozen=True)
class UserPrice:
    """A user's prices for one GPU (a prices file, --price); over the catalog's, field by field."""

    buy_usd: float | None = None
    """Purchase price per card, USD; None: not given."""
    rent_usd_per_hour: float | None = None
    """Rental price per GPU-hour, USD; None: not given."""
    date: str = ""
    """YYYY-MM or YYYY-MM-DD; undated: taken as current."""
    source: str = ""


@dataclass(frozen=True)
class GpuPrices:
    """What one GPU costs to buy (per card) and to rent (per GPU-hour)."""

    buy: Quote
    rent: Quote


def last_day(date: str) -> dt.date | None:
    """The latest day a YYYY / YYYY-MM / YYYY-MM-DD date can mean (a price is stale only when
    it is certainly older than a year)."""
    if re.fullmatch(r"\d{4}", date):
        return dt.date(int(date), 12, 31)
    m = _DATE.match(date)
    if not m:
        return None
    y, mo = int(m.group(1)), int(m.group(2))
    if not 1 <= mo <= 12:
        return None
    d = int(m.group(3)) if m.group(3) else calendar.monthrange(y, mo)[1]
    try:
        return dt.date(y, mo, d)
    except ValueError:
        return None


def is_stale(date: str, today: dt.date) -> bool:
    """Older than a year; an undated price is stale."""
    d = last_day(date)
    return d is None or (today - d).days > STALE_DAYS


def catalog_prices(gpu: GpuSpec, today: dt.date) -> GpuPrices:
    p = gpu.price
    if p.street_usd is not None:
        buy = Quote(p.street_usd, "street", p.street_date, p.street_source, is_stale(p.street_date, today))
    elif p.launch_msrp_usd is not None:
        year = str(gpu.year)
        buy = Quote(p.launch_msrp_usd, "msrp", year, p.launch_source or "launch MSRP", is_stale(year, today))
    else:
        buy = Quote(None)
    if p.cloud_usd_per_hour is not None:
        src = f"{p.cloud_provider}: {p.cloud_source}" if p.cloud_provider else p.cloud_source
        rent = Quote(p.cloud_usd_per_hour, "cloud", p.cloud_date, src, is_stale(p.cloud_date, today))
    else:
        rent = Quote(None)
    return GpuPrices(buy, rent)


def resolve_prices(gpu: GpuSpec, user: dict[str, UserPrice], today: dt.date) -> GpuPrices:
    """The catalog's prices with the user's on top."""
    base = catalog_prices(gpu, today)
    u = user.get(gpu.id)
    if u is None:
        return base
    src = u.source or "user price"
    stale = bool(u.date) and is_stale(u.date, today)  # an undated user price is taken as current
    buy = Quote(u.buy_usd, "user", u.date, src, stale) if u.buy_usd is not None else base.buy
    rent = Quote(u.rent_usd_per_hour, "user", u.date, src, stale) if u.rent_usd_per_hour is not None else base.rent
    return GpuPrices(buy, rent)


# ---- user input -----------------------------------------------------------------------------

def _number(where: str, field: str, value: Any, hourly: bool = False) -> float | None:
    """A price in USD (per GPU-hour when `hourly`), None when not given; > 0 and plausible."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise PricesError(f"{where}: {field} must be a number of US dollars, got {value!r}")
    if not isinstance(value, (str, int, float)):
        raise PricesError(f"{where}: {field} must be a number of US dollars, got {value!r}")
    try:
        x = float(str(value).replace(",", "").replace("_", "").lstrip("$")) if isinstance(value, str) else float(value)
    except ValueError:
        raise PricesError(f"{where}: {field} must be a number of US dollars, got {value!r}") from None
    except OverflowError:  # an integer past the largest float
        x = math.inf
    hi = MAX_RENT_USD_PER_HOUR if hourly else MAX_BUY_USD
    if not 0 < x <= hi:  # NaN fails too
        shown = f"{x:g}" if isinstance(value, int) and abs(value) >= 10**18 else repr(value)
        raise PricesError(f"{where}: {field} must be > 0 and at most {hi:,.0f} USD{' per GPU-hour' if hourly else ''}"
                          f", got {shown}")
    return x


def _entry(where: str, catalog: Catalog, name: str, row: dict[str, Any]) -> tuple[str, UserPrice]:
    unknown = sorted(set(row) - set(FILE_FIELDS))
    if unknown:
        raise PricesError(f"{where}: unknown field {unknown[0]!r}; valid: " + ", ".join(FILE_FIELDS))
    try:
        gid = catalog.get(name).id
    except WhichGPUError as e:
        raise PricesError(f"{where}: {e}") from None
    buy = _number(where, "buy_usd", row.get("buy_usd"))
    rent = _number(where, "rent_usd_per_hour", row.get("rent_usd_per_hour"), hourly=True)
    if buy is None and rent is None:
        raise PricesError(f"{where}: give buy_usd (USD per card) and/or rent_usd_per_hour (USD per GPU-hour)")
    date = str(row.get("date") or "").strip()
    if date and last_day(date) is None:
        raise PricesError(f"{where}: date must be YYYY-MM or YYYY-MM-DD, got {date!r}")
    return gid, UserPrice(buy, rent, date, str(row.get("source") or "").strip())


def load_prices_file(path: str, catalog: Catalog) -> dict[str, UserPrice]:
    """Read a TOML or CSV prices file (format in the module docstring)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".csv"):
        raise PricesError(f"{path}: a prices file must be .toml or .csv (see docs/presets.md, 'Prices')")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PricesError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                          "a prices file must be UTF-8: save it as UTF-8") from None
    except OSError as e:
        raise PricesError(f"{path}: cannot read ({e.strerror})") from None
    out: dict[str, UserPrice] = {}
    if suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except ValueError as e:  # TOMLDecodeError, or an integer of more than 4300 digits
            raise PricesError(f"{path}: not valid TOML ({e})") from None
        for name, row in raw.items():
            if not isinstance(row, dict):
                raise PricesError(f"{path}: {name!r} must be a table [\"{name}\"] with buy_usd and/or "
                                  "rent_usd_per_hour")
            if "gpu" in row:
                raise PricesError(f"{path}: [{name}]: the table name is the GPU; remove the 'gpu' field")
            gid, up = _entry(f"{path}: [{name}]", catalog, name, row)
            out[gid] = up
    else:
        try:
            rows = list(csv.DictReader(text.splitlines()))
            header = next(csv.reader(text.splitlines()), [])
        except csv.Error as e:
            raise PricesError(f"{path}: malformed CSV ({e})") from None
        if not header or "gpu" not in [h.strip() for h in header]:
            raise PricesError(f"{path}: the first row must be a header with a 'gpu' column; valid columns: "
                              + ", ".join(FILE_FIELDS))
        for i, row in enumerate(rows, start=2):
            clean = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
            if None in row:
                raise PricesError(f"{path}: line {i}: more cells than header columns")
            name = clean.pop("gpu", "")
            if not name:
                raise PricesError(f"{path}: line {i}: the gpu cell is empty")
            gid, up = _entry(f"{path}: line {i}", catalog, name, clean)
            out[gid] = up
    if not out:
        raise PricesError(f"{path}: no prices found")
    return out


def parse_price_args(args: list[str], catalog: Catalog) -> dict[str, UserPrice]:
    """``NAME=USD`` (per card) or ``NAME=USD/h`` (per GPU-hour), repeatable."""
    out: dict[str, UserPrice] = {}
    for a in args:
        m = _PRICE_ARG.match(a.strip())
        if not m:
            raise PricesError(f"--price {a!r}: expected NAME=USD (per card) or NAME=USD/h (per GPU-hour), "
                              "e.g. --price 'RTX 4090=1650' or --price h100=2.49/h")
        usd = _number(f"--price {a!r}", "the price", m.group("usd"), hourly=bool(m.group("hourly")))
        try:
            gid = catalog.get(m.group("name").strip()).id
        except WhichGPUError as e:
            raise PricesError(f"--price {a!r}: {e}") from None
        prev = out.get(gid, UserPrice(source="--price"))
        out[gid] = replace(prev, rent_usd_per_hour=usd) if m.group("hourly") else replace(prev, buy_usd=usd)
    return out


def merge(*layers: dict[str, UserPrice]) -> dict[str, UserPrice]:
    """Later layers override earlier ones field by field."""
    out: dict[str, UserPrice] = {}
    for layer in layers:
        for gid, up in layer.items():
            prev = out.get(gid)
            if prev is None:
                out[gid] = up
                continue
            out[gid] = UserPrice(up.buy_usd if up.buy_usd is not None else prev.buy_usd,
                                 up.rent_usd_per_hour if up.rent_usd_per_hour is not None else prev.rent_usd_per_hour,
                                 up.date or prev.date, up.source or prev.source)
    return out
