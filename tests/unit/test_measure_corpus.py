"""The validation corpus: both CSV formats, row mapping, exclusions, summaries (torch-free parts
run in milliseconds; predictions use the torch extra)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from tests.conftest import needs_torch

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.measure.corpus import parse_settings, read_measurements
from whichgpu.measure.jobs import map_precision, row_job
from whichgpu.measure.predict import predict
from whichgpu.measure.validate import load_exclusions, run

DATA = Path(__file__).resolve().parents[1] / "data"
CAT = load_catalog()
EXTERNAL_HEADER = ("row_id,source,source_ref,table,model,task,phase,gpu,gpu_count,tp,precision,batch,seq_len,"
                   "image_size,context,gen_tokens,metric,unit,value,derived,settings,notes")


def _external(tmp_path: Path, *rows: str) -> Path:
    f = tmp_path / "rows.csv"
    f.write_text("\n".join([EXTERNAL_HEADER, *rows]) + "\n")
    return f


def test_the_whole_dev_corpus_reads_from_one_directory() -> None:
    rows = read_measurements([str(DATA)])
    files = {r.file for r in rows}
    assert {"throughput_dev.csv", "timm.csv", "llm_infer.csv", "finetune.csv", "flops.csv"} <= files
    assert {r.source for r in rows} >= {"DeepLearningExamples", "Lambda", "timm", "gpt-fast", "TensorRT-LLM"}
    # row ids are unique across files, so exclusions and reports can name rows
    assert len({r.row_id for r in rows}) == len(rows)


def test_settings_parse_and_unknown_formats_are_one_line_errors(tmp_path: Path) -> None:
    assert parse_settings("compile=1;engine=gpt-fast; power_limit_w=330") == (
        ("compile", "1"), ("engine", "gpt-fast"), ("power_limit_w", "330"))
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="missing column"):
        read_measurements([str(bad)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \.csv files"):
        read_measurements([str(empty)])
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"model,gpu\n\xe9\n")
    with pytest.raises(InputError, match="UTF-8"):
        read_measurements([str(latin)])


@pytest.mark.parametrize(("label", "task", "policy"), [
    ("AMP fp16 (autocast)", "infer", "amp-fp16"), ("F16", "infer", "fp16"), ("bf16", "infer", "bf16"),
    ("FP8", "infer", "fp8"), ("Q4_K_M", "infer", "q4_k_m"), ("int8 weight-only", "infer", "int8"),
    ("int4 weight-only (group size 32)", "infer", "int4-g32"), ("FP32 (TF32 likely active)", "train", "tf32"),
    ("fp16 mixed precision", "train", "amp-fp16"),
])
def test_precision_labels_map_to_policies(label: str, task: str, policy: str) -> None:
    assert map_precision(label, task) == policy


def test_rows_map_to_the_engine_gpu_and_layout_the_source_ran(tmp_path: Path) -> None:
    f = _external(
        tmp_path,
        "A,gpt-fast,,,Llama-2-7B,infer,decode,A100-80GB (330W cap),4,4,bf16,1,5,,,200,decode_tokens_per_s,"
        "tokens/s,254,,compile=1;engine=gpt-fast;power_limit_w=330;parallel=tensor,",
        "B,TensorRT-LLM,,Peak Throughput: A100 GPUs (FP16) [v0.6.1],LLaMA 70B,infer,serve,A100,4,4,FP16,1280,128,,,128,"
        "output_tokens_per_s,out tok/s,670,,"
        "compile=1;engine=tensorrt-llm;parallel=tensor,",
        "C,llama.cpp (XiongjieDai),,,LLaMA 3 8B Q4_K_M,infer,decode,3090 24GB,2,,Q4_K_M,1,,,1024,1024,"
        "decode_tokens_per_s,tokens/s,110,,engine=llama.cpp;parallel=layer-split,",
        "D,timm,,,resnet50,infer,full,RTX 4090,1,,AMP fp16 (autocast),256,,224,,,infer_samples_per_s,samples/s,"
        "8237,,layout=nchw;compile=1;engine=timm-benchmark.py,torch 2.4 cuda 12.4",
    )
    a, b, c, d = (row_job(m, CAT) for m in read_measurements([str(f)]))
    assert a.engine == "gpt-fast" and a.gpu.id == "a100-sxm4-80gb" and a.plan.power_limit_w == 330
    assert dict(a.spec.options) == {"tp": 4, "tp_head": "replicated"}
    assert b.spec.model == "llama-2-70b" and b.per_gpu == 4 and dict(b.spec.options)["tp_head"] == "sharded"
    assert b.engine == "tensorrt-llm-0.6"  # the release measured, before the XQA generation kernel
    assert c.layer_split == 2 and c.spec.precision == "q4_k_m" and c.engine == "llama.cpp"
    assert dict(c.spec.options) == {"attention": "eager"}  # llama.cpp without -fa
    assert d.engine == "torch-compile" and d.kind == "step"


@needs_torch
def test_lambdas_transformer_xl_rows_run_trainpy_defaults_on_independent_ranks(tmp_path: Path) -> None:
    """Lambda's harness runs DLE's Transformer-XL train.py without its config file: no adaptive
    softmax, div_val 1, no --multi_gpu ddp (each GPU trains alone); DLE's own rows keep the
    reference setup with data parallelism."""
    head = "source_repo,source_path_or_url,model,task,framework,gpu,gpu_count,precision," \
           "batch_size_per_gpu,seq_len_or_image_size,metric_unit,value,notes"
    f = tmp_path / "t.csv"
    f.write_text("\n".join([
        head,
        "lambdal/deeplearning-benchmark,x.csv,Transformer-XL Base (WT103),train,PyTorch,H100-SXM5-80GB,8,"
        "AMP/FP16,104,,tokens/s,497053,",
        "lambdal/deeplearning-benchmark,x.csv,Transformer-XL Large (WT103),train,PyTorch,A100-SXM4-80GB,1,"
        "AMP/FP16,48,,tokens/s,1000,",
        "NVIDIA/DeepLearningExamples,y.md,Transformer-XL Base (WT103),train,PyTorch,A100-SXM4-40GB,8,AMP,32,,"
        "tokens/s,449890,",
    ]) + "\n")
    base, large, dle = (row_job(m, CAT) for m in read_measurements([str(f)]))
    assert dict(base.spec.options) == {"adaptive": False, "div_val": 1}
    assert base.replicas == 8 and base.plan.dp == 1
    assert large.spec.seq_len == 256 and large.spec.optimizer == "adam"
    assert dict(large.spec.options) == {"adaptive": False, "div_val": 1, "mem_len": 256}
    assert dle.spec.options == () and dle.replicas == 1 and dle.plan.dp == 8
    # eight independent ranks deliver eight times one rank's tokens
    from whichgpu.workload.api import get_trace

    one = predict(replace(base, replicas=1), get_trace)
    assert predict(base, get_trace).value == pytest.approx(8 * one.value)


def test_dle_ssd_trains_channels_last_at_every_precision_but_infers_nchw(tmp_path: Path) -> None:
    """DLE SSD main.py defaults --data-layout to channels_last and its training loops convert the
    images (AMP, TF32 and FP32 alike); its inference loop does not, and Lambda's fork of the
    script predates the flag. ResNet-50 keeps its own rule: channels-last with AMP only."""
    head = "source_repo,source_path_or_url,model,task,framework,gpu,gpu_count,precision," \
           "batch_size_per_gpu,seq_len_or_image_size,metric_unit,value,notes"
    f = tmp_path / "t.csv"
    rows = [("NVIDIA/DeepLearningExamples", "SSD300 (ResNet-50 backbone)", "train", "TF32", "64"),
            ("NVIDIA/DeepLearningExamples", "SSD300 (ResNet-50 backbone)", "train", "AMP", "64"),
            ("NVIDIA/DeepLearningExamples", "SSD300 (ResNet-50 backbone)", "infer", "AMP", "8"),
            ("lambdal/deeplearning-benchmark", "SSD300 (ResNet-50 backbone)", "train", "AMP/FP16", "448"),
            ("NVIDIA/DeepLearningExamples", "ResNet-50 v1.5", "train", "TF32", "256"),
            ("NVIDIA/DeepLearningExamples", "ResNet-50 v1.5", "train", "AMP", "256")]
    f.write_text("\n".join([head, *(f"{src},y.md,{model},{task},PyTorch,A100-SXM4-80GB,1,{prec},{b},300,images/s,100,"
                                     for src, model, task, prec, b in rows)]) + "\n")
    layouts = [dict(row_job(m, CAT).spec.options).get("memory_format") for m in read_measurements([str(f)])]
    assert layouts == ["channels_last", "channels_last", None, None, None, "channels_last"]


def test_a_row_that_cannot_be_modelled_says_why(tmp_path: Path) -> None:
    f = _external(tmp_path, "E,x,,,NoSuchModel 9B,infer,decode,H100 SXM,1,,bf16,1,5,,,10,decode_tokens_per_s,"
                            "tokens/s,10,,,")
    (m,) = read_measurements([str(f)])
    with pytest.raises(WhichGPUError, match="unknown model"):
        row_job(m, CAT)


def test_exclusions_name_rows_of_the_corpus_with_reasons() -> None:
    excl = load_exclusions()
    ids = {r.row_id for r in read_measurements([str(DATA)])}
    assert excl and set(excl) <= ids
    assert all(len(reason) > 40 for reason in excl.values())


@needs_torch
def test_validate_scores_external_rows_and_keeps_excluded_ones_visible(tmp_path: Path) -> None:
    f = _external(
        tmp_path,
        "L0408,llama.cpp (XiongjieDai),,,LLaMA 3 8B F16,infer,prefill,A100 SXM 80GB,1,,F16,1,512,,,,"
        "prefill_tokens_per_s,tokens/s,603.76,,engine=llama.cpp,",
        "W,llama.cpp (XiongjieDai),,,LLaMA 3 8B,infer,weights,,,,F16,,,,,,weights_size,GiB,14.96,,,",
        "O,llama.cpp (XiongjieDai),,,LLaMA 3 70B F16,infer,decode,3070 8GB,1,,F16,1,,,1024,1024,fits,,OOM,,"
        "engine=llama.cpp,",
    )
    v = run(read_measurements([str(f)]), CAT)
    ex, w, o = v.rows
    assert ex.status == "ok" and ex.excluded and not ex.bounded
    assert v.summary["excluded"][0]["row_id"] == "L0408"
    # LLaMA 3 8B in F16: 8.03e9 weights x 2 B = 14.96 GiB, exactly the GGUF file
    assert w.predicted == pytest.approx(14.96, rel=0.005) and w.bounded
    assert o.predicted == 0.0 and o.measured == 0.0 and v.summary["fits"]["correct"] == 1
    assert v.summary["bounded"] == 1 and not math.isnan(v.summary["median_ape"])
