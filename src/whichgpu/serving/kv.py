"""KV-cache capacity of a serving engine, computed the way vLLM (v1 engine, 0.8 and later) sizes it.

What is modelled (sources read: vllm-project/vllm ``vllm/v1/worker/gpu_worker.py``
``determine_available_memory`` and ``compile_or_warm_up_model``; ``vllm/utils/mem_utils.py``
``memory_profiling``; ``vllm/v1/core/kv_cache_utils.py`` ``get_num_blocks``,
``get_max_concurrency_for_kv_cache_config``, ``_get_kv_cache_groups_uniform_page_size``;
``vllm/v1/kv_cache_interface.py`` ``AttentionSpec.page_size_bytes``, ``SlidingWindowSpec``):

1. vLLM asks for ``requested = gpu_memory_utilization x total GPU memory`` (the total as
   ``cudaMemGetInfo`` reports it). Everything the instance keeps besides the KV cache comes out
   of that: ``non_kv = weights + activation peak of the profiling run + non-torch increase``.
   The profiling run is one forward pass at ``max_num_batched_tokens`` tokens (spread over up to
   ``max_num_seqs`` sequences) plus a sampler pass; its peak *torch* allocation above the weights
   is the activation peak (an input here: the caller computes it from the trace). The non-torch
   increase is memory allocated outside PyTorch's allocator after the start-up snapshot: NCCL
   buffers, attention-backend workspaces. The CUDA context itself predates the snapshot and comes
   out of the ``1 - gpu_memory_utilization`` headroom, not the KV budget.
2. ``KV bytes = requested - non_kv``; blocks = KV bytes // (bytes of one block over every layer),
   a block holding ``block_size`` tokens (16 by default on CUDA).
3. CUDA graphs are captured *after* the KV cache is allocated, so by default their memory also
   comes out of the headroom (vLLM logs it as "CUDAGraph memory"). vLLM 0.11+ can instead estimate
   it during profiling and subtract it from the KV budget (environment variable
   ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``): the switch ``cuda_graphs_in_budget``.
4. Reported capacity: ``tokens = blocks x block_size`` and ``max concurrency = blocks /
   ceil(max_seq_len / block_size)`` (the start-up log's "GPU KV cache size" and "Maximum
   concurrency for N tokens per request"). When one request of ``max_seq_len`` does not fit,
   vLLM refuses to start, and so do we (`NoAnswerError`).

KV bytes per token per GPU (``kv_layout``): ``2 (K and V) x kv_heads_per_gpu x head_dim x bytes``
per layer, kv heads split over tensor parallelism (``max(1, kv_heads // tp)``: replicated when
tp exceeds the heads, as vLLM's ``ModelConfig.get_num_kv_heads``); multi-head latent attention
(DeepSeek-V2/V3) caches one latent of ``kv_lora_rank + qk_rope_head_dim`` values per layer,
replicated on every TP rank (vLLM's MLA spec: one "head", no K/V pair).

Sliding-window layers (Mistral, Gemma-2/3, gpt-oss): vLLM's hybrid KV-cache manager puts full and
sliding layers in separate groups of equal size that share one block pool; a sliding group keeps
at most ``ceil(window / block_size) + 1`` blocks per request (the blocks that slid out of the
window are freed). The pool's bytes per block are ``page x layers per group``; a request of L
tokens needs ``full_groups x ceil(L / bs) + sliding_groups x min(ceil(L / bs), window blocks)``
blocks. Assumption: vLLM's ``max_memory_usage_bytes`` also reserves ``max_num_batched_tokens``
extra window positions for a chunked prefill in flight; we count the steady state (window + 1
block), so max concurrency for long contexts is a little higher than the start-up log's.

SGLang for comparison (sgl-project/sglang ``model_runner.py`` ``profile_max_num_token``): after the
weights load, ``rest = free memory - total x (1 - mem_fraction_static)``; tokens = rest //
(KV bytes per token over all layers), one token per "page"; activations and CUDA graphs must fit
in the ``1 - mem_fraction_static`` share instead of being profiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.hardware.spec import USABLE_FRACTION
from whichgpu.units import GiB

DEFAULT_BLOCK_SIZE = 16
"""vLLM's default ``--block-size`` on CUDA (``vllm/config/cache.py``)."""

DEFAULT_NON_TORCH_BYTES_TP1 = int(0.13 * GiB)
"""Non-torch memory vLLM logs for one GPU: 0.13-0.14 GiB for Llama-3.1-8B, Qwen3-0.6B/32B,
gpt-oss-20b/120b on H100 (llm-d/llm-d-benchmark ``config_explorer/empirical-vllm-memory-results.md``)."""

DEFAULT_NON_TORCH_BYTES_TP = int(0.55 * GiB)
"""Non-torch memory per GPU with tensor parallelism (NCCL buffers): 0.55 GiB logged for
Llama-3.3-70B-FP8 at TP=2 on H100 (same source)."""

DEFAULT_CUDA_GRAPH_BYTES = int(0.5 * GiB)
"""CUDA-graph memory per GPU: vLLM's "CUDAGraph memory" log line reads -0.45 to 1.03 GiB for
0.6B-120B models on H100 (same source; negative when capture reuses freed memory). Only
subtracted from the KV budget when ``cuda_graphs_in_budget``."""


def default_non_torch_bytes(tp: int) -> int:
    """The documented default non-torch memory per GPU for a tensor-parallel degree."""
    return DEFAULT_NON_TORCH_BYTES_TP1 if tp <= 1 else DEFAULT_NON_TORCH_BYTES_TP


@dataclass(frozen=True)
class KvLayout:
    """How one GPU's KV cache is laid out for one model: bytes per token per layer and the layers."""

    bytes_per_token_layer: int
    """KV bytes one token occupies in one attention layer on this GPU."""
    full_layers: int
    """Layers attending to the whole context (every layer for most models)."""
    sliding_layers: int = 0
    """Layers attending within ``sliding_window`` positions."""
    sliding_window: int = 0
    """The sliding layers' window in tokens (0: none)."""
    state_layers: int = 0
    """Linear-attention (Gated DeltaNet) layers: no KV, one fixed state per request each."""
    state_bytes_layer: int = 0
    """Bytes of one request's state in one such layer on this GPU (recurrent state + convolution)."""

    @property
    def layers(self) -> int:
        return self.full_layers + self.sliding_layers

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token over every layer, before any window caps it."""
        return self.bytes_per_token_layer * self.layers


def kv_layout(*, layers: int, kv_heads: int, head_dim: int, kv_dtype_bytes: float, tp: int = 1,
              sliding_layers: int = 0, sliding_window: int = 0, kv_lora_rank: int = 0,
              qk_rope_head_dim: int = 0, state_layers: int = 0, state_bytes_layer: int = 0,
              index_bytes: int = 0) -> KvLayout:
    """The per-GPU KV layout of a decoder.

    ``layers`` counts every attention layer (``sliding_layers`` of them use a window). With
    ``kv_lora_rank`` set (MLA) ``kv_heads``/``head_dim`` are ignored: each layer caches one latent
    of ``kv_lora_rank + qk_rope_head_dim`` values on every TP rank; ``index_bytes``: DeepSeek sparse
    attention's indexer key per token and layer (FP8 values and their scale), beside it.
    """
    for name, v in (("layers", layers), ("tp", tp)):
        if v < 1:
            raise InputError(f"{name} must be >= 1, got {v}", field=name)
    if kv_dtype_bytes <= 0:
        raise InputError(f"kv_dtype_bytes must be > 0 (2: BF16/FP16, 1: FP8), got {kv_dtype_bytes}",
                         field="kv_dtype_bytes")
    if not 0 <= sliding_layers <= layers:
        raise InputError(f"sliding_layers must be between 0 and layers ({layers}), got {sliding_layers}",
                         field="sliding_layers")
    if sliding_layers and sliding_window < 1:
        raise InputError(f"sliding_window must be >= 1 with {sliding_layers} sliding layers, got {sliding_window}",
                         field="sliding_window")
    if kv_lora_rank:
        if sliding_layers:
            raise InputError("MLA with sliding-window layers is not supported (nor by vLLM)", field="sliding_layers")
        values = kv_lora_rank + qk_rope_head_dim  # one latent, not split by TP
    else:
        if kv_heads < 1 or head_dim < 1:
            raise InputError(f"kv_heads and head_dim must be >= 1, got {kv_heads} and {head_dim}", field="kv_heads")
        if kv_heads % tp and tp % kv_heads:
            raise InputError(f"tp {tp} must divide the {kv_heads} KV heads or be a multiple of them", field="tp")
        values = 2 * max(1, kv_heads // tp) * head_dim  # K and V; replicated when tp > kv_heads
    per_layer = values * kv_dtype_bytes + index_bytes
    if per_layer != int(per_layer):
        raise InputError(f"KV bytes per token per layer must be whole, got {per_layer}", field="kv_dtype_bytes")
    if state_layers and (state_bytes_layer < 1 or sliding_layers):
        raise InputError("linear-attention layers need their state's bytes, and do not mix with sliding windows here",
                         field="state_layers")
    return KvLayout(int(per_layer), layers - sliding_layers, sliding_layers, sliding_window if sliding_layers else 0,
                    state_layers, state_bytes_layer if state_layers else 0)


@dataclass(frozen=True)
class BlockGroups:
    """How many blocks of the shared pool a request of n tokens holds (vLLM's KV cache groups)."""

    block_size: int
    full_groups: int = 1
    """Groups of full-attention layers: each holds ceil(n / block_size) blocks per request."""
    sliding_groups: int = 0
    """Groups of sliding-window layers: each holds at most ``sliding_blocks`` blocks per request."""
    sliding_blocks: int = 0
    """The cap of a sliding group's blocks: ceil(window / block_size) + 1."""
    state_groups: int = 0
    """Groups of linear-attention layers: each holds one block (the request's state) per request."""

    def blocks(self, tokens: int) -> int:
        """Blocks a request holding ``tokens`` tokens of KV occupies."""
        b = -(-tokens // self.block_size)
        return self.full_groups * b + self.sliding_groups * min(b, self.sliding_blocks) + self.state_groups


@dataclass(frozen=True)
class KvCapacity:
    """The KV cache of one GPU (one rank of a TP/PP group): the budget's terms and the result."""

    total_memory_bytes: int
    gpu_memory_utilization: float
    requested_bytes: float
    """gpu_memory_utilization x total: everything this instance may use."""
    weight_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    cuda_graphs_in_budget: bool
    kv_cache_bytes: int
    """requested - weights - activation peak - non-torch (- CUDA graphs when in the budget)."""
    block_size: int
    bytes_per_block: int
    """Bytes of one block of the shared pool, over the layers of one group (every layer when uniform)."""
    num_blocks: int
    num_tokens: int
    """Tokens of context the pool holds: blocks x block_size (uniform); max concurrency x
    max_seq_len with sliding-window groups (vLLM's newer start-up log)."""
    max_seq_len: int
    blocks_per_request: int
    """Blocks one request of max_seq_len tokens holds."""
    max_concurrency: float
    """Requests of max_seq_len tokens the pool holds at once: num_blocks / blocks_per_request."""
    groups: BlockGroups
    headroom_bytes: float
    """total - requested, minus CUDA graphs when they are not in the budget: what is left for the
    CUDA context and anything else; negative means the engine would likely run out of memory."""
    notes: tuple[str, ...] = ()
    state_slots: int | None = None
    """SGLang with linear-attention layers: requests whose states its state pool holds, which caps
    the requests running at once; None: no such pool."""
    state_bytes_per_request: int = 0
    """One request's linear-attention states over this GPU's layers (0: no such layers)."""
    state_pool_bytes: int = 0
    """SGLang: the bytes of its state pool, beside `kv_cache_bytes` (0: no such pool)."""
    engine_fraction: float | None = None
    """The engine's own memory fraction where its accounting is not vLLM's (SGLang's
    mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction); `gpu_memory_utilization` is
    then the vLLM-style share of the total that gives the same KV bytes."""


def _group_size(a: int, b: int) -> int:
    """Layers per group of two kinds of layers (counts a and b): vLLM pads to the larger count when
    they are close, else takes the smaller."""
    lo, hi = sorted((a, b))
    return hi if hi < 1.5 * lo else lo


def _groups(layout: KvLayout, block_size: int) -> tuple[BlockGroups, int]:
    """(block groups, layers per group) as vLLM's hybrid KV-cache manager forms them."""
    if layout.state_layers:  # attention groups and linear-attention (state) groups
        gs = _group_size(layout.full_layers, layout.state_layers)
        return BlockGroups(block_size, -(-layout.full_layers // gs), state_groups=-(-layout.state_layers // gs)), gs
    if not layout.sliding_layers or not layout.full_layers:
        gs = layout.layers
        if layout.sliding_layers:  # every layer sliding: one sliding group
            return BlockGroups(block_size, 0, 1, -(-layout.sliding_window // block_size) + 1), gs
        return BlockGroups(block_size), gs
    gs = _group_size(layout.full_layers, layout.sliding_layers)
    return BlockGroups(block_size, -(-layout.full_layers // gs), -(-layout.sliding_layers // gs),
                       -(-layout.sliding_window // block_size) + 1), gs


def kv_cache_capacity(*, total_memory_bytes: int, weight_bytes: int, activation_peak_bytes: int,
                      layout: KvLayout, max_seq_len: int, gpu_memory_utilization: float = 0.9,
                      non_torch_bytes: int | None = None, tp: int = 1,
                      cuda_graph_bytes: int = DEFAULT_CUDA_GRAPH_BYTES, cuda_graphs_in_budget: bool = False,
                      block_size: int = DEFAULT_BLOCK_SIZE, state_pool_share: float = 0.0) -> KvCapacity:
    """KV-cache capacity of one GPU as vLLM v1 sizes it (see the module docstring).

    ``weight_bytes``: this GPU's share of the weights. ``activation_peak_bytes``: the profiling
    run's peak above the weights. ``non_torch_bytes``: None takes ``default_non_torch_bytes(tp)``.
    Raises `InputError` on bad values and `NoAnswerError` when the weights, the non-KV memory or
    one request of ``max_seq_len`` tokens do not fit.

    Linear-attention layers (``layout.state_layers``): vLLM (``state_pool_share`` 0) keeps each
    request's state in one block of each state group, the attention block size raised to the
    smallest multiple of 16 tokens whose page holds one layer's state (its page-size unification);
    SGLang gives the states their own pool, ``state_pool_share`` of the KV bytes
    (``mamba_full_memory_ratio`` r: r / (1 + r)), which caps the requests running at once
    (`KvCapacity.state_slots`).
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}",
                         field="gpu_memory_utilization")
    for name, v in (("total_memory_bytes", total_memory_bytes), ("max_seq_len", max_seq_len),
                    ("block_size", block_size)):
        if v < 1:
            raise InputError(f"{name} must be >= 1, got {v}", field=name)
    non_torch = default_non_torch_bytes(tp) if non_torch_bytes is None else non_torch_bytes
    for name, v in (("weight_bytes", weight_bytes), ("activation_peak_bytes", activation_peak_bytes),
                    ("non_torch_bytes", non_torch)):  # CUDA-graph memory may be negative (see its default)
        if v < 0:
            raise InputError(f"{name} must be >= 0, got {v}", field=name)

    requested = total_memory_bytes * gpu_memory_utilization
    gib = f"{total_memory_bytes / GiB:.2f} GiB"
    if weight_bytes > requested:
        raise NoAnswerError(
            f"the weights ({weight_bytes / GiB:.2f} GiB per GPU) do not fit in gpu_memory_utilization "
            f"{gpu_memory_utilization:g} x {gib} = {requested / GiB:.2f} GiB")
    graphs = cuda_graph_bytes if cuda_graphs_in_budget else 0
    non_kv = weight_bytes + activation_peak_bytes + non_torch + graphs
    kv_bytes = int(requested - non_kv)  # vLLM: int(requested_memory - non_kv_cache_memory)
    slots = None
    per_state = layout.state_bytes_layer * layout.state_layers
    pool = 0
    if layout.state_layers and state_pool_share:  # SGLang: a pool of states beside the token pool
        pool = int(max(kv_bytes, 0) * state_pool_share)
        slots = pool // per_state
        kv_bytes = int(kv_bytes * (1.0 - state_pool_share))
        layout = replace(layout, state_layers=0, state_bytes_layer=0)
    elif layout.state_layers:  # vLLM: attention pages as large as a state's
        align = 16 * layout.bytes_per_token_layer
        block_size = max(block_size, 16 * -(-layout.state_bytes_layer // align))
    groups, per_group = _groups(layout, block_size)
    page = max(layout.bytes_per_token_layer * block_size, layout.state_bytes_layer)  # one layer, one block
    bytes_per_block = page * per_group
    num_blocks = max(kv_bytes, 0) // page // per_group  # kv_cache_utils.get_num_blocks
    terms = (f"weights {weight_bytes / GiB:.2f} + activation peak {activation_peak_bytes / GiB:.2f} + "
             f"non-torch {non_torch / GiB:.2f}" + (f" + CUDA graphs {graphs / GiB:.2f}" if graphs else "")
             + f" GiB of {requested / GiB:.2f} GiB ({gpu_memory_utilization:g} x {gib})")
    if num_blocks < 1:
        raise NoAnswerError(f"no memory left for the KV cache: {terms}")
    per_request = groups.blocks(max_seq_len)
    if per_request > num_blocks:
        longest = _longest_fitting(groups, num_blocks)
        raise NoAnswerError(
            f"one request of {max_seq_len} tokens needs {per_request} KV blocks "
            f"({per_request * bytes_per_block / GiB:.2f} GiB) but only {num_blocks} fit "
            f"({kv_bytes / GiB:.2f} GiB after {terms}); the longest that fits is {longest} tokens")
    concurrency = num_blocks / per_request if slots is None else min(num_blocks / per_request, slots)
    uniform = not layout.sliding_layers and not layout.state_layers
    tokens = num_blocks * block_size if uniform else int(concurrency * max_seq_len)
    headroom = total_memory_bytes - requested - (0 if cuda_graphs_in_budget else cuda_graph_bytes)
    notes: list[str] = []
    if headroom < 0:
        notes.append(f"CUDA graphs ({cuda_graph_bytes / GiB:.2f} GiB) exceed the unrequested "
                     f"{(total_memory_bytes - requested) / GiB:.2f} GiB: the engine would likely run out of memory")
    if groups.sliding_groups:
        notes.append(f"hybrid KV cache: {groups.full_groups} full and {groups.sliding_groups} sliding-window "
                     f"groups of {per_group} layers; a sliding group keeps at most {groups.sliding_blocks} blocks "
                     "per request")
    if groups.state_groups:
        notes.append(f"hybrid KV cache: {groups.full_groups} attention and {groups.state_groups} linear-attention "
                     f"group(s) of {per_group} layers, blocks of {block_size} tokens (a page as large as one layer's "
                     f"state, {layout.state_bytes_layer / 2**20:.2f} MiB); each request holds one block per "
                     "linear-attention group for its state")
    if slots is not None:
        notes.append(f"linear-attention states in their own pool ({state_pool_share:.1%} of the KV bytes): "
                     f"{slots:,} requests' states, the most that run at once")
    return KvCapacity(total_memory_bytes, gpu_memory_utilization, requested, weight_bytes, activation_peak_bytes,
                      non_torch, cuda_graph_bytes, cuda_graphs_in_budget, kv_bytes, block_size, bytes_per_block,
                      num_blocks, tokens, max_seq_len, per_request, concurrency, groups, headroom, tuple(notes),
                      state_slots=slots, state_bytes_per_request=per_state, state_pool_bytes=pool)


def _longest_fitting(groups: BlockGroups, num_blocks: int) -> int:
    """The longest request (tokens) whose blocks fit in ``num_blocks`` (0 if none)."""
    lo, hi = 0, num_blocks * groups.block_size
    while lo < hi:  # largest n with blocks(n) <= num_blocks; blocks() is non-decreasing
        mid = (lo + hi + 1) // 2
        if groups.blocks(mid) <= num_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def vllm_batch_defaults(total_memory_bytes: int, device_name: str = "") -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks when not given.

    vllm-project/vllm ``vllm/engine/arg_utils.py`` (``get_batch_defaults``, 0.8-0.27): GPUs with at
    least 70 GiB that are not an A100 get 8192 tokens and 1024 sequences, the others 2048 and 256.
    (0.28 adds a 16384-token tier for >= 160 GiB devices; not modelled.)
    """
    if total_memory_bytes >= 70 * GiB and "a100" not in device_name.lower():
        return 8192, 1024
    return 2048, 256


TRTLLM_MAX_NUM_TOKENS = 8192
"""TensorRT-LLM's default max_num_tokens (its ``BuildConfig``; trtllm-serve's ``--max_num_tokens``):
without chunked prefill it is also the longest prompt the engine takes."""


def batch_defaults(engine: str, total_memory_bytes: int, device_name: str = "") -> tuple[int, int]:
    """(step token budget, most running requests) an engine runs with when not given: vLLM's
    (`vllm_batch_defaults`; SGLang's requests follow from its KV pool once sized,
    `default_running_requests`, and TensorRT-LLM is assumed to share vLLM's),
    but TensorRT-LLM's own max_num_tokens of `TRTLLM_MAX_NUM_TOKENS` and SGLang's own
    chunked_prefill_size for the GPU's memory (`sglang_mem_fraction_static`: 2048 under 35 GiB,
    4096 under 60, 8192 under 160, 16384 above). ``total_memory_bytes``: what cudaMemGetInfo
    reports (`GpuSpec.usable_memory_bytes`)."""
    tokens, seqs = vllm_batch_defaults(total_memory_bytes, device_name)
    if engine == "tensorrt-llm":
        tokens = TRTLLM_MAX_NUM_TOKENS
    elif engine == "sglang":  # its bands are in nvidia-smi's MiB (`GpuSpec.device_memory_mib`)
        tokens = sglang_mem_fraction_static(total_memory_bytes / USABLE_FRACTION / 2**20, 1)[1]
    return tokens, seqs


SGLANG_REQUESTS_PER_CONTEXT = 512
"""SGLang sizes its request pool at 512 requests per context length of KV tokens (model_runner)."""


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """The most requests one SGLang worker (under DP attention one attention group) runs at once
    when ``--max-running-requests`` is not given (sgl-project/sglang 0.5.x): its request pool,
    ``kv_tokens / context_len x 512`` within 2048-4096 (model_runner ``max_num_reqs``), and at most
    half its KV tokens (the scheduler's ``max_total_num_tokens // 2``); a larger pool than vLLM's
    256 or 1024 sequences, so its admission is bound by KV tokens, not a request count."""
    if kv_tokens < 0 or context_len < 1:
        raise InputError(f"KV tokens must be >= 0 and the context length >= 1, got {kv_tokens} and {context_len}",
                         field="context_len")
    pool = min(max(int(kv_tokens / context_len * SGLANG_REQUESTS_PER_CONTEXT), 2048), 4096)
    return max(1, min(pool, kv_tokens // 2))


def default_running_requests(engine: str, seqs: int, kv_tokens: int, context_len: int) -> int:
    """The most running requests `engine` admits when not given: SGLang's own
    (`sglang_max_running_requests`), else ``seqs`` (`batch_defaults`: vLLM's, which TensorRT-LLM is
    assumed to share)."""
    return sglang_max_running_requests(kv_tokens, context_len) if engine == "sglang" else seqs


def sglang_mem_fraction_static(gpu_mem_mib: float, tp: int, pp: int = 1, dp_attention: int = 1,
                               speculative: str | None = None) -> tuple[float, int, int]:
    """(mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs) SGLang picks when the flags are
    not given (sgl-project/sglang ``server_args.py`` ``_handle_gpu_memory_settings``, 0.5.8-0.5.9).

    ``gpu_mem_mib``: the device's total as nvidia-smi reports it, in MiB. By memory band the chunk
    and the largest CUDA-graph batch are (under 20 GiB) 2048 and 8; (under 35) 2048 and 24, or 80
    from TP 4; (under 60) 4096 and 32 or 160; (under 160) 8192 and 256 or 512; else 16384 and 512.
    It reserves, in MiB, 512 + 1.5 x max(chunk, 2048) + 2 x graph batch + 1024 x tp x pp / 8, with
    DP attention 3 x graph batch x groups more (4.5 x above a graph batch of 300), at least 10 GiB on
    a device over 60 GiB, then 2 GiB more for speculative decoding with a draft head (6 GiB with a
    standalone draft model); the fraction is (total - reserved) / total, rounded to 3 places."""
    small_tp = tp < 4
    if gpu_mem_mib < 20 * 1024:
        chunk, graph_bs = 2048, 8
    elif gpu_mem_mib < 35 * 1024:
        chunk, graph_bs = 2048, 24 if small_tp else 80
    elif gpu_mem_mib < 60 * 1024:
        chunk, graph_bs = 4096, 32 if small_tp else 160
    elif gpu_mem_mib < 160 * 1024:
        chunk, graph_bs = 8192, 256 if small_tp else 512
    else:
        chunk, graph_bs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if dp_attention > 1:
        reserved += graph_bs * dp_attention * 3
        if graph_bs > 300:
            reserved += graph_bs * dp_attention * 1.5
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative == "standalone":
        reserved += 6 * 1024
    elif speculative:
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3), chunk, graph_bs


def kv_tokens_sglang(*, free_after_weights_bytes: int, total_memory_bytes: int, mem_fraction_static: float,
                     layout: KvLayout) -> int:
    """SGLang's KV pool in tokens, for comparison: (free memory after loading the weights -
    total x (1 - mem_fraction_static)) // KV bytes per token over every layer
    (sgl-project/sglang ``python/sglang/srt/model_executor/model_runner.py`` ``profile_max_num_token``)."""
    if not 0 < mem_fraction_static <= 1:
        raise InputError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static}",
                         field="mem_fraction_static")
    rest = free_after_weights_bytes - total_memory_bytes * (1 - mem_fraction_static)
    return max(0, math.floor(rest // layout.bytes_per_token))
