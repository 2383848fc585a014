"""Training step memory: model states (sharded), activations and gradients over time, the
optimizer step, communication buffers."""

from __future__ import annotations

from whichgpu.memory.allowances import NCCL_BUFFER_BYTES
from whichgpu.memory.lifetime import Timeline, simulate
from whichgpu.memory.lines import MemoryLine, count, gb, snap
from whichgpu.memory.states import (
    OptimizerInfo,
    model_states,
    optimizer_state_bytes,
    optimizer_temp_bytes,
    parse_optimizer,
    shard_factors,
    state_bytes_per_value,
    state_count,
)
from whichgpu.memory.weights import linear_params
from whichgpu.parallel.plan import FULL_SHARD, Plan
from whichgpu.workload.precision import Precision
from whichgpu.workload.trace import Trace

Parts = tuple[dict[str, MemoryLine], str, str, float, list[str]]


def _unit_params(trace: Trace, tl: Timeline, grad_elem: float) -> tuple[float, str]:
    """Parameters gathered at once under ZeRO-3 / FSDP full sharding: one repeated block (FSDP
    wraps each transformer block), else the largest parameter tensor (DeepSpeed gathers per module)."""
    shape = trace.shape
    lin = linear_params(shape)
    if lin is not None and shape.layers > 0:
        h = shape.hidden
        return lin / shape.layers + 2 * h, "one transformer block"
    if tl.windows and grad_elem > 0 and max(w.grad_bytes for w in tl.windows) > 0:
        return max(w.grad_bytes for w in tl.windows) / grad_elem, "one repeated block"
    if tl.grad_tensors and grad_elem > 0:
        return max(b for b, _n in tl.grad_tensors) / grad_elem, "the largest parameter tensor"
    return 0.0, "nothing (no trainable parameters)"


def training(trace: Trace, plan: Plan, prec: Precision, shard_gpus: int) -> Parts:
    """(lines, peak phase, peak module, activation peak, notes) of a training step; the model
    states are sharded over `shard_gpus` (Plan.shard_gpus)."""
    notes: list[str] = []
    opt: OptimizerInfo = parse_optimizer(trace.optimizer)
    if plan.optimizer_state_bits == 8 and not opt.eight_bit and opt.name != "none":
        opt = OptimizerInfo(opt.name, "fused", True)  # bitsandbytes 8-bit optimizer
    trainable = float(trace.trainable_params)
    traced_ft = (getattr(trace, "finetune", "full") or "full").split()[0]
    grads_in_step = plan.set_to_none and plan.grad_accum == 1
    drop_casts = plan.sharding in FULL_SHARD and prec.autocast is not None
    tl = simulate(trace, grads_in_step=grads_in_step, drop_weight_casts=drop_casts)
    ge = snap(tl.param_grad_bytes / trainable) if trainable and tl.param_grad_bytes else prec.param_bytes
    master = plan.master_weights and ge < 4.0 and opt.name != "none" and trainable > 0
    # ---- weights -----------------------------------------------------------------------------
    w_bytes = float(trace.param_bytes + trace.buffer_bytes)
    if traced_ft == "qlora":
        w_text = (f"QLoRA: {gb(trace.buffer_bytes)} NF4 base weights (4-bit + FP32 absmax per 64) and buffers + "
                  f"{gb(trace.param_bytes)} other parameters and adapters as stored")
    else:
        w_text = (f"{count(trace.params)} parameters as stored ({trace.param_bytes / max(trace.params, 1):.3g} B each"
                  f" under {prec.name})" + (f" + {gb(trace.buffer_bytes)} buffers" if trace.buffer_bytes >= 1e6 else ""))
        if traced_ft == "lora":
            w_text += f"; frozen base + {count(trainable)} LoRA adapter parameters"
    value_bytes = state_bytes_per_value(opt, ge, plan.master_weights, plan.optimizer_state_bits)
    numels = tuple(b / ge for b, n in tl.grad_tensors for _ in range(n)) if opt.name == "adafactor" else ()
    states_b = optimizer_state_bytes(opt, trainable, value_bytes, numels)
    unit, unit_text = _unit_params(trace, tl, ge)
    gather_elem = prec.gathered_param_bytes
    ms = model_states(weight_bytes=w_bytes, trainable=trainable, grad_elem_bytes=ge, master=master,
                      state_bytes=states_b, sharding=plan.sharding, gpus=shard_gpus, offload=plan.offload_optimizer,
                      unit_params=unit, gather_elem_bytes=gather_elem)
    fw, fg, fo = shard_factors(plan.sharding, shard_gpus)
    full_grads = trainable * ge
    grad_weight = ms.grads / full_grads if full_grads else 0.0
    shard_txt = {1.0: "replicated"}.get(fw, f"sharded 1/{shard_gpus}")
    # ---- the two candidate peaks ---------------------------------------------------------------
    temp = 0.0 if plan.offload_optimizer else optimizer_temp_bytes(opt, trainable) * fo
    if grads_in_step:
        pk = tl.peak(grad_weight)
        act_a, grads_a = pk.activations, pk.gradients * grad_weight
    else:
        pk = tl.activation_peak()
        act_a, grads_a = pk.activations, ms.grads
    act_b, grads_b = tl.end_activation_bytes, ms.grads
    if act_b + grads_b + temp > act_a + grads_a:
        phase, module, act, grads, tmp = "optimizer step", "", act_b, grads_b, temp
    else:
        phase, module, act, grads, tmp = pk.phase, pk.module, act_a, grads_a, 0.0
    act_peak = tl.activation_peak().activations
    # ---- lines -----------------------------------------------------------------------------------
    gsh = "" if fg == 1.0 else f", sharded 1/{shard_gpus}"
    g_text = f"{count(trainable)} trainable x {ge:g} B{gsh}: {gb(full_grads * fg)} in all"
    if master and plan.sharding in FULL_SHARD and not plan.offload_optimizer:
        g_text = (f"{count(trainable)} trainable x {ge:g} B: each unit's gradients are reduce-scattered into the FP32 "
                  "gradient partition (counted with the master weights); the unit in flight is in gathered parameters")
    elif plan.offload_optimizer and ms.grads == 0.0 and full_grads:
        g_text = f"{count(trainable)} trainable x {ge:g} B: partitions stream to CPU RAM as they are reduced (ZeRO-Offload)"
    elif grads_in_step and phase != "optimizer step":
        g_text += f"; {gb(grads)} allocated by the peak ({phase}, zero_grad(set_to_none=True))"
    elif not grads_in_step:
        g_text += "; live through the step (set_to_none=False or gradient accumulation)"
    parts: dict[str, MemoryLine] = {
        "weights": MemoryLine(ms.weights, w_text + ("" if fw == 1.0 else f"; {shard_txt}")),
        "gradients": MemoryLine(grads, g_text, full_grads * fg if plan.offload_optimizer and ms.grads == 0.0 else 0.0),
    }
    host_states = states_b * fo if plan.offload_optimizer else 0.0
    host_master = 2 * 4.0 * trainable * fo if (plan.offload_optimizer and master) else 0.0
    if master:
        parts["master_weights"] = MemoryLine(ms.master + ms.fp32_grads,
                                             f"FP32 copy of {count(trainable)} 16-bit parameters + FP32 gradient copy for the update "
                                             f"(4 + 4 B){'' if fo == 1.0 else f', sharded 1/{shard_gpus}'}"
                                             + ("; in CPU RAM (offload)" if plan.offload_optimizer else ""), host_master)
    st_name = opt.name + ("-8bit" if opt.eight_bit else "")
    st_text = (f"{st_name}: {_states_formula(opt, value_bytes)} per trainable parameter"
               if opt.name != "adafactor" else f"adafactor: factored second moment, {value_bytes:g} B x 2 sqrt(n) per tensor")
    if opt.name == "none":
        st_text = "no optimizer"
    st_text += "" if fo == 1.0 else f", sharded 1/{shard_gpus}"
    st_text += "; in CPU RAM (offload)" if plan.offload_optimizer else ""
    parts["optimizer_states"] = MemoryLine(ms.states, st_text, host_states)
    if tmp:
        parts["optimizer_temporaries"] = MemoryLine(tmp, f"{opt.name}/{opt.impl}: denominators of all parameters at once "
                                                    "(FP32, one state's size)" + ("" if fo == 1.0 else f", sharded 1/{shard_gpus}"))
    where = f"peak in {phase}" + (f" at {module}" if module else "")
    a_text = (f"lifetime simulation of the trace's {len(trace.mem_events)} allocations, {where}"
              + "".join(f"; {w.block} x{w.extra + 1}: {gb(w.saved_bytes)} saved per copy" for w in tl.windows))
    if drop_casts and tl.weight_cast_bytes:
        a_text += "; autocast weight copies left out (FSDP mixed precision gathers low-precision parameters)"
    parts["activations"] = MemoryLine(act, a_text)
    if ms.gathered:
        parts["gathered_params"] = MemoryLine(ms.gathered, f"{unit_text}: {count(unit)} parameters all-gathered "
                                              f"({gather_elem:g} B) + unsharded gradients ({ge:g} B) before reduce-scatter")
    parts["inputs"] = MemoryLine(float(trace.input_bytes), "model inputs of the step")
    if plan.dp > 1:
        comm = NCCL_BUFFER_BYTES
        text = f"NCCL buffers {gb(NCCL_BUFFER_BYTES)}"
        if plan.sharding == "ddp" and not plan.ddp_bucket_view:
            comm += full_grads
            text += f" + DDP all-reduce buckets {gb(full_grads)} (a copy of the gradients; gradient_as_bucket_view=False)"
        parts["comm_buffers"] = MemoryLine(comm, text)
    if plan.offload_optimizer:
        notes.append(f"CPU RAM: {gb(ms.host)} per GPU for the offloaded optimizer side (states, master weights, "
                     "gradient partitions)")
    return parts, phase, module, act_peak, notes


def _states_formula(opt: OptimizerInfo, value_bytes: float) -> str:
    n = state_count(opt.name)
    return f"{n} x {value_bytes:.4g} B" if n else "0 B"
