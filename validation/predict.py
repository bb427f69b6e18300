"""Predict one measurement record through the same per-op and whole-step paths ``simulate`` uses."""
from __future__ import annotations

from dataclasses import dataclass

import pydantic

from hardware_specs.catalog import Hardware
from models.schema import ModelSpec, MoEConfig
from simulator.calibration import Calibration
from simulator.comm import COLLECTIVES, collective_time, fabric_from_hardware
from simulator.compute import (ELEMENTWISE_PASSES, attention_time, cast_to_fp32_time, causal_fraction, elementwise_time,
                               fp32_clone_time, gemm_time, grouped_gemm_time, score_gemm_time, masked_fill_time, memcpy_time, mixed_add_time,
                               softmax_backward_kernel_time, torch_silu_mul_time)
from simulator.engine import device_model, simulate
from simulator.power import step_clock_fraction, work_class
from simulator.plan import ParallelPlan
from validation.records import record_dtype

ELEMENTWISE_KINDS = ("layernorm", "rmsnorm", "gelu", "softmax", "silu_mul", "add")
# the Mamba-2 SSD scan (validation/harness/ssd_scan.py): fitted only through its own parameters
# (calibrate --only ssd; a full calibrate fits them with the rest)
SSD_KINDS = ("ssd_scan",)
# PyTorch's non-vectorized TensorIterator paths (validation/harness/torch_paths.py): fitted through
# memory_op_fraction nonvectorized / cast_unrolled only
TORCH_PATH_KINDS = ("masked_fill_broadcast", "add_mixed", "cast_to_fp32")
KERNEL_KINDS = ("copy", "gemm", "attention_fwd", "attention_fwd_bwd") + ELEMENTWISE_KINDS + SSD_KINDS + TORCH_PATH_KINDS
# predicted from parameters other records fit, never fitted themselves (torch_paths.py): a clone
# (the copy fraction) and PyTorch's two-kernel softmax backward (the add fraction)
CHECK_KINDS = ("clone", "softmax_bwd")
# predicted, never fitted (not in KERNEL_KINDS, which calibrate fits): MoE expert layers
GROUPED_KINDS = ("grouped_gemm",)
GROUPED_IMPLS = ("grouped_mm", "bmm", "loop")
# attention records' ``backend`` (meshcast's kernel names; simulator.compute.attention_time)
ATTENTION_KERNELS = ("flash", "cudnn", "efficient", "fa3", "triton_fa", "math", "unfused", "unfused_torch")
# instep_conditions.py's ``condition`` of a kernel record the kernel model predicts: alone on a
# cool GPU, with or without most of the memory held (None: every other suite's records)
MODELLED_CONDITIONS = (None, "isolated", "ballast")
# strategy -> ZeRO stage of the plain-PyTorch framework (simulator/frameworks/pytorch.yaml)
STRATEGIES = {"single": 0, "ddp": 0, "fsdp_full_shard": 3}


class Unsupported(Exception):
    """A record meskcast cannot predict (unknown kind or strategy, missing field)."""


@dataclass(frozen=True)
class Prediction:
    """A prediction for one record: seconds, and for training steps peak bytes, fit and the
    host's seconds to issue forward+backward and the optimizer step. ``total_memory_bytes`` is the
    fit-verdict bytes (peak x fragmentation + workspace) that simulator.memory.fits_in compares."""
    time_s: float | None
    peak_memory_bytes: float | None = None
    fits: bool | None = None
    host_issue_s: float | None = None
    host_optimizer_s: float | None = None
    total_memory_bytes: float | None = None
    clock_fraction: float | None = None     # training steps: SM clock / f_max under the power limit


def predict_record(rec: dict, hw: Hardware, cal: Calibration, gpu_only: bool = False) -> Prediction:
    """The predicted time (and, for training steps, peak memory and fit) of one record. A collective
    is a call timed alone: the GPU's time (simulator.comm) plus the host's seconds to issue it
    (``Calibration.collective_host_s``); ``gpu_only``: the GPU's time alone."""
    kind = rec["kind"]
    if rec.get("condition") not in MODELLED_CONDITIONS:
        raise Unsupported(f"measured under step conditions ({rec['condition']!r}: after GEMMs or inside a chain "
                          "of kernels), a diagnostic the kernel model does not represent")
    try:
        if kind in KERNEL_KINDS:
            return Prediction(kernel_time(rec, hw, cal))
        if kind in CHECK_KINDS:
            return Prediction(kernel_time(rec, hw, cal))
        if kind in GROUPED_KINDS:
            return Prediction(grouped_gemm_record_time(rec, hw, cal))
        if kind in COLLECTIVES:
            fabric = fabric_from_hardware(hw, cal)
            host = 0.0 if gpu_only else cal.collective_host_s.get(kind, 0.0)
            return Prediction(collective_time(fabric, kind, float(rec["bytes"]), int(rec["world"])) + host)
        if kind == "train_step":
            return train_step_prediction(rec, hw, cal)
        if kind == "plan_step":
            return plan_step_prediction(rec, hw, cal)
    except KeyError as exc:
        raise Unsupported(f"missing field {exc.args[0]!r}") from None
    except pydantic.ValidationError as exc:    # the record's dimensions describe no valid model
        raise Unsupported(f"its dimensions are no valid model: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") \
            from None
    raise Unsupported(f"unknown kind {kind!r}")


def kernel_time(rec: dict, hw: Hardware, cal: Calibration) -> float:
    """Seconds of one kernel record on ``hw.accelerator`` (simulator.compute)."""
    dev = kernel_device(rec, hw, cal)
    kind = rec["kind"]
    if kind == "copy":
        return memcpy_time(dev, float(rec["bytes_moved"]))
    if kind == "gemm":      # batched (bmm_random: ``batch`` = b*heads) or, without the field, one GEMM
        if rec.get("set") == "bmm_random":      # unfused attention's batched GEMMs, costed as the simulator costs them
            return score_gemm_time(dev, rec["m"], rec["n"], rec["k"], record_dtype(rec), int(rec["batch"]))
        return gemm_time(dev, rec["m"], rec["n"], rec["k"], record_dtype(rec), batch=int(rec.get("batch") or 1))
    if kind in SSD_KINDS:
        return ssd_record_time(rec, dev)
    if kind in TORCH_PATH_KINDS or kind in CHECK_KINDS:
        return torch_path_time(rec, dev)
    if kind.startswith("attention"):
        direction = "fwd" if kind == "attention_fwd" else "fwd_bwd"
        backend = rec.get("backend", "flash")
        if backend not in ATTENTION_KERNELS:
            raise Unsupported(f"unknown attention backend {backend!r}")
        if rec.get("unsupported"):
            raise Unsupported(f"the {backend} backend refused this shape on the GPU")
        t = attention_time(dev, rec["batch"], rec["heads"], rec["seq"], rec["seq"], rec["head_dim"],
                           bool(rec.get("causal", False)), rec.get("kv_heads") or rec["heads"],
                           backend, direction)
        return t + harness_mask_clone_s(rec, dev)
    assert kind in ELEMENTWISE_PASSES
    if kind == "silu_mul" and "silu" in cal.memory_op_fraction:   # eager silu then mul (session 22)
        return torch_silu_mul_time(dev, rec["tokens"], rec["hidden"], record_dtype(rec))
    return elementwise_time(dev, kind, rec["tokens"], rec["hidden"], record_dtype(rec), masked=record_masked(rec))


def record_masked(rec: dict) -> float:
    """Fraction of a softmax record's scores a causal mask set to -10000 (instep_conditions.py
    ``data: causal_scores``: rows of s scores, row i of each s x s block keeping i + 1): (s − 1)/2s;
    0 for N(0, 1) data and every other record."""
    if rec.get("kind") != "softmax" or rec.get("data") != "causal_scores":
        return 0.0
    s = int(rec["hidden"])
    return 1.0 - causal_fraction(s, s, True)


def harness_mask_clone_s(rec: dict, dev) -> float:
    """Seconds the attention suite's Megatron-local pattern spent beyond Megatron-Core itself: until
    session 12 it masked the fp32 scores out of place (``scores.masked_fill(mask, v)``, which ATen
    runs as a clone and ``masked_fill_``), where Megatron masks in place
    (megatron/core/transformer/utils.py attention_mask_func: ``masked_fill_``). Records of the fixed
    harness carry ``mask_inplace: true`` and pay nothing here; older causal ones pay the clone
    (read 4, write 4 bytes per score at the copy fraction)."""
    if rec.get("backend") != "unfused_torch" or not rec.get("causal") or rec.get("mask_inplace"):
        return 0.0
    return fp32_clone_time(dev, rec["batch"] * rec["heads"] * rec["seq"] ** 2)


def torch_path_time(rec: dict, dev) -> float:
    """Seconds of one torch_paths record (docs/measurements.md "PyTorch's own paths"): the broadcast
    masked_fill_ of fp32 scores (8 bytes per score) and the mixed-dtype add (10 bytes per element)
    at the non-vectorized rate, the bf16 -> fp32 cast (6) at the unrolled cast rate, a clone (8, the
    copy fraction), and the softmax backward as PyTorch runs it: grad·out, then the row kernel, 6
    passes over the rows at the vectorized add fraction (simulator.compute)."""
    kind = rec["kind"]
    if kind == "masked_fill_broadcast":
        return masked_fill_time(dev, rec["bh"] * rec["seq"] ** 2)
    if kind == "add_mixed":
        return mixed_add_time(dev, rec["elements"])
    if kind == "cast_to_fp32":
        return cast_to_fp32_time(dev, rec["elements"])
    if kind == "clone":
        return fp32_clone_time(dev, rec["elements"])
    return 2 * softmax_backward_kernel_time(dev, rec["tokens"] * rec["hidden"], record_dtype(rec))


def kernel_device(rec: dict, hw: Hardware, cal: Calibration):
    """The device a kernel record ran on: kernel records are short bursts (kernels.py) at full
    clock; a ``sustained`` window (sustained.py) runs at the clock where its own work meets the
    power limit (simulator/power.py step_clock_fraction for the record's class of work at full
    activity), or, without a step power model, at the GEMM sustained clock."""
    if rec.get("regime") != "sustained":
        return device_model(hw.accelerator, cal)
    if not cal.step_power:
        return device_model(hw.accelerator, cal, sustained=True)
    kind = "attention" if rec["kind"].startswith("attention") else rec["kind"]
    cls = work_class(kind, record_dtype(rec), rec.get("backend", "flash"))
    x = step_clock_fraction(cal.step_power, {cls: (1.0, 1.0)}, cal.gemm_clock_bound_fraction)
    return device_model(hw.accelerator, cal, clock=round(x, 4))


def ssd_record_args(rec: dict) -> dict:
    """simulator.ssm.ssd_cost's arguments for one ``ssd_scan`` record (docs/measurements.md):
    x is ``[batch, seq, heads, head_dim]``, so the call covers ``batch * seq`` tokens in ``batch``
    sequences of ``seq`` (each chunked on its own, as Megatron-Core's micro-batch of ``mbs``
    sequences is: simulator.lowering._ssd_scan), ``heads`` and ``groups`` the local (per-TP-rank)
    counts the call ran with; ``gate``: z fused into the scan."""
    if record_dtype(rec) != "bf16":
        raise Unsupported(f"the SSD scan is modelled in bf16 only, record is {record_dtype(rec)}")
    batch, seq = int(rec["batch"]), int(rec["seq"])
    return dict(tokens=batch * seq, heads=int(rec["heads"]), head_dim=int(rec["head_dim"]), groups=int(rec["groups"]),
                state=int(rec["state"]), chunk=int(rec["chunk"]), sequences=batch, gate=bool(rec.get("gate", False)))


def ssd_record_time(rec: dict, dev) -> float:
    """Seconds of one ``ssd_scan`` record through simulator.ssm (the cost model the Mamba-2 lowering
    uses): ``direction`` ``fwd`` the forward scan, ``fwd_bwd`` the forward then the backward."""
    from simulator.ssm import ssd_cost, ssd_time
    direction = rec.get("direction", "fwd")
    if direction not in ("fwd", "fwd_bwd"):
        raise Unsupported(f"unknown ssd_scan direction {direction!r}")
    args = dict(ssd_record_args(rec), sm_count=dev.accelerator.sm_count)
    t = ssd_time(dev, ssd_cost(**args), backward=False, isolated=True)
    if direction == "fwd_bwd":
        t += ssd_time(dev, ssd_cost(**args, backward=True), backward=True, isolated=True)
    return t


def grouped_gemm_record_time(rec: dict, hw: Hardware, cal: Calibration) -> float:
    """Seconds of one ``grouped_gemm`` record (docs/measurements.md) by its ``impl``:
    ``grouped_mm`` one grouped launch (simulator.compute.grouped_gemm_time); ``bmm`` one batched
    GEMM over equal groups; ``loop`` one GEMM per non-empty group, back to back. The loop's
    Python issue time (one torch.mm dispatch per expert, ~5-10 us) is not modelled: where the
    per-expert GEMMs are shorter than it, the host, not the GPU, sets a loop's time."""
    dev = device_model(hw.accelerator, cal)
    tokens = [int(t) for t in rec["group_tokens"]]
    n, k, dtype, impl = int(rec["n"]), int(rec["k"]), record_dtype(rec), rec.get("impl")
    if impl == "grouped_mm":
        return grouped_gemm_time(dev, tuple(tokens), n, k, dtype)
    if impl == "bmm":
        if len(set(tokens)) != 1:
            raise Unsupported("bmm over unequal groups")
        return gemm_time(dev, tokens[0], n, k, dtype, batch=len(tokens))
    if impl == "loop":
        return sum(gemm_time(dev, m, n, k, dtype) for m in tokens if m > 0)
    raise Unsupported(f"unknown grouped_gemm impl {impl!r}")


def reference_gpt(rec: dict) -> ModelSpec:
    """The reference GPT of MEASUREMENTS.md: pre-LN, biases, 4h GELU MLP, untied head, no positions."""
    h = rec["hidden"]
    return ModelSpec(name=f"reference-gpt-{rec['layers']}x{h}", family="gpt", num_layers=rec["layers"], hidden=h,
                     ffn_hidden=4 * h, num_heads=rec["heads"], vocab=rec["vocab"], seq_len=rec["seq"],
                     activation="gelu", norm="layernorm", tied_embeddings=False, linear_bias=True,
                     position="none")


def reference_plan(rec: dict) -> ParallelPlan:
    """The plan a reference training step ran: one GPU, DDP (ZeRO-0) or FSDP full shard (ZeRO-3).
    Attention: the record's ``attention``, else ``flash``: validation/harness/train_step.py forces
    SDPA's FlashAttention-2 (``sdpa_kernel(FLASH_ATTENTION)``), where the pytorch profile's default
    is SDPA's own choice (cuDNN on Hopper)."""
    strategy = rec.get("strategy", "single")
    if strategy not in STRATEGIES:
        raise Unsupported(f"unknown strategy {strategy!r}")
    zero = STRATEGIES[strategy]
    world = int(rec.get("world", 1))
    mb = int(rec["micro_batch"])
    return ParallelPlan(tp=1, pp=1, dp=world, mbs=mb, gbs=mb * world, seq=rec["seq"], zero_stage=zero,
                        framework="pytorch", attention=rec.get("attention", "flash"), sequence_parallel=False,
                        num_gpus=world)


def train_step_prediction(rec: dict, hw: Hardware, cal: Calibration) -> Prediction:
    """Time, peak allocated memory and fit of a reference training step, via simulate()."""
    world = int(rec.get("world", 1))
    hw = Hardware(hw.cluster, hw.node, hw.accelerator, world)
    r = simulate(reference_gpt(rec), hw, reference_plan(rec), cal)
    return Prediction(r.step_time_s, r.memory.peak_allocated_bytes, r.fits, r.host_issue_s, r.host_optimizer_s,
                      r.memory.total_bytes, r.clock_fraction)


# ---- plan_step: a framework's training step under a parallel plan -------------------------------
PLAN_STEP_FRAMEWORKS = ("megatron-core", "megatron-core-local", "torchtitan", "deepspeed", "pytorch")


def plan_model(rec: dict) -> ModelSpec:
    """The model a plan_step record trained, from its dimensions (Llama-style or GPT-style); with
    ``experts``, ``topk`` and ``moe_ffn_hidden`` every layer's FFN is a dropless MoE."""
    gated = rec["activation"] in ("swiglu", "geglu")
    moe = MoEConfig(num_experts=rec["experts"], top_k=rec["topk"], expert_ffn_hidden=rec["moe_ffn_hidden"]) \
        if rec.get("experts") else None
    return ModelSpec(name=rec.get("name") or f"plan-model-{rec['layers']}x{rec['hidden']}",
                     family="llama" if gated else "gpt", num_layers=rec["layers"], hidden=rec["hidden"],
                     ffn_hidden=rec["ffn_hidden"], num_heads=rec["heads"], num_kv_heads=rec.get("kv_heads"),
                     vocab=rec["vocab"], seq_len=rec["seq"], activation=rec["activation"], norm=rec["norm"],
                     tied_embeddings=bool(rec.get("tied_embeddings", False)),
                     linear_bias=bool(rec.get("linear_bias", False)), position=rec.get("position", "rope"),
                     moe=moe)


# validation/harness/plan_step.py deferred FSDP2's gradient sync to the last micro-batch for every
# torch-native ZeRO-3 case (``model.set_requires_gradient_sync(last)``) from its first commit
# (6d3a387) until commit 99036ac, which added the every-micro-batch option and the record field
# ``fsdp_grad_sync``; every torchtitan ZeRO-3 record it has written since carries the field.
HARNESS_FSDP_GRAD_SYNC = "last_microbatch"


def record_grad_sync(rec: dict) -> str:
    """FSDP2's gradient sync policy a plan_step record ran (ParallelPlan.fsdp_grad_sync): the
    record's ``fsdp_grad_sync``; absent, for a torchtitan ZeRO-3 record (FSDP2), the policy the
    harness always ran before it wrote the field (HARNESS_FSDP_GRAD_SYNC: the files
    h200x2_plan_torchtitan.json, h200x2_plan_prereg.json, h200x2_plan_prereg_rest.json,
    h200x2_plan_prereg2.json, h200x2_plan_host.json and repeat/h200x2_plan_smoke.json); else
    every_microbatch (no FSDP2: the field means nothing)."""
    if "fsdp_grad_sync" in rec:
        return rec["fsdp_grad_sync"]
    if rec.get("framework") == "torchtitan" and int(rec.get("zero_stage", 0)) == 3:
        return HARNESS_FSDP_GRAD_SYNC
    return "every_microbatch"


def record_plan(rec: dict) -> ParallelPlan:
    """The plan a plan_step record ran, every field from the record; the framework from ``framework``.
    The harness runs Megatron-Core with overlap_grad_reduce on and overlap_param_gather off, and
    ModelParallelConfig's pipeline defaults (overlap_p2p_comm off: batch_isend_irecv, then a device
    synchronize), unless the record says ``overlap_p2p``; FSDP2's gradient sync: record_grad_sync."""
    framework = rec.get("framework")
    if framework not in PLAN_STEP_FRAMEWORKS:
        raise Unsupported(f"unknown framework {framework!r}")
    world = int(rec["world"])
    return ParallelPlan(tp=int(rec["tp"]), pp=int(rec["pp"]), dp=int(rec["dp"]), vp=int(rec.get("vp", 1)),
                        cp=int(rec.get("cp", 1)), ep=int(rec.get("ep", 1)),
                        sequence_parallel=bool(rec.get("sequence_parallel", False)),
                        zero_stage=int(rec["zero_stage"]), recompute=rec.get("recompute", "none"),
                        mbs=int(rec["mbs"]), gbs=int(rec["gbs"]), seq=int(rec["seq"]),
                        schedule=rec.get("schedule") if int(rec["pp"]) > 1 else None,
                        overlap_grad_reduce=bool(rec.get("overlap_grad_reduce", True)),
                        overlap_param_gather=bool(rec.get("overlap_param_gather", False)),
                        overlap_p2p=bool(rec.get("overlap_p2p", False)), fsdp_grad_sync=record_grad_sync(rec),
                        attention=rec.get("attention"), framework=framework, num_gpus=world)


def plan_step_prediction(rec: dict, hw: Hardware, cal: Calibration) -> Prediction:
    """Time, peak allocated memory (the largest stage) and fit of a plan_step record, via simulate()
    with the record's framework profile."""
    from hardware_specs.errors import MeshcastError
    world = int(rec["world"])
    hw = Hardware(hw.cluster, hw.node, hw.accelerator, world)
    try:
        r = simulate(plan_model(rec), hw, record_plan(rec), cal)
    except MeshcastError as exc:
        raise Unsupported(f"meshcast rejects the plan: {exc}") from None
    return Prediction(r.step_time_s, r.memory.peak_allocated_bytes, r.fits, r.host_issue_s, r.host_optimizer_s,
                      r.memory.total_bytes, r.clock_fraction)
