"""How far `serve`'s latencies have been from published measurements of the same GPU and engine.

The figures are data (serving/accuracy.toml), written by scripts/serve_accuracy.py from a
`whichgpu validate-serve` run over the serving dev rows: for every (GPU, engine) group with at
least ``MIN_ROWS`` scored rows, and for each engine and all rows together, the 10th, 50th and
90th percentiles of measured / predicted mean TTFT and TPOT. `serve` reports the group of its own
GPU and engine, or says it has none and gives the coarser one, so a user reads "measured TTFT was
0.9-2.3x this" next to the number instead of trusting it blindly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import tomllib

ACCURACY_FILE = Path(__file__).with_name("accuracy.toml")
MIN_ROWS = 8
ANY = "*"


@dataclass(frozen=True)
class Spread:
    """Measured / predicted: 10th, 50th and 90th percentile over the group's rows."""

    p10: float
    p50: float
    p90: float

    def to_dict(self) -> dict[str, float]:
        return {"p10": self.p10, "p50": self.p50, "p90": self.p90}

    def text(self) -> str:
        return f"{self.p10:.2f}-{self.p90:.2f}x (median {self.p50:.2f}x)"


@dataclass(frozen=True)
class Accuracy:
    gpu: str  # catalog id, or "*"
    engine: str  # engine id, or "*"
    rows: int
    ttft: Spread
    tpot: Spread
    exact: bool  # the group of the report's own GPU and engine (not a fallback)

    def scope(self, gpu_name: str) -> str:
        if self.gpu != ANY:
            return f"{self.engine} on {gpu_name}"
        return f"{self.engine} on all validated GPUs" if self.engine != ANY else "all engines and GPUs"

    def to_dict(self, gpu_name: str) -> dict[str, Any]:
        return {"scope": self.scope(gpu_name), "gpu": self.gpu, "engine": self.engine, "rows": self.rows,
                "exact": self.exact, "source": load()["meta"].get("source", ""),
                "ttft_measured_over_predicted": self.ttft.to_dict(),
                "tpot_measured_over_predicted": self.tpot.to_dict()}

    def text(self, gpu_name: str) -> str:
        head = "" if self.exact else f"not validated for {gpu_name} with this engine; "
        return (f"{head}on {self.rows} published runs of {self.scope(gpu_name)} (serving_dev.csv), measured mean "
                f"TTFT was {self.ttft.text()} the prediction and TPOT {self.tpot.text()} (p10-p90)")


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    with ACCURACY_FILE.open("rb") as f:
        doc: dict[str, Any] = tomllib.load(f)
    return doc


def lookup(gpu: str, engine: str) -> Accuracy | None:
    """The narrowest group holding `gpu` and `engine`: the pair, the engine on all GPUs, all rows."""
    groups = {(g["gpu"], g["engine"]): g for g in load().get("group", [])}
    for key in ((gpu, engine), (ANY, engine), (ANY, ANY)):
        g = groups.get(key)
        if g is not None:
            return Accuracy(g["gpu"], g["engine"], int(g["rows"]), Spread(*g["ttft"]), Spread(*g["tpot"]),
                            key == (gpu, engine))
    return None
