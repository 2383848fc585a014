"""The serving recommendation (`recommend --rate R --slo-...`) on the console."""

from __future__ import annotations

from collections import Counter

from whichgpu.measure.serving_validate import validated_gpus
from whichgpu.recommend.serving import ServingOption, ServingRecommendation
from whichgpu.report.console import compact_table, console, say

SCHEMA = "whichgpu.recommend-serving/1"
VALIDATED = validated_gpus()
"""The GPUs the serving dev rows measure, by catalog id (measure/serving_validate.py)."""
VALIDATED_NAMES = set(VALIDATED.values())
KINDS = {"price": "no price for the cost mode", "fit": "do not fit (weights or KV cache)",
         "slo": "miss the targets at any rate", "max-gpus": "need more GPUs than --max-gpus",
         "pruned": "cannot beat the top (bound), not searched", "engine": "do not run the engine"}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def _layout(o: ServingOption) -> str:
    reps = f"{o.replicas} x " if o.replicas and o.replicas > 1 else ""
    return f"{reps}{o.layout} {o.gpu.name}"


def no_answer(rec: ServingRecommendation) -> str | None:
    """Why no configuration serves the rate within the targets (exit 1); else None."""
    if rec.ranked:
        return None
    a = rec.ask
    return (f"no GPU x TP configuration serves {a.rate_per_s:g} requests/s of {a.model} within the targets on at most "
            f"{a.max_gpus} GPUs (see the reasons listed; raise --max-gpus, relax the SLOs or lower the rate)")


def print_serving_recommendation(rec: ServingRecommendation) -> None:
    a = rec.ask
    p = f"P{a.percentile}"
    targets = " and ".join(t for t in (f"TTFT {p} <= {a.slo_ttft_ms:g} ms" if a.slo_ttft_ms is not None else "",
                                        f"TPOT {p} <= {a.slo_tpot_ms:g} ms" if a.slo_tpot_ms is not None else "") if t)
    say(f"serving {a.model} at {a.rate_per_s:g} requests/s ({a.input_len} prompt + {a.output_len} answer tokens) "
        f"with {targets}: cheapest per million output tokens, {a.cost.mode}", wrap=True)
    if rec.ranked:
        t = compact_table(f"top {len(rec.ranked)} that meet the targets")
        for col in ("#", "GPUs", "layout", "max req/s per replica", f"TTFT {p} ms", f"TPOT {p} ms", "$/hour",
                    "$/M output tokens"):
            t.add_column(col, justify="left" if col in ("layout",) else "right")
        for i, o in enumerate(rec.ranked, 1):
            per_m = o.usd_per_million_tokens(a)
            hour = o.usd_per_hour()
            t.add_row(str(i), str(o.gpus), _layout(o),
                      f"{o.max_rate_per_replica:.2f}" + (" (saturation)" if o.capped else "") if o.max_rate_per_replica else "-",
                      _ms(o.ttft_ms), _ms(o.tpot_ms), "-" if hour is None else f"{hour:,.2f}",
                      "-" if per_m is None else f"{per_m:,.3f}")
        console.print(t)
        best = rec.ranked[0]
        say(f"price of #1: {best.price_source}", wrap=True)
        outside = sorted({o.gpu.name for o in rec.ranked if o.gpu.id not in VALIDATED})
        if outside:
            say(f"note: serving is validated on {', '.join(sorted(VALIDATED_NAMES))} (`whichgpu validate-serve`); "
                f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} predicted outside that ground", wrap=True)
    if rec.more:
        say(f"{len(rec.more)} more configurations meet the targets at a higher cost (--top, or --json lists them)")
    if rec.others:
        say(f"{len(rec.others)} configurations are out:")
        by = Counter(o.kind for o in rec.others)
        for kind, n in by.most_common():
            example = next(o for o in rec.others if o.kind == kind)
            say(f"  {n} x {KINDS.get(kind, kind)} (e.g. {example.layout} {example.gpu.name}: {example.reason})", wrap=True)
    say("assumptions: " + "; ".join(f"{k}: {v}" for k, v in rec.assumptions.items()), wrap=True)
