"""The cost model: plain numbers in, dollars, hours and kilowatt-hours out.

Buying n cards, used H hours a month for Y years, electricity at X USD/kWh, each card drawing W
watts while it works (its TDP, or the power limit when one is set):

    purchase per hour of use    = n * price / (12 * Y * H)
    electricity per hour of use = n * W / 1000 * X
    cost per hour of use        = the sum of the two

Renting: cost per hour = n * the cloud price per GPU-hour (electricity included).

Buy-versus-rent break-even: the hours of use after which the cards cost less than renting the
same cards, price + h * W/1000 * X = h * rate, so

    h = price / (rate - W/1000 * X)          (never, when renting costs less than the electricity)

per card (n cancels). Assumptions, echoed in every report: the card draws W only while working
(idle power, the host machine, its power supply and resale value are not counted); the cloud rate
is per GPU with the host included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from whichgpu.errors import InputError

HOURS_PER_MONTH = 730.0  # 8760 / 12


@dataclass(frozen=True)
class CostModel:
    """How the cards are paid for."""

    mode: str = "buy"  # buy | rent
    hours_per_month: float = 200.0
    years: float = 3.0
    usd_per_kwh: float = 0.20

    def validate(self) -> None:
        if self.mode not in ("buy", "rent"):
            raise InputError(f"cost mode must be buy or rent, got {self.mode!r}", field="cost.mode")
        if not 0 < self.hours_per_month <= HOURS_PER_MONTH or math.isnan(self.hours_per_month):
            raise InputError(f"hours of use a month must be in (0, {HOURS_PER_MONTH:g}] (a month has "
                             f"{HOURS_PER_MONTH:g} hours), got {self.hours_per_month:g}", field="cost.hours_per_month")
        if not self.years > 0 or math.isinf(self.years):
            raise InputError(f"the years a purchase is amortised over must be > 0, got {self.years:g}",
                             field="cost.years")
        if not self.usd_per_kwh >= 0 or math.isinf(self.usd_per_kwh):
            raise InputError(f"the electricity price must be >= 0 USD/kWh, got {self.usd_per_kwh:g}",
                             field="cost.usd_per_kwh")

    @property
    def utilisation(self) -> float:
        return self.hours_per_month / HOURS_PER_MONTH

    def describe(self) -> str:
        if self.mode == "rent":
            return "rent: cloud price per GPU-hour x GPUs (electricity included)"
        return (f"buy: purchase amortised over {self.years:g} years at {self.hours_per_month:g} h/month "
                f"({100 * self.utilisation:.0f}% utilisation) + electricity at TDP (or the power limit) x "
                f"${self.usd_per_kwh:g}/kWh while working; host, idle power and resale not counted")


def electricity_usd_per_hour(gpus: int, watts: float, usd_per_kwh: float) -> float:
    return gpus * watts / 1000.0 * usd_per_kwh


def buy_usd_per_hour(card_usd: float, gpus: int, watts: float | None, m: CostModel) -> float:
    """Purchase amortised over the hours of use plus electricity (0 when the power is unknown)."""
    amortised = gpus * card_usd / (12.0 * m.years * m.hours_per_month)
    return amortised + electricity_usd_per_hour(gpus, watts or 0.0, m.usd_per_kwh)


def rent_usd_per_hour(rate: float, gpus: int) -> float:
    return gpus * rate


def break_even_hours(card_usd: float, rate: float, watts: float | None, usd_per_kwh: float) -> float | None:
    """Hours of use after which buying costs less than renting; None: never (the rent is below
    the electricity alone)."""
    margin = rate - (watts or 0.0) / 1000.0 * usd_per_kwh
    if margin <= 0:
        return None
    return card_usd / margin


def job_hours(work: float, per_second: float) -> float:
    """Hours to do `work` units at `per_second` units/s."""
    return math.inf if per_second <= 0 else work / per_second / 3600.0


def energy_kwh(gpus: int, watts: float, hours: float) -> float:
    return gpus * watts * hours / 1000.0
