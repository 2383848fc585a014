"""Zoo entries (torch-free metadata): sequence models that no maintained package defines.

Definitions are re-implemented from NVIDIA DeepLearningExamples (the scripts behind the
validation rows); builders live in `whichgpu.workload.zoo.seq`.
"""

from __future__ import annotations

from whichgpu.workload.zoo.base import ZooEntry

_SEQ = "whichgpu.workload.zoo.seq"
_DLE = "NVIDIA DeepLearningExamples PyTorch/"

ENTRIES: list[ZooEntry] = [
    ZooEntry(
        id="gnmt-v2",
        title="GNMT v2",
        family="seq2seq",
        input_kind="tokens",
        builder=f"{_SEQ}.gnmt_build:build",
        definition=_DLE + "Translation/GNMT (seq2seq/models/gnmt.py, train.py defaults)",
        default_batch_size=128,  # train.py --train-batch-size (sentences per GPU)
        default_seq_len=26,  # mean WMT16 en-de sentence, BOS/EOS included (gnmt_build.py)
        default_optimizer="adam",
        reference_mixed_precision="fp16",  # DLE GNMT --math fp16: FP16 model, FP32 master weights
        validation_names=("GNMT v2",),
        aliases=("gnmt", "gnmt-v2-wmt16", "gnmtv2"),
        params_reference=160_671_297,  # MLPerf GNMT, vocab 32320 (apex optimizer test)
        throughput_unit="tokens/s",
        notes="4+4 LSTM layers of 1024, normalized Bahdanau attention, shared 32320-word "
              "embedding; batch in sentences; tokens/s counts source + target tokens as DLE "
              "logs them; length-bucket padding modelled as +4 tokens (option bucket_padding).",
    ),
    ZooEntry(
        id="transformer-xl-base",
        title="Transformer-XL Base (WT103)",
        family="decoder",
        input_kind="tokens",
        builder=f"{_SEQ}.txl_build:build_base",
        definition=_DLE + "LanguageModeling/Transformer-XL (mem_transformer.py, wt103_base.yaml)",
        default_batch_size=32,  # README DGX A100 training rows, per GPU
        default_seq_len=192,  # tgt_len (mem_len 192)
        default_optimizer="lamb",
        reference_mixed_precision="fp16",  # DLE Transformer-XL --fp16: apex O2
        validation_names=("Transformer-XL Base (WT103)",),
        aliases=("transformer-xl", "txl-base", "transformer-xl-base-wt103"),
        params_reference=191_950_298,
        throughput_unit="tokens/s",
        notes="16 layers, d_model 512, 8x64 heads, relative attention over 192 cached states; "
              "adaptive softmax with static per-cluster token shares (WikiText-103 estimate); "
              "tokens/s = tgt_len x batch per step as DLE train.py logs it.",
    ),
    ZooEntry(
        id="transformer-xl-large",
        title="Transformer-XL Large (WT103)",
        family="decoder",
        input_kind="tokens",
        builder=f"{_SEQ}.txl_build:build_large",
        definition=_DLE + "LanguageModeling/Transformer-XL (mem_transformer.py, wt103_large.yaml)",
        default_batch_size=16,  # batch_size 128 over a DGX (8 GPUs)
        default_seq_len=384,  # tgt_len (mem_len 384)
        default_optimizer="lamb",
        reference_mixed_precision="fp16",  # DLE Transformer-XL --fp16: apex O2
        validation_names=("Transformer-XL Large (WT103)",),
        aliases=("txl-large", "transformer-xl-large-wt103"),
        params_reference=285_167_482,
        throughput_unit="tokens/s",
        notes="18 layers, d_model 1024, 16x64 heads, 384 cached states; adaptive input and "
              "softmax with div_val 4 and static per-cluster token shares; tokens/s = tgt_len x "
              "batch per step.",
    ),
    ZooEntry(
        id="transformer-big-wmt14",
        title="Transformer-big (WMT14 en-de)",
        family="seq2seq",
        input_kind="tokens",
        builder=f"{_SEQ}.transformer_build:build",
        definition=_DLE + "Translation/Transformer (fairseq transformer_wmt_en_de_big_t2t)",
        default_batch_size=10240,  # --max-tokens per GPU (batch sizes above 1000 are tokens)
        default_seq_len=30,  # mean WMT en-de sentence in BPE tokens + EOS
        default_optimizer="adam",
        batch_by_precision=(("fp32", 5120),),  # README: FP32 runs use half the tokens
        reference_mixed_precision="fp16",  # fairseq --fp16: FP16 model, FP32 master weights
        validation_names=("Transformer-big (WMT14 en-de)",),
        aliases=("transformer-big", "transformer-big-wmt14-en-de", "transformer-wmt-en-de-big",
                 "fairseq-transformer-big"),
        params_reference=210_808_832,
        throughput_unit="tokens/s",
        infer_benchmark="beam-search generation (fairseq generate, beam 4)",
        notes="6+6 pre-LN layers, d 1024, 16 heads, FFN 4096, shared 33712-word embedding; "
              "batch_size > 1000 (or option batch_in_tokens) is --max-tokens; tokens/s counts "
              "target tokens; inference rows of DLE measure beam search, the build is one "
              "teacher-forced forward.",
    ),
]
