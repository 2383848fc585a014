"""Golden numbers for every FLOP formula (workload/flops.py), the arithmetic worked out beside each.

Pure math on plain numbers: no torch, milliseconds. The per-element FLOPs of ops without a
formula of their own are registrations (test_registry.py).
"""

from __future__ import annotations

import math

from whichgpu.workload.flops import (
    attention_pairs,
    conv_flops,
    conv_gemm,
    mm_flops,
    model_flops_per_token,
    norm_backward_flops,
    norm_flops,
    numel,
    rnn_cell_flops,
    sdpa_backward_flops,
    sdpa_flops,
    softmax_backward_flops,
    softmax_flops,
)


def test_numel() -> None:
    # 2*3*4 = 24; a 0-d tensor holds one element
    assert numel((2, 3, 4)) == 24
    assert numel(()) == 1


def test_mm_flops() -> None:
    # 2*M*N*K = 2*64*128*32 = 524288
    assert mm_flops(64, 128, 32) == 524288
    # batched: 2*B*M*N*K = 2*3*64*128*32 = 1572864
    assert mm_flops(64, 128, 32, batch=3) == 1572864
    # matrix-vector (N = 1): 2*4096*1*4096 = 33554432
    assert mm_flops(4096, 1, 4096) == 33554432


def test_conv_flops_dense() -> None:
    # ResNet-50 stem: 7x7, 3 -> 64 channels, 224 -> 112 pixels.
    # 2 * out elements * Cin/groups * kernel = 2 * (64*112*112) * 3 * 49 = 2 * 802816 * 147 = 236027904
    assert conv_flops((1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 112, 112)) == 236027904


def test_conv_flops_grouped() -> None:
    # groups=4, 32 -> 64 channels, 3x3, 8x8 pixels, batch 2: weight (64, 32/4=8, 3, 3)
    # 2 * (2*64*8*8) * 8 * 9 = 2 * 8192 * 72 = 1179648 (a quarter of the dense conv's 4718592)
    assert conv_flops((2, 32, 8, 8), (64, 8, 3, 3), (2, 64, 8, 8)) == 1179648
    # depthwise (groups = channels = 32): weight (32, 1, 3, 3): 2 * (2*32*8*8) * 1 * 9 = 73728
    assert conv_flops((2, 32, 8, 8), (32, 1, 3, 3), (2, 32, 8, 8)) == 73728


def test_conv_flops_transposed() -> None:
    # 2x2 stride-2 transposed conv, 16 -> 8 channels, 4x4 -> 8x8; weight (Cin=16, Cout=8, 2, 2).
    # 2 * input elements * Cout/groups * kernel = 2 * (16*4*4) * 8 * 4 = 2 * 256 * 32 = 16384
    assert conv_flops((1, 16, 4, 4), (16, 8, 2, 2), (1, 8, 8, 8), transposed=True) == 16384
    # the same read as a normal conv would count out elements instead: 2 * (8*8*8) * 8 * 4 = 32768
    assert conv_flops((1, 16, 4, 4), (16, 8, 2, 2), (1, 8, 8, 8)) == 32768
    # grouped transposed (groups=2): weight (16, 8/2=4, 3, 3): 2 * 256 * 4 * 9 = 18432
    assert conv_flops((1, 16, 4, 4), (16, 4, 3, 3), (1, 8, 8, 8), transposed=True) == 18432


def test_conv_gemm() -> None:
    # implicit GEMM of the stem: M = N*H*W out = 112*112 = 12544, N = Cout = 64, K = 3*7*7 = 147;
    # 2*M*N*K = 2*12544*64*147 = 236027904, the conv's FLOPs
    assert conv_gemm((1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 112, 112), 1, False) == (1, 12544, 64, 147)
    assert mm_flops(12544, 64, 147) == 236027904
    # grouped: batch = groups = 4, M = 2*8*8 = 128, N = 64/4 = 16, K = 8*3*3 = 72
    assert conv_gemm((2, 32, 8, 8), (64, 8, 3, 3), (2, 64, 8, 8), 4, False) == (4, 128, 16, 72)
    # transposed: M = input pixels 4*4 = 16, N = Cout/groups = 8, K = (Cin/groups)*kernel = 16*2*2 = 64
    assert conv_gemm((1, 16, 4, 4), (16, 8, 2, 2), (1, 8, 8, 8), 1, True) == (1, 16, 8, 64)


def test_attention_pairs_not_causal() -> None:
    # every query sees every key: 128 * 256 = 32768
    assert attention_pairs(128, 256, causal=False) == 32768


def test_attention_pairs_causal() -> None:
    # square mask: sq*(sq+1)/2 = 4*5/2 = 10
    assert attention_pairs(4, 4, causal=True) == 10
    # more queries than keys (sq=6, sk=4): 4*5/2 + (6-4)*4 = 10 + 8 = 18
    assert attention_pairs(6, 4, causal=True) == 18
    # KV cache (the last 2 of 5 positions query): 4 + 5 keys = 2*(5-2) + 2*3/2 = 6 + 3 = 9
    assert attention_pairs(2, 5, causal=True) == 9
    # decode: one new token over a 1024-token cache sees 1025 keys = 1*1024 + 1*2/2
    assert attention_pairs(1, 1025, causal=True) == 1025


def test_sdpa_flops() -> None:
    # b=2, h=8, s=128, d=dv=64: pairs 128*128 = 16384; per pair 2*64 + 2*64 + 5 = 261
    # 2*8*16384*261 = 262144*261 = 68419584
    assert sdpa_flops(2, 8, 128, 128, 64, 64, causal=False) == 68419584
    # causal: pairs 128*129/2 = 8256: 2*8*8256*261 = 132096*261 = 34477056
    assert sdpa_flops(2, 8, 128, 128, 64, 64, causal=True) == 34477056
    # d != dv: 1*1*(2*3 pairs)*(2*4 + 2*8 + 5) = 6*29 = 174
    assert sdpa_flops(1, 1, 2, 3, 4, 8, causal=False) == 174


def test_sdpa_backward_flops() -> None:
    # per pair 6*d + 4*dv + 8 = 384 + 256 + 8 = 648 (2.5x the forward matmuls' 4*64 = 256, plus softmax)
    # 2*8*16384*648 = 262144*648 = 169869312
    assert sdpa_backward_flops(2, 8, 128, 128, 64, 64, causal=False) == 169869312
    # causal: 2*8*8256*648 = 132096*648 = 85598208
    assert sdpa_backward_flops(2, 8, 128, 128, 64, 64, causal=True) == 85598208


def test_rnn_cell_flops() -> None:
    # LSTM step, batch 32, input 256, hidden 512: GEMM 2*32*(4*512)*(256+512) = 2*32*2048*768
    # = 100663296, gate math 10*32*512 = 163840: 100827136
    assert rnn_cell_flops(32, 256, 512, gates=4) == 100827136
    # GRU: 2*32*1536*768 = 75497472 + 163840 = 75661312
    assert rnn_cell_flops(32, 256, 512, gates=3) == 75661312


def test_norm_flops() -> None:
    # forward 8 per element: 8*4096 = 32768; backward 14 per element: 14*4096 = 57344
    assert norm_flops(4096) == 32768
    assert norm_backward_flops(4096) == 57344


def test_softmax_flops() -> None:
    # forward 7 per element: 7*1000 = 7000; backward 4 per element: 4*1000 = 4000
    assert softmax_flops(1000) == 7000
    assert softmax_backward_flops(1000) == 4000


def test_model_flops_per_token() -> None:
    # 6N: 6 * 7e9 = 4.2e10 training FLOPs per token; no parameters: undefined
    assert model_flops_per_token(7_000_000_000) == 42_000_000_000
    assert math.isnan(model_flops_per_token(0))
