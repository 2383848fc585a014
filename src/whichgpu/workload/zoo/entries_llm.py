"""Zoo entries: transformers-era models (decoder LLMs, BERT, ViT, Stable Diffusion UNet)."""

from __future__ import annotations

from whichgpu.workload.zoo.base import ZooEntry

_DEC = "whichgpu.workload.zoo.llm.build:build_packaged"
_HF = "whichgpu.workload.zoo.hf_models"
_DEF = ("in-house decoder mirroring transformers' {cls} op for op (parameters and FLOPs checked "
        "against transformers in tests), built from the packaged config.json facts")


def _llm(id_: str, title: str, cfg: str, params: int, aliases: tuple[str, ...], cls: str = "LlamaForCausalLM",
         seq: int = 4096, notes: str = "") -> ZooEntry:
    return ZooEntry(id=id_, title=title, family="decoder", input_kind="tokens", builder=_DEC,
                    definition=_DEF.format(cls=cls), default_batch_size=1, default_seq_len=seq,
                    default_optimizer="adamw", aliases=aliases, causal_lm=True, params_reference=params,
                    throughput_unit="tokens/s", config=cfg, notes=notes)


ENTRIES: list[ZooEntry] = [
    # Parameter counts: sums of the parameter shapes of the Hugging Face checkpoints
    # (model cards / safetensors index), equal to transformers' num_parameters().
    _llm("gpt2", "GPT-2 (124M)", "gpt2", 124_439_808, ("gpt2-small", "gpt-2", "gpt2-124m"), "GPT2LMHeadModel", 1024),
    _llm("gpt2-medium", "GPT-2 Medium (355M)", "gpt2-medium", 354_823_168, ("gpt2-355m",), "GPT2LMHeadModel", 1024),
    _llm("gpt2-large", "GPT-2 Large (774M)", "gpt2-large", 774_030_080, ("gpt2-774m",), "GPT2LMHeadModel", 1024),
    _llm("gpt2-xl", "GPT-2 XL (1.5B)", "gpt2-xl", 1_557_611_200, ("gpt2-1.5b",), "GPT2LMHeadModel", 1024),
    _llm("llama-2-7b", "Llama-2 7B", "llama-2-7b", 6_738_415_616, ("llama2-7b", "meta-llama/Llama-2-7b-hf")),
    _llm("llama-2-13b", "Llama-2 13B", "llama-2-13b", 13_015_864_320, ("llama2-13b", "meta-llama/Llama-2-13b-hf")),
    _llm("llama-2-70b", "Llama-2 70B", "llama-2-70b", 68_976_648_192, ("llama2-70b", "meta-llama/Llama-2-70b-hf")),
    _llm("llama-3-8b", "Llama-3 8B", "llama-3-8b", 8_030_261_248, ("llama3-8b", "llama-3.1-8b", "meta-llama/Meta-Llama-3-8B"), seq=8192),
    _llm("llama-3-70b", "Llama-3 70B", "llama-3-70b", 70_553_706_496, ("llama3-70b", "llama-3.1-70b", "meta-llama/Meta-Llama-3-70B"), seq=8192),
    _llm("llama-3-405b", "Llama-3.1 405B", "llama-3.1-405b", 405_853_388_800, ("llama3-405b", "llama-3.1-405b", "meta-llama/Llama-3.1-405B"), seq=8192),
    _llm("mistral-7b", "Mistral-7B v0.1", "mistral-7b", 7_241_732_096, ("mistral", "mistralai/Mistral-7B-v0.1"), "MistralForCausalLM"),
    _llm("mixtral-8x7b", "Mixtral-8x7B", "mixtral-8x7b", 46_702_792_704, ("mixtral", "mistralai/Mixtral-8x7B-v0.1"), "MixtralForCausalLM",
         notes="MoE: 2 of 8 experts per token, tokens spread evenly over experts (load-balanced routing)"),
    # GPT-J and Falcon: transformers' num_parameters() of GPTJForCausalLM / FalconForCausalLM built
    # on the meta device from the packaged configs (transformers 5.23; tests recompute it). By shapes:
    # GPT-J 6B: wte 50400 x 4096 + 28 x (ln_1 2 x 4096 + q,k,v,out 4 x 4096^2 + fc_in/fc_out
    #   2 x 4096 x 16384 + biases 16384 + 4096) + ln_f 2 x 4096 + lm_head 4096 x 50400 + 50400
    #   = 6,050,882,784 (the model card's 6,053,381,344 is mesh-transformer-jax's count).
    # Falcon-180B: word_embeddings 65024 x 14848 (tied lm_head) + 80 x (query_key_value
    #   14848 x (232 + 2 x 8) x 64 + dense 14848^2 + MLP 2 x 14848 x 59392 + ln_attn, ln_mlp
    #   4 x 14848) + ln_f 2 x 14848 = 178,557,088,768.
    _llm("gpt-j-6b", "GPT-J 6B", "gpt-j-6b", 6_050_882_784, ("gptj-6b", "gpt-j", "EleutherAI/gpt-j-6b"),
         "GPTJForCausalLM", 2048,
         notes="parallel block, rotary on 64 of each head's 256 dims (interleaved), untied lm_head with a bias"),
    _llm("falcon-180b", "Falcon 180B", "falcon-180b", 178_557_088_768, ("falcon180b", "tiiuae/falcon-180B"),
         "FalconForCausalLM", 2048,
         notes="parallel block with two LayerNorms, 232 query heads sharing 8 K/V heads (the KV cache is kept "
               "at 8 heads, as serving engines do), tied lm_head"),
    ZooEntry(
        id="bert-base-squad", title="BERT-Base SQuAD fine-tune", family="encoder", input_kind="tokens",
        builder=f"{_HF}:build_bert_squad", config="bert-base-uncased",
        definition="transformers BertForQuestionAnswering (eager attention, as NVIDIA's BERT), vocab padded to 30528 as NVIDIA DLE",
        default_batch_size=32, default_seq_len=384, default_optimizer="adamw",
        reference_mixed_precision="fp16",  # DLE BERT: apex amp.initialize(opt_level="O2")
        validation_names=("BERT-Base SQuAD fine-tune",), aliases=("bert-base", "bert-base-uncased"),
        throughput_unit="sequences/s"),
    ZooEntry(
        id="bert-large-squad", title="BERT-Large SQuAD fine-tune", family="encoder", input_kind="tokens",
        builder=f"{_HF}:build_bert_squad", config="bert-large-uncased",
        definition="transformers BertForQuestionAnswering (eager attention, as NVIDIA's BERT), vocab padded to 30528 as NVIDIA DLE",
        default_batch_size=32, default_seq_len=384, default_optimizer="adamw",
        reference_mixed_precision="fp16",  # DLE BERT: apex amp.initialize(opt_level="O2")
        validation_names=("BERT-Large SQuAD fine-tune", "BERT-Large SQuAD inference"),
        aliases=("bert-large", "bert-large-uncased"), throughput_unit="sequences/s"),
    ZooEntry(
        id="bert-large-cls", title="BERT-Large sequence classification", family="encoder", input_kind="tokens",
        builder=f"{_HF}:build_bert_cls", config="bert-large-uncased",
        definition="transformers BertForSequenceClassification, 2 labels (eager attention, as transformers of 2022), "
                   "the Hub checkpoint's 30522-token vocabulary",
        default_batch_size=4, default_seq_len=512, default_optimizer="adamw",  # HF guide: Trainer, batch 4, seq 512
        validation_names=("bert-large-uncased (sequence classification)",),
        aliases=("bert-large-uncased-cls", "bert-large-classification", "bert-large-seq-cls"),
        params_reference=335_143_938,  # BertForSequenceClassification(num_labels=2).num_parameters(), on meta
        throughput_unit="samples/s",
        notes="the HF 'efficient training on one GPU' guide's model: AutoModelForSequenceClassification "
              "of bert-large-uncased under the Trainer (fp16 = autocast)"),
    ZooEntry(
        id="bert-large-pretraining", title="BERT-Large pretraining (LAMB)", family="encoder", input_kind="tokens",
        builder=f"{_HF}:build_bert_pretraining", config="bert-large-uncased",
        definition="transformers BertModel + pretraining heads; MLM head on the masked positions only "
                   "(20 per sequence at length 128, 80 at 512) as NVIDIA DLE's run_pretraining.py",
        default_batch_size=64, default_seq_len=128, default_optimizer="lamb",
        batch_by_precision=(("amp", 64), ("fp16", 64), ("tf32", 64), ("fp32", 32)),
        # DLE scripts/run_pretraining.sh: per-GPU train_batch_size 8192 (phase 1, seq 128) and
        # 4096 (phase 2, seq 512) reached by gradient accumulation; LAMB steps once per that.
        accumulated_batch=((128, 8192), (512, 4096)),
        reference_mixed_precision="fp16",  # DLE BERT: apex amp.initialize(opt_level="O2")
        validation_names=("BERT-Large pretraining (LAMB)",), aliases=("bert-large-pretrain",),
        throughput_unit="sequences/s"),
    ZooEntry(
        id="vit-b16", title="ViT-B/16", family="vit", input_kind="image", builder=f"{_HF}:build_vit",
        config="vit-base-patch16-224", definition="transformers ViTForImageClassification (SDPA attention)",
        default_batch_size=256, default_image_size=224, default_optimizer="adamw",
        aliases=("vit-base", "vit-base-patch16-224", "vit_b_16"), params_reference=86_567_656,
        throughput_unit="images/s"),
    ZooEntry(
        id="vit-l16", title="ViT-L/16", family="vit", input_kind="image", builder=f"{_HF}:build_vit",
        config="vit-large-patch16-224", definition="transformers ViTForImageClassification (SDPA attention)",
        default_batch_size=128, default_image_size=224, default_optimizer="adamw",
        aliases=("vit-large", "vit-large-patch16-224", "vit_l_16"), params_reference=304_326_632,
        throughput_unit="images/s"),
    ZooEntry(
        id="sd-unet", title="Stable Diffusion 1.5 UNet", family="diffusion", input_kind="image",
        builder=f"{_HF}:build_sd_unet", config="sd-1.5-unet",
        definition="diffusers UNet2DConditionModel with the Stable Diffusion 1.5 config (latents 64x64 for 512 px images)",
        default_batch_size=8, default_image_size=512, default_optimizer="adamw",
        aliases=("stable-diffusion-unet", "sd-1.5", "stable-diffusion", "sd15-unet"), params_reference=859_520_964,
        throughput_unit="images/s",
        notes="UNet only (text encoder and VAE excluded); image size is the pixel size, latents are 1/8"),
]
