"""The web API's answers: each the command's own run function and JSON document (commands/*.py,
report/*.py), so the browser sees what `whichgpu COMMAND --json` prints, with two keys added:
``answer`` ("yes", or "no" where the command exits 1) and ``reason`` (why "no", else null).

Functions here block (a first capture can take seconds); web/app.py runs them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from whichgpu.errors import InputError
from whichgpu.web import params as P
from whichgpu.web.uploads import resolve_model

DEFAULT_COMPARE_GPUS = "h100-sxm5-80gb,a100-sxm4-80gb,rtx-4090"


def _answered(schema: str, body: dict[str, Any], no: str | None) -> dict[str, Any]:
    return {"schema": schema, **body, "answer": "no" if no else "yes", "reason": no}


def _kwargs(raw: Mapping[str, object], table: Mapping[str, P.Param], need_model: bool = True) -> dict[str, Any]:
    kw = P.parse(raw, table)
    if "spec_draft_model" in kw:  # a model too: a zoo name or an upload, never a path
        kw["spec_draft_model"] = resolve_model(kw["spec_draft_model"])
    if "model" in kw:
        kw["model"] = resolve_model(kw["model"])
    elif need_model:
        raise InputError("give a model: a zoo name (GET /api/models) or an uploaded config.json (POST /api/config)")
    return kw


def gpus(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.gpus/1: the catalog."""
    from whichgpu.commands.common import get_catalog
    from whichgpu.commands.gpus import gpus_body

    P.parse(raw, {})
    cat = get_catalog(None)
    return {"schema": "whichgpu.gpus/1", **gpus_body(list(cat), cat)}


def models(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.models/1: the zoo."""
    from whichgpu.commands.models import models_body

    P.parse(raw, {})
    return {"schema": "whichgpu.models/1", **models_body()}


def recommend(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.recommend/1: a model's (or a use case's) ranking of every GPU x count."""
    from whichgpu.commands.recommend import recommend_no_answer, recommend_run
    from whichgpu.recommend import SCHEMA
    from whichgpu.report.recommend import recommend_document

    rec, traced = recommend_run(**_kwargs(raw, P.RECOMMEND, need_model=False))
    return _answered(SCHEMA, recommend_document(rec, traced), recommend_no_answer(rec))


def compare(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.estimate/1 on several GPUs (default three), each result with its memory breakdown
    and the roofline it is drawn against (the peak of its matmul dtype and the memory bandwidth)."""
    from whichgpu.commands.estimate import estimate_run
    from whichgpu.report.estimate import estimate_document

    kw = _kwargs(raw, P.COMPARE)
    kw.setdefault("gpu", DEFAULT_COMPARE_GPUS)
    results = estimate_run(**kw)
    doc = estimate_document(results, explain=True)
    for d, r in zip(doc["results"], results):
        d["memory_breakdown"] = r.memory.to_dict()["breakdown"] if r.memory is not None else None
        d["roofline"] = {"peak_tflops": r.gpu.peak(d["mfu_peak_dtype"]),
                         "memory_bandwidth_gbps": r.gpu.memory_bandwidth_gbps}
    return _answered("whichgpu.estimate/1", doc, None)


def fit(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.memory/1: fits or not, the breakdown, the largest batch, what would make it fit."""
    from whichgpu.commands.fit import fit_no_answer, fit_run
    from whichgpu.report.memory import fit_document

    kw = _kwargs(raw, P.FIT)
    report = fit_run(**kw)
    lora = kw.get("lora_rank", 16) if kw.get("finetune", "full") != "full" else None
    return _answered("whichgpu.memory/1", fit_document(report, lora), fit_no_answer(report))


def plan(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.plan/1 with ``gantt_svg``: the best layout's pipeline schedule ("" without stages)."""
    from whichgpu.commands.plan import plan_body, plan_gantt, plan_no_answer, plan_run

    run = plan_run(**_kwargs(raw, P.PLAN))
    body = plan_body(run)
    body["gantt_svg"] = plan_gantt(run.res, run.ctx)
    return _answered("whichgpu.plan/1", body, plan_no_answer(run))


def serve(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.serve/1 with ``sweep``: latency and throughput at 1/8 ... 8/8 of the saturation rate
    (the HTML report's curve)."""
    from whichgpu.commands.serve import serve_no_answer, serve_run
    from whichgpu.report.serve import _at_rate_doc, serve_document

    rep = serve_run(**_kwargs(raw, P.SERVE), sweep=True)
    body = serve_document(rep)
    body["sweep"] = [{"rate_per_s_per_replica": rate, **_at_rate_doc(rep, rate, r)} for rate, r in rep.sweep or []]
    return _answered("whichgpu.serve/1", body, serve_no_answer(rep))


def recommend_serving(raw: Mapping[str, object]) -> dict[str, Any]:
    """whichgpu.recommend-serving/1 (`recommend --rate R --slo-...`) with ``out_by_kind`` (the
    configurations out, counted by reason kind, as the console lists them) and ``validated_on``
    (the GPUs the serving model is validated on; the rows' ``validated_gpu`` says which are)."""
    from collections import Counter

    from whichgpu.commands.recommend import recommend_serving_run
    from whichgpu.recommend.serving import serving_body
    from whichgpu.report.recommend_serving import KINDS, SCHEMA, VALIDATED_NAMES, no_answer

    rec = recommend_serving_run(**_kwargs(raw, P.RECOMMEND_SERVING, need_model=False))
    body = serving_body(rec)
    body["out_by_kind"] = [{"kind": kind, "label": KINDS.get(kind, kind), "count": n}
                           for kind, n in Counter(o.kind for o in rec.others).most_common()]
    body["validated_on"] = sorted(VALIDATED_NAMES)
    return _answered(SCHEMA, body, no_answer(rec))


ENDPOINTS = {"gpus": gpus, "models": models, "recommend": recommend, "compare": compare, "fit": fit,
             "plan": plan, "serve": serve, "recommend-serving": recommend_serving}
SCHEMAS = {"gpus": "whichgpu.gpus/1", "models": "whichgpu.models/1", "recommend": "whichgpu.recommend/1",
           "compare": "whichgpu.estimate/1", "fit": "whichgpu.memory/1", "plan": "whichgpu.plan/1",
           "serve": "whichgpu.serve/1", "recommend-serving": "whichgpu.recommend-serving/1"}
