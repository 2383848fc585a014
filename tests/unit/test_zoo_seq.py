"""Sequence models of the zoo: GNMT v2, Transformer-XL Base/Large, Transformer-big (WMT14).

Parameter counts are those of the reference definitions (NVIDIA DeepLearningExamples), with
the arithmetic in comments. No GFLOPs figure is published for these models, so forward FLOPs
are checked against the GEMM count of the architecture worked out by hand below.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from whichgpu.errors import InputError  # noqa: E402
from whichgpu.workload.zoo import get_entry  # noqa: E402
from whichgpu.workload.zoo.base import BuildRequest, Built  # noqa: E402
from whichgpu.workload.zoo.seq.txl_adaptive import WT103_SHARES, cluster_sizes  # noqa: E402

IDS = ("gnmt-v2", "transformer-xl-base", "transformer-xl-large", "transformer-big-wmt14")
# `model` column of shared/validation/throughput.csv (and the set kept aside)
VALIDATION = {
    "GNMT v2": "gnmt-v2",
    "Transformer-XL Base (WT103)": "transformer-xl-base",
    "Transformer-XL Large (WT103)": "transformer-xl-large",
    "Transformer-big (WMT14 en-de)": "transformer-big-wmt14",
}

# GNMT v2, H = 1024, V = 32320. LSTM(I, H): 4H(I + H) weights + 8H biases.
#   encoder: 2 x LSTM(1024) bidir 2 x 8,396,800 + LSTM(2048) 12,591,104 + 2 x 8,396,800 = 46,178,304
#   decoder: LSTM(1024) 8,396,800 + attention (2 x 1024^2 + 1024 + 1 + 1024) 2,099,201
#            + 3 x LSTM(2048) 37,773,312                                                = 48,269,313
#   shared embedding 1024 V + classifier 1025 V = 2049 x 32320                           = 66,223,680
#   total 160,671,297 = "MLPerf GNMT has 160671297 parameters" (NVIDIA apex test)
GNMT_PARAMS = 160_671_297
# Transformer-XL Base, WT103 n_token 267,735, div_val 1 (no projections), tied output weights:
#   embedding 267,735 x 512 = 137,080,320
#   layer: qkv 512 x 1536 + r_net 512^2 + o_net 512^2 + FF (512 x 2048 + 2048 + 2048 x 512 + 512)
#          + 2 LayerNorms 2 x 1024 = 3,412,480; x 16 = 54,599,680
#   r_w_bias + r_r_bias 2 x 8 x 64 = 1,024; cluster weight/bias 3 x 512 + 3; biases 267,735
#   total 191,950,298
TXL_BASE_PARAMS = 191_950_298
# Transformer-XL Large, d 1024, div_val 4: cluster widths 1024/256/64/16 for
# 19,997 / 20,000 / 160,000 / 67,738 words:
#   embeddings 36,920,736 + projections 1024 x (1024 + 256 + 64 + 16) = 1,392,640
#   layer 13,640,704 x 18 = 245,532,672; r biases 2,048; clusters 3 x 1024 + 3; biases 267,735
#   untied head projection (tie_projs[0] = False) 1024^2 = 1,048,576
#   total 285,167,482
TXL_LARGE_PARAMS = 285_167_482
# Transformer-big (DLE fairseq, pre-LN, attention without biases), e 1024, f 4096, V 33,712:
#   encoder layer 4 e^2 + (2 e f + e + f) + 2 LN (2 x 2048) = 12,592,128; x 6 = 75,552,768
#   decoder layer 8 e^2 + (2 e f + e + f) + 3 LN = 16,788,480; x 6 = 100,730,880
#   final LayerNorms 2 x 2048; shared embedding 33,712 x 1024 = 34,521,088
#   total 210,808,832
TRANSFORMER_BIG_PARAMS = 210_808_832
REFERENCE_PARAMS = dict(zip(IDS, (GNMT_PARAMS, TXL_BASE_PARAMS, TXL_LARGE_PARAMS, TRANSFORMER_BIG_PARAMS),
                            strict=True))


def _build(name: str, **kw: object) -> Built:
    return get_entry(name).load_builder()(BuildRequest(**kw))  # type: ignore[arg-type]


def _n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _forward_flops(built: Built) -> float:
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        built.model(**built.inputs)
    return float(fc.get_total_flops())


# ---------------------------------------------------------------------------------------------
# names and metadata
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", IDS)
def test_entry_resolves_by_every_name(name: str) -> None:
    e = get_entry(name)
    assert e.id == name
    for alias in (e.title, *e.aliases, *e.validation_names):
        assert get_entry(alias).id == name
    assert e.throughput_unit == "tokens/s" and e.input_kind == "tokens"
    assert e.params_reference == REFERENCE_PARAMS[name]


@pytest.mark.parametrize(("spelling", "name"), VALIDATION.items())
def test_validation_names_resolve(spelling: str, name: str) -> None:
    assert get_entry(spelling).id == name
    assert spelling in get_entry(name).validation_names


# ---------------------------------------------------------------------------------------------
# parameter counts
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", IDS)
def test_full_model_parameter_count(name: str) -> None:
    e = get_entry(name)
    full = _build(name, task="train", batch_size=2, seq_len=4, truncate_layers=False)
    assert _n_params(full.model) == REFERENCE_PARAMS[name]
    assert full.full_params == REFERENCE_PARAMS[name]
    truncated = _build(name, task="train", batch_size=2, seq_len=4)
    assert truncated.full_params == REFERENCE_PARAMS[name]
    assert e.default_batch_size > 0 and e.default_seq_len


# ---------------------------------------------------------------------------------------------
# forward FLOPs against the GEMM count of the architecture
# ---------------------------------------------------------------------------------------------

def test_gnmt_forward_flops() -> None:
    b, length, pad = 128, 26, 4  # default sentences, padded to 30 by length bucketing
    built = _build("gnmt-v2", task="infer", batch_size=b)
    s, t, h, v = length + pad, length + pad - 1, 1024, 32320

    def lstm(i: int) -> int:  # per token and direction: 2 * 4h * (i + h)
        return 2 * 4 * h * (i + h)

    encoder = s * b * (2 * lstm(h) + lstm(2 * h) + 2 * lstm(h))
    keys = s * b * 2 * h * h  # linear_k
    decoder = t * b * (lstm(h) + 3 * lstm(2 * h) + 2 * h * h  # att LSTM, 3 LSTMs, linear_q
                       + 2 * s * h  # context bmm (the score mat-vec is not counted by torch)
                       + 2 * h * v)  # classifier
    expected = encoder + keys + decoder  # 958.6 GFLOP
    assert _forward_flops(built) == pytest.approx(expected, rel=1e-3)
    assert built.tokens == b * (2 * length - 1)  # DLE Tok/s: src + tgt - 1 tokens


def _txl_expected(n_layer: int, d: int, heads: int, d_head: int, d_inner: int, qlen: int,
                  mlen: int, b: int, head_proj: bool, tails: list[tuple[int, int, int]]) -> float:
    klen, n = qlen + mlen, qlen * b
    hd = heads * d_head
    layer = (2 * klen * b * d * 3 * hd  # qkv_net on [mems; segment]
             + 2 * klen * d * hd  # r_net on positions
             + 3 * 2 * b * heads * qlen * klen * d_head  # AC, BD, attention x V
             + 2 * n * hd * d  # o_net
             + 2 * 2 * n * d * d_inner)  # FF
    head = 2 * n * d * (19997 + 3) + (2 * n * d * d if head_proj else 0)
    tail = sum(2 * n_i * (d * e_i if e_i != d else 0) + 2 * n_i * e_i * words for n_i, e_i, words in tails)
    return n_layer * layer + head + tail


def test_transformer_xl_base_forward_flops() -> None:
    b = 32
    built = _build("transformer-xl-base", task="train", batch_size=b, truncate_layers=False)
    n0, n1, n2, n3 = cluster_sizes(192 * b, WT103_SHARES)
    assert n0 + n1 + n2 + n3 == 192 * b
    tails = [(n1, 512, 20000), (n2, 512, 160000), (n3, 512, 67738)]
    expected = _txl_expected(16, 512, 8, 64, 2048, 192, 192, b, False, tails)  # 1039.7 GFLOP
    assert _forward_flops(built) == pytest.approx(expected, rel=1e-3)
    assert built.tokens == 192 * b  # DLE train.py: target.numel() per step


def test_transformer_xl_large_forward_flops() -> None:
    b = 16
    built = _build("transformer-xl-large", task="train", batch_size=b, truncate_layers=False)
    n0, n1, n2, n3 = cluster_sizes(384 * b, WT103_SHARES)
    # tail clusters: project 1024 -> 256 / 64 / 16, then logits over the cluster's words
    tails = [(n1, 256, 20000), (n2, 64, 160000), (n3, 16, 67738)]
    embed = 2 * (n0 * 1024 * 1024 + n1 * 256 * 1024 + n2 * 64 * 1024 + n3 * 16 * 1024)  # emb projs
    expected = _txl_expected(18, 1024, 16, 64, 4096, 384, 384, b, True, tails) + embed  # 4310 GFLOP
    assert _forward_flops(built) == pytest.approx(expected, rel=1e-3)


def test_transformer_big_forward_flops_and_token_batch() -> None:
    built = _build("transformer-big-wmt14", task="train", batch_size=10240, truncate_layers=False)
    n, length, e, f, v = 336, 30, 1024, 4096, 33712  # 10240 // 30 = 341 -> multiple of 8
    assert built.samples == n and built.tokens == n * length
    tok = n * length
    attn = 2 * 2 * n * 16 * length * length * 64  # QK^T and PV per attention block
    enc = 6 * (4 * 2 * tok * e * e + attn + 2 * 2 * tok * e * f)
    dec = 6 * (8 * 2 * tok * e * e + 2 * attn + 2 * 2 * tok * e * f)
    expected = enc + dec + 2 * tok * e * v  # 4269.6 GFLOP
    assert _forward_flops(built) == pytest.approx(expected, rel=1e-3)


def test_transformer_big_batch_units() -> None:
    def req(batch: int, **opts: object) -> Built:
        return _build("transformer-big-wmt14", task="infer", batch_size=batch,
                      options=tuple(opts.items()))

    assert req(5120).samples == 168  # 170 sentences, rounded down to a multiple of 8
    assert req(2560).samples == 80
    assert req(64).samples == 64  # small batches are sentences
    assert req(512, batch_in_tokens=True).samples == 16
    with pytest.raises(InputError):
        req(20, batch_in_tokens=True)  # no 30-token sentence fits in 20 tokens


# ---------------------------------------------------------------------------------------------
# train and infer run on meta
# ---------------------------------------------------------------------------------------------

TRAIN_REQUESTS: dict[str, dict[str, Any]] = {
    "gnmt-v2": {"batch_size": 4, "seq_len": 5, "options": (("bucket_padding", 1),)},
    "transformer-xl-base": {"batch_size": 4, "seq_len": 16, "options": (("mem_len", 16),)},
    "transformer-xl-large": {"batch_size": 4, "seq_len": 16, "options": (("mem_len", 16),)},
    "transformer-big-wmt14": {"batch_size": 8, "seq_len": 12},
}


@pytest.mark.parametrize("name", IDS)
def test_train_step_gives_every_parameter_a_grad(name: str) -> None:
    built = _build(name, task="train", **TRAIN_REQUESTS[name])
    assert built.model.training and built.loss_fn is not None
    out = built.model(**built.inputs)
    loss = built.loss_fn(out, built.inputs)
    assert loss.dim() == 0 and loss.device.type == "meta"
    loss.backward()
    missing = [n for n, p in built.model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


@pytest.mark.parametrize("name", IDS)
def test_infer_runs_without_grad(name: str) -> None:
    built = _build(name, task="infer", **TRAIN_REQUESTS[name])
    assert not built.model.training and built.loss_fn is None
    with torch.no_grad():
        out = built.model(**built.inputs)
    first = out[0] if isinstance(out, tuple) else out
    assert first.device.type == "meta" and not first.requires_grad
    assert built.samples > 0 and built.tokens > 0


def test_transformer_xl_memory_and_repeats() -> None:
    built = _build("transformer-xl-base", task="train", batch_size=2, seq_len=8, options=(("mem_len", 8),))
    assert built.repeats == {"layers.1": 14}
    loss, new_mems = built.model(**built.inputs)
    assert tuple(loss.shape) == (8, 2)
    assert tuple(new_mems.shape) == (16, 8, 2, 512)  # full depth even with 2 built layers
    infer = _build("transformer-xl-base", task="infer", batch_size=2)
    assert tuple(infer.inputs["data"].shape) == (64, 2)  # eval config: tgt_len 64
    assert tuple(infer.inputs["mems"].shape) == (16, 640, 2, 512)  # mem_len 640


def test_transformer_xl_without_adaptive_softmax_has_one_full_softmax() -> None:
    """DLE's train.py without --adaptive (Lambda's harness): no cutoffs, one tied embedding and
    softmax over all 267,735 words; with div_val 1 the large model loses its projections."""
    full = _build("transformer-xl-base", task="train", batch_size=2, seq_len=8,
                  options=(("mem_len", 8), ("adaptive", False)))
    adaptive = _build("transformer-xl-base", task="train", batch_size=2, seq_len=8, options=(("mem_len", 8),))
    crit = full.model.crit
    assert crit.cutoff_ends == [0, 267735] and crit.cluster_weight.shape[0] == 0
    assert adaptive.model.crit.cutoff_ends == [0, 19997, 39997, 199997, 267735]
    # the same parameters but the three cluster logits
    assert adaptive.full_params - full.full_params == 3 * 512 + 3
    loss, _ = full.model(**full.inputs)
    loss.float().mean().backward()
    assert full.model.word_emb.emb_layers[0].weight.grad is not None
    large = _build("transformer-xl-large", task="train", batch_size=2, seq_len=8,
                   options=(("mem_len", 8), ("adaptive", False), ("div_val", 1)))
    assert len(large.model.word_emb.emb_projs) == 0  # d_embed == d_model: no projection
    assert tuple(large.model.word_emb.emb_layers[0].weight.shape) == (267735, 1024)


# ---------------------------------------------------------------------------------------------
# bad requests
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", IDS)
@pytest.mark.parametrize("kw", [{"batch_size": 0}, {"batch_size": -3}, {"batch_size": 2, "seq_len": 0},
                                {"batch_size": 2, "task": "serve"}])
def test_bad_request_raises_input_error(name: str, kw: dict[str, object]) -> None:
    with pytest.raises(InputError):
        _build(name, **{"task": "train", **kw})


def test_bad_options_raise_input_error() -> None:
    with pytest.raises(InputError):
        _build("gnmt-v2", task="train", batch_size=2, options=(("bucket_padding", -1),))
    with pytest.raises(InputError):
        _build("transformer-xl-base", task="train", batch_size=2, options=(("cluster_shares", (0.5, 0.5)),))
    with pytest.raises(InputError):
        _build("transformer-xl-large", task="train", batch_size=2, options=(("mem_len", -1),))
    with pytest.raises(InputError, match="adaptive"):
        _build("transformer-xl-base", task="train", batch_size=2, options=(("adaptive", "no"),))
    with pytest.raises(InputError, match="div_val"):
        _build("transformer-xl-base", task="train", batch_size=2, options=(("div_val", 0),))
    with pytest.raises(InputError, match="cluster_shares"):  # one cluster without adaptive softmax
        _build("transformer-xl-base", task="train", batch_size=2,
               options=(("adaptive", False), ("cluster_shares", (0.5, 0.5))))
