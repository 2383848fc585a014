"""DeepSeek sparse attention (GLM-5; DeepSeek-V3.2's DSA): MLA over the index_topk keys a lightning
indexer picks, the indexer scoring every earlier key. The config's facts, the capped attention pairs
and decode reads (and their closed forms against counting), the KV cache with the indexer's keys,
SGLang's FP8 cache on Blackwell, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.parallel.models import planner_model
from whichgpu.serving.batch import StepBatch
from whichgpu.serving.model import Setup, build
from whichgpu.serving.spec import SpecDecode
from whichgpu.serving.step import capped_sums, sparse_pairs


def _setup(gpu: str, engine: str = "sglang", **kw) -> Setup:  # type: ignore[no-untyped-def]
    ids = {"b200": ("b200", "hgx-b200"), "h200": ("h200-sxm-141gb", "dgx-h200")}[gpu]
    return Setup("glm-5", load_catalog().get(ids[0]), load_systems().get(ids[1]), tp=8, precision="fp8",
                 engine=engine, **kw)


def test_glm5_facts() -> None:
    a = planner_model("zhipuai/GLM-5")[1]
    assert a.mla and a.dsa and (a.index_heads, a.index_dim, a.index_topk) == (32, 128, 2048)
    # the indexer: q from the 2,048-wide query latent (32 x 128), k (128) with its LayerNorm, head weights (32)
    assert a.indexer_params() == 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32 == 9_371_904
    assert a.params()[0] == 743_911_199_232  # transformers' GlmMoeDsaForCausalLM on the meta device
    assert "sparse attention" in a.serving_only


def test_a_deepseek_v32_config_reads_as_deepseek_v3_with_the_indexer() -> None:
    import json

    from whichgpu.parallel.models import CONFIGS
    from whichgpu.workload.zoo.llm.args import args_from_config

    cfg = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    v3 = args_from_config(cfg)
    v32 = args_from_config({**cfg, "model_type": "deepseek_v32", "index_n_heads": 64, "index_head_dim": 128,
                            "index_topk": 2048})
    assert v32.dsa and not v3.dsa
    assert v32.params()[0] - v3.params()[0] == 61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64)


def test_sparse_pairs_count_min_position_topk() -> None:
    def brute(chunks: list[tuple[int, int]], k: int) -> int:
        return sum(min(q, k) for t, c in chunks for q in range(c - t + 1, c + 1))
    for chunks in ([(100, 100)], [(3000, 3000)], [(500, 2500)], [(1000, 5000), (7, 9)], [(2048, 2048), (1, 2049)]):
        b = StepBatch(np.array([t for t, _ in chunks]), np.array([c for _, c in chunks]), np.array([], dtype=np.int64))
        assert sparse_pairs(b, 2048) == brute(chunks, 2048)


def test_capped_sums_equal_counting() -> None:
    ctx = np.array([5, 1500, 2047, 2048, 2049, 9000])
    got = capped_sums(ctx, 700, 2048)
    want = [int(np.minimum(ctx + j, 2048).sum()) for j in range(700)]
    assert got.tolist() == want


def test_decode_reads_all_index_keys_and_topk_latents() -> None:
    m = build(_setup("h200"))
    st = m.step_time
    per_pos, _ = st._decode_rates()  # the indexer's pass over every cached key
    idx_mem, idx_comp, _ = st._indexer_parts()
    assert per_pos == pytest.approx(st._attn_layers * max(idx_mem, idx_comp))

    def decode(n: int, ctx: int) -> float:
        return st(StepBatch.decode_only(np.full(n, ctx)))
    # past topk, a longer context costs the indexer only; below it, the latents too
    assert decode(4, 9000) - decode(4, 3000) == pytest.approx(per_pos * 4 * 6000, rel=1e-9)
    assert decode(4, 2000) - decode(4, 1000) == pytest.approx((per_pos + st._sparse_rate) * 4 * 1000, rel=1e-9)
    # a run of decode steps crossing topk equals the steps one by one
    ctx = np.array([1900, 2040, 5000])
    run = st.decode_run(ctx, 200)
    assert run == pytest.approx([st(StepBatch.decode_only(ctx + j)) for j in range(200)], rel=1e-12)


def test_kv_cache_holds_the_indexer_keys_and_sglang_blackwell_takes_fp8() -> None:
    h200, b200 = build(_setup("h200")), build(_setup("b200"))
    # 78 layers x (512 + 64 latent values + 128 FP8 indexer values and a 4-byte scale)
    assert h200.kv.bytes_per_token == 78 * ((512 + 64) * 2 + 132)
    assert b200.kv.bytes_per_token == 78 * ((512 + 64) * 1 + 132)  # SGLang's NSA default on Blackwell
    assert "FP8 KV cache" in b200.assumptions["sparse_attention"]
    vllm = build(_setup("b200", engine="vllm"))
    assert vllm.kv.bytes_per_token == 78 * ((512 + 64) * 2 + 132)  # --kv-dtype auto: 16 bits


def test_speculative_decoding_and_the_planner_refuse_sparse_attention() -> None:
    from typer.testing import CliRunner

    from whichgpu.cli import app

    with pytest.raises(InputError, match="sparse attention"):
        build(_setup("h200", spec=SpecDecode(draft_len=2, acceptance=0.7)))
    r = CliRunner().invoke(app, ["plan", "glm-5", "--gpu", "H100", "--gpus", "64"])
    assert r.exit_code == 2 and "sparse attention" in r.output and "Traceback" not in r.output
