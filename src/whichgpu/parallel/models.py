"""The decoder a planner question is about, without torch: a zoo LLM (its packaged config.json)
or a Hugging Face config.json on disk, read into DecoderArgs."""

from __future__ import annotations

import json
from pathlib import Path

from whichgpu.errors import InputError
from whichgpu.workload.zoo.llm.args import DecoderArgs, args_from_config

CONFIGS = Path(__file__).resolve().parent.parent / "workload" / "configs"


def planner_model(name: str) -> tuple[str, DecoderArgs, int | None]:
    """(model id, its decoder facts, its default sequence length) for a zoo name or a config path."""
    from whichgpu.errors import CaptureError
    from whichgpu.workload.zoo import all_entries, get_entry, is_zoo_name

    if name.endswith(".json") or Path(name).is_file():
        path = Path(name)
        if not path.is_file():
            raise InputError(f"model config {name!r} does not exist", field="model")
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"model config {name!r} is not readable JSON: {e}", field="model") from e
        try:
            return path.stem, args_from_config(cfg, str(path)), None
        except CaptureError as e:
            raise InputError(f"the planner models decoder-only LLMs: {e}", field="model") from e
    if not is_zoo_name(name):
        llms = sorted(e.id for e in all_entries().values() if e.config and (CONFIGS / f"{e.config}.json").is_file())
        raise InputError(f"unknown model {name!r}: the planner takes a decoder LLM of the zoo ({', '.join(llms[:12])}, "
                         "... see `whichgpu models`) or a path to a config.json", field="model")
    entry = get_entry(name)
    cfg_path = CONFIGS / f"{entry.config}.json" if entry.config else None
    if cfg_path is None or not cfg_path.is_file():
        raise InputError(f"{entry.id} is not a decoder LLM with a packaged config: the planner lays out decoder-only "
                         "transformers (see `whichgpu models`)", field="model")
    try:
        a = args_from_config(json.loads(cfg_path.read_text()), str(cfg_path))
    except CaptureError as e:
        raise InputError(f"{entry.id}: the planner models decoder-only LLMs: {e}", field="model") from e
    return entry.id, a, entry.default_seq_len


def refuse_serving_only(model_id: str, a: DecoderArgs, what: str) -> None:
    """InputError where `what` (a part that lays out or builds every layer as plain attention)
    meets what only the serving model models (`DecoderArgs.serving_only`), instead of a silent
    wrong number."""
    if a.serving_only:
        raise InputError(f"{model_id} has {a.serving_only}, which {what} does not model yet; "
                         "`whichgpu serve` and `whichgpu recommend MODEL --rate` do", field="model")
