"""Real training steps under a parallel plan (`plan_step` records), on one or several GPUs.

Two frameworks:
  megatron-core-local   Megatron-Core (pip package megatron-core) with its *local* layer spec
                        (get_gpt_layer_local_spec: no Transformer Engine, no apex): GPTModel,
                        Megatron DDP with or without the distributed optimizer,
                        get_forward_backward_func (no pipelining, 1F1B, interleaved), sequence
                        parallel, full / selective recompute. Without TE/apex the attention is
                        DotProductAttention (materialised scores, fp32 softmax with a mask), norms
                        and activations are unfused torch ops, and get_megatron_optimizer falls
                        back to torch.optim.AdamW.
  torchtitan            torch-native parallelism as torchtitan composes it: a Llama/GPT module in
                        plain PyTorch (SDPA flash attention), DDP, FSDP2 fully_shard per block,
                        DTensor tensor + sequence parallel (torchtitan's Llama TP plan, loss parallel),
                        torch.distributed.pipelining (stages split by hand, Schedule1F1B /
                        ScheduleInterleaved1F1B, dp 1) and context parallel (context_parallel over
                        SDPA, FSDP2 over the cp ranks; CUDA only).

Usage (the launcher runs the cases in torch.distributed.run children, so that a case that dies
-- an out-of-memory on one rank that leaves the other waiting in a collective -- costs only
itself; its record says oom when the log says so):

    python3 validation/harness/plan_step.py launch --grid main --nproc 2 --out F.json --budget-s 400
    python3 validation/harness/plan_step.py launch --grid smoke --nproc 1 --out F.json
    python3 validation/harness/plan_step.py list --grid main          # print the cases
    # CPU dry run (gloo, tiny sizes, torchtitan only; Megatron-Core and context parallel need CUDA)
    python3 validation/harness/plan_step.py launch --grid cpu --nproc 2 --cpu --out /tmp/p.json

Timing: after >= 3 warm-up steps, >= 5 steps each timed as synchronized wall time (all ranks
synchronize the device, barrier, perf_counter, step, synchronize); per-step time is the max over
ranks; time_s is the median, time_min_s / time_max_s the extremes. Memory: max over ranks of
torch.cuda.max_memory_allocated() / max_memory_reserved() over the timed steps.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# this folder's grouped_gemm.py (the grouped-GEMM kernel benchmark) would shadow the `grouped_gemm`
# package Megatron-Core's MoE imports when present (megatron/core/transformer/moe/grouped_gemm_util.py
# then reads grouped_gemm.ops from our module); the package is not installed, so make it absent
sys.modules.setdefault("grouped_gemm", None)
from nvml import Sampler, summarize_samples  # noqa: E402

PLAN_FIELDS = ("world", "tp", "pp", "vp", "cp", "dp", "sequence_parallel", "zero_stage", "recompute",
               "mbs", "gbs", "schedule")
MODEL_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq", "norm", "activation",
                "position", "linear_bias", "tied_embeddings")

# ----------------------------------------------------------------------------------- models


def _moe(layers, hidden, heads, kv_heads, vocab, experts, topk, ffn):
    """A Llama-style model whose every FFN is a MoE of ``experts`` experts of width ``ffn``, ``topk``
    per token (ffn_hidden = ffn: no dense FFN exists)."""
    return dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn, vocab=vocab,
                norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False,
                experts=experts, topk=topk, moe_ffn_hidden=ffn)


# Llama-style: RMSNorm, SwiGLU, RoPE, GQA, no biases. GPT-style: LayerNorm, GELU, learned positions, biases.
MODELS = {
    "llama-1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, ffn_hidden=8192, vocab=32768,
                     norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "llama-3b": dict(layers=28, hidden=3072, heads=24, kv_heads=8, ffn_hidden=8192, vocab=32768,
                     norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "llama-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32768,
                     norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "llama-2b": dict(layers=20, hidden=2560, heads=20, kv_heads=4, ffn_hidden=6912, vocab=32768,
                     norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "llama-4b": dict(layers=24, hidden=3584, heads=28, kv_heads=4, ffn_hidden=9728, vocab=32768,
                     norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    # Llama-3-8B's shape (GQA 4:1, vocab 128256): 18 bytes per parameter are 145 GB, more than one
    # H200 holds, so on two it needs the distributed optimizer, tensor or pipeline parallelism
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256,
                      norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    # Qwen2.5-3B's shape (36 layers, GQA 8:1, ffn 11008, vocab 151936; untied here): session 31's set 15
    "qwen-3b": dict(layers=36, hidden=2048, heads=16, kv_heads=2, ffn_hidden=11008, vocab=151936,
                    norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "gpt-2.7b": dict(layers=32, hidden=2560, heads=32, kv_heads=32, ffn_hidden=10240, vocab=50304,
                     norm="layernorm", activation="gelu", position="learned", linear_bias=True),
    "gpt-1.3b": dict(layers=24, hidden=2048, heads=16, kv_heads=16, ffn_hidden=8192, vocab=50304,
                     norm="layernorm", activation="gelu", position="learned", linear_bias=True),
    "tiny-llama": dict(layers=4, hidden=128, heads=4, kv_heads=2, ffn_hidden=256, vocab=512,
                       norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "tiny-gpt": dict(layers=4, hidden=128, heads=4, kv_heads=4, ffn_hidden=512, vocab=512,
                     norm="layernorm", activation="gelu", position="learned", linear_bias=True),
    # the host grid: the real models' op structure at sizes whose kernels take a few microseconds,
    # so that a step's time is the host's time to issue it
    "host-llama": dict(layers=8, hidden=256, heads=4, kv_heads=2, ffn_hidden=1024, vocab=2048,
                       norm="rmsnorm", activation="swiglu", position="rope", linear_bias=False),
    "host-gpt": dict(layers=8, hidden=256, heads=4, kv_heads=4, ffn_hidden=1024, vocab=2048,
                     norm="layernorm", activation="gelu", position="learned", linear_bias=True),
    # Mixture-of-experts (every layer): `experts` routed experts of width `moe_ffn_hidden`, `topk` per
    # token, no shared expert; Megatron-Core only (its MoELayer: TopKRouter with the aux loss, the
    # alltoall token dispatcher, SequentialMLP experts: the local spec has no grouped GEMM without the
    # grouped_gemm package or Transformer Engine). A Mixtral-like layout (8 wide experts, top-2) and a
    # fine-grained one (64 narrow experts, top-8, as Qwen3-MoE / DeepSeek route)
    "moe-8x2": _moe(8, 2048, 16, 8, 32768, experts=8, topk=2, ffn=5632),
    "moe-64x8": _moe(8, 2048, 16, 4, 32768, experts=64, topk=8, ffn=768),
    "tiny-moe": _moe(2, 128, 4, 2, 512, experts=4, topk=2, ffn=256),
    "tiny-moe-16": _moe(2, 128, 4, 2, 512, experts=16, topk=4, ffn=64),
    "tiny-moe-64": _moe(2, 128, 4, 2, 512, experts=64, topk=8, ffn=64),
    # session 20's fresh MoE set: a DeepSeekMoE-like layout (16 experts of 1408, top-4) and a wider,
    # shallower one (32 experts of 1024, top-4, hidden 2560)
    "moe-16x4": _moe(8, 2048, 16, 4, 32768, experts=16, topk=4, ffn=1408),
    "moe-32x4": _moe(6, 2560, 20, 4, 32768, experts=32, topk=4, ffn=1024),
    # MoE twins: the host grid's sizes with a MoE model's expert count (top-k and layers come from the
    # plan's case), so that the twin's step is the host's time to issue the MoE layers' Python code too
    # (router, dispatcher, the loop over local experts), which a dense twin does not run
    **{f"host-moe-{e}": _moe(8, 256, 4, 2, 2048, experts=e, topk=2, ffn=64) for e in (8, 16, 32, 64)},
}
# the aux-loss coefficient of every MoE case (Megatron-Core's load-balancing loss; Mixtral-style runs use 1e-2)
MOE_AUX_LOSS_COEFF = 1e-2


def case(framework, model, seq, world, tp=1, pp=1, vp=1, cp=1, zero=0, sp=False, recompute="none", mbs=1, gbs=8,
         risky=False, layers=None, topk=None, ep=1):
    """One case: framework, model (a MODELS name), sequence, world and plan fields; dp is what is
    left of the world after tp * pp * cp. ``topk`` overrides a MoE model's experts per token; ``ep``
    (MoE, Megatron-Core only) splits the experts over ep ranks of the data-parallel group."""
    dp = world // (tp * pp * cp)
    m = dict(MODELS[model], seq=seq, tied_embeddings=False)
    if layers is not None:
        m["layers"] = layers
    if topk is not None:
        m["topk"] = topk
    plan = dict(world=world, tp=tp, pp=pp, vp=vp, cp=cp, dp=dp, ep=ep, sequence_parallel=bool(sp and tp > 1),
                zero_stage=zero, recompute=recompute, mbs=mbs, gbs=gbs,
                schedule=("interleaved" if vp > 1 else "1f1b") if pp > 1 else None)
    return dict(framework=framework, name=model, model=m, plan=plan, risky=risky)


def unsupported_reason(c: dict) -> str | None:
    """Why the runners cannot run case ``c``, or None: the torch-native runner builds learned
    position embeddings only unsharded (torchtitan's models use RoPE), so not under TP or CP."""
    p = c["plan"]
    if c["framework"] == "torchtitan" and c["model"]["position"] == "learned" and (p["tp"] > 1 or p.get("cp", 1) > 1):
        return "the torch-native runner has no learned positions under tensor or context parallelism"
    if p.get("ep", 1) > 1 and not c["model"].get("experts"):
        return "expert parallelism needs a MoE model"
    if p.get("ep", 1) > 1 and c["framework"] == "torchtitan":
        return "the torch-native runner has no MoE layers, so no expert parallelism"
    return None


def _megatron_two_gpu(model, seq, gbs, recompute="none", extra=True, risky_ddp=False):
    F = "megatron-core-local"
    out = [case(F, model, seq, 2, zero=0, gbs=gbs, recompute=recompute, risky=risky_ddp),
           case(F, model, seq, 2, zero=1, gbs=gbs, recompute=recompute),
           case(F, model, seq, 2, tp=2, sp=False, gbs=gbs, recompute=recompute),
           case(F, model, seq, 2, tp=2, sp=True, gbs=gbs, recompute=recompute),
           case(F, model, seq, 2, pp=2, gbs=gbs, recompute=recompute)]
    if extra:
        out.append(case(F, model, seq, 2, pp=2, vp=2, gbs=gbs, recompute=recompute))
    return out


def grid(name: str) -> list[dict]:
    """The named case list (every world size; the launcher keeps those of its --nproc)."""
    F, T = "megatron-core-local", "torchtitan"
    if name == "cpu":
        return [case(T, "tiny-llama", 64, 1, gbs=4), case(T, "tiny-llama", 64, 2, zero=0, gbs=4),
                case(T, "tiny-llama", 64, 2, zero=3, gbs=4), case(T, "tiny-llama", 64, 2, tp=2, sp=True, gbs=4),
                case(T, "tiny-gpt", 64, 2, zero=3, gbs=4, recompute="full"),
                case(T, "tiny-llama", 64, 2, pp=2, gbs=4), case(T, "tiny-llama", 64, 2, pp=2, vp=2, gbs=4)]
    if name == "clocks1":    # single-GPU steps from GPU-bound to host-bound, for the step power model
        return [case(F, "llama-4b", 2048, 1, mbs=2, gbs=8), case(F, "gpt-2.7b", 2048, 1, mbs=2, gbs=8, recompute="full"),
                case(T, "gpt-2.7b", 3072, 1, gbs=8), case(T, "llama-1b", 2048, 1, gbs=8),
                case(F, "host-llama", 512, 1, gbs=8)]
    if name == "smoke":
        return [case(F, "tiny-llama", 256, 1, gbs=4), case(F, "tiny-gpt", 256, 1, gbs=4, recompute="full"),
                case(F, "llama-1b", 2048, 1, gbs=2),
                case(F, "llama-1b", 2048, 2, zero=0, gbs=4), case(F, "llama-1b", 2048, 2, zero=1, gbs=4),
                case(F, "llama-1b", 2048, 2, tp=2, sp=True, gbs=4, recompute="selective"),
                case(F, "tiny-gpt", 256, 2, tp=2, sp=False, gbs=4),
                case(F, "llama-1b", 2048, 2, pp=2, gbs=4, recompute="full"),
                case(F, "tiny-llama", 256, 2, pp=2, vp=2, gbs=4),
                case(T, "tiny-llama", 256, 1, gbs=4), case(T, "llama-1b", 2048, 2, zero=3, gbs=4),
                case(T, "llama-1b", 2048, 2, tp=2, sp=True, gbs=4), case(T, "tiny-gpt", 256, 2, zero=0, gbs=4)]
    if name in ("main", "m1"):
        # one GPU: the baselines
        cases = [case(F, "llama-1b", 2048, 1, gbs=4), case(F, "llama-1b", 4096, 1, gbs=2),
                 case(F, "llama-1b", 4096, 1, gbs=2, recompute="selective"),
                 case(F, "llama-1b", 4096, 1, gbs=2, recompute="full"),
                 case(F, "gpt-1.3b", 2048, 1, gbs=4), case(F, "llama-1b", 8192, 1, gbs=1),
                 case(F, "llama-3b", 4096, 1, gbs=2, recompute="full"),
                 case(F, "llama-7b", 2048, 1, gbs=2, risky=True)]          # 18 B/param: does not fit
        if name == "m1":
            return cases
    else:
        cases = []
    if name in ("main", "m2a"):
        # two GPUs: the plans the planner chooses between, per model and sequence
        cases += _megatron_two_gpu("llama-1b", 2048, 8)
        cases += _megatron_two_gpu("llama-1b", 4096, 4)
        cases += [case(F, "llama-1b", 4096, 2, zero=1, gbs=4, recompute="selective"),
                  case(F, "llama-1b", 4096, 2, zero=1, gbs=4, recompute="full"),
                  case(F, "llama-1b", 4096, 2, tp=2, sp=True, gbs=4, recompute="selective"),
                  case(F, "llama-1b", 4096, 2, zero=1, mbs=2, gbs=4)]
        cases += _megatron_two_gpu("gpt-1.3b", 2048, 8)
        cases += _megatron_two_gpu("llama-1b", 8192, 2, extra=False)
    if name == "m2redo":     # re-run after a failed neighbour left its process short of memory
        cases += [case(F, "llama-1b", 4096, 2, pp=2, vp=2, gbs=4),
                  case(F, "llama-1b", 4096, 2, zero=1, gbs=4, recompute="selective")]
    if name in ("main", "m2b", "m2redo"):
        cases += _megatron_two_gpu("llama-3b", 4096, 4, recompute="full", extra=False)
        cases += [case(F, "llama-3b", 4096, 2, tp=2, sp=True, gbs=4, risky=True)]   # no recompute
        cases += _megatron_two_gpu("llama-7b", 2048, 4, risky_ddp=True)
    if cases:
        return cases
    if name in NAMED_GRIDS:
        return NAMED_GRIDS[name]()
    if name == "fsdp-sync":   # FSDP2 reducing every micro-batch, as torchtitan does
        T = "torchtitan"
        return [dict(c, fsdp_sync_each=True) for c in (
            case(T, "llama-1b", 2048, 2, zero=3, gbs=8), case(T, "llama-1b", 4096, 2, zero=3, gbs=4),
            case(T, "gpt-1.3b", 2048, 2, zero=3, gbs=8), case(T, "llama-3b", 4096, 2, zero=3, gbs=4))]
    if name == "frag":    # the plans that ran out of memory with far less allocated than reserved
        F = "megatron-core-local"
        return [case(F, "llama-1b", 4096, 2, zero=1, mbs=2, gbs=4, risky=True),
                case(F, "llama-1b", 8192, 2, tp=2, gbs=2, risky=True),
                case(F, "llama-7b", 2048, 2, zero=1, gbs=4, risky=True),
                case(F, "llama-1b", 8192, 2, pp=2, gbs=2, recompute="full", risky=True)]
    if name == "prereg-rest":    # the pre-registered cases the first run lost or did not reach
        return [c for c in prereg_grid() if c.get("risky") or
                (c["framework"] == "torchtitan" and c["name"] == "llama-3b" and c["plan"]["zero_stage"] == 3)]
    if name == "profile":     # where the GPU time of seq-2048 steps goes (kernel profile of one step)
        F = "megatron-core-local"
        return [dict(c, profile=True) for c in (
            case(F, "llama-1b", 2048, 2, zero=0, gbs=8), case(F, "llama-1b", 4096, 2, zero=0, gbs=4),
            case(F, "gpt-1.3b", 2048, 2, tp=2, gbs=8), case(F, "llama-1b", 2048, 2, tp=2, gbs=8))]
    if name == "profile1":   # one H200: the steps sets 10 and 12 found 5-9% slower than predicted, kernel-profiled
        return [dict(c, profile=True) for c in (
            case(F, "llama-4b", 2048, 1, mbs=2, gbs=8), case(F, "llama-4b", 2048, 1, mbs=2, gbs=8, recompute="full"),
            case(T, "gpt-2.7b", 3072, 1, gbs=8), case(T, "llama-4b", 2048, 1, gbs=8))]
    if name == "profile2":   # one H200, session 12: every kernel (not the top 30) of the steps still too fast
        return [dict(c, profile=True, profile_top_n=400) for c in (
            case(F, "llama-4b", 2048, 1, mbs=2, gbs=8), case(F, "llama-2b", 4096, 1, mbs=2, gbs=8),
            case(F, "llama-3b", 4096, 1, gbs=8, recompute="selective"))]
    if name == "gemm-trace":   # one H200, session 13: every GEMM of the profile2 steps, in the step and alone
        tr = lambda c: dict(c, gemm_trace=True, profile=True, profile_top_n=400)  # noqa: E731
        return [tr(case(F, "llama-4b", 2048, 1, mbs=2, gbs=8)), tr(case(F, "llama-2b", 4096, 1, mbs=2, gbs=8)),
                tr(case(F, "llama-3b", 4096, 1, gbs=8, recompute="selective")),
                tr(case(F, "gpt-1.3b", 2048, 1, mbs=4, gbs=8)), tr(case(T, "llama-4b", 2048, 1, gbs=8))]
    if name == "n2":
        return [case(T, "llama-1b", 4096, 2, zero=0, gbs=4), case(T, "llama-1b", 4096, 2, zero=3, gbs=4),
                case(T, "llama-1b", 4096, 2, tp=2, sp=True, gbs=4), case(T, "llama-7b", 2048, 2, zero=3, gbs=4)]
    if name == "native":
        cases = [case(T, "llama-1b", 4096, 1, gbs=4), case(T, "llama-3b", 4096, 1, gbs=2)]
        for model, seq, gbs in (("llama-1b", 4096, 8), ("llama-3b", 4096, 4), ("llama-1b", 8192, 4)):
            cases += [case(T, model, seq, 2, zero=0, gbs=gbs), case(T, model, seq, 2, zero=3, gbs=gbs),
                      case(T, model, seq, 2, tp=2, sp=True, gbs=gbs)]
        cases += [case(T, "llama-7b", 2048, 2, zero=3, gbs=4), case(T, "llama-7b", 2048, 2, tp=2, sp=True, gbs=4),
                  case(T, "llama-7b", 2048, 2, zero=0, gbs=4, risky=True)]
        return cases
    if name == "host-cp":   # the host cost of torch-native context parallel (fit data, like --grid host)
        S = 256
        out = []
        for n in (2, 8):
            out += [case(T, "host-llama", S, 2, zero=0, gbs=16, layers=n),
                    sync_each(case(T, "host-llama", S, 2, zero=3, gbs=16, layers=n)),
                    sync_each(case(T, "host-llama", S, 2, cp=2, zero=3, gbs=8, layers=n)),
                    sync_each(case(T, "host-llama", S, 2, cp=2, zero=3, gbs=2, layers=n))]
        return out
    if name == "native-profile":   # where torch-native steps spend their GPU time (one profiled step each)
        return [dict(c, profile=True) for c in (
            case(T, "llama-1b", 2048, 2, zero=0, gbs=8), case(T, "llama-1b", 4096, 2, zero=0, gbs=4),
            case(T, "llama-1b", 2048, 2, tp=2, sp=True, gbs=8), case(T, "llama-1b", 4096, 2, pp=2, gbs=8),
            case(T, "llama-1b", 4096, 2, pp=2, vp=2, gbs=8), case(T, "llama-1b", 4096, 2, cp=2, zero=3, gbs=4),
            dict(case(T, "llama-1b", 4096, 2, zero=3, gbs=4), fsdp_sync_each=True))]
    if name == "host-diag":   # is the host's time per step size-dependent? same structure, tiny vs real
        hp = lambda c: dict(c, host_profile=True)  # noqa: E731
        return [sync_each(case(T, "llama-1b", 4096, 2, cp=2, zero=3, gbs=4)),
                sync_each(case(T, "host-llama", 4096, 2, cp=2, zero=3, gbs=4, layers=16)),
                sync_each(case(T, "llama-1b", 4096, 2, zero=3, gbs=4)),
                sync_each(case(T, "host-llama", 4096, 2, zero=3, gbs=4, layers=16)),
                hp(case(T, "llama-1b", 2048, 2, tp=2, sp=True, gbs=8)),
                hp(case(T, "host-llama", 2048, 2, tp=2, sp=True, gbs=8, layers=16)),
                hp(case(F, "llama-1b", 2048, 2, tp=2, gbs=8)),
                hp(case(F, "host-llama", 2048, 2, tp=2, gbs=8, layers=16))]
    if name == "moe-smoke":
        return [case(F, "tiny-moe", 256, 1, gbs=4)]
    if name == "moe-host":   # host-bound MoE steps (kernels of microseconds): the expert loop's host cost
        return [case(F, "tiny-moe", 256, 1, gbs=4), case(F, "tiny-moe-16", 256, 1, gbs=4),
                case(F, "tiny-moe-64", 256, 1, gbs=4), case(F, "tiny-moe-64", 256, 1, gbs=4, topk=2),
                case(F, "host-llama", 256, 1, gbs=4, layers=2)]
    if name == "moe1":       # session 19: the first MoE steps, one GPU (expert parallelism needs two)
        return with_twins(moe1_grid())
    if name == "moe1-alone":   # the moe1 cases whose peak a case before them in the process inflated, each alone
        return [dict(c, risky=True) for c in moe1_grid()[1:5] + moe1_grid()[6:]]
    if name == "moe2":       # session 20: a fresh MoE set, predicted before it ran; MoE twins and dense twins
        cases = [dict(c, risky=True) for c in moe2_grid()]
        return cases + [twin_of(c) for c in moe2_grid()] + [dense_twin(c) for c in moe2_grid()[:3]]
    if name == "moe-diag":   # session 20: where a MoE step's time goes (kernel busy time, host syncs), each alone
        prof = lambda c: dict(c, risky=True, profile=True, profile_top_n=60, host_profile=True)  # noqa: E731
        return [prof(case(F, "moe-8x2", 2048, 1, mbs=1, gbs=8)), prof(case(F, "moe-8x2", 2048, 1, mbs=2, gbs=8)),
                prof(case(F, "moe-8x2", 2048, 1, mbs=1, gbs=4)), prof(case(F, "moe-64x8", 2048, 1, mbs=1, gbs=8)),
                prof(case(F, "moe-64x8", 2048, 1, mbs=2, gbs=8)), prof(case(F, "tiny-moe-64", 256, 1, gbs=4)),
                case(F, "host-llama", 2048, 1, mbs=1, gbs=8), case(F, "host-llama", 2048, 1, mbs=2, gbs=8),
                case(F, "host-llama", 2048, 1, mbs=1, gbs=4), case(F, "host-llama", 256, 1, gbs=4, layers=2)]
    if name == "cpu-pp":
        return [case(T, "tiny-llama", 64, 2, pp=2, gbs=4), case(T, "tiny-llama", 64, 2, pp=2, vp=2, gbs=4),
                case(T, "tiny-gpt", 64, 2, pp=2, gbs=8, recompute="full")]
    raise SystemExit(f"unknown grid {name!r}")


def moe1_grid() -> list[dict]:
    """Megatron-Core MoE steps on one GPU (session 19, predicted before they ran): a Mixtral-like
    layout (8 experts, top-2) and a fine-grained one (64 experts, top-8, and top-2 on the same
    weights), each at one and two micro-batch sizes, with full recompute, and the fine-grained
    model at seq 4096: per-expert GEMMs from 4k to 32k rows, the router, the token permutations,
    SequentialMLP's per-expert loop on the host."""
    F = "megatron-core-local"
    return [case(F, "moe-8x2", 2048, 1, mbs=1, gbs=8), case(F, "moe-8x2", 2048, 1, mbs=2, gbs=8),
            case(F, "moe-8x2", 2048, 1, mbs=2, gbs=8, recompute="full"),
            case(F, "moe-64x8", 2048, 1, mbs=1, gbs=8), case(F, "moe-64x8", 2048, 1, mbs=2, gbs=8),
            case(F, "moe-64x8", 2048, 1, mbs=2, gbs=8, recompute="full"),
            case(F, "moe-64x8", 2048, 1, mbs=2, gbs=8, topk=2), case(F, "moe-64x8", 4096, 1, mbs=1, gbs=8)]


def moe2_grid() -> list[dict]:
    """Megatron-Core MoE steps on one GPU never run before (session 20, predicted before they ran):
    16 experts top-4 at micro-batch 1 and 2, 32 experts top-4 on a wider, shallower model (with and
    without selective recompute), and the Mixtral-like 8x2 at sequence 4096."""
    F = "megatron-core-local"
    return [case(F, "moe-16x4", 2048, 1, mbs=1, gbs=8), case(F, "moe-16x4", 2048, 1, mbs=2, gbs=8),
            case(F, "moe-32x4", 2048, 1, mbs=1, gbs=8), case(F, "moe-32x4", 2048, 1, mbs=1, gbs=8, recompute="selective"),
            case(F, "moe-8x2", 4096, 1, mbs=1, gbs=8)]


def dense_twin(c: dict) -> dict:
    """The dense host-grid twin of a case (host-llama or host-gpt), whatever its FFN: what a MoE
    case was paired with before MoE twins existed."""
    return twin_of({**c, "model": {k: v for k, v in c["model"].items() if k not in ("experts", "topk", "moe_ffn_hidden")}})


def sync_each(c: dict) -> dict:
    """Case ``c`` with FSDP2 reducing gradients after every micro-batch (torchtitan's loop)."""
    return dict(c, fsdp_sync_each=True)


def _torch_native_group(model: str, seq: int, gbs: int = 8) -> list[dict]:
    """The torch-native plans of one model that the pre-registered sets run side by side: DDP,
    FSDP2, DTensor TP + SP, pipelining 1F1B and interleaved, and context parallel over FSDP2 (the
    two FSDP2 cases with a gradient sync every micro-batch, as torchtitan runs them)."""
    T = "torchtitan"
    return [case(T, model, seq, 2, zero=0, gbs=gbs), sync_each(case(T, model, seq, 2, zero=3, gbs=gbs)),
            case(T, model, seq, 2, tp=2, sp=True, gbs=gbs), case(T, model, seq, 2, pp=2, gbs=gbs),
            case(T, model, seq, 2, pp=2, vp=2, gbs=gbs), sync_each(case(T, model, seq, 2, cp=2, zero=3, gbs=gbs))]


def _megatron_group(model: str, seq: int, recompute: str, gbs: int = 8) -> list[dict]:
    """The Megatron-Core local plans of one model that sets 9 and 11 run side by side: dp +
    distributed optimizer, tp, tp + sp, pp 1F1B, interleaved, and dp + distributed optimizer with
    ``recompute``."""
    F = "megatron-core-local"
    return [case(F, model, seq, 2, zero=1, gbs=gbs), case(F, model, seq, 2, tp=2, gbs=gbs),
            case(F, model, seq, 2, tp=2, sp=True, gbs=gbs), case(F, model, seq, 2, pp=2, gbs=gbs),
            case(F, model, seq, 2, pp=2, vp=2, gbs=gbs), case(F, model, seq, 2, zero=1, gbs=gbs, recompute=recompute)]


def native12_grid() -> list[dict]:
    """A thirteenth pre-registered two-GPU set (logs/prereg13_h200x2_plan.txt), registered with the
    model of session 11 before the Megatron-Core local kernel reconciliation of that session was
    merged (its developer never saw this set): llama-2b at s4096 and micro-batch 2 under
    Megatron-Core local (never run under Megatron: dp + distributed optimizer, tp, tp + sp, pp,
    interleaved, selective recompute) and llama-3b at s3072 under torch-native parallelism (DDP,
    FSDP2, DTensor TP + SP, pp, interleaved, cp), every plan followed by its twin."""
    F = "megatron-core-local"
    # the largest predicted peak (interleaved, 129 GiB of 140) first, in a fresh process (set 12)
    cases = [case(F, "llama-2b", 4096, 2, pp=2, vp=2, mbs=2, gbs=16),
             case(F, "llama-2b", 4096, 2, zero=1, mbs=2, gbs=16), case(F, "llama-2b", 4096, 2, tp=2, mbs=2, gbs=16),
             case(F, "llama-2b", 4096, 2, tp=2, sp=True, mbs=2, gbs=16), case(F, "llama-2b", 4096, 2, pp=2, mbs=2, gbs=16),
             case(F, "llama-2b", 4096, 2, zero=1, mbs=2, gbs=16, recompute="selective")]
    return with_twins(cases + _torch_native_group("llama-3b", 3072))


def native13_grid() -> list[dict]:
    """A fourteenth pre-registered two-GPU set (logs/prereg14_h200x2_plan.txt): a model that does
    not fit one H200 with its optimizer (llama3-8b, Llama-3-8B's shape, s2048), the plans a team
    would weigh on two under both frameworks. Megatron-Core local: tp, tp + sp, pp, interleaved
    (the largest predicted peak, first in a fresh process), dp + distributed optimizer with full
    recompute, tp + sp with selective recompute, and, run alone at the end (risky), dp +
    distributed optimizer without recompute (predicted just over the line) and plain DDP; torch
    native: FSDP2, DTensor TP + SP, pp, interleaved, cp, and DDP (risky). Each plan is followed at
    once by its twin, so that a budget stop leaves whole pairs."""
    F, T = "megatron-core-local", "torchtitan"
    m, s = "llama3-8b", 2048
    megatron = [case(F, m, s, 2, pp=2, vp=2, gbs=8), case(F, m, s, 2, tp=2, gbs=8), case(F, m, s, 2, tp=2, sp=True, gbs=8),
                case(F, m, s, 2, pp=2, gbs=8), case(F, m, s, 2, zero=1, gbs=8, recompute="full"),
                case(F, m, s, 2, tp=2, sp=True, gbs=8, recompute="selective"),
                case(F, m, s, 2, zero=1, gbs=8, risky=True), case(F, m, s, 2, zero=0, gbs=8, risky=True)]
    native = [sync_each(case(T, m, s, 2, zero=3, gbs=8)), case(T, m, s, 2, tp=2, sp=True, gbs=8),
              case(T, m, s, 2, pp=2, gbs=8), case(T, m, s, 2, pp=2, vp=2, gbs=8),
              sync_each(case(T, m, s, 2, cp=2, zero=3, gbs=8)), case(T, m, s, 2, zero=0, gbs=8, risky=True)]
    return [x for c in megatron + native for x in (c, twin_of(c))]


def native14_grid() -> list[dict]:
    """A fifteenth pre-registered two-GPU set (logs/prereg15_h200x2_plan.txt, session 31): Qwen2.5-3B's
    shape (qwen-3b) at s4096, never run under either framework, every plan family a team weighs on
    two GPUs. Megatron-Core local: interleaved (first, in a fresh process), pp, tp, tp + sp, dp +
    distributed optimizer, the same with selective recompute, tp + sp with full recompute, and,
    alone at the end (risky: predicted within 2% of the memory), plain DDP; torch-native: DDP, FSDP2, DTensor TP + SP, pp, interleaved, cp. Each plan followed at once
    by its twin, so that a budget stop leaves whole pairs; run with ``--only`` per framework."""
    F, T = "megatron-core-local", "torchtitan"
    m, s = "qwen-3b", 4096
    megatron = [case(F, m, s, 2, pp=2, vp=2, gbs=8), case(F, m, s, 2, pp=2, gbs=8), case(F, m, s, 2, tp=2, gbs=8),
                case(F, m, s, 2, tp=2, sp=True, gbs=8), case(F, m, s, 2, zero=1, gbs=8),
                case(F, m, s, 2, zero=1, gbs=8, recompute="selective"),
                case(F, m, s, 2, tp=2, sp=True, gbs=8, recompute="full"), case(F, m, s, 2, zero=0, gbs=8, risky=True)]
    native = [case(T, m, s, 2, zero=0, gbs=8), sync_each(case(T, m, s, 2, zero=3, gbs=8)),
              case(T, m, s, 2, tp=2, sp=True, gbs=8), case(T, m, s, 2, pp=2, gbs=8),
              case(T, m, s, 2, pp=2, vp=2, gbs=8), sync_each(case(T, m, s, 2, cp=2, zero=3, gbs=8))]
    return [x for c in megatron + native for x in (c, twin_of(c))]


def moe3_grid() -> list[dict]:
    """The first MoE steps with expert parallelism (session 31, logs/prereg_moe3_h200x2_plan.txt):
    Megatron-Core local on two GPUs, the experts replicated (ep 1, distributed optimizer) or split
    over the two ranks (ep 2: the alltoall dispatcher's all-to-all over NVLink), beside tp + sp and
    pp, for three expert layouts already run on one GPU (moe2 / moe1), at micro-batch 4 (8,192 tokens,
    so that the experts' GEMMs, not the host, set most steps): 16 experts top-4, the
    Mixtral-like 8 experts top-2 and the fine-grained 64 experts top-8. Each plan runs alone (a MoE
    case leaves memory behind in its process); the MoE twins (host-moe-E, the same plan) run first."""
    F = "megatron-core-local"
    plans = [case(F, "moe-16x4", 2048, 2, zero=1, mbs=4, gbs=32), case(F, "moe-16x4", 2048, 2, zero=1, ep=2, mbs=4, gbs=32),
             case(F, "moe-16x4", 2048, 2, zero=0, ep=2, mbs=4, gbs=32), case(F, "moe-16x4", 2048, 2, tp=2, sp=True, mbs=4, gbs=32),
             case(F, "moe-16x4", 2048, 2, pp=2, mbs=4, gbs=32),
             case(F, "moe-8x2", 2048, 2, zero=1, mbs=4, gbs=32), case(F, "moe-8x2", 2048, 2, zero=1, ep=2, mbs=4, gbs=32),
             case(F, "moe-64x8", 2048, 2, zero=1, ep=2, mbs=4, gbs=32)]
    return [dict(c, risky=True) for c in plans] + [twin_of(c) for c in plans]


def native12b_grid() -> list[dict]:
    """Set 13 again on a second machine, the plans whose records the first run lost (its launcher
    was stopped by the call's time limit before it wrote them; their times are in
    logs/h200x2_plan_native12_run.log): as registered (logs/prereg13_h200x2_plan.txt) but without
    the interleaved plan (out of memory there, recorded) and the two host-bound torch-native plans
    (TP + SP, cp: 25-39 s each), each plan followed at once by its twin so that a budget stop
    leaves whole pairs."""
    keep = [c for c in native12_grid() if not c["name"].startswith("host-")
            and not (c["framework"] == "megatron-core-local" and c["plan"]["vp"] > 1)
            and not (c["framework"] == "torchtitan" and (c["plan"]["tp"] > 1 or c["plan"]["cp"] > 1))]
    return [x for c in keep for x in (c, twin_of(c))]


def native11_grid() -> list[dict]:
    """A twelfth pre-registered two-GPU set (logs/prereg12_h200x2_plan.txt): set 11's Megatron-Core
    interleaved plan that ran out of memory after four earlier cases (predicted 121 GiB) first, in
    a fresh process, then set 10's plans again on another machine (llama-4b s2048 mbs2 Megatron-Core
    local, gpt-2.7b s3072 torch-native; set 10 measured every plan 5-13% slower than predicted, so a
    repeat says whether that was its machine or the model), every plan followed by its twin."""
    F = "megatron-core-local"
    first = [case(F, "llama-3b", 4096, 2, pp=2, vp=2, gbs=8)]
    repeat = [c for c in native9_grid() if not c["name"].startswith("host-") and not unsupported_reason(c)]
    return with_twins(first + repeat)


def h100a_grid() -> list[dict]:
    """The first pre-registered plan steps on another GPU type (logs/prereg_h100a_plan.txt): one H100
    80 GB, Megatron-Core local and torch-native single-GPU steps of five models, a plan predicted not
    to fit (llama-4b mbs2: 18 bytes per parameter plus activations above 80 GB), every plan followed
    by its twin (the host speed of that machine)."""
    F, T = "megatron-core-local", "torchtitan"
    return with_twins([case(F, "llama-1b", 2048, 1, gbs=8), case(F, "gpt-1.3b", 2048, 1, gbs=8),
                       case(F, "llama-1b", 4096, 1, gbs=4, recompute="selective"),
                       case(F, "llama-3b", 4096, 1, gbs=4, recompute="full"),
                       case(T, "llama-1b", 2048, 1, gbs=8), case(T, "gpt-2.7b", 3072, 1, gbs=8),
                       case(T, "llama-3b", 2048, 1, gbs=8),
                       case(F, "llama-4b", 2048, 1, mbs=2, gbs=8, risky=True)])


def single44_grid() -> list[dict]:
    """Single-GPU plans registered in session 44 and run on one H100 and one H200 (the same grid on both:
    logs/prereg_single44_h100.txt, logs/prereg_single44_h200.txt): model shapes and plan combinations
    never run on one GPU, with the model of that session (its GEMM, attention, memory-bound and host
    models all changed since h100a). Megatron-Core local: Qwen2.5-3B's shape with full recompute,
    llama-2b at s4096 with selective recompute, gpt-2.7b at micro-batch 2, the Mixtral-like MoE at
    s4096; torch-native: qwen-3b with full recompute, llama-2b at s8192 (flash attention's share grows),
    gpt-1.3b at micro-batch 2 and s4096, and llama-4b (65.9 GiB predicted: close to an H100's line).
    Risky, each run alone at the end in a fresh process: the three plans nearest or over an H100's
    memory (Megatron qwen-3b 69.6 GiB and gpt-2.7b at micro-batch 2, 108.7 GiB, predicted not to fit
    on 80 GB; torch-native llama-4b) and the MoE plan (a MoE case leaves memory behind in its process,
    as in set moe3). Each plan is followed by its tiny twin (the machine's host speed)."""
    F, T = "megatron-core-local", "torchtitan"
    plans = [case(F, "qwen-3b", 2048, 1, gbs=8, recompute="full", risky=True),
             case(F, "llama-2b", 4096, 1, gbs=4, recompute="selective"),
             case(F, "gpt-2.7b", 2048, 1, mbs=2, gbs=8, risky=True), case(F, "moe-8x2", 4096, 1, gbs=8, risky=True),
             case(T, "qwen-3b", 2048, 1, gbs=8, recompute="full"), case(T, "llama-2b", 8192, 1, gbs=2),
             case(T, "gpt-1.3b", 4096, 1, mbs=2, gbs=8), case(T, "llama-4b", 2048, 1, gbs=8, risky=True)]
    return [x for c in plans for x in (c, twin_of(c))]


def rank44_grid() -> list[dict]:
    """Single-GPU plan choices of one model each, registered in session 44 for one H100
    (logs/prereg_rank44_h100.txt): what a planner weighs on one GPU is micro-batch against recompute
    against memory, so each group holds one model at one global batch under every such choice, for
    Kendall tau and the pick. Megatron-Core local, llama-2b s4096 gbs 8: micro-batch 1 and 2 without
    recompute, 1 and 2 with selective, 2 and 4 with full; torch-native, llama-1b s4096 gbs 16:
    micro-batch 1, 2 and 4 without recompute, 4 and 8 with full. The plans nearest or over an H100's
    memory (Megatron micro-batch 1 and 2 without recompute: 75.9 and 126 GiB predicted, neither fitting;
    torch-native micro-batch 4, 52 GiB) run alone at the end (risky); each plan is followed by its
    tiny twin."""
    F, T = "megatron-core-local", "torchtitan"
    m, n = "llama-2b", "llama-1b"
    megatron = [case(F, m, 4096, 1, gbs=8, risky=True), case(F, m, 4096, 1, mbs=2, gbs=8, risky=True),
                case(F, m, 4096, 1, gbs=8, recompute="selective"), case(F, m, 4096, 1, mbs=2, gbs=8, recompute="selective"),
                case(F, m, 4096, 1, mbs=2, gbs=8, recompute="full"), case(F, m, 4096, 1, mbs=4, gbs=8, recompute="full")]
    native = [case(T, n, 4096, 1, gbs=16), case(T, n, 4096, 1, mbs=2, gbs=16), case(T, n, 4096, 1, mbs=4, gbs=16, risky=True),
              case(T, n, 4096, 1, mbs=4, gbs=16, recompute="full"), case(T, n, 4096, 1, mbs=8, gbs=16, recompute="full")]
    return [x for c in megatron + native for x in (c, twin_of(c))]


def native10_grid() -> list[dict]:
    """An eleventh pre-registered two-GPU set (logs/prereg11_h200x2_plan.txt), the first predicted
    with the step power model and run with NVML clocks per record: llama-3b at s4096 under
    Megatron-Core local (a sequence no llama-3b run had: dp + distributed optimizer, tp, tp + sp,
    pp, interleaved, full recompute) and llama-4b under torch-native parallelism (never run
    torch-native: DDP, FSDP2, DTensor TP + SP, pp, interleaved, cp), every plan followed by its
    twin; registered rule as sets 9-10: each plan under its own twin's host factor."""
    return with_twins(_megatron_group("llama-3b", 4096, "full") + _torch_native_group("llama-4b", 2048))


def native9_grid() -> list[dict]:
    """A tenth pre-registered two-GPU set (logs/prereg10_h200x2_plan.txt): a Llama-style
    Megatron-Core local group at micro-batch 2 on a shape no earlier run had (llama-4b s2048, GQA
    7:1: dp + distributed optimizer, tp + sp, pp, interleaved, full recompute, tp + sp with
    selective recompute) and a GPT-style torch-native group (gpt-2.7b s3072: DDP, FSDP2, DTensor
    TP + SP, pp, interleaved, cp), every plan followed by its twin; registered rule as set 9: each
    plan under its own twin's host factor. The torch-native TP + SP and cp cases cannot run
    (learned positions under TP/CP: unsupported_reason): they errored on the machine, and the
    launcher now skips them."""
    F = "megatron-core-local"
    cases = [case(F, "llama-4b", 2048, 2, zero=1, mbs=2, gbs=16), case(F, "llama-4b", 2048, 2, tp=2, sp=True, mbs=2, gbs=16),
             case(F, "llama-4b", 2048, 2, pp=2, mbs=2, gbs=16), case(F, "llama-4b", 2048, 2, pp=2, vp=2, mbs=2, gbs=16),
             case(F, "llama-4b", 2048, 2, zero=1, mbs=2, gbs=16, recompute="full"),
             case(F, "llama-4b", 2048, 2, tp=2, sp=True, mbs=2, gbs=16, recompute="selective")]
    return with_twins(cases + _torch_native_group("gpt-2.7b", 3072))


def native8_grid() -> list[dict]:
    """A ninth pre-registered two-GPU set (logs/prereg9_h200x2_plan.txt) on two model shapes no
    earlier run had: a GPT-style Megatron-Core local group (gpt-2.7b s2048: dp + distributed
    optimizer, tp, tp + sp, pp, interleaved, selective recompute) and a torch-native group
    (llama-2b s4096, GQA 5:1: DDP, FSDP2, DTensor TP + SP, pp, interleaved, cp), every plan
    followed by its twin; registered rule: each plan under its own twin's host factor."""
    return with_twins(_megatron_group("gpt-2.7b", 2048, "selective") + _torch_native_group("llama-2b", 4096))


def native7_grid() -> list[dict]:
    """An eighth pre-registered two-GPU set (logs/prereg8_h200x2_plan.txt), predicted by the model
    of session 7 (host/GPU tandem, host costs per checkpointed region, per pipeline chunk and per
    FSDP2 unit refitted over five machines' twins) and the step-based twin rule: a GPT-style
    Megatron-Core local group (gpt-1.3b s2560: dp + distributed optimizer, tp + sp, pp,
    interleaved, full recompute, tp with selective recompute) and a torch-native group (llama-3b
    s2048: DDP, FSDP2, DTensor TP + SP, pp, interleaved, cp), every plan followed by its twin."""
    F = "megatron-core-local"
    cases = [case(F, "gpt-1.3b", 2560, 2, zero=1, gbs=8), case(F, "gpt-1.3b", 2560, 2, tp=2, sp=True, gbs=8),
             case(F, "gpt-1.3b", 2560, 2, pp=2, gbs=8), case(F, "gpt-1.3b", 2560, 2, pp=2, vp=2, gbs=8),
             case(F, "gpt-1.3b", 2560, 2, zero=1, gbs=8, recompute="full"),
             case(F, "gpt-1.3b", 2560, 2, tp=2, gbs=8, recompute="selective")]
    return with_twins(cases + _torch_native_group("llama-3b", 2048))


def native6_grid() -> list[dict]:
    """A seventh pre-registered two-GPU set (logs/prereg7_h200x2_plan.txt), predicted by the model
    of the host-speed commit: one Megatron-Core local group (llama-3b s1536: dp + distributed
    optimizer, tp, tp + sp, pp, interleaved, selective recompute) and one torch-native group
    (llama-1b s3072: DDP, FSDP2, DTensor TP + SP, pp, interleaved, cp) for rank agreement and
    picks, every plan followed by its tiny twin: the machine's host speed
    (validation/host_speed.py), measured in the same run on separate records."""
    F = "megatron-core-local"
    cases = [case(F, "llama-3b", 1536, 2, zero=1, gbs=8), case(F, "llama-3b", 1536, 2, tp=2, gbs=8),
             case(F, "llama-3b", 1536, 2, tp=2, sp=True, gbs=8), case(F, "llama-3b", 1536, 2, pp=2, gbs=8),
             case(F, "llama-3b", 1536, 2, pp=2, vp=2, gbs=8),
             case(F, "llama-3b", 1536, 2, zero=1, gbs=8, recompute="selective")]
    return with_twins(cases + _torch_native_group("llama-1b", 3072))


def native5_grid() -> list[dict]:
    """A sixth pre-registered two-GPU set (logs/prereg6_h200x2_plan.txt), predicted after GQA's
    repeated K/V were counted for Megatron-Core's local attention (developed on the fifth set) and
    the grouped-GEMM set-up: GQA models at sequences never run under every Megatron family, and
    torch-native plans at new sizes."""
    T, F = "torchtitan", "megatron-core-local"
    return [case(F, "llama-1b", 5120, 2, zero=1, gbs=4), case(F, "llama-1b", 5120, 2, tp=2, sp=True, gbs=4),
            case(F, "llama-1b", 5120, 2, pp=2, gbs=4), case(F, "llama-7b", 2048, 2, tp=2, sp=True, gbs=4, recompute="full"),
            case(F, "llama-3b", 2560, 2, pp=2, vp=2, gbs=8),
            case(T, "llama-1b", 5120, 2, zero=0, gbs=4), sync_each(case(T, "llama-1b", 5120, 2, zero=3, gbs=4)),
            case(T, "llama-1b", 5120, 2, pp=2, gbs=8), sync_each(case(T, "llama-3b", 6144, 2, cp=2, zero=3, gbs=2))]


def native4_grid() -> list[dict]:
    """A fifth pre-registered two-GPU set (logs/prereg5_h200x2_plan.txt), predicted after the
    torch-native kernel reconciliation (autocast casts, fp32 gradient sums, fp32 RoPE): torch-native
    and Megatron-Core local plans at combinations never run (llama-3b at seq 3072 under Megatron,
    selective recompute, GPT-style pipelines at seq 2048, llama-1b cp at seq 16384, DTensor TP at 3B)."""
    T, F = "torchtitan", "megatron-core-local"
    return [case(T, "llama-1b", 4096, 2, zero=0, gbs=8), case(T, "gpt-1.3b", 2048, 2, zero=0, gbs=16),
            sync_each(case(T, "llama-3b", 4096, 2, zero=3, gbs=8)), sync_each(case(T, "llama-7b", 2048, 2, zero=3, gbs=8)),
            case(T, "gpt-1.3b", 2048, 2, pp=2, gbs=16), case(T, "llama-1b", 2048, 2, pp=2, vp=2, gbs=16),
            case(T, "llama-3b", 8192, 2, pp=2, gbs=8, recompute="full"),
            sync_each(case(T, "llama-1b", 16384, 2, cp=2, zero=3, gbs=2)), case(T, "llama-3b", 2048, 2, tp=2, sp=True, gbs=8),
            case(F, "llama-3b", 3072, 2, zero=1, gbs=8), case(F, "llama-3b", 3072, 2, tp=2, sp=True, gbs=8),
            case(F, "llama-3b", 3072, 2, pp=2, gbs=8), case(F, "llama-3b", 3072, 2, pp=2, vp=2, gbs=8),
            case(F, "llama-3b", 3072, 2, tp=2, sp=True, gbs=8, recompute="selective"),
            case(F, "llama-3b", 3072, 2, zero=1, gbs=8, recompute="selective"),
            case(F, "llama-1b", 6144, 2, tp=2, sp=False, gbs=4)]


def native3_grid() -> list[dict]:
    """A fourth pre-registered two-GPU set (logs/prereg4_h200x2_plan.txt), predicted by the model
    after the torch-native memory fixes that were developed on native2: torch-native plans at
    models, sequences and batches never run (GPT-style pipelines, llama-7b under pp and FSDP2,
    context parallel with FSDP2 reducing every micro-batch as torchtitan does), plus Megatron-Core
    local plans of gpt-1.3b at sequence 3072."""
    T, F = "torchtitan", "megatron-core-local"
    return [sync_each(case(T, "llama-1b", 8192, 2, cp=2, zero=3, gbs=2)), sync_each(case(T, "llama-3b", 4096, 2, cp=2, zero=3, gbs=4)),
            sync_each(case(T, "gpt-1.3b", 4096, 2, cp=2, zero=3, gbs=4)),
            case(T, "gpt-1.3b", 4096, 2, pp=2, gbs=8), case(T, "gpt-1.3b", 4096, 2, pp=2, vp=2, gbs=8),
            case(T, "llama-3b", 2048, 2, pp=2, gbs=16), case(T, "llama-7b", 4096, 2, pp=2, vp=2, gbs=8),
            sync_each(case(T, "llama-7b", 4096, 2, zero=3, gbs=4)), sync_each(case(T, "gpt-1.3b", 4096, 2, zero=3, gbs=4)),
            sync_each(case(T, "llama-3b", 2048, 2, zero=3, gbs=8)),
            case(T, "gpt-1.3b", 4096, 2, zero=0, gbs=8), case(T, "llama-1b", 8192, 2, zero=0, gbs=4),
            case(F, "gpt-1.3b", 3072, 2, zero=1, gbs=8), case(F, "gpt-1.3b", 3072, 2, tp=2, sp=True, gbs=8),
            case(F, "gpt-1.3b", 3072, 2, pp=2, gbs=8), case(F, "gpt-1.3b", 3072, 2, pp=2, vp=2, gbs=8),
            case(T, "llama-7b", 8192, 2, pp=2, vp=2, gbs=4, risky=True)]


def native2_grid() -> list[dict]:
    """torch-native pipeline and context parallel on 2 GPUs (issue #11), predicted before they ran
    (logs/prereg3_h200x2_plan.txt): torch.distributed.pipelining 1F1B and interleaved (pp 2, vp 2)
    and context parallel 2 (FSDP2 over the cp ranks, as torchtitan's dp_shard_cp mesh: torchtitan
    has no DDP under cp, and meshcast refuses cp without ZeRO-3 for it) for llama-1b and llama-3b at
    seq 4096 and 8192, with 4-8 micro-batches per pipeline; llama-7b cp 2 at seq 16384; full
    recompute variants; the four fsdp-sync cases; llama-7b pp 2 at seq 8192 (near the memory) and
    16384 (predicted not to fit), run last and alone (risky)."""
    T = "torchtitan"
    out = []
    for model, seq, gbs in (("llama-1b", 4096, 8), ("llama-1b", 8192, 4), ("llama-3b", 4096, 8), ("llama-3b", 8192, 4)):
        out += [case(T, model, seq, 2, pp=2, gbs=gbs), case(T, model, seq, 2, pp=2, vp=2, gbs=gbs),
                case(T, model, seq, 2, cp=2, zero=3, gbs=gbs // 2)]
    out += [case(T, "llama-7b", 16384, 2, cp=2, zero=3, gbs=2),
            case(T, "llama-3b", 8192, 2, pp=2, gbs=4, recompute="full"),
            case(T, "llama-3b", 8192, 2, pp=2, vp=2, gbs=4, recompute="full"),
            case(T, "llama-3b", 8192, 2, cp=2, zero=3, gbs=2, recompute="full")]
    out += grid("fsdp-sync")
    out += [case(T, "llama-7b", 8192, 2, pp=2, gbs=4, risky=True),
            case(T, "llama-7b", 16384, 2, pp=2, gbs=4, risky=True)]
    return out


def host_grid() -> list[dict]:
    """Host-bound steps for the host cost of each framework (issue #11): the host-llama / host-gpt
    models (kernels of a few microseconds) with 2 and 8 layers and 2 to 16 micro-batches, so that the
    host's seconds split into per step, per micro-batch and per layer-micro-batch; every plan kind of
    the two-GPU grid; torch-native beside Megatron-Core on the same machine (the ratio of the two
    is what transfers to another host CPU)."""
    F, T, S = "megatron-core-local", "torchtitan", 256
    out = []
    for fw in (F, T):
        out += [case(fw, "host-llama", S, 1, gbs=g, layers=n) for n in (2, 8) for g in (2, 8)]
    out += [case(F, "host-gpt", S, 1, gbs=8), case(T, "host-gpt", S, 1, gbs=8)]
    for n in (2, 8):
        out += [case(F, "host-llama", S, 2, zero=0, gbs=16, layers=n), case(F, "host-llama", S, 2, tp=2, gbs=8, layers=n),
                case(F, "host-llama", S, 2, tp=2, sp=True, gbs=8, layers=n), case(F, "host-llama", S, 2, pp=2, gbs=8, layers=n),
                case(T, "host-llama", S, 2, zero=0, gbs=16, layers=n), case(T, "host-llama", S, 2, zero=3, gbs=16, layers=n),
                case(T, "host-llama", S, 2, tp=2, sp=True, gbs=8, layers=n)]
    out += [case(F, "host-llama", S, 2, zero=1, gbs=16), case(F, "host-llama", S, 2, pp=2, vp=2, gbs=8),
            case(F, "host-llama", S, 2, tp=2, sp=True, gbs=8, recompute="selective"),
            case(F, "host-llama", S, 2, zero=1, gbs=16, recompute="full"),
            case(F, "host-gpt", S, 2, tp=2, gbs=8), case(F, "host-gpt", S, 2, zero=0, gbs=16),
            case(T, "host-gpt", S, 2, tp=2, sp=True, gbs=8)]
    return out


def prereg_grid() -> list[dict]:
    """Two-GPU plans never run before, predicted and committed before they ran
    (validation/measurements/logs/prereg_h200x2_plan.txt): new model x sequence x micro-batch
    combinations of every plan family, Megatron-Core local and torch-native."""
    F, T = "megatron-core-local", "torchtitan"
    out = [case(F, "llama-3b", 2048, 2, zero=1, gbs=8), case(F, "llama-3b", 2048, 2, tp=2, gbs=8),
           case(F, "llama-3b", 2048, 2, tp=2, sp=True, gbs=8), case(F, "llama-3b", 2048, 2, pp=2, gbs=8),
           case(F, "llama-3b", 2048, 2, pp=2, vp=2, gbs=8),
           case(F, "gpt-1.3b", 4096, 2, zero=0, gbs=4), case(F, "gpt-1.3b", 4096, 2, zero=1, gbs=4),
           case(F, "gpt-1.3b", 4096, 2, tp=2, sp=True, gbs=4), case(F, "gpt-1.3b", 4096, 2, pp=2, gbs=4),
           case(F, "gpt-1.3b", 4096, 2, tp=2, sp=True, gbs=4, recompute="selective"),
           case(F, "llama-1b", 2048, 2, zero=1, mbs=2, gbs=16), case(F, "llama-1b", 2048, 2, tp=2, sp=True, mbs=2, gbs=16),
           case(F, "llama-1b", 2048, 2, pp=2, mbs=2, gbs=16),
           case(F, "llama-1b", 8192, 2, tp=2, sp=True, gbs=2, recompute="full"),
           case(F, "llama-1b", 8192, 2, pp=2, gbs=2, recompute="full"),
           case(T, "llama-3b", 4096, 2, zero=3, gbs=4), case(T, "llama-3b", 4096, 2, tp=2, sp=True, gbs=4),
           case(T, "gpt-1.3b", 2048, 2, zero=3, gbs=8), case(T, "gpt-1.3b", 2048, 2, zero=0, gbs=8),
           case(F, "llama-7b", 4096, 2, tp=2, sp=True, gbs=4, recompute="full", risky=True),
           case(F, "llama-7b", 4096, 2, pp=2, gbs=4, recompute="full", risky=True),
           case(T, "llama-3b", 4096, 2, zero=0, gbs=4, risky=True)]
    return out


def prereg2_grid() -> list[dict]:
    """A second pre-registered two-GPU set (logs/prereg2_h200x2_plan.txt), predicted by the model
    after the kernel reconciliation: a sequence length never run (3072), micro-batch 2, selective
    recompute at 7B, torch-native at seq 2048."""
    F, T = "megatron-core-local", "torchtitan"
    return [case(F, "llama-1b", 3072, 2, zero=1, gbs=8), case(F, "llama-1b", 3072, 2, tp=2, sp=True, gbs=8),
            case(F, "llama-1b", 3072, 2, pp=2, gbs=8), case(F, "llama-1b", 3072, 2, pp=2, vp=2, gbs=8),
            case(F, "gpt-1.3b", 2048, 2, zero=1, mbs=2, gbs=16), case(F, "gpt-1.3b", 2048, 2, tp=2, mbs=2, gbs=16),
            case(F, "llama-3b", 4096, 2, zero=1, gbs=4, recompute="selective"),
            case(F, "llama-7b", 2048, 2, tp=2, sp=True, gbs=8, recompute="selective"),
            case(F, "llama-7b", 2048, 2, pp=2, vp=2, gbs=8, recompute="full"),
            case(T, "llama-1b", 2048, 2, zero=0, gbs=8), case(T, "llama-1b", 2048, 2, zero=3, gbs=8),
            case(T, "llama-1b", 2048, 2, tp=2, sp=True, gbs=8)]


# the grids that are one function each (pre-registered sets, the host grid); looked up by grid()
NAMED_GRIDS = {"host": host_grid, "prereg": prereg_grid, "prereg2": prereg2_grid, "native2": native2_grid,
               "native3": native3_grid, "native4": native4_grid, "native5": native5_grid,
               "native6": native6_grid, "native7": native7_grid, "native8": native8_grid,
               "native9": native9_grid, "native10": native10_grid,
               "native11": native11_grid, "native12": native12_grid, "native12b": native12b_grid,
               "native13": native13_grid, "native14": native14_grid, "moe3": moe3_grid,
               "h100a": h100a_grid, "single44": single44_grid, "rank44": rank44_grid}


def twin_of(c: dict) -> dict:
    """The tiny twin of a case: the same framework, plan, sequence and layer count on the host-grid
    model of its family (host-llama for gated MLPs, host-gpt else), whose kernels take
    microseconds, so its step time is the host's (validation/host_speed.py)."""
    family = "host-llama" if c["model"]["activation"] == "swiglu" else "host-gpt"
    topk = None
    if c["model"].get("experts"):      # a MoE case's twin runs the MoE layers' host code (host-moe-E)
        family, topk = f"host-moe-{c['model']['experts']}", c["model"]["topk"]
    p = c["plan"]
    twin = case(c["framework"], family, c["model"]["seq"], p["world"], tp=p["tp"], pp=p["pp"], vp=p["vp"],
                cp=p.get("cp", 1), zero=p["zero_stage"], sp=p["sequence_parallel"], recompute=p["recompute"],
                mbs=p["mbs"], gbs=p["gbs"], layers=c["model"]["layers"], topk=topk, ep=p.get("ep", 1))
    return {**{k: v for k, v in c.items() if k not in ("model", "plan", "name", "risky", "profile", "host_profile",
                                                    "gemm_trace")},
            **twin}


def with_twins(cases: list[dict]) -> list[dict]:
    """The cases followed by the twin of each (one per distinct twin)."""
    twins, seen = [], set()
    for c in cases:
        t = twin_of(c)
        if case_label(t) not in seen and not c["name"].startswith("host-"):
            seen.add(case_label(t))
            twins.append(t)
    return cases + twins


def fsdp_grad_sync(c: dict) -> str | None:
    """The record's ``fsdp_grad_sync`` for case ``c`` (torchtitan ZeRO-3, i.e. FSDP2, only; None
    otherwise): ``every_microbatch`` under ``fsdp_sync_each`` (torchtitan's loop: a reduce-scatter after
    each micro-batch), else ``last_microbatch`` (set_requires_gradient_sync(last): the others accumulate
    unsharded gradients, in fp32 under reduce_dtype fp32). Records written before this field existed
    (commit 99036ac) ran last_microbatch (validation/predict.py record_grad_sync)."""
    if c["framework"] != "torchtitan" or c["plan"]["zero_stage"] != 3:
        return None
    return "every_microbatch" if c.get("fsdp_sync_each") else "last_microbatch"


def case_label(c: dict) -> str:
    p = c["plan"]
    name = c["name"] if c["model"]["layers"] == MODELS[c["name"]]["layers"] else f"{c['name']}-L{c['model']['layers']}"
    if c["model"].get("experts") and c["model"]["topk"] != MODELS[c["name"]].get("topk"):
        name += f"-top{c['model']['topk']}"
    bits = [c["framework"], name, f"s{c['model']['seq']}", f"w{p['world']}", f"tp{p['tp']}", f"pp{p['pp']}"]
    if p["vp"] > 1:
        bits.append(f"vp{p['vp']}")
    if p.get("cp", 1) > 1:
        bits.append(f"cp{p['cp']}")
    bits += [f"dp{p['dp']}", f"z{p['zero_stage']}"]
    if p.get("ep", 1) > 1:
        bits.append(f"ep{p['ep']}")
    if p["sequence_parallel"]:
        bits.append("sp")
    if p["recompute"] != "none":
        bits.append(f"rc-{p['recompute']}")
    bits.append(f"mbs{p['mbs']}gbs{p['gbs']}")
    return " ".join(bits)


# ----------------------------------------------------------------------------------- child: common

def _log(*a):
    print(*a, flush=True)


class Ctx:
    """What a child process knows about its distributed run."""

    def __init__(self, cpu: bool, pg_timeout_s: float):
        import torch
        import torch.distributed as dist
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.cuda = torch.cuda.is_available() and not cpu
        if self.cuda:
            torch.cuda.set_device(self.local_rank)
            self.dev = torch.device("cuda", self.local_rank)
            dist.init_process_group("nccl", device_id=self.dev, timeout=datetime.timedelta(seconds=pg_timeout_s))
        else:
            self.dev = torch.device("cpu")
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=pg_timeout_s))
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def sync(self):
        import torch
        import torch.distributed as dist
        if self.cuda:
            torch.cuda.synchronize()
        dist.barrier()


def timed_steps(ctx: Ctx, step, warmup: int, steps: int):
    """Per-step seconds (synchronized wall time, max over ranks) and the peak allocated and
    reserved bytes (max over ranks) of the timed steps."""
    import torch
    import torch.distributed as dist
    for _ in range(warmup):
        step()
    ctx.sync()
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    window = [time.monotonic(), None]       # the launcher's NVML sampler cuts this window's samples
    for _ in range(steps):
        ctx.sync()
        t = time.perf_counter()
        step()
        if ctx.cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    window[1] = time.monotonic()
    peak = [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), outside_allocator_bytes()] \
        if ctx.cuda else [0, 0, 0]
    phases = host_phases(ctx, step)
    phases["timed_window_monotonic"] = window
    tt = torch.tensor(times, dtype=torch.float64, device=ctx.dev)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    pk = torch.tensor(peak, dtype=torch.int64, device=ctx.dev)
    dist.all_reduce(pk, op=dist.ReduceOp.MAX)
    return tt.tolist(), [int(x) for x in pk.tolist()], phases


def host_phases(ctx: Ctx, step) -> dict:
    """One more step, after the timed ones (their peaks already read), split into its phases from
    an idle GPU: the host's seconds to return from forward+backward and from the optimizer step
    (host_fwd_bwd_s, host_opt_s) and the same phases with the device synchronized after each
    (synced_fwd_bwd_s, synced_opt_s); the largest over ranks. Where the host's forward+backward
    seconds reach the synchronized ones, the step is host-bound. A host-side synchronisation inside
    a phase (Megatron's gradient-norm .item(), pipeline receives) makes its host seconds include
    waiting for the GPU. Empty where the step has no phases or one fails."""
    import torch
    import torch.distributed as dist
    fns = getattr(step, "phases", None)
    if not fns:
        return {}
    try:
        out = []
        for fn in fns:
            ctx.sync()
            t = time.perf_counter()
            fn()
            host = time.perf_counter() - t
            if ctx.cuda:
                torch.cuda.synchronize()
            out += [host, time.perf_counter() - t]
        v = torch.tensor(out, dtype=torch.float64, device=ctx.dev)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        keys = ("host_fwd_bwd_s", "synced_fwd_bwd_s", "host_opt_s", "synced_opt_s")
        return {k: round(float(x), 6) for k, x in zip(keys, v.tolist())}
    except Exception as exc:  # noqa: BLE001
        _log(f"  (host phases not measured: {type(exc).__name__}: {exc})")
        return {}


def outside_allocator_bytes() -> int:
    """Device bytes in use that PyTorch's caching allocator does not hold, after the timed steps:
    cudaMemGetInfo's used (total - free) minus torch.cuda.memory_reserved() -- the CUDA context,
    library handles and communicator buffers of this process, and any other process on the GPU.
    The fit verdict's non-allocator term (simulator.memory.process_bytes) is read from it."""
    import torch
    free, total = torch.cuda.mem_get_info()
    return int(total - free - torch.cuda.memory_reserved())


def kernel_profile(ctx: Ctx, step, top_n: int = 30) -> dict:
    """One more step under torch.profiler (CUDA activity) on this rank: the step's wall seconds,
    the GPU's busy seconds (union of kernel intervals: what is left is the GPU waiting for the
    host or for a transfer), the kernels' summed seconds and count, and the ``top_n`` kernel names
    with the most time (seconds, calls; a case's ``profile_top_n``, 30 unless set). Empty where the
    profiler fails."""
    import torch
    import common
    try:
        from torch.profiler import ProfilerActivity, profile
        ctx.sync()
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        wall = time.perf_counter() - t
        spans, by_name = [], {}
        for e in prof.events():
            if getattr(e.device_type, "name", "") != "CUDA":
                continue
            a, b = e.time_range.start, e.time_range.end
            spans.append((a, b))
            tot, cnt = by_name.get(e.name, (0.0, 0))
            by_name[e.name] = (tot + (b - a) * 1e-6, cnt + 1)
        busy = common.union_length(spans)
        top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top_n]
        return {"profile_wall_s": round(wall, 6), "profile_busy_s": round(busy * 1e-6, 6),
                "profile_kernel_s": round(sum(v[0] for v in by_name.values()), 6),
                "profile_kernels": sum(v[1] for v in by_name.values()),
                "profile_top": [[k[:120], round(v[0], 6), v[1]] for k, v in top]}
    except Exception as exc:  # noqa: BLE001
        _log(f"  (kernel profile not taken: {type(exc).__name__}: {exc})")
        return {}


def host_profile(ctx: Ctx, step) -> dict:
    """Where the host's time goes in one step (issue #11: torch-native cp and DTensor tp steps are
    host-bound by more than the tiny host grid shows). Two more steps on this rank:

    * under cProfile, issue only (no synchronize inside the timed part): the issue seconds and the
      25 Python functions with the most own time ("file:function", seconds, calls). cProfile slows
      Python-heavy code, so these are shares, not times to compare with the unprofiled step;
    * under torch.profiler (CPU + CUDA activity): the CUDA runtime/driver calls the host made, by
      name (seconds, calls): a cudaStreamSynchronize, a blocking cudaMemcpy or cudaFree there means
      the host waits for the GPU inside the step, so host and GPU time add instead of overlapping.
    Empty where either fails."""
    import cProfile
    import pstats
    import torch
    out = {}
    try:
        ctx.sync()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        step()
        prof.disable()
        out["hostprof_issue_s"] = round(time.perf_counter() - t, 6)
        ctx.sync()
        stats = pstats.Stats(prof).stats
        rows = sorted(((f"{Path(k[0]).name}:{k[2]}", v[2], v[1]) for k, v in stats.items()), key=lambda r: -r[1])
        out["hostprof_python_top"] = [[n[:90], round(tt, 6), calls] for n, tt, calls in rows[:25]]
        out["hostprof_python_total_s"] = round(sum(r[1] for r in rows), 6)
    except Exception as exc:  # noqa: BLE001
        _log(f"  (python host profile not taken: {type(exc).__name__}: {exc})")
    try:
        from torch.profiler import ProfilerActivity, profile
        ctx.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            step()
            torch.cuda.synchronize()
        calls = {}
        for e in tp.events():
            if getattr(e.device_type, "name", "") == "CUDA" or not e.name.startswith("cu"):
                continue
            tot, cnt = calls.get(e.name, (0.0, 0))
            calls[e.name] = (tot + (e.time_range.end - e.time_range.start) * 1e-6, cnt + 1)
        top = sorted(calls.items(), key=lambda kv: -kv[1][0])[:15]
        out["hostprof_runtime_top"] = [[k[:60], round(v[0], 6), v[1]] for k, v in top]
    except Exception as exc:  # noqa: BLE001
        _log(f"  (runtime-call profile not taken: {type(exc).__name__}: {exc})")
    return out


def steps_for(c: dict) -> tuple[int, int]:
    m, p = c["model"], c["plan"]
    ffn = m["topk"] * m["moe_ffn_hidden"] if m.get("experts") else m["ffn_hidden"]    # active width
    params = m["layers"] * (4 * m["hidden"] ** 2 + 3 * m["hidden"] * ffn) + 2 * m["vocab"] * m["hidden"]
    work = 6 * params * m["seq"] * p["gbs"] / p["world"]
    return (3, 5) if work > 1e15 else (3, 6)


# ----------------------------------------------------------------------------------- Megatron-Core

_ORIG_LN: dict = {}


class SPTorchNorm:
    """torch.nn.LayerNorm / RMSNorm whose parameters carry Megatron's ``sequence_parallel`` tag."""

    def __new__(cls, config, hidden_size, eps=1e-5, **_):
        import torch
        norm_cls = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        mod = norm_cls(normalized_shape=hidden_size, eps=eps)
        for prm in mod.parameters():
            setattr(prm, "sequence_parallel", bool(config.sequence_parallel))
        return mod


class MegatronRunner:
    framework = "megatron-core-local"

    def attention_backend(self) -> str:
        """meshcast's name of the attention kernel that ran: apex's fused scale-mask-softmax
        (``unfused``) where apex or TE is importable, else the PyTorch fallback (``unfused_torch``)."""
        v = self.versions()
        return "unfused" if (v["has_apex"] or v["has_transformer_engine"]) else "unfused_torch"

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.layout = None

    def versions(self) -> dict:
        import megatron.core
        have = {}
        for mod in ("transformer_engine", "apex"):
            try:
                __import__(mod)
                have[mod] = True
            except Exception:  # noqa: BLE001
                have[mod] = False
        return {"megatron_core": getattr(megatron.core, "__version__", "?"), **{f"has_{k}": v for k, v in have.items()},
                "layer_spec": "get_gpt_layer_local_spec", "attention": "DotProductAttention (unfused, fp32 softmax)",
                "moe": "MoELayer: TopKRouter (softmax, aux_loss), MoEAlltoAllTokenDispatcher, SequentialMLP"}

    @staticmethod
    def _moe_config(m: dict) -> dict:
        """TransformerConfig fields of a MoE model (none for a dense one): every layer MoE, top-k
        softmax router with the aux (load-balancing) loss, the alltoall token dispatcher, dropless,
        SequentialMLP experts (moe_grouped_gemm off: the local spec's grouped MLP needs the
        grouped_gemm package)."""
        if not m.get("experts"):
            return {}
        return dict(num_moe_experts=m["experts"], moe_router_topk=m["topk"], moe_ffn_hidden_size=m["moe_ffn_hidden"],
                    moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss",
                    moe_aux_loss_coeff=MOE_AUX_LOSS_COEFF, moe_grouped_gemm=False)

    def _layout(self, tp, pp, vp, ep=1):
        from megatron.core import parallel_state as ps
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        if self.layout != (tp, pp, vp, ep):
            if self.layout is not None:
                ps.destroy_model_parallel()
            ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                         virtual_pipeline_model_parallel_size=vp if vp > 1 else None,
                                         expert_model_parallel_size=ep,
                                         create_gloo_process_groups=False, distributed_timeout_minutes=2)
            self.layout = (tp, pp, vp, ep)
        model_parallel_cuda_manual_seed(1234)

    def build(self, c: dict):
        import torch
        import torch.nn.functional as Fn
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer.module import Float16Module
        from megatron.core.transformer.transformer_config import TransformerConfig

        m, p = c["model"], c["plan"]
        tp, pp, vp, ep = p["tp"], p["pp"], p["vp"], p.get("ep", 1)
        self._layout(tp, pp, vp, ep)
        llama = m["activation"] == "swiglu"
        rc = p["recompute"]
        cfg = TransformerConfig(
            num_layers=m["layers"], hidden_size=m["hidden"], num_attention_heads=m["heads"],
            num_query_groups=m["kv_heads"], ffn_hidden_size=m["ffn_hidden"],
            normalization="RMSNorm" if m["norm"] == "rmsnorm" else "LayerNorm",
            gated_linear_unit=llama, activation_func=Fn.silu if llama else Fn.gelu,
            add_bias_linear=m["linear_bias"], hidden_dropout=0.0, attention_dropout=0.0,
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vp if vp > 1 else None, expert_model_parallel_size=ep,
            sequence_parallel=p["sequence_parallel"], bf16=True, params_dtype=torch.bfloat16,
            pipeline_dtype=torch.bfloat16, autocast_dtype=torch.bfloat16,
            recompute_granularity=None if rc == "none" else rc,
            recompute_method="uniform" if rc == "full" else None, recompute_num_layers=1 if rc == "full" else None,
            masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
            apply_rope_fusion=False, gradient_accumulation_fusion=False, cross_entropy_loss_fusion=False,
            persist_layer_norm=False, deallocate_pipeline_outputs=True, use_cpu_initialization=False,
            init_method_std=0.02, **self._moe_config(m),
        )
        spec = get_gpt_layer_local_spec(num_experts=m.get("experts"), moe_grouped_gemm=False,
                                        normalization=cfg.normalization)
        self.norm_impl = "WrappedTorchNorm (torch.nn.LayerNorm / RMSNorm)"
        if p["sequence_parallel"]:
            # The local spec's WrappedTorchNorm asserts `not config.sequence_parallel` (its SP norm is
            # apex's FusedLayerNorm). Same torch kernels, parameters tagged sequence_parallel so that
            # finalize_model_grads all-reduces their gradients over the TP group, as FusedLayerNorm does.
            import megatron.core.transformer.transformer_block as tb
            spec.submodules.input_layernorm = SPTorchNorm
            spec.submodules.pre_mlp_layernorm = SPTorchNorm
            _ORIG_LN.setdefault("impl", tb.LayerNormImpl)
            tb.LayerNormImpl = SPTorchNorm
            self.norm_impl = "torch.nn.LayerNorm / RMSNorm tagged sequence_parallel (harness SPTorchNorm)"
        chunks = []
        for i in range(vp):
            kw = dict(vp_stage=i) if vp > 1 else {}
            first = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=i) if vp > 1 else ps.is_pipeline_first_stage()
            last = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=i) if vp > 1 else ps.is_pipeline_last_stage()
            chunk = GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=m["vocab"],
                             max_sequence_length=m["seq"], pre_process=first, post_process=last,
                             share_embeddings_and_output_weights=m["tied_embeddings"],
                             position_embedding_type="rope" if m["position"] == "rope" else "learned_absolute",
                             **kw)
            chunk.cuda(torch.cuda.current_device())
            chunks.append(Float16Module(cfg, chunk))     # as Megatron's get_model does under --bf16
        ddp_cfg = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=True,
                                                overlap_param_gather=False,
                                                use_distributed_optimizer=p["zero_stage"] == 1,
                                                check_for_nan_in_grad=False)
        model = [DistributedDataParallel(config=cfg, ddp_config=ddp_cfg, module=ch) for ch in chunks]
        if p["sequence_parallel"]:
            tb.LayerNormImpl = _ORIG_LN["impl"]
        for mc in model:
            mc.broadcast_params()
        cfg.no_sync_func = [mc.no_sync for mc in model]
        cfg.grad_sync_func = [mc.start_grad_sync for mc in model]
        if len(model) == 1:
            cfg.no_sync_func, cfg.grad_sync_func = cfg.no_sync_func[0], cfg.grad_sync_func[0]
        cfg.finalize_model_grads_func = finalize_model_grads
        opt_cfg = OptimizerConfig(optimizer="adam", lr=1e-4, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95,
                                  bf16=True, params_dtype=torch.bfloat16, clip_grad=1.0,
                                  use_distributed_optimizer=p["zero_stage"] == 1)
        optimizer = get_megatron_optimizer(opt_cfg, model, use_gloo_process_groups=False)
        # a ChainedOptimizer (expert parallelism: one optimizer for the dense and one for the expert
        # parameters) refuses `.optimizer`; name the torch optimizer of each part
        parts = list(getattr(optimizer, "chained_optimizers", None) or [optimizer])
        self.optimizer_class = ", ".join(sorted({type(getattr(o, "optimizer", o)).__module__ + "." +
                                                 type(getattr(o, "optimizer", o)).__name__ for o in parts}))
        fwd_bwd = get_forward_backward_func()
        mbs, seq = p["mbs"], m["seq"]
        nmb = p["gbs"] // (p["dp"] * mbs)
        dp_rank = ps.get_data_parallel_rank()
        g = torch.Generator(device="cuda")
        g.manual_seed(1000 + dp_rank)
        tokens = torch.randint(m["vocab"], (mbs, seq), device="cuda", generator=g)
        labels = torch.randint(m["vocab"], (mbs, seq), device="cuda", generator=g)
        pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, seq).contiguous()

        def batches():
            while True:
                yield tokens, labels, pos

        def forward_step(data_iterator, mdl):
            tok, lab, ps_ids = next(data_iterator)
            out = mdl(tok, ps_ids, None, labels=lab)

            def loss_func(output_tensor):
                loss = output_tensor.float().mean()
                return loss, {"loss": loss.detach()}
            return out, loss_func

        def forward_backward():
            for mc in model:
                mc.zero_grad_buffer()
            optimizer.zero_grad()
            data = [batches() for _ in model] if len(model) > 1 else batches()
            fwd_bwd(forward_step_func=forward_step, data_iterator=data, model=model if len(model) > 1 else model[0],
                    num_microbatches=nmb, seq_length=seq, micro_batch_size=mbs, decoder_seq_length=seq,
                    forward_only=False)

        def step():
            forward_backward()
            optimizer.step()

        step.phases = (forward_backward, optimizer.step)
        self._held = (model, optimizer)
        return step

    def release(self):
        self._held = None


# ----------------------------------------------------------------------------------- torch-native

def _native_model_cls():
    import torch
    import torch.nn as nn
    import torch.nn.functional as Fn

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover
        SDPBackend = sdpa_kernel = None

    def rope(x, cos, sin):          # x [b, s, h, d]; cos/sin [s, d/2]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s_ = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x1 * c - x2 * s_, x1 * s_ + x2 * c), dim=-1).flatten(-2)

    def norm(kind, h):
        return nn.RMSNorm(h, eps=1e-5) if kind == "rmsnorm" else nn.LayerNorm(h)

    class Attention(nn.Module):
        def __init__(self, m):
            super().__init__()
            h, nh, nkv = m["hidden"], m["heads"], m["kv_heads"]
            self.hd, self.rope = h // nh, m["position"] == "rope"
            b = m["linear_bias"]
            self.wq = nn.Linear(h, nh * self.hd, bias=b)
            self.wk = nn.Linear(h, nkv * self.hd, bias=b)
            self.wv = nn.Linear(h, nkv * self.hd, bias=b)
            self.wo = nn.Linear(nh * self.hd, h, bias=b)
            self.flash = True

        def forward(self, x, freqs):
            bsz, s, _ = x.shape
            q = self.wq(x).view(bsz, s, -1, self.hd)       # local heads under tensor parallel
            k = self.wk(x).view(bsz, s, -1, self.hd)
            v = self.wv(x).view(bsz, s, -1, self.hd)
            if self.rope:
                cos, sin = freqs
                q, k = rope(q, cos, sin).type_as(v), rope(k, cos, sin).type_as(v)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            ctx = (sdpa_kernel(SDPBackend.FLASH_ATTENTION) if (q.is_cuda and sdpa_kernel is not None)
                   else contextlib.nullcontext())
            with ctx:
                o = Fn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
            return self.wo(o.transpose(1, 2).reshape(bsz, s, -1))

    class FeedForward(nn.Module):
        def __init__(self, m):
            super().__init__()
            h, f, b = m["hidden"], m["ffn_hidden"], m["linear_bias"]
            self.gated = m["activation"] == "swiglu"
            self.w1 = nn.Linear(h, f, bias=b)
            self.w2 = nn.Linear(f, h, bias=b)
            if self.gated:
                self.w3 = nn.Linear(h, f, bias=b)

        def forward(self, x):
            if self.gated:
                return self.w2(Fn.silu(self.w1(x)) * self.w3(x))
            return self.w2(Fn.gelu(self.w1(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.attention_norm = norm(m["norm"], m["hidden"])
            self.attention = Attention(m)
            self.ffn_norm = norm(m["norm"], m["hidden"])
            self.feed_forward = FeedForward(m)

        def forward(self, x, freqs):
            x = x + self.attention(self.attention_norm(x), freqs)
            return x + self.feed_forward(self.ffn_norm(x))

    class Transformer(nn.Module):
        """The whole model, or one pipeline stage of it: ``layers`` (lo, hi) keeps blocks lo..hi-1;
        ``first`` owns the embeddings (its input is tokens, else the previous stage's hidden
        states), ``last`` the final norm and the output head (its output is logits, else hidden
        states)."""

        def __init__(self, m, recompute="none", layers=None, first=True, last=True):
            super().__init__()
            self.m, self.recompute = m, recompute
            lo, hi = layers if layers is not None else (0, m["layers"])
            self.tok_embeddings = nn.Embedding(m["vocab"], m["hidden"]) if first else None
            learned = first and m["position"] == "learned"
            self.pos_embeddings = nn.Embedding(m["seq"], m["hidden"]) if learned else None
            self.layers = nn.ModuleList([Block(m) for _ in range(lo, hi)])
            self.norm = norm(m["norm"], m["hidden"]) if last else None
            self.output = nn.Linear(m["hidden"], m["vocab"], bias=False) if last else None
            hd = m["hidden"] // m["heads"]
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            ang = torch.outer(torch.arange(m["seq"], dtype=torch.float32), inv)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
            if self.pos_embeddings is not None:
                h = h + self.pos_embeddings.weight[: tokens.shape[1]]
            freqs = (self.cos, self.sin)
            for blk in self.layers:
                if self.recompute == "full":
                    from torch.utils.checkpoint import checkpoint
                    h = checkpoint(blk, h, freqs, use_reentrant=False)
                else:
                    h = blk(h, freqs)
            return self.output(self.norm(h)) if self.output is not None else h

    return Transformer


class NativeRunner:
    """torch-native steps as torchtitan composes them: DDP, FSDP2, DTensor TP+SP,
    torch.distributed.pipelining (1F1B, interleaved 1F1B) and context parallel through SDPA."""
    framework = "torchtitan"

    @staticmethod
    def attention_backend() -> str:
        return "flash"

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.extra = {}

    def versions(self) -> dict:
        return {"attention": "scaled_dot_product_attention (flash)", "tp_plan": "torchtitan llama3 apply_tp",
                "pp": "torch.distributed.pipelining PipelineStage per stage (layers split by hand), "
                      "Schedule1F1B / ScheduleInterleaved1F1B (looped placement), loss_fn on the last stage",
                "cp": "torch.distributed.tensor.experimental.context_parallel (buffers tokens, labels, rope cos/sin)"}

    def build(self, c: dict):
        """The step function of case ``c`` (with ``step.phases``: forward+backward, optimizer)."""
        p = c["plan"]
        self.extra = {}
        if p["recompute"] == "selective":
            raise NotImplementedError("torchtitan runner: no selective recompute yet")
        if p["pp"] > 1:
            return self._build_pp(c)
        return self._build_flat(c)

    def _autocast(self):
        import torch
        dev_type = "cuda" if self.ctx.cuda else "cpu"
        return lambda: torch.autocast(dev_type, dtype=torch.bfloat16)

    def _apply_tp(self, model, m, tp):
        """torchtitan's Llama TP plan with sequence parallel and loss parallel, over a 1-D mesh."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                       SequenceParallel, parallelize_module)
        mesh = init_device_mesh("cuda" if self.ctx.cuda else "cpu", (tp,), mesh_dim_names=("tp",))
        top = {"tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
               "norm": SequenceParallel(),
               "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
        if model.pos_embeddings is not None:
            raise NotImplementedError("torchtitan runner: learned positions under TP")
        parallelize_module(model, mesh, top)
        for blk in model.layers:
            plan = {"attention_norm": SequenceParallel(),
                    "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                                    desired_input_layouts=(Replicate(), None)),
                    "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                    "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                    "ffn_norm": SequenceParallel(),
                    "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                    "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))}
            if m["activation"] == "swiglu":
                plan["feed_forward.w3"] = ColwiseParallel()
            parallelize_module(blk, mesh, plan)

    def _cp_context(self, model, cp):
        """A factory of torch's context_parallel contexts over a 1-D ``cp`` mesh (the whole world:
        dp = tp = pp = 1): each micro-batch shards its tokens and labels (not restored) and the
        model's rope cos/sin buffers (restored on exit) along the sequence, with torch's default
        head-tail load balancing for causal attention and its default KV rotate method (recorded)."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        if not self.ctx.cuda:
            raise NotImplementedError("context parallel needs CUDA SDPA kernels (flash / efficient / cudnn)")
        if model.pos_embeddings is not None:
            raise NotImplementedError("torchtitan runner: learned positions under CP")
        mesh = init_device_mesh("cuda", (cp,), mesh_dim_names=("cp",))
        try:
            from torch.distributed.tensor.experimental._attention import _cp_options
            self.extra.update(cp_rotate_method=str(getattr(_cp_options.rotate_method, "name", "?")).lower(),
                              cp_load_balance=bool(_cp_options.enable_load_balance))
        except ImportError:  # pragma: no cover
            self.extra["cp_rotate_method"] = "unknown"

        def make(tok, lab):
            return context_parallel(mesh, buffers=[tok, lab, model.cos, model.sin], buffer_seq_dims=[1, 1, 0, 0],
                                    no_restore_buffers={tok, lab})
        return make

    def _build_flat(self, c: dict):
        """No pipeline: DDP (zero 0), FSDP2 (zero 3) or DTensor TP+SP, optionally context parallel;
        gbs / (dp * mbs) micro-batches, each loss / n_microbatches, gradients synchronized on the last
        (or on every one under ``fsdp_sync_each``)."""
        import torch
        import torch.nn.functional as Fn
        from torch.distributed.device_mesh import init_device_mesh
        m, p = c["model"], c["plan"]
        ctx = self.ctx
        tp, dp, cp, zero = p["tp"], p["dp"], p["cp"], p["zero_stage"]
        if cp > 1 and (tp > 1 or dp > 1):
            raise NotImplementedError("torchtitan runner: cp only with dp = tp = pp = 1")
        Transformer = _native_model_cls()
        torch.manual_seed(0)
        with torch.device(ctx.dev):
            model = Transformer(m, p["recompute"])
        dev_type = "cuda" if ctx.cuda else "cpu"
        autocast = contextlib.nullcontext
        loss_ctx = contextlib.nullcontext
        cp_ctx = self._cp_context(model, cp) if cp > 1 else None
        if tp > 1:
            from torch.distributed.tensor.parallel import loss_parallel
            self._apply_tp(model, m, tp)
            loss_ctx = loss_parallel
            autocast = self._autocast()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
            self.optimizer_class = "torch.optim.AdamW(foreach) under autocast bf16, DTensor params"
        elif zero == 3:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            # torchtitan shards over dp_shard x cp (its dp_shard_cp mesh)
            mesh = init_device_mesh(dev_type, (dp * cp,), mesh_dim_names=("dp_shard_cp",))
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for blk in model.layers:
                fully_shard(blk, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
            self.optimizer_class = "torch.optim.AdamW(foreach) over FSDP2 shards"
        else:
            if dp * cp > 1:
                from torch.nn.parallel import DistributedDataParallel as DDP
                model = DDP(model, device_ids=[ctx.local_rank] if ctx.cuda else None)
            autocast = self._autocast()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=ctx.cuda)
            self.optimizer_class = "torch.optim.AdamW(fused) under autocast bf16"
        mbs, seq = p["mbs"], m["seq"]
        nmb = p["gbs"] // (dp * mbs)
        sync_each = bool(c.get("fsdp_sync_each"))
        g = torch.Generator(device=ctx.dev)
        g.manual_seed(1000 + (ctx.rank // (tp * cp)))       # the same data on a TP or CP group
        tokens = torch.randint(m["vocab"], (mbs, seq), device=ctx.dev, generator=g)
        labels = torch.randint(m["vocab"], (mbs, seq), device=ctx.dev, generator=g)
        no_sync = model.no_sync if hasattr(model, "no_sync") else None

        def micro(last):
            tok, lab = (tokens.clone(), labels.clone()) if cp_ctx else (tokens, labels)
            with (cp_ctx(tok, lab) if cp_ctx else contextlib.nullcontext()):
                with autocast():
                    logits = model(tok)
                with loss_ctx():
                    loss = Fn.cross_entropy(logits.float().flatten(0, 1), lab.flatten(0, 1)) / nmb
                    loss.backward()

        def forward_backward():
            for i in range(nmb):
                last = i == nmb - 1
                if zero == 3 and hasattr(model, "set_requires_gradient_sync") and not sync_each:
                    model.set_requires_gradient_sync(last)
                if no_sync is not None and not last:
                    with no_sync():
                        micro(last)
                else:
                    micro(last)

        return self._finish(forward_backward, opt, model)

    def _finish(self, forward_backward, opt, held):
        """The step (forward+backward, then AdamW step and zero_grad) with its two phases."""
        def optimizer_step():
            opt.step()
            opt.zero_grad(set_to_none=True)

        def step():
            forward_backward()
            optimizer_step()

        step.phases = (forward_backward, optimizer_step)
        self._held = (held, opt)
        return step

    def _pp_stages(self, m, p, Transformer):
        """This rank's pipeline stages: pp * vp stages of layers / (pp * vp) blocks each, stage i on
        rank i % pp (torchtitan's looped placement: rank r holds stages r, r + pp, ...); stage 0
        owns the embeddings, the last stage the final norm and the output head."""
        from torch.distributed.pipelining import PipelineStage
        import torch
        pp, vp = p["pp"], p["vp"]
        n = pp * vp
        if m["layers"] % n:
            raise ValueError(f"{m['layers']} layers do not split into {n} equal pipeline stages")
        per = m["layers"] // n
        torch.manual_seed(0)
        parts, stages = [], []
        for i in range(self.ctx.rank % pp, n, pp):
            with torch.device(self.ctx.dev):
                part = Transformer(m, p["recompute"], layers=(i * per, (i + 1) * per), first=i == 0, last=i == n - 1)
            parts.append(part)
            stages.append(PipelineStage(part, i, n, self.ctx.dev))
        return parts, stages

    def _build_pp(self, c: dict):
        """Pipeline parallel with torch.distributed.pipelining (dp = tp = cp = 1): plain fp32
        parameters under autocast bf16, fused AdamW, Schedule1F1B (vp = 1) or
        ScheduleInterleaved1F1B (vp > 1) over gbs / mbs micro-batches. The schedule's loss_fn is
        the mean cross entropy of a micro-batch and the schedule divides the gradients by the
        number of micro-batches (scale_grads), which is the DDP path's loss / n_microbatches."""
        import inspect
        import torch
        import torch.nn.functional as Fn
        from torch.distributed.pipelining import Schedule1F1B, ScheduleInterleaved1F1B
        m, p = c["model"], c["plan"]
        if p["tp"] > 1 or p["cp"] > 1 or p["dp"] > 1 or p["zero_stage"]:
            raise NotImplementedError("torchtitan runner: pp only with dp = tp = cp = 1 and zero 0")
        parts, stages = self._pp_stages(m, p, _native_model_cls())
        nmb = p["gbs"] // (p["dp"] * p["mbs"])

        def loss_fn(logits, labels):
            return Fn.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))

        cls = ScheduleInterleaved1F1B if p["vp"] > 1 else Schedule1F1B
        kw = {"scale_grads": True} if "scale_grads" in inspect.signature(cls.__init__).parameters else {}
        sched = cls(stages if p["vp"] > 1 else stages[0], n_microbatches=nmb, loss_fn=loss_fn, **kw)
        step_kw = {"return_outputs": False} if "return_outputs" in inspect.signature(sched.step).parameters else {}
        self.extra.update(pp_schedule=cls.__name__, pp_return_outputs=not step_kw,
                          pp_scale_grads=kw.get("scale_grads", "torch default"))
        params = [q for part in parts for q in part.parameters()]
        opt = torch.optim.AdamW(params, lr=1e-4, fused=self.ctx.cuda)
        self.optimizer_class = "torch.optim.AdamW(fused) under autocast bf16"
        g = torch.Generator(device=self.ctx.dev)
        g.manual_seed(1000)
        shape = (nmb * p["mbs"], m["seq"])
        tokens = torch.randint(m["vocab"], shape, device=self.ctx.dev, generator=g)
        labels = torch.randint(m["vocab"], shape, device=self.ctx.dev, generator=g)
        first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
        autocast = self._autocast()

        def forward_backward():
            with autocast():
                sched.step(*((tokens,) if first else ()), target=labels if last else None, **step_kw)

        return self._finish(forward_backward, opt, (parts, stages, sched))

    def release(self):
        self._held = None


# ----------------------------------------------------------------------------------- child main

def child_main(args):
    import torch
    import torch.distributed as dist
    import common
    with open(args.cases) as f:
        cases = json.load(f)
    ctx = Ctx(args.cpu, args.pg_timeout_s)
    if ctx.cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    runners = {}
    done = []
    t0 = time.time()
    for i, c in enumerate(cases):
        if time.time() - t0 > args.budget_s:
            break
        if ctx.rank == 0:
            with open(args.status, "w") as f:
                f.write(str(i))
        fw = c["framework"]
        if fw not in runners:
            runners[fw] = (MegatronRunner if fw == "megatron-core-local" else NativeRunner)(ctx)
        runner = runners[fw]
        rec = dict(kind="plan_step", framework=fw, name=c["name"], **c["model"], **c["plan"], dtype="bfloat16")
        label = case_label(c)
        tc = time.time()
        err, oom, times, peaks, phases = None, False, None, None, {}
        try:
            step = runner.build(c)
            warm, n = steps_for(c)
            times, peaks, phases = timed_steps(ctx, step, warm, n)
            if c.get("profile"):
                phases.update(kernel_profile(ctx, step, c.get("profile_top_n", 30)))
            if c.get("host_profile"):
                phases.update(host_profile(ctx, step))
            if c.get("gemm_trace") and ctx.cuda:
                import gemm_trace
                phases.update(gemm_trace.trace(step, c.get("gemm_trace_budget_s", 120.0)))
        except Exception as exc:  # noqa: BLE001
            oom = common.is_oom(exc)
            err = common.short_exc(exc, limit=800 if oom else 300)   # an OOM's text names reserved vs allocated
            if not oom:
                import traceback
                traceback.print_exc(limit=6, file=sys.stdout)
        step = None
        runner.release()
        common.free_memory()
        # agree across ranks: any rank out of memory -> the case is oom (the other rank's error is
        # then only the collective it was left waiting in); else any error -> an error
        flags = torch.tensor([int(oom), int(times is None)], device=ctx.dev)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        st = 1 if flags[0].item() else (2 if flags[1].item() else 0)
        rec["optimizer"] = getattr(runner, "optimizer_class", None)
        rec.update(getattr(runner, "extra", None) or {})     # pp schedule, cp rotate method
        rec["attention"] = runner.attention_backend()
        if getattr(runner, "norm_impl", None):
            rec["norm_impl"] = runner.norm_impl
        if fsdp_grad_sync(c):
            rec["fsdp_grad_sync"] = fsdp_grad_sync(c)
        if st == 0:
            rec.update(time_s=float(statistics.median(times)), time_min_s=float(min(times)),
                       time_max_s=float(max(times)), reps=len(times), step_times_s=[round(x, 6) for x in times],
                       peak_memory_bytes=peaks[0], peak_reserved_bytes=peaks[1], oom=False,
                       outside_allocator_bytes=peaks[2],
                       tokens_per_s=c["plan"]["gbs"] * c["model"]["seq"] / float(statistics.median(times)),
                       **phases)
        elif st == 1:
            rec.update(time_s=None, peak_memory_bytes=None, peak_reserved_bytes=None, oom=True,
                       error=err or "out of memory on another rank")
        else:
            rec = None
        if ctx.rank == 0:
            dt = time.time() - tc
            if rec is None:
                _log(f"  ERROR {label}: {err}")
                done.append({"index": i, "error": err or "error on another rank"})
            elif rec["oom"]:
                _log(f"  {label}: OOM ({dt:.1f}s)")
                done.append({"index": i, "record": rec})
            else:
                _log(f"  {label}: {rec['time_s'] * 1e3:.1f} ms [{rec['time_min_s'] * 1e3:.1f}, "
                     f"{rec['time_max_s'] * 1e3:.1f}], peak {rec['peak_memory_bytes'] / 2**30:.2f} GiB "
                     f"(reserved {rec['peak_reserved_bytes'] / 2**30:.2f}), {rec['tokens_per_s']:.0f} tok/s ({dt:.1f}s)")
                done.append({"index": i, "record": rec})
            with open(args.part + ".tmp", "w") as f:
                json.dump({"done": done, "versions": {k: r.versions() for k, r in runners.items()}}, f)
            os.replace(args.part + ".tmp", args.part)
        if st != 0:
            # a failed case can leave NCCL communicators or cached blocks behind: the launcher goes
            # on with the remaining cases in fresh processes, so no measurement runs after a failure
            break
    dist.barrier()
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------- launcher

def gpu_clocks() -> list[dict]:
    """nvidia-smi's clocks, temperature and power per GPU (empty where there is no nvidia-smi)."""
    q = "index,name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit,driver_version"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except Exception:  # noqa: BLE001
        return []
    keys = q.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in out.strip().splitlines() if line.strip()]


def with_clocks(r: dict, sampler, nproc: int) -> dict:
    """The record with the NVML readings of its timed steps: per GPU (``gpu_clocks``: median and
    mean SM clock, median and mean power, temperature, throttle reasons, sample count) and over
    the GPUs (``sm_clock_mhz``, ``power_w``: means of the per-GPU means)."""
    window = r.pop("timed_window_monotonic", None)
    if sampler is None or not window or window[1] is None:
        return r
    per = []
    for g in range(nproc):
        s = summarize_samples(sampler.between(window[0], window[1], gpu=g, wait=(g == 0)), None)
        if s["nvml_samples"]:
            s.pop("power_limit_w", None)
            per.append({"gpu": g, **s})
    if per:
        r["gpu_clocks"] = per
        r["sm_clock_mhz"] = statistics.fmean(p["sm_clock_mean_mhz"] for p in per)
        r["power_w"] = statistics.fmean(p["power_mean_w"] for p in per)
        r["throttle_reasons"] = sorted({x for p in per for x in (p.get("throttle_reasons") or [])})
    return r


def launch(args):
    import common
    import torch
    cases = [c for c in grid(args.grid) if c["plan"]["world"] == args.nproc]
    for c in [c for c in cases if unsupported_reason(c)]:
        print(f"  skipped {case_label(c)}: {unsupported_reason(c)}", flush=True)
    cases = [c for c in cases if not unsupported_reason(c)]
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        cases = cases[i::n]
    if args.only:
        keep = args.only.split(",")
        cases = [c for c in cases if any(k in case_label(c) for k in keep)]
    if args.twins:
        cases = with_twins(cases)
    info = common.device_info(world=args.nproc, suite=f"plan_step:{args.grid}",
                              nccl=common.nccl_version_str() if torch.cuda.is_available() else None)
    info["gpu_clocks_start"] = gpu_clocks()
    info["env"] = {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NVLS_ENABLE", "PYTORCH_CUDA_ALLOC_CONF",
                                                  "TORCH_SYMM_MEM_DISABLE_MULTICAST", "OMP_NUM_THREADS")}
    info["timing"] = ("synchronized wall time per step (device sync + barrier before, device sync after), "
                      "max over ranks; time_s = median over the timed steps after warm-up")
    rec = common.Recorder(args.out, info)
    sampler = Sampler(args.out + ".nvml.jsonl", period_s=0.1) if torch.cuda.is_available() else None
    import tempfile
    work = tempfile.mkdtemp(prefix="plan_step_")      # children's case lists, parts and logs
    t0 = time.time()
    pending = list(cases)
    # cases expected to fail run alone, after the rest
    order = [c for c in pending if not c.get("risky")] + [c for c in pending if c.get("risky")]
    batches, cur = [], []
    for c in order:
        if c.get("risky"):
            if cur:
                batches.append(cur)
                cur = []
            batches.append([c])
        else:
            cur.append(c)
    if cur:
        batches.append(cur)
    child_n = 0
    for batch in batches:
        while batch:
            left = args.budget_s - (time.time() - t0)
            if left < 30:
                common.log(f"budget reached: {sum(len(b) for b in batches)} cases not run")
                batch = []
                break
            child_n += 1
            cf, part, status = (os.path.join(work, f"{n}_{child_n}.json") for n in ("cases", "part", "status"))
            with open(cf, "w") as f:
                json.dump(batch, f)
            for pth in (part, status):
                if os.path.exists(pth):
                    os.remove(pth)
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
                   "--master_port", str(args.port_base + child_n % 50), os.path.abspath(__file__), "child",
                   "--cases", cf, "--part", part, "--status", status, "--budget-s", str(max(10.0, left - 25)),
                   "--pg-timeout-s", str(args.pg_timeout_s)] + (["--cpu"] if args.cpu else [])
            common.log(f"== child {child_n}: {len(batch)} cases, {left:.0f}s left")
            logf = os.path.join(work, f"log_{child_n}.txt")
            with open(logf, "w") as lf:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                try:
                    for line in proc.stdout:
                        lf.write(line)
                        if not line.startswith(("[rank", "W1", "I1")) or "Error" in line:
                            sys.stdout.write(line)
                    proc.wait(timeout=max(5, left))
                except subprocess.TimeoutExpired:
                    proc.kill()
            with open(logf) as lf:
                text = lf.read()
            done = {}
            if os.path.exists(part):
                with open(part) as f:
                    pj = json.load(f)
                info.setdefault("frameworks", {}).update(pj.get("versions", {}))
                done = {d["index"]: d for d in pj["done"]}
            for i in sorted(done):
                d = done[i]
                if "record" in d:
                    rec.add(with_clocks(d["record"], sampler, args.nproc))
                else:
                    rec.error(f"{case_label(batch[i])}: {d['error']}")
            nxt = max(done) + 1 if done else 0
            # a child stops by itself after a failed case (child_main), and may then die at teardown
            # (NCCL after an OOM): that exit is not the next case's, which runs in a fresh child
            last = done[max(done)] if done else {}
            stopped = "error" in last or bool(last.get("record", {}).get("oom"))
            if nxt < len(batch) and proc.returncode not in (0, None) and not stopped:
                # the child died inside case nxt: an OOM that left a rank waiting, or a crash
                c = batch[nxt]
                oom = "out of memory" in text.lower() or "OutOfMemoryError" in text
                if oom:
                    r = dict(kind="plan_step", framework=c["framework"], name=c["name"], **c["model"], **c["plan"],
                             dtype="bfloat16", time_s=None, peak_memory_bytes=None, peak_reserved_bytes=None,
                             oom=True, error="out of memory; the run ended in that case (a rank died or waited)")
                    rec.add(r)
                    common.log(f"  {case_label(c)}: OOM (child died)")
                else:
                    tail = " ".join(text.strip().splitlines()[-3:])[-300:]
                    rec.error(f"{case_label(c)}: child exited {proc.returncode}: {tail}")
                nxt += 1
            elif nxt < len(batch) and (not done or time.time() - t0 > args.budget_s - 30):
                nxt = len(batch)          # budget stop inside the child
            batch = batch[nxt:]
    if sampler is not None:
        sampler.stop()
    info["gpu_clocks_end"] = gpu_clocks()
    info["errors"] = rec.errors
    rec.flush()
    common.log(f"done: {len(rec.records)} records, {len(rec.errors)} errors, {time.time() - t0:.0f}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    la = sub.add_parser("launch")
    la.add_argument("--grid", default="smoke")
    la.add_argument("--nproc", type=int, default=1)
    la.add_argument("--out", required=True)
    la.add_argument("--budget-s", type=float, default=300)
    la.add_argument("--only", default=None, help="comma-separated substrings of case labels to keep")
    la.add_argument("--cpu", action="store_true")
    la.add_argument("--twins", action="store_true",
                    help="after the cases, each one's tiny twin (same plan and op structure, host-grid sizes): "
                         "the host speed of this machine (meshcast validate --host-speed twins)")
    la.add_argument("--shard", default=None, help="i/n: keep every n-th case from the i-th (parallel 1-GPU runs)")
    la.add_argument("--port-base", type=int, default=29500)
    la.add_argument("--pg-timeout-s", type=float, default=60)
    ls = sub.add_parser("list")
    ls.add_argument("--grid", default="main")
    ch = sub.add_parser("child")
    ch.add_argument("--cases", required=True)
    ch.add_argument("--part", required=True)
    ch.add_argument("--status", required=True)
    ch.add_argument("--budget-s", type=float, default=300)
    ch.add_argument("--pg-timeout-s", type=float, default=90)
    ch.add_argument("--cpu", action="store_true")
    args = ap.parse_args()
    if args.cmd == "list":
        for c in grid(args.grid):
            print(case_label(c) + (" (risky)" if c.get("risky") else ""))
    elif args.cmd == "child":
        child_main(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
