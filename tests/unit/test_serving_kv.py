"""KV-cache capacity as vLLM sizes it (serving/kv.py): golden numbers with the arithmetic shown."""

from __future__ import annotations

import pytest

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.serving import (
    batch_defaults,
    kv_cache_capacity,
    kv_layout,
    kv_tokens_sglang,
    vllm_batch_defaults,
)
from whichgpu.serving.kv import DEFAULT_NON_TORCH_BYTES_TP, DEFAULT_NON_TORCH_BYTES_TP1, BlockGroups
from whichgpu.units import GiB

GIB = 2**30
LLAMA31_8B = dict(layers=32, kv_heads=8, head_dim=128)  # config.json: 32 layers, GQA 32/8, head 128
LLAMA31_8B_WEIGHTS = 8_030_261_248 * 2  # parameters (HF safetensors metadata) x 2 B (BF16)


def test_llama31_8b_on_a_24gb_card_at_0_9() -> None:
    # KV bytes per token: 32 layers x 2 (K, V) x 8 KV heads x 128 x 2 B (BF16) = 131,072 B (128 KiB);
    # a block of 16 tokens = 2,097,152 B (2 MiB) over the 32 layers
    # (vLLM: page_size_bytes = 2 x 16 x 8 x 128 x 2 = 65,536 B per layer; get_num_blocks divides by
    # page size, then by the 32 layers).
    #
    # requested = 0.9 x 24 GiB            = 0.9 x 25,769,803,776     = 23,192,823,398.4 B
    # weights   = 8,030,261,248 x 2 B                                = 16,060,522,496 B
    # activation peak (input; assumed 1.25 GiB at the 2048-token budget) = 1,342,177,280 B
    # non-torch (default, one GPU: 0.13 GiB)                         =    139,586,437 B
    # KV bytes  = int(23,192,823,398.4 - 17,542,286,213)            =  5,650,537,185 B (5.26 GiB)
    # blocks    = 5,650,537,185 // 65,536 // 32 = 86,220 // 32      =          2,694
    # tokens    = 2,694 x 16                                         =         43,104
    # max concurrency at 8,192 tokens = 2,694 / (8,192 / 16 = 512)  =          5.26x
    layout = kv_layout(**LLAMA31_8B, kv_dtype_bytes=2)
    assert layout.bytes_per_token == 131_072
    cap = kv_cache_capacity(total_memory_bytes=24 * GIB, weight_bytes=LLAMA31_8B_WEIGHTS,
                            activation_peak_bytes=1_342_177_280, layout=layout, max_seq_len=8192,
                            gpu_memory_utilization=0.9)
    assert cap.requested_bytes == pytest.approx(23_192_823_398.4)
    assert cap.non_torch_bytes == 139_586_437
    assert cap.kv_cache_bytes == 5_650_537_185
    assert cap.bytes_per_block == 2_097_152
    assert cap.num_blocks == 2694
    assert cap.num_tokens == 43_104
    assert cap.blocks_per_request == 512
    assert cap.max_concurrency == pytest.approx(2694 / 512)
    # CUDA graphs (0.5 GiB default) come out of the 2.4 GiB left unrequested, not the KV budget
    assert cap.headroom_bytes == pytest.approx(24 * GIB * 0.1 - 0.5 * GIB)
    assert cap.notes == ()


def test_reproduces_vllm_logged_kv_memory_for_llama31_8b_on_h100() -> None:
    # vLLM's own start-up log (llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md,
    # Llama-3.1-8B-Instruct, H100 79.18 GiB, gpu_memory_utilization 0.9): weights 14.99 GiB, peak
    # activation 4.76 GiB, non-torch 0.13 GiB -> "Available KV cache memory: 51.38 GiB".
    # 0.9 x 79.18 = 71.262; 71.262 - 14.99 - 4.76 - 0.13 = 51.382 GiB.
    cap = kv_cache_capacity(total_memory_bytes=int(79.18 * GiB), weight_bytes=int(14.99 * GiB),
                            activation_peak_bytes=int(4.76 * GiB), non_torch_bytes=int(0.13 * GiB),
                            layout=kv_layout(**LLAMA31_8B, kv_dtype_bytes=2), max_seq_len=16000)
    assert cap.kv_cache_bytes / GiB == pytest.approx(51.38, abs=0.005)
    # 51.382 GiB / 2 MiB per block = 26,307 blocks; 26,307 / ceil(16000 / 16) = 26.3x concurrency
    assert cap.num_blocks == 26_307
    assert cap.max_concurrency == pytest.approx(26.307)


def test_cuda_graphs_in_budget_reduce_the_kv_cache() -> None:
    layout = kv_layout(**LLAMA31_8B, kv_dtype_bytes=2)
    kw = dict(total_memory_bytes=80 * GIB, weight_bytes=16 * GIB, activation_peak_bytes=2 * GIB,
              non_torch_bytes=0, layout=layout, max_seq_len=4096, cuda_graph_bytes=GIB)
    off = kv_cache_capacity(**kw)  # type: ignore[arg-type]
    on = kv_cache_capacity(**kw, cuda_graphs_in_budget=True)  # type: ignore[arg-type]
    assert off.kv_cache_bytes - on.kv_cache_bytes == GIB
    assert on.headroom_bytes - off.headroom_bytes == GIB


def test_kv_heads_split_over_tp_and_replicated_beyond() -> None:
    # 2 x 8 heads x 128 x 2 B = 4,096 B per layer on one GPU; TP 2: 4 heads; TP 8: 1; TP 16: still 1
    per_layer = {tp: kv_layout(**LLAMA31_8B, kv_dtype_bytes=2, tp=tp).bytes_per_token_layer for tp in (1, 2, 8, 16)}
    assert per_layer == {1: 4096, 2: 2048, 8: 512, 16: 512}
    assert kv_layout(**LLAMA31_8B, kv_dtype_bytes=1).bytes_per_token == 65_536  # FP8 KV: half
    with pytest.raises(InputError, match="tp 3"):
        kv_layout(**LLAMA31_8B, kv_dtype_bytes=2, tp=3)


def test_mla_caches_the_latent_on_every_tp_rank() -> None:
    # DeepSeek-V3: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values x 2 B = 1,152 B/layer
    for tp in (1, 8):
        lay = kv_layout(layers=61, kv_heads=128, head_dim=192, kv_dtype_bytes=2, tp=tp, kv_lora_rank=512,
                        qk_rope_head_dim=64)
        assert lay.bytes_per_token == 61 * 1152


def test_sliding_window_layers_use_vllm_hybrid_groups() -> None:
    # gpt-oss-20b: 24 layers, 12 sliding (window 128) and 12 full, 8 KV heads x 64.
    # Groups of 12 layers: one full, one sliding; a block = 16 tokens x 2 x 8 x 64 x 2 B x 12 layers
    # = 393,216 B. A 16,000-token request: 1,000 full blocks + min(1,000, ceil(128/16) + 1 = 9) = 1,009.
    lay = kv_layout(layers=24, kv_heads=8, head_dim=64, kv_dtype_bytes=2, sliding_layers=12, sliding_window=128)
    cap = kv_cache_capacity(total_memory_bytes=80 * GIB, weight_bytes=13 * GIB, activation_peak_bytes=7 * GIB,
                            layout=lay, max_seq_len=16000)
    assert cap.groups == BlockGroups(16, 1, 1, 9)
    assert cap.bytes_per_block == 393_216
    assert cap.blocks_per_request == 1009
    assert cap.num_blocks == cap.kv_cache_bytes // 393_216
    assert cap.max_concurrency == pytest.approx(cap.num_blocks / 1009)
    assert cap.num_tokens == int(cap.max_concurrency * 16000)
    # counted as full attention it would hold about half as many such requests
    full = kv_cache_capacity(total_memory_bytes=80 * GIB, weight_bytes=13 * GIB, activation_peak_bytes=7 * GIB,
                             layout=kv_layout(layers=24, kv_heads=8, head_dim=64, kv_dtype_bytes=2), max_seq_len=16000)
    assert 1.9 < cap.max_concurrency / full.max_concurrency < 2.0


def test_weights_that_do_not_fit_say_so_with_the_numbers() -> None:
    lay = kv_layout(**LLAMA31_8B, kv_dtype_bytes=2)
    with pytest.raises(NoAnswerError, match=r"weights \(20\.00 GiB per GPU\) do not fit .* 0\.9 x 20\.00 GiB = 18\.00 GiB"):
        kv_cache_capacity(total_memory_bytes=20 * GIB, weight_bytes=20 * GIB, activation_peak_bytes=0,
                          layout=lay, max_seq_len=1024)
    with pytest.raises(NoAnswerError, match="no memory left for the KV cache"):
        kv_cache_capacity(total_memory_bytes=20 * GIB, weight_bytes=17 * GIB, activation_peak_bytes=GIB,
                          layout=lay, max_seq_len=1024)
    # 1 GiB of KV = 512 blocks = 8,192 tokens: a 100,000-token request needs 6,250 blocks
    with pytest.raises(NoAnswerError, match="longest that fits is 8192 tokens"):
        kv_cache_capacity(total_memory_bytes=10 * GIB, weight_bytes=8 * GIB, activation_peak_bytes=0,
                          non_torch_bytes=0, gpu_memory_utilization=0.9, layout=lay, max_seq_len=100_000)


@pytest.mark.parametrize("u", [0, -0.1, 1.01])
def test_bad_utilisation_is_an_input_error(u: float) -> None:
    with pytest.raises(InputError, match="gpu_memory_utilization"):
        kv_cache_capacity(total_memory_bytes=GIB, weight_bytes=0, activation_peak_bytes=0,
                          layout=kv_layout(**LLAMA31_8B, kv_dtype_bytes=2), max_seq_len=16, gpu_memory_utilization=u)


def test_default_non_torch_memory_depends_on_tp() -> None:
    lay = kv_layout(**LLAMA31_8B, kv_dtype_bytes=2, tp=2)
    kw = dict(total_memory_bytes=80 * GIB, weight_bytes=8 * GIB, activation_peak_bytes=GIB, layout=lay, max_seq_len=4096)
    assert kv_cache_capacity(**kw, tp=1).non_torch_bytes == DEFAULT_NON_TORCH_BYTES_TP1  # type: ignore[arg-type]
    assert kv_cache_capacity(**kw, tp=2).non_torch_bytes == DEFAULT_NON_TORCH_BYTES_TP  # type: ignore[arg-type]


def test_vllm_batch_defaults() -> None:
    assert vllm_batch_defaults(80 * 10**9, "NVIDIA H100 80GB HBM3") == (8192, 1024)
    assert vllm_batch_defaults(80 * 10**9, "NVIDIA A100-SXM4-80GB") == (2048, 256)
    assert vllm_batch_defaults(24 * GIB, "NVIDIA GeForce RTX 4090") == (2048, 256)
    # TensorRT-LLM's own max_num_tokens (8192, also its longest prompt without chunked prefill)
    assert batch_defaults("tensorrt-llm", 24 * GIB, "NVIDIA GeForce RTX 4090") == (8192, 256)
    assert batch_defaults("sglang", 24 * GIB, "NVIDIA GeForce RTX 4090") == (2048, 256)
    # SGLang's own chunked_prefill_size by memory band (nvidia-smi's MiB; the usable memory given is
    # 0.985 of it): a B200 (177.3 GiB usable) chunks at 16384, an A100 40GB (39.4) at 4096, an A100
    # 80GB at 8192 where vLLM, which leaves A100s out of its large tier, takes 2048
    assert batch_defaults("sglang", int(180 * GIB * 0.985), "NVIDIA B200") == (16384, 1024)
    assert batch_defaults("sglang", int(40 * GIB * 0.985), "NVIDIA A100-SXM4-40GB") == (4096, 256)
    assert batch_defaults("sglang", int(80 * GIB * 0.985), "NVIDIA A100-SXM4-80GB") == (8192, 256)
    assert batch_defaults("vllm", int(80 * GIB * 0.985), "NVIDIA A100-SXM4-80GB") == (2048, 256)
    assert batch_defaults("vllm", 80 * 10**9, "NVIDIA H100 80GB HBM3") == (8192, 1024)


def test_sglang_pool_for_comparison() -> None:
    # 80 GiB GPU, 64 GiB free after the weights, mem_fraction_static 0.9:
    # rest = 64 - 80 x 0.1 = 56 GiB; / 131,072 B per token = 458,752 tokens
    lay = kv_layout(**LLAMA31_8B, kv_dtype_bytes=2)
    assert kv_tokens_sglang(free_after_weights_bytes=64 * GIB, total_memory_bytes=80 * GIB,
                            mem_fraction_static=0.9, layout=lay) == 458_752


def test_sglang_default_memory_fraction_follows_its_rule() -> None:
    from whichgpu.serving.kv import sglang_mem_fraction_static as frac

    # H100 (81,920 MiB), TP1: chunk 8192, CUDA-graph batch 256; reserved = 512 + 1.5 x 8192 + 2 x 256
    # + 1024 x 1 / 8 = 13,440 MiB (over the 10 GiB floor); (81,920 - 13,440) / 81,920 = 0.836
    assert frac(81_920, tp=1) == (0.836, 8192, 256)
    # H200 (144,384 MiB), TP8: 512 + 12,288 + 2 x 512 + 1024 = 14,848; 129,536 / 144,384 = 0.897
    assert frac(144_384, tp=8) == (0.897, 8192, 512)
    # B200 (184,320 MiB), TP8: chunk 16384, batch 512: 512 + 24,576 + 1,024 + 1,024 = 27,136 -> 0.853
    assert frac(184_320, tp=8) == (0.853, 16384, 512)
    # with 8 DP-attention groups: + 3 x 512 x 8 + 1.5 x 512 x 8 (batch over 300) = 45,568 -> 0.753
    assert frac(184_320, tp=8, dp_attention=8)[0] == 0.753
    # L4 with ECC on (23,040 MiB), TP1: chunk 2048, batch 24: 512 + 3,072 + 48 + 128 = 3,760, under
    # 60 GiB so no floor; 19,280 / 23,040 = 0.837
    assert frac(23_040, tp=1) == (0.837, 2048, 24)
    # a draft head adds 2 GiB after the floor (H100 TP1: 15,488 -> 0.811), a standalone draft 6 GiB
    assert frac(81_920, tp=1, speculative="eagle")[0] == 0.811
    assert frac(81_920, tp=1, speculative="standalone")[0] == round((81_920 - 13_440 - 6144) / 81_920, 3)
    # the 10 GiB floor: an 80 GiB card at TP1 with a small chunk would reserve less
    assert frac(65 * 1024, tp=1)[0] == round((65 * 1024 - 13_440) / (65 * 1024), 3)


def test_sglang_sizes_its_pool_from_the_memory_free_before_loading() -> None:
    # profile_max_num_token: (free after the weights) - (free before them) x (1 - fraction): the
    # activations are not subtracted, they live in the 1 - fraction left over
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import load_systems
    from whichgpu.serving.kv import default_non_torch_bytes
    from whichgpu.serving.model import Setup, build

    gpu = load_catalog().get("h100-sxm5-80gb")
    sg = build(Setup("llama-3.1-8b", gpu, load_systems().get("dgx-h100"), engine="sglang"))
    vl = build(Setup("llama-3.1-8b", gpu, load_systems().get("dgx-h100"), engine="vllm"))
    assert sg.sglang_mem_fraction == 0.836
    cap = sg.capacity(max_seq_len=2048)
    free_before = gpu.usable_memory_bytes - default_non_torch_bytes(1)
    assert cap.engine_fraction == 0.836
    assert cap.kv_cache_bytes == pytest.approx(0.836 * free_before - sg.weight_bytes, abs=2)
    assert vl.capacity(max_seq_len=2048).engine_fraction is None
    # --gpu-memory-utilization sets SGLang's fraction, read the same way
    mine = sg.capacity(gpu_memory_utilization=0.9, max_seq_len=2048)
    assert mine.kv_cache_bytes == pytest.approx(0.9 * free_before - sg.weight_bytes, abs=2)
    assert "mem_fraction_static 0.836" in sg.assumptions["memory"]


def test_the_engines_read_the_memory_cudamemgetinfo_reports() -> None:
    # vLLM's own log on an H100: 79.18 GiB total (cudaMemGetInfo); the catalog's "80 GB" is 80 GiB,
    # less the driver's 1.5 %: 78.8 GiB, not 80e9 bytes (74.5 GiB)
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import load_systems
    from whichgpu.serving.model import Setup, build

    gpu = load_catalog().get("h100-sxm5-80gb")
    assert gpu.usable_memory_bytes / GiB == pytest.approx(79.18, rel=0.01)
    m = build(Setup("llama-3.1-8b", gpu, load_systems().get("dgx-h100")))
    cap = m.capacity(max_seq_len=2048)
    assert cap.total_memory_bytes == int(gpu.usable_memory_bytes)
    assert "80 GiB x 0.985 usable" in m.assumptions["memory"]


def test_sglang_runs_as_many_requests_as_its_pool_holds() -> None:
    from whichgpu.serving.kv import default_running_requests
    from whichgpu.serving.kv import sglang_max_running_requests as most

    # Llama-3.1-8B on one H100: 416,240 KV tokens over a 131,072-token context: 416,240 / 131,072 x 512
    # = 1,625 requests, raised to the pool's floor of 2,048 (half the tokens, 208,120, is no limit)
    assert most(416_240, 131_072) == 2048
    # a short context: 2,000,000 / 8,192 x 512 = 125,000, capped at 4,096
    assert most(2_000_000, 8192) == 4096
    # a tiny pool: 3,000 tokens hold at most 1,500 requests (two tokens each, the scheduler's cap)
    assert most(3000, 8192) == 1500
    assert most(0, 8192) == 1
    # vLLM and TensorRT-LLM keep the count they were given
    assert default_running_requests("vllm", 1024, 416_240, 131_072) == 1024
    assert default_running_requests("tensorrt-llm", 256, 416_240, 131_072) == 256
    assert default_running_requests("sglang", 1024, 416_240, 131_072) == 2048
    with pytest.raises(InputError):
        most(1000, 0)
