"""whichgpu's kernels inside models that transformers builds (the generic config.json path).

transformers dispatches attention through ``AttentionInterface`` and routed experts through
``ExpertsInterface`` (``transformers.integrations.moe``); both take named implementations. This
module registers a "whichgpu" implementation of each, so that a model built by transformers on
the meta device runs the kernels a GPU runs, as the in-house decoder does:

* attention: one fused kernel, `whichgpu::attention` (FlashAttention's: native GQA, causal
  sliding windows, logit soft-capping, attention sinks), with no mask materialised. The name is
  left out of transformers' mask interface, so ``create_causal_mask`` and friends return None
  (their path for backends that mask inside the kernel, as vLLM's): the builders' batches have no
  padding, and causality comes from each attention module's ``is_causal``. The exception is an
  additive bias that needs a gradient (T5's learned position bias in training): PyTorch runs
  SDPA's unfused math path for it, and so does the trace (`_math_attention`).
* experts: one grouped GEMM each way, `whichgpu::grouped_mm`, under the balanced routing of
  `whichgpu.workload.zoo.llm.modern.route_rows` (dropless; or a capacity factor, the request
  option ``moe_capacity``), in place of ``grouped_mm_experts_forward``, whose sort / histc
  offsets are data-dependent and whose ``torch._grouped_mm`` only takes BF16 on meta.

It also makes three helpers of transformers answer for meta tensors, whose values do not exist
(``.item()`` on one raises): ``masking_utils.fast_all`` (is this padding mask all ones?) says
yes, ``masking_utils.find_packed_sequence_indices`` (are several sequences packed in a row?)
says no, and ``PreTrainedModel.warn_if_padding_and_no_attention_mask`` (DeBERTa's and other
encoders' check for pad tokens) does not look: the unpadded, unpacked batch the builders
describe. Tensors on other devices see no change.

`CachedStep` runs a decode step over a transformers cache that a prompt filled on meta.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor, nn

import whichgpu.workload.ops  # noqa: F401  (defines whichgpu::attention and whichgpu::grouped_mm)
from whichgpu.workload.zoo.llm.modern import route_rows

NAME = "whichgpu"
CAPACITY_ATTR = "_whichgpu_moe_capacity"  # set on experts modules by the builder (option moe_capacity)


def attention_forward(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                      softcap: float | None = None, is_causal: bool | None = None, s_aux: Tensor | None = None,
                      position_bias: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention signature (as ``flash_attention_forward``): q (B, H, Sq, D), k/v
    (B, KV, Sk, D) -> (B, Sq, H, Dv). The scale and the attention dropout (fused in the kernel)
    change no cost and are not passed; a mask or T5's position bias is an additive bias, as SDPA's
    memory-efficient kernel takes it (no causal block skipping then, as in SDPA), unless it needs a
    gradient (`_math_attention`)."""
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    sq = int(query.shape[2])
    mask = attention_mask if attention_mask is not None and attention_mask.dim() == 4 else None
    if position_bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        mask = create_position_bias_mask(position_bias, mask, causal and sq > 1, query, key)
    causal = causal and sq > 1 and mask is None  # one query sees every cached key, as SDPA decides
    if mask is not None and mask.requires_grad:
        return _math_attention(query, key, value, mask, dropout, scaling), None
    window = int(sliding_window or 0) if causal else 0
    out, _lse = torch.ops.whichgpu.attention(query, key, value, mask, causal, window, float(softcap or 0.0), s_aux)
    return out.transpose(1, 2), None


def _math_attention(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, dropout: float,
                    scaling: float | None) -> Tensor:
    """SDPA's math path, which PyTorch takes when the additive bias needs a gradient (T5's learned
    position bias in training): it picked no fused kernel for those calls, so the scores and the
    probabilities are materialised, and saved for backward. Measured on an H100 with torch 2.11
    (data/gpu_probes/README.md: 24 of T5-Base's 36 attention calls ran unfused). q and k are each
    scaled by the square root of the scale, as the math path does. -> (B, Sq, H, Dv)."""
    rep = int(query.shape[1]) // int(key.shape[1])
    if rep > 1:
        key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
    root = (scaling if scaling is not None else int(query.shape[-1]) ** -0.5) ** 0.5
    scores = torch.matmul(query * root, (key * root).transpose(-2, -1)) + bias
    probs = torch.ops.aten._softmax(scores, -1, False)
    if dropout > 0.0:
        probs = torch.nn.functional.dropout(probs, dropout, True)
    return torch.matmul(probs, value).transpose(1, 2)


def experts_forward(self: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
    """The routed experts of T tokens (hidden_states (T, H), top_k_index / top_k_weights (T, k)) as
    two grouped GEMMs over the rows `route_rows` assumes (module docstring). Rows are grouped by
    expert; which rows go where is not data here, so every row reads token 0 and expert 0 (no
    FLOP or byte depends on it) and the weights are read for `touched` experts. Handles the layouts
    of ``grouped_mm_experts_forward``: gate_up or up only, biases, transposed weights, the
    model's own gate (``_apply_gate``), a post-expert norm."""
    e: Any = self
    tokens, hidden = int(hidden_states.shape[0]), int(hidden_states.shape[-1])
    top_k = int(top_k_index.shape[-1])
    rows, touched, padded = route_rows(tokens, top_k, int(e.num_experts), float(getattr(e, CAPACITY_ATTR, 0.0)))
    idx = torch.zeros(rows, dtype=torch.long, device=hidden_states.device)  # token of each row
    eid = torch.zeros(rows, dtype=torch.long, device=hidden_states.device)  # expert of each row
    xs = hidden_states.index_select(0, idx)  # (rows, H)
    if e.has_gate:
        up = _grouped_linear(e, xs, e.gate_up_proj, e.gate_up_proj_bias if e.has_bias else None, eid, touched, padded)
        act = e._apply_gate(up)  # (rows, I)
    else:
        up = _grouped_linear(e, xs, e.up_proj, e.up_proj_bias if e.has_bias else None, eid, touched, padded)
        act = e.act_fn(up)
    y = _grouped_linear(e, act, e.down_proj, e.down_proj_bias if e.has_bias else None, eid, touched, padded)
    if getattr(e, "has_post_expert_norm", False):
        y = e.post_expert_norm(y)
    w = top_k_weights.reshape(-1)  # (T*k,): one routing weight per routed row
    w = w if rows == w.shape[0] else w.index_select(0, torch.zeros(rows, dtype=torch.long, device=w.device))
    y = y * w.to(y.dtype)[:, None]  # (rows, H)
    out = y.new_zeros((tokens, hidden)).index_add_(0, idx, y)  # each row back to its token
    return out.to(hidden_states.dtype)


def _grouped_linear(e: Any, x: Tensor, weight: Tensor, bias: Tensor | None, eid: Tensor, touched: int,
                    padded: int) -> Tensor:
    """x (rows, K) through each row's expert: `weight` is (E, N, K), or (E, K, N) transposed."""
    w = weight.transpose(1, 2) if e.is_transposed else weight  # (E, N, K)
    out = torch.ops.whichgpu.grouped_mm(x, w, touched, padded)  # (rows, N)
    if bias is not None:
        out = out + bias.index_select(0, eid).to(out.dtype)
    return out  # type: ignore[no-any-return]


def set_moe_capacity(model: nn.Module, capacity: float) -> int:
    """Give every experts module of `model` the capacity factor (0: dropless); returns how many."""
    n = 0
    for m in model.modules():
        if hasattr(m, "has_gate") and hasattr(m, "num_experts"):
            setattr(m, CAPACITY_ATTR, float(capacity))
            n += 1
    return n


def _meta_fast_all(orig: Any) -> Any:
    @functools.wraps(orig)
    def fast_all(tensor: Tensor) -> Any:
        return True if tensor.device.type == "meta" else orig(tensor)

    fast_all.whichgpu_patched = True  # type: ignore[attr-defined]
    return fast_all


def _meta_packed(orig: Any) -> Any:
    @functools.wraps(orig)
    def find_packed_sequence_indices(position_ids: Tensor) -> Tensor | None:
        return None if position_ids.device.type == "meta" else orig(position_ids)

    find_packed_sequence_indices.whichgpu_patched = True  # type: ignore[attr-defined]
    return find_packed_sequence_indices


def _meta_pad_warning(orig: Any) -> Any:
    @functools.wraps(orig)
    def warn_if_padding_and_no_attention_mask(self: Any, input_ids: Any, attention_mask: Any) -> Any:
        if isinstance(input_ids, Tensor) and input_ids.device.type == "meta":
            return None
        return orig(self, input_ids, attention_mask)

    warn_if_padding_and_no_attention_mask.whichgpu_patched = True  # type: ignore[attr-defined]
    return warn_if_padding_and_no_attention_mask


class CachedStep(nn.Module):
    """One decode step of `model` over `cache` (a transformers Cache filled by the prompt). The
    cache's tensors are held as buffers of this module, so that the capture's precision cast of
    the model reaches them; `forward` puts the current buffers back in the cache object."""

    def __init__(self, model: nn.Module, cache: Any) -> None:
        super().__init__()
        self.model = model
        self.cache = cache
        self.slots: list[tuple[int, str, int, str]] = []  # (cache layer, attribute, list index or -1, buffer)
        for li, layer in enumerate(cache.layers):
            for attr, v in list(vars(layer).items()):
                items = [(-1, v)] if isinstance(v, Tensor) else list(enumerate(v)) if isinstance(v, list) else []
                for j, t in items:
                    if isinstance(t, Tensor):
                        name = f"cache_{li}_{attr}" + (f"_{j}" if j >= 0 else "")
                        self.register_buffer(name, t, persistent=False)
                        self.slots.append((li, attr, j, name))

    def forward(self, input_ids: Tensor) -> Any:
        for li, attr, j, name in self.slots:
            layer, t = self.cache.layers[li], getattr(self, name)
            if j < 0:
                setattr(layer, attr, t)
            else:
                getattr(layer, attr)[j] = t
        return self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True)


def register() -> None:
    """Register the "whichgpu" attention and experts implementations, and make the mask helpers
    meta-safe (module docstring). Idempotent."""
    import transformers.masking_utils as mu
    from transformers import AttentionInterface, PreTrainedModel
    from transformers.integrations.moe import ExpertsInterface

    AttentionInterface.register(NAME, attention_forward)
    ExpertsInterface.register(NAME, experts_forward)
    if not getattr(mu.fast_all, "whichgpu_patched", False):
        mu.fast_all = _meta_fast_all(mu.fast_all)
    if not getattr(mu.find_packed_sequence_indices, "whichgpu_patched", False):
        mu.find_packed_sequence_indices = _meta_packed(mu.find_packed_sequence_indices)
    warn = PreTrainedModel.warn_if_padding_and_no_attention_mask
    if not getattr(warn, "whichgpu_patched", False):
        PreTrainedModel.warn_if_padding_and_no_attention_mask = _meta_pad_warning(warn)  # type: ignore[method-assign]


def supports_interface(cls: Any) -> bool:
    """The model class dispatches attention through transformers' AttentionInterface."""
    try:
        return bool(cls._can_set_attn_implementation())
    except Exception:
        return False


def supports_experts(cls: Any) -> bool:
    """The model class's experts dispatch through ExpertsInterface (@use_experts_implementation)."""
    try:
        return bool(cls._can_set_experts_implementation())
    except Exception:
        return False


