"""A plan as Megatron-LM command-line arguments, and back (for round-trip checks).

Mapping (Megatron-LM ``megatron/training/arguments.py``, core_r0.10+ names):

  tp, sp          --tensor-model-parallel-size, --sequence-parallel
  pp, vp          --pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage
                  (layers per model chunk of a middle stage: its layers / vp)
  uneven stages   --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers
                  (the middle stages split the rest evenly, as Megatron requires)
  cp, ep, etp     --context-parallel-size, --expert-model-parallel-size, --expert-tensor-parallel-size
  zero 1, 2       --use-distributed-optimizer (Megatron's distributed optimizer shards optimizer
                  states and reduce-scatters gradients)
  zero 3          --use-torch-fsdp2
  recompute       selective: --recompute-granularity selective; full: --recompute-granularity full
                  with --recompute-method uniform --recompute-num-layers 1 (every layer), or
                  --recompute-method block --recompute-num-layers N (the first N layers of each
                  stage; with vp > 1 Megatron counts per model chunk, so N/vp)
  mbs, gbs, seq   --micro-batch-size, --global-batch-size, --seq-length
  precision       --bf16 | --fp16 | --bf16 --fp8-format hybrid
  overlaps        --overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap
"""
from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Optional

from hardware_specs.errors import MeshcastError
from models.schema import ModelSpec
from simulator.plan import ParallelPlan


def megatron_args(plan: ParallelPlan, model: ModelSpec) -> tuple[list[str], list[str]]:
    """(arguments, notes): the arguments for a resolved ``plan``; notes say where Megatron-LM
    cannot express the plan exactly."""
    args: list[str] = []
    notes: list[str] = []
    L = model.num_layers
    if plan.zero_stage is None:
        from simulator.frameworks import get_framework
        plan = replace(plan, zero_stage=get_framework(plan.framework).default_zero)

    def add(flag: str, value=None) -> None:
        args.append(flag)
        if value is not None:
            args.append(str(value))

    add("--tensor-model-parallel-size", plan.tp)
    add("--pipeline-model-parallel-size", plan.pp)
    lps = plan.layers_per_stage
    uneven = lps is not None and len(set(lps)) > 1
    if uneven:
        mids = lps[1:-1]
        if len(set(mids)) > 1:
            notes.append(f"middle stages are uneven {list(mids)}; Megatron-LM splits them evenly")
        add("--decoder-first-pipeline-num-layers", lps[0])
        add("--decoder-last-pipeline-num-layers", lps[-1])
    if plan.vp > 1:
        middle = (lps[1] if lps and len(lps) > 2 else (lps[0] if lps else L // plan.pp))
        add("--num-layers-per-virtual-pipeline-stage", middle // plan.vp)
    if plan.cp > 1:
        add("--context-parallel-size", plan.cp)
    if plan.ep > 1 or (model.moe is not None):
        add("--expert-model-parallel-size", plan.ep)
        add("--expert-tensor-parallel-size", plan.expert_tp)
    if plan.sp:
        add("--sequence-parallel")
    if plan.recompute == "selective":
        add("--recompute-granularity", "selective")
    elif plan.recompute == "full":
        add("--recompute-granularity", "full")
        if plan.recompute_layers is None:
            add("--recompute-method", "uniform")
            add("--recompute-num-layers", 1)
        else:
            n = plan.recompute_layers
            if plan.vp > 1:
                if n % plan.vp:
                    notes.append(f"recompute_layers={n} is not a multiple of vp={plan.vp}; Megatron-LM's block "
                                 f"method counts per model chunk, rounded up to {-(-n // plan.vp)}")
                n = -(-n // plan.vp)
            add("--recompute-method", "block")
            add("--recompute-num-layers", n)
    add("--micro-batch-size", plan.mbs)
    if plan.gbs is not None:
        add("--global-batch-size", plan.gbs)
    if plan.seq is not None:
        add("--seq-length", plan.seq)
    if plan.zero_stage in (1, 2):
        add("--use-distributed-optimizer")
        if plan.zero_stage == 2:
            notes.append("ZeRO-2: Megatron's distributed optimizer already reduce-scatters gradients")
    elif plan.zero_stage == 3:
        add("--use-torch-fsdp2")
    if plan.precision == "bf16":
        add("--bf16")
    elif plan.precision == "fp16":
        add("--fp16")
    else:
        add("--bf16")
        add("--fp8-format", "hybrid")
    if plan.overlap_grad_reduce and plan.zero_stage in (1, 2):
        add("--overlap-grad-reduce")
    if plan.overlap_param_gather and plan.zero_stage in (1, 2):
        add("--overlap-param-gather")
    if plan.tp_comm_overlap:
        add("--tp-comm-overlap")
    if plan.schedule == "gpipe":
        notes.append("Megatron-LM has no GPipe schedule; it runs 1F1B (same time, less memory)")
    return args, notes


def format_args(args: list[str]) -> str:
    """One line per flag (with its value), ready to paste into a launch script."""
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(args[i])
            i += 1
    return " \\\n".join(lines)


def parse_megatron_args(argv: list[str] | str, model: ModelSpec, base: Optional[ParallelPlan] = None) -> ParallelPlan:
    """The plan a list of Megatron-LM arguments describes (inverse of :func:`megatron_args`)."""
    if isinstance(argv, str):
        argv = shlex.split(argv.replace("\\\n", " "))
    vals: dict[str, Optional[str]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            raise MeshcastError("megatron_args", f"unexpected token {tok!r}")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            vals[tok] = argv[i + 1]
            i += 2
        else:
            vals[tok] = None
            i += 1

    def num(flag: str, default=None):
        v = vals.get(flag)
        return default if v is None else int(v)

    L = model.num_layers
    tp = num("--tensor-model-parallel-size", 1)
    pp = num("--pipeline-model-parallel-size", 1)
    first = num("--decoder-first-pipeline-num-layers")
    last = num("--decoder-last-pipeline-num-layers")
    lps = None
    if first is not None or last is not None:
        if pp < 2:
            raise MeshcastError("megatron_args", "first/last stage layers need pipeline parallelism")
        first = first if first is not None else (L - (last or 0)) // (pp - 1)
        last = last if last is not None else (L - first) // (pp - 1)
        mid_total = L - first - last
        if pp == 2:
            lps = (first, last)
        else:
            if mid_total % (pp - 2):
                raise MeshcastError("megatron_args", f"{mid_total} middle layers do not split over {pp - 2} stages")
            lps = (first,) + (mid_total // (pp - 2),) * (pp - 2) + (last,)
    per_chunk = num("--num-layers-per-virtual-pipeline-stage")
    vp = 1
    if per_chunk is not None:
        middle = lps[1] if lps and len(lps) > 2 else (lps[0] if lps else L // pp)
        vp = middle // per_chunk
    gran = vals.get("--recompute-granularity", None) if "--recompute-granularity" in vals else None
    recompute, rec_layers = "none", None
    if gran == "selective":
        recompute = "selective"
    elif gran == "full":
        recompute = "full"
        if vals.get("--recompute-method") == "block":
            rec_layers = num("--recompute-num-layers") * vp
    zero = 0
    if "--use-distributed-optimizer" in vals:
        zero = 1
    if "--use-torch-fsdp2" in vals:
        zero = 3
    precision = "fp16" if "--fp16" in vals else ("fp8" if "--fp8-format" in vals else "bf16")
    base = base or ParallelPlan()
    etp = num("--expert-tensor-parallel-size")
    return replace(base, tp=tp, pp=pp, vp=vp, cp=num("--context-parallel-size", 1),
                   ep=num("--expert-model-parallel-size", 1), etp=None if etp in (None, tp) else etp,
                   sequence_parallel="--sequence-parallel" in vals,
                   zero_stage=zero, recompute=recompute, recompute_layers=rec_layers,
                   mbs=num("--micro-batch-size", 1), gbs=num("--global-batch-size"), seq=num("--seq-length"),
                   precision=precision, schedule="interleaved" if vp > 1 else None, layers_per_stage=lps,
                   overlap_grad_reduce="--overlap-grad-reduce" in vals or zero in (0, 3) and base.overlap_grad_reduce,
                   overlap_param_gather="--overlap-param-gather" in vals or zero in (0, 3) and base.overlap_param_gather,
                   tp_comm_overlap="--tp-comm-overlap" in vals)
