"""simulate(model, hardware, plan): the one cost model behind simulate, plan, validate and reports.

Each distinct layer kind (dense, MoE; a hybrid model's Mamba-2, attention, MLP and MoE blocks) is
lowered and costed once for one micro-batch; stages
sum their layers; the pipeline schedule turns stage times into the step's critical path; data-
parallel gradient reduction, parameter gathering and the optimizer step are added where they
are not hidden. See docs/cost_model.md for every formula.
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np
from dataclasses import dataclass, fields, replace

from hardware_specs.catalog import Hardware
from models.params import embedding_param_tensors, head_param_tensors, kind_param_tensors, layer_param_tensors
from models.schema import ModelSpec
from simulator.calibration import DEFAULT, Calibration
from simulator.comm import Fabric, collective_time, fabric_from_hardware, flat_time
from simulator.compute import DeviceModel, memory_time
from simulator.frameworks import get_framework
from simulator.regimes import model_tags
from simulator.flops import step_hardware_flops, step_model_flops
from simulator.identity_cache import IdentityCache
from simulator.launch_queue import OpStream, steady_microbatch_seconds
from simulator.lowering import EXPERT_LOOP_OP, Context, embedding_ops, last_stage_ops, layer_ops, p2p_time
from simulator.memory import (DS_REDUCE_BUCKET, StageFootprint, fits_in, kinds_in, layer_activations_by_kind,
                              layer_kind_params, moe_layers_in, stage_footprint, stage_memory, stage_params)
from simulator.ops import Op
from simulator.power import activity, step_clock_fraction, work_class
from simulator.plan import ParallelPlan, check_precision, precision_peak_dtype, resolve_plan, split_note
from hardware_specs.errors import PlanError
from simulator.result import Result, StageCost
from simulator.schedule import p2p_exposed as _p2p_exposed, pipeline_time, timeline
from simulator import zero3_2021

# HBM bytes per parameter of one Adam step: fused kernels read p, g, m, v and write p, m, v (+ the
# bf16 copy for megatron); PyTorch's foreach AdamW (FSDP2 reference) runs ~9 separate passes
OPTIMIZER_BYTES = {"megatron": 30, "zero": 28, "torch_amp": 28, "torch_fsdp": 72}
BUCKET_PARAMS = 40e6       # Megatron-LM DDP bucket size (elements); the last bucket is never hidden


_DEVICES = IdentityCache()
_FABRICS = IdentityCache()


def device_model(accelerator, cal: Calibration, sustained: bool = False, clock: float = 1.0) -> DeviceModel:
    """The cost-model view of an accelerator under a calibration, cached by identity so the
    per-op caches in simulator.compute are shared by every simulation on the same inputs.
    ``sustained`` costs tensor-core work at the power-limited clock of back-to-back GEMMs
    (kernel records of sustained.py). Training steps do not: a step's memory-bound phases and
    gaps lower its average power, so it runs at its own clock fraction ``clock`` (simulator/power.py
    step_clock_fraction; 1.0 where the calibration has no step power model)."""
    return _DEVICES.get((accelerator, cal), (sustained, clock),
                        lambda: DeviceModel(accelerator, cal, sustained, clock))


def _fabric(hw: Hardware, cal: Calibration) -> Fabric:
    return _FABRICS.get((hw.cluster, hw.node, cal), (hw.num_gpus,), lambda: fabric_from_hardware(hw, cal))


_LOWERED = IdentityCache(limit=4096)
# Plan fields that change the per-micro-batch ops of a layer (dp, pp, vp, zero, gbs do not, but
# the number of micro-batches does: autograd's gradient accumulation runs on all but the first,
# lowering._autograd_accumulation); planners.bounds keys its layer costs on the same list.
LOWERING_FIELDS = ("tp", "cp", "ep", "etp", "mbs", "seq", "sequence_parallel", "recompute",
                   "recompute_layers", "recompute_modules", "precision", "attention", "dropout", "tp_comm_overlap", "recipe",
                   "ep_comm_overlap", "framework", "bf16_layers", "gemm_precision", "moe_dispatcher",
                   "moe_permute_fusion", "moe_router_fusion", "moe_host_sync", "fp8_recipe")
_LAYER_KEY = operator.attrgetter(*LOWERING_FIELDS)


def _lowered(ctx: Context):
    """Lowered ops of each layer kind, the embedding and the head, shared between plans that
    differ only in fields the per-layer ops do not depend on (a planner sweeps many such).
    dp joins the key only for the pipeline send, whose group stride it sets."""
    p = ctx.plan
    return _LOWERED.get((ctx.model, ctx.dev, ctx.fabric), _LAYER_KEY(p) + (p.dp, p.microbatches()),
                        lambda: _lower(ctx))


def _lower(ctx: Context) -> tuple:
    """(ops of each layer kind, the same without recompute where the plan recomputes only some
    layers, embedding, head with any MTP depths (lowering.last_stage_ops), pipeline send seconds,
    and where the plan keeps layers in bf16 (``bf16_layers``) the (ops, ops without recompute) of
    each kind lowered in bf16)."""
    p, model = ctx.plan, ctx.model
    sp = ctx.dev.cal.step_power
    kinds = list(layer_kind_params(model))

    def lower_kinds(c: Context) -> tuple[dict, dict]:
        ops = {k: summarize_ops(layer_ops(c, k), sp) for k in kinds}
        norec = {k: summarize_ops(layer_ops(c, k, recompute=False), sp) for k in kinds} if p.recompute_layers else {}
        return ops, norec

    ops, norec = lower_kinds(ctx)
    bf16 = {}
    if bf16_layer_range(model, p):
        b_ops, b_norec = lower_kinds(replace(ctx, plan=replace(p, precision="bf16", bf16_layers=None,
                                                                gemm_precision=None)))
        bf16 = {k: (b_ops[k], b_norec.get(k)) for k in kinds}
    return (ops, norec, summarize_ops(embedding_ops(ctx), sp), summarize_ops(last_stage_ops(ctx), sp), p2p_time(ctx),
            bf16)


def bf16_layer_range(model: ModelSpec, plan: ParallelPlan) -> tuple[range, ...]:
    """The decoder layers a quantized plan keeps in bf16 (``plan.bf16_layers`` = (first, last)):
    Megatron-Core's get_fp8_context / get_fp4_context (fp8_utils.py, fp4_utils.py) leave layer_no
    < first and layer_no >= num_layers - last outside the quantized autocast. Empty where the
    plan is not quantized or keeps no layer in bf16."""
    if not plan.bf16_layers or plan.precision not in ("fp8", "nvfp4"):
        return ()
    first, last = plan.bf16_layers
    n = model.num_layers
    tail = max(min(first, n), n - last)
    return tuple(r for r in (range(0, min(first, n)), range(tail, n)) if len(r))


def bf16_kinds_in(model: ModelSpec, plan: ParallelPlan, layers: range) -> dict[str, int]:
    """How many of ``layers`` of each kind run in bf16 (bf16_layer_range)."""
    out: dict[str, int] = {}
    for r in bf16_layer_range(model, plan):
        lo, hi = max(r.start, layers.start), min(r.stop, layers.stop)
        for kind, n in (kinds_in(model, lo, hi) if hi > lo else {}).items():
            out[kind] = out.get(kind, 0) + n
    return out


@dataclass(frozen=True)
class OpsSummary:
    """An op list reduced to what stage costing needs: exposed seconds forward and backward
    (recompute included), exposed seconds per category, and FLOPs (no recompute)."""

    ops: tuple
    forward_s: float
    backward_s: float
    groups: dict
    flops: float
    count: int = 0           # ops the host dispatches (eager frameworks launch one by one)
    count_forward: int = 0   # of which in the forward pass
    power_s: dict = None     # (exposed, active) seconds per class of the step power model (power_class)
    loop_count: int = 0      # ops issued by a Python loop over local experts (lowering.EXPERT_LOOP_OP)
    syncs: int = 0           # host synchronisations (the host waits for the GPU's queue to drain)


def power_class(op: Op) -> str | None:
    """The step power model's class of an op (simulator/power.py work_class): a GEMM's dtype is
    its shape's fifth entry, an attention op's backend its last."""
    dtype = op.shape[4] if op.kind == "gemm" and len(op.shape) > 4 else None
    backend = op.shape[-1] if op.kind == "attention" and op.shape else None
    return work_class(op.kind, dtype, backend)


def _power_seconds(ops: list[Op], sp: dict | None) -> dict:
    """(exposed seconds, active seconds Σ ρ·t) per power class (simulator/power.py activity)."""
    out: dict[str, tuple[float, float]] = {}
    for op in ops:
        cls = power_class(op)
        if cls is None or op.phase not in ("fwd", "bwd", "recompute"):
            continue
        t = op.time_s - op.overlap_s
        t0, a0 = out.get(cls, (0.0, 0.0))
        counted = op.bytes if op.kind != "attention" else 0.0     # unfused attention: score traffic not in op.bytes
        out[cls] = (t0 + t, a0 + t * activity(sp, cls, op.flops, op.time_s, counted))
    return out


def summarize_ops(ops: list[Op], step_power: dict | None = None) -> OpsSummary:
    """Reduce an op list the way a stage sums it: exposed forward and backward (with recompute)
    seconds, exposed seconds per category and per power class (activities from the calibration's
    ``step_power``), FLOPs and the op count."""
    return OpsSummary(tuple(ops), _sum_phase(ops, ("fwd",)), _sum_phase(ops, ("bwd", "recompute")),
                      _group_time(ops, ("fwd", "bwd", "recompute")),
                      sum(op.flops for op in ops if op.phase in ("fwd", "bwd")), len(ops),
                      sum(1 for op in ops if op.phase == "fwd"), _power_seconds(ops, step_power),
                      sum(1 for op in ops if op.name.startswith(EXPERT_LOOP_OP)),
                      sum(1 for op in ops if op.kind == "host_sync"))


def stage_layer_ranges(model: ModelSpec, plan: ParallelPlan) -> list[range]:
    """The layers each pipeline stage owns (even split unless ``layers_per_stage`` is given)."""
    sizes = plan.layers_per_stage or (model.num_layers // plan.pp,) * plan.pp
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


def _sum_phase(ops: list[Op], phases: tuple[str, ...]) -> float:
    return sum(op.time_s - op.overlap_s for op in ops if op.phase in phases)


def _group_time(ops: list[Op], phases: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in ops:
        if op.phase in phases:
            key = op.group if op.kind == "collective" else "compute"
            out[key] = out.get(key, 0.0) + op.time_s - op.overlap_s
    return out


@dataclass
class _Step:
    """The core of one simulated step, shared by simulate() and evaluate_plans()."""

    plan: ParallelPlan
    ctx: Context
    lowered: tuple
    ranges: list
    bundles: list
    stages: list
    p2p: float
    overlap_p2p: bool
    pipe: float
    dp_exposed: float
    dp_total: float
    optimizer: float
    host_bound: float
    step: float
    host_issue: float        # host seconds to issue forward and backward of every micro-batch
    host_optimizer: float    # host seconds to issue the optimizer step
    stage_devices: list = None   # heterogeneous plans: (Context, HBM bytes, Hardware) per stage
    clock_fraction: float = 1.0  # SM clock / f_max the step runs at (power-limited; 1.0 = full clock)
    full_clock_step: float = 0.0  # the step's seconds at full clock (= step where not power-limited)


# clocks are rounded to this step so that plans of similar power share lowered ops (a 0.5% clock
# step moves a GEMM-bound step by at most ~0.15%)
CLOCK_STEP = 0.005


def _step(model: ModelSpec, hardware: Hardware, plan: ParallelPlan, calibration: Calibration) -> _Step:
    """One step at the clock its own mix of work allows under the board's power limit: costed at
    full clock, then, where its average power would exceed the limit (step_power_clock), costed
    again at the power-limited clock (docs/cost_model.md "Clocks and power")."""
    st = _step_at(model, hardware, plan, calibration, 1.0)
    st.full_clock_step = st.step
    x = step_power_clock(st, calibration, hardware.accelerator.calibration_profile)
    if x >= 1.0 - CLOCK_STEP / 2:
        return st
    capped = _step_at(model, hardware, plan, calibration, round(x / CLOCK_STEP) * CLOCK_STEP)
    capped.clock_fraction, capped.full_clock_step = x, st.step
    return capped


def step_power_clock(st: _Step, calibration: Calibration, own_profile: str | None) -> float:
    """The clock fraction of a step costed at full clock (simulator/power.py step_clock_fraction):
    the mix of work of its busiest stage's GPU over the step, per power class (its micro-batches'
    op classes, the optimizer as memory-bound work, the rest of the step idle or communicating).
    1.0 without a step power model, for a profile other than the accelerator's own
    (``own_profile``: its watts are another board's, so a transferred profile runs at full clock) or
    for plans whose stages run on different accelerators."""
    sp = calibration.step_power
    if not sp or st.stage_devices is not None or own_profile != calibration.name:
        return 1.0
    m = st.plan.microbatches()
    i = max(range(len(st.stages)), key=lambda j: st.stages[j].forward_s + st.stages[j].backward_s)
    mix = {c: (m * t, m * act) for c, (t, act) in (st.stages[i].power_s or {}).items()}
    t, act = mix.get("memory", (0.0, 0.0))
    opt = st.bundles[i].optimizer_s
    mix["memory"] = (t + opt, act + opt)
    mix["idle"] = (max(0.0, st.step - sum(v[0] for v in mix.values())), 0.0)
    return step_clock_fraction(sp, mix, calibration.gemm_clock_bound_fraction)


def _step_at(model: ModelSpec, hardware: Hardware, plan: ParallelPlan, calibration: Calibration,
             clock: float) -> _Step:
    plan = resolve_plan(model, plan, hardware.num_gpus)
    check_precision(plan.precision, hardware.accelerator)
    for _, want in plan.gemm_precision or ():
        check_precision(want, hardware.accelerator)
    dev = device_model(hardware.accelerator, calibration, clock=clock)
    ctx = Context(model, plan, dev, _fabric(hardware, calibration), hardware.node.host_link.bandwidth_per_direction_Bps)
    lowered = _lowered(ctx)
    ranges = stage_layer_ranges(model, plan)
    links = devices = None
    if plan.stage_clusters is None:
        bundles = _stage_bundles(ctx, hardware, ranges, lowered)
    else:
        bundles, links, devices = _heterogeneous_stages(model, hardware, plan, calibration, ranges)
    stages = [b.cost if b.cost.index == i else
              StageCost(i, b.cost.layers, b.cost.moe_layers, b.cost.forward_s, b.cost.backward_s, b.cost.groups,
                        b.cost.flops, b.cost.host_s, b.cost.host_forward_s, b.cost.power_s) for i, b in enumerate(bundles)]
    p2p = lowered[4] if plan.pp > 1 else 0.0
    if links is not None:
        p2p = links if plan.pp > 1 else 0.0
    overlap_p2p = plan.overlap_p2p if plan.overlap_p2p is not None else plan.pipeline_schedule == "interleaved"
    m = plan.microbatches()
    # each micro-batch's 2·vp pipeline sends and receives are host-issued calls too
    p2p_calls = 2 * plan.vp * calibration.host_op_s if plan.pp > 1 else 0.0
    synced = plan.pp > 1 and get_framework(plan.framework).host.p2p_sync and not overlap_p2p
    fwd, bwd = _phase_seconds(stages, p2p_calls, synced)
    pipe = pipeline_time(fwd, bwd, m, plan.vp, p2p, overlap_p2p, calibration.comm_overlap_slowdown)
    dp_exposed = max(b.dp_exposed_s + m * b.dp_microbatch_exposed_s for b in bundles)
    opt = max(b.optimizer_s for b in bundles)
    step = pipe + dp_exposed + opt
    # the GPU cannot run ahead of the host that issues its kernels (eager frameworks); with no
    # synchronisation between steps the host issues the next forward while the GPU still runs
    # this step's optimizer, so over a step the slower of the two sets the pace. Where every
    # pipeline exchange synchronizes the device, host and GPU meet phase by phase instead
    # (_phase_seconds) and only the optimizer's issue can still run past the GPU.
    host_issue, host_opt = max(((m * (st.host_s + p2p_calls), b.optimizer_host_s) for st, b in zip(stages, bundles)),
                               key=sum)
    host_bound = max(0.0, host_opt - opt) if synced else max(0.0, host_issue + host_opt - step)
    return _Step(plan, ctx, lowered, ranges, bundles, stages, p2p, overlap_p2p, pipe, dp_exposed,
                 max(b.dp_total_s + m * b.dp_microbatch_total_s for b in bundles), opt, host_bound, step + host_bound, host_issue, host_opt,
                 devices)


def _phase_seconds(stages, p2p_calls: float, synced: bool) -> tuple[list[float], list[float]]:
    """Per-stage forward and backward seconds of one micro-batch for the pipeline schedule: the
    GPU's, or, where each pipeline exchange synchronizes the device (Megatron-Core's
    batch_isend_irecv followed by torch.cuda.synchronize, p2p_communication.py), the larger of the
    GPU's and the host's seconds of that phase, since neither can run ahead past the exchange."""
    fwd = [s.forward_s for s in stages]
    bwd = [s.backward_s for s in stages]
    if not synced:
        return fwd, bwd
    return ([max(f, s.host_forward_s + p2p_calls / 2) for f, s in zip(fwd, stages)],
            [max(b, s.host_s - s.host_forward_s + p2p_calls / 2) for b, s in zip(bwd, stages)])


def stage_hardware(hardware: Hardware, plan: ParallelPlan, calibration: Calibration, index: int):
    """(Hardware, Calibration) stage ``index`` of a heterogeneous plan runs on: its catalog cluster
    with the plan's GPU count (so its fabric has the same spans as a homogeneous run), and the
    given calibration where its accelerator is the simulated hardware's, else the accelerator's
    own (or nearest) profile (simulator.calibration.calibration_for)."""
    name = plan.stage_clusters[index]
    hw = _cluster_hardware(name, plan.num_gpus or hardware.num_gpus)
    if hw.accelerator.name == hardware.accelerator.name:
        return hw, calibration
    return hw, _own_calibration(hw.accelerator)


@functools.lru_cache(maxsize=64)
def _cluster_hardware(name: str, num_gpus: int) -> Hardware:
    from hardware_specs.catalog import load_cluster, load_hardware, load_node

    cl = load_cluster(name)
    total = cl.num_nodes * load_node(cl.node).gpus_per_node
    return replace(load_hardware(name, min(total, num_gpus)), num_gpus=num_gpus)


_CALS = IdentityCache()


def _own_calibration(accelerator) -> Calibration:
    from simulator.calibration import calibration_for
    return _CALS.get((accelerator,), (), lambda: calibration_for(accelerator)[0])


def inter_cluster_link(a: Fabric, b: Fabric):
    """The link between two clusters of a heterogeneous pipeline. Assumed: each cluster's first
    scale-out (inter-node NIC) tier, and a send between them runs at the slower of the two (its
    per-GPU NIC share, fixed cost and hop latency); a cluster with no scale-out tier uses its
    outermost level."""
    la = a.levels[1] if len(a.levels) > 1 else a.levels[-1]
    lb = b.levels[1] if len(b.levels) > 1 else b.levels[-1]
    return la if la.beta_Bps <= lb.beta_Bps else lb


def _heterogeneous_stages(model: ModelSpec, hardware: Hardware, plan: ParallelPlan, calibration: Calibration,
                          ranges: list[range]):
    """Bundles of a plan whose stages sit on different clusters (each costed on its own
    accelerator, calibration and fabric) and the send time of every pipeline boundary s -> s+1
    (the last entry the wrap-around p-1 -> 0): on the stage's fabric within one cluster, over
    ``inter_cluster_link`` between two."""
    bundles, ctxs, names = [], [], plan.stage_clusters
    for i in range(plan.pp):
        hw, cal = stage_hardware(hardware, plan, calibration, i)
        ctx = Context(model, plan, device_model(hw.accelerator, cal), _fabric(hw, cal),
                      hw.node.host_link.bandwidth_per_direction_Bps)
        lowered = _lowered(ctx)
        bundles.append(_stage_bundles(ctx, hw, ranges, lowered)[i])
        ctxs.append((ctx, lowered, hw))
    nbytes = ctxs[0][0].sp_tokens * model.hidden * 2
    links = []
    for i in range(plan.pp):
        j = (i + 1) % plan.pp
        if names[i] == names[j]:
            links.append(ctxs[i][1][4])
        else:
            level = inter_cluster_link(ctxs[i][0].fabric, ctxs[j][0].fabric)
            links.append(flat_time(level, "send_recv", nbytes, 2))
    return bundles, links, [(c, hw.accelerator.hbm_capacity_bytes, hw) for c, _, hw in ctxs]


def _stage_caps(st: _Step, hardware: Hardware) -> list:
    """(Context, HBM capacity) of every stage: its own device in a heterogeneous plan."""
    if st.stage_devices is not None:
        return [(c, cap) for c, cap, _ in st.stage_devices]
    return [(st.ctx, hardware.accelerator.hbm_capacity_bytes)] * len(st.ranges)


def _max_p2p(p2p) -> float:
    return max(p2p) if isinstance(p2p, (list, tuple)) else p2p


def simulate(model: ModelSpec, hardware: Hardware, plan: ParallelPlan,
             calibration: Calibration = DEFAULT, with_timeline: bool = False, with_ops: bool = False) -> Result:
    """Predict one training step: time, throughput, MFU/HFU, memory, breakdown, bottleneck.
    ``with_timeline`` adds the pipeline replay (reports, traces); ``with_ops`` the op lists of
    one micro-batch (each layer kind, embedding, head) for roofline plots."""
    st = _step(model, hardware, plan, calibration)
    plan, stages, ranges = st.plan, st.stages, st.ranges
    mems = [stage_memory(c, i, r, i == 0, i == len(ranges) - 1, cap, footprint=b.footprint)
            for i, (r, b, (c, cap)) in enumerate(zip(ranges, st.bundles, _stage_caps(st, hardware)))]
    events = None
    if with_timeline:
        events = timeline([s.forward_s for s in stages], [s.backward_s for s in stages], plan.microbatches(),
                          plan.vp, plan.pipeline_schedule, _max_p2p(st.p2p))
    result = _result(model, hardware, plan, calibration, stages, mems, st, events)
    if with_ops:
        kinds, _, emb, head, _, _ = st.lowered
        ops = {f"{k}_layer": list(v.ops) for k, v in kinds.items()}
        ops.update({"embedding": list(emb.ops), "head": [op for op in head.ops if not op.name.startswith("mtp")]})
        mtp = [op for op in head.ops if op.name.startswith("mtp")]
        if mtp:
            ops["mtp"] = mtp
        result = replace(result, ops=ops)
    return result


@dataclass
class PlanEvaluation:
    """A plan's step time (s), throughput (tokens/s) and fullest device (bytes) from the batch
    path, or the reason the plan cannot run."""

    plan: ParallelPlan
    step_time_s: float = math.inf
    tokens_per_s: float = 0.0
    memory_total_bytes: float = math.inf
    fits: bool = False
    error: str = ""


def evaluate_plans(model: ModelSpec, hardware: Hardware, plans, calibration: Calibration = DEFAULT) -> list:
    """Step time, throughput and memory verdict of many plans through the same cost model as
    simulate() (the same _step and memory functions), without building a full Result per plan:
    the batch API for planners."""
    from simulator.memory import stage_total_bytes

    out = []
    for plan in plans:
        try:
            st = _step(model, hardware, plan, calibration)
        except PlanError as exc:
            out.append(PlanEvaluation(plan, error=f"{exc.field}: {exc.reason}"))
            continue
        p = st.plan
        totals = [stage_total_bytes(p, b.footprint, i) for i, b in enumerate(st.bundles)]
        fits = all(fits_in(t, cap) for t, (_, cap) in zip(totals, _stage_caps(st, hardware)))
        out.append(PlanEvaluation(p, st.step, p.gbs * p.seq / st.step, max(totals), fits))
    return out


@dataclass(frozen=True)
class StageBundle:
    """Everything about one stage that does not depend on the pipeline around it: its cost per
    micro-batch, its memory footprint, its data-parallel communication and optimizer step."""

    cost: StageCost
    footprint: StageFootprint
    dp_exposed_s: float
    dp_total_s: float
    optimizer_s: float
    optimizer_host_s: float = 0.0   # host seconds to issue the optimizer step (eager frameworks)
    dp_microbatch_exposed_s: float = 0.0   # per micro-batch, where sharded gradients are reduced each one
    dp_microbatch_total_s: float = 0.0


_BUNDLES = IdentityCache(limit=200_000)
# Plan fields a stage's bundle does not depend on (they shape the pipeline around the stages).
_PIPELINE_ONLY = {"pp", "vp", "gbs", "schedule", "layers_per_stage", "num_gpus", "overlap_p2p", "stage_clusters"}
_STAGE_KEY_FIELDS = tuple(f.name for f in fields(ParallelPlan) if f.name not in _PIPELINE_ONLY)
_STAGE_KEY = operator.attrgetter(*_STAGE_KEY_FIELDS)


def _stage_bundles(ctx: Context, hw: Hardware, ranges: list[range], lowered) -> list[StageBundle]:
    """The bundle of every stage. Bundles are shared between stages with the same layer mix and
    position, and between plans that differ only in pipeline-level fields (a planner evaluates
    thousands of such plans); the cache holds the objects it was built from and checks them."""
    p, model = ctx.plan, ctx.model
    base = _STAGE_KEY(p)
    last = len(ranges) - 1
    per_layer: list = []

    def build(i: int, r: range):
        if not per_layer:   # computed once per call, only when some stage misses
            per_layer.append(layer_activations_by_kind(ctx))
        return _stage_bundle(ctx, hw, i, r, i == last, lowered, per_layer[0])

    owners = (model, ctx.dev, ctx.fabric, hw.node)
    # gbs is pipeline-level, but per-micro-batch accumulation is not; nor is the host's per-chunk
    # schedule code (vp chunks, more under pipelining: _host_seconds)
    base += (p.microbatches(), p.vp, p.pp > 1)
    return [_BUNDLES.get(owners, base + (len(r), _mix_key(model, r), i == 0, i == last,
                                         tuple(sorted(bf16_kinds_in(model, p, r).items()))),
                         lambda i=i, r=r: build(i, r))
            for i, r in enumerate(ranges)]


def _mix_key(model: ModelSpec, r: range):
    """What identifies a stage's layer mix: its MoE count for a transformer (dense layers are the
    rest), the count of every block kind for a hybrid model."""
    if not model.hybrid:
        return moe_layers_in(model, r.start, r.stop)
    return tuple(sorted(kinds_in(model, r.start, r.stop).items()))


def _stage_bundle(ctx: Context, hw: Hardware, index: int, r: range, last: bool, lowered, per_layer) -> StageBundle:
    kind_ops, norec_ops, emb, head, _, bf16_ops = lowered
    first = index == 0
    cost, sync = _stage_cost(ctx, index, r, kind_ops, norec_ops, emb, head, first, last, bf16_ops)
    footprint = stage_footprint(ctx, r, first, last, per_layer)
    exposed, total, opt, mb_exposed, mb_total = _stage_data_parallel(ctx, hw, r, first, last, cost)
    exposed += sync      # FSDP2's deferred gradient sync: the last micro-batch's reduction, once a step
    return StageBundle(cost, footprint, exposed, total, opt, _optimizer_host_seconds(ctx, r, first, last),
                       mb_exposed, mb_total)


def _stage_cost(ctx: Context, index: int, layers: range, kind_ops: dict, norec_ops: dict, emb, head,
                first: bool, last: bool, bf16_ops: dict | None = None) -> tuple[StageCost, float]:
    """Forward and backward seconds of one micro-batch on one stage, and where they go; with the
    exposed seconds FSDP2's deferred gradient sync adds once a step (fsdp_deferred_sync_seconds).
    The stage's layers that the plan keeps in bf16 (bf16_kinds_in) are costed with ``bf16_ops``."""
    model, plan = ctx.model, ctx.plan
    counts = kinds_in(model, layers.start, layers.stop)
    n_moe = counts.get("moe", 0)
    n_rec = len(layers) if plan.recompute_layers is None else min(plan.recompute_layers, len(layers))
    in_bf16 = bf16_kinds_in(model, plan, layers) if bf16_ops else {}
    parts: list[tuple[list[Op], float]] = []
    for kind in sorted(counts, key=lambda k: k != "dense"):   # dense first, as before kinds were named
        n16 = in_bf16.get(kind, 0)
        for ops, norec, count in ((kind_ops[kind], norec_ops.get(kind), counts[kind] - n16),
                                  (*(bf16_ops or {}).get(kind, (None, None)), n16)):
            if count <= 0:
                continue
            if plan.recompute_layers is not None:
                share = n_rec / len(layers)
                parts += [(ops, count * share), (norec, count * (1 - share))]
                parts = [(o, n) for o, n in parts if n > 0]
            else:
                parts.append((ops, count))
    if first:
        parts.append((emb, 1))
    if last:
        parts.append((head, 1))
    f = sum(o.forward_s * n for o, n in parts)
    b = sum(o.backward_s * n for o, n in parts)
    host, host_fwd = _host_seconds(ctx, parts, layers, first, last)
    if any(o.syncs for o, _ in parts):
        f, b = _queued_seconds(ctx, parts, emb if first else None, head if last else None, host)
    groups: dict[str, float] = {}
    power: dict[str, float] = {}
    for o, n in parts:
        for k, v in o.groups.items():
            groups[k] = groups.get(k, 0.0) + v * n
        for k, (t, act) in (o.power_s or {}).items():
            t0, a0 = power.get(k, (0.0, 0.0))
            power[k] = (t0 + t * n, a0 + act * n)
    sync = 0.0
    if plan.zero_stage == 3:
        f3, b3 = _zero3_gather_exposed(ctx, layers, f, b)
        if plan.fsdp_defers_sync:
            sync = fsdp_deferred_sync_seconds(ctx, layers, b)
        f, b = f + f3, b + b3
        groups["dp"] = groups.get("dp", 0.0) + f3 + b3
    flops = sum(o.flops * n for o, n in parts)
    return StageCost(index, len(layers), n_moe, f, b, groups, flops, host, host_fwd, power), sync


def _stage_param_tensors(model: ModelSpec, layers: range, first: bool, last: bool) -> int:
    """Parameter tensors one device of a stage holds (per-tensor hooks and optimizer bookkeeping)."""
    tensors = sum(n * kind_param_tensors(model, kind) for kind, n in kinds_in(model, layers.start, layers.stop).items())
    return tensors + (embedding_param_tensors(model) if first else 0) + (head_param_tensors(model) if last else 0)


def _host_seconds(ctx: Context, parts, layers: range, first: bool, last: bool) -> tuple[float, float]:
    """Host (CPU) seconds to issue one micro-batch of a stage, and the forward pass's share:
    ``host_op_s`` per op plain eager PyTorch dispatches, times the framework's ``host.op_scale``
    (and ``host.tp_op_scale`` under tensor parallelism: DTensor's dispatch, Megatron's
    communicating autograd functions; ``host.cp_op_scale`` under context parallelism: torch's
    context_parallel dispatches the attention through DTensor and re-shards its buffers; each op of
    a Python loop over local experts at ``host.expert_loop_op_scale`` of a layer op), plus
    op-equivalents of schedule and loss code per micro-batch and model chunk (``host.microbatch_ops``,
    and ``host.pp_microbatch_ops`` more under pipelining: a virtual pipeline runs its per-chunk
    step code ``vp`` times a micro-batch) and per checkpointed region (``host.recompute_call_ops``:
    the checkpoint function's RNG-state save and restore and its nested backward), from
    simulator/frameworks/profile.py HostCosts, measured by validation/host_fit.py; under FSDP2,
    ``fsdp_unit_host_s`` per unit (one per block, and the root module of
    embedding and head), whose hooks gather, copy and reshard in Python; under DDP,
    ``ddp_tensor_host_s`` per parameter tensor (the reducer's autograd hook marks each ready)."""
    cal, p = ctx.dev.cal, ctx.plan
    host = get_framework(p.framework).host
    ops = sum((o.count + (host.expert_loop_op_scale - 1.0) * o.loop_count) * n for o, n in parts)
    fwd_share = sum(o.count_forward * n for o, n in parts) / ops if ops else 0.5
    t = _host_op_seconds(ctx) * ops + _host_chunk_seconds(ctx) \
        + cal.host_op_s * host.recompute_call_ops * _checkpointed_regions(p, layers)
    if p.recipe == "torch_fsdp":
        t += cal.fsdp_unit_host_s * (len(layers) + (1 if first or last else 0))
    if p.recipe == "torch_amp" and p.zero_stage == 0 and p.dp * p.cp > 1:
        t += cal.ddp_tensor_host_s * _stage_param_tensors(ctx.model, layers, first, last)
    return t, t * fwd_share


def _host_op_seconds(ctx: Context) -> float:
    """Host seconds to issue one modelled op (``host_op_s`` x the framework's op scales, _host_seconds)."""
    p, host = ctx.plan, get_framework(ctx.plan.framework).host
    scale = host.op_scale * (host.tp_op_scale if p.tp > 1 else 1.0) * (host.cp_op_scale if p.cp > 1 else 1.0)
    return ctx.dev.cal.host_op_s * scale


def _host_chunk_seconds(ctx: Context) -> float:
    """Host seconds of a micro-batch's schedule and loss code (``host.microbatch_ops`` per model chunk,
    ``host.pp_microbatch_ops`` more under pipelining, _host_seconds)."""
    p, host = ctx.plan, get_framework(ctx.plan.framework).host
    return ctx.dev.cal.host_op_s * (host.microbatch_ops + (host.pp_microbatch_ops if p.pp > 1 else 0.0)) * p.vp


def _op_stream(ctx: Context, ops, phases: tuple[str, ...]) -> OpStream:
    """The ops of ``phases`` in issue order as a launch-queue stream (simulator/launch_queue.py): each
    costs the host _host_op_seconds (x ``host.expert_loop_op_scale`` inside a Python loop over
    experts) and the GPU its exposed seconds; a host synchronisation runs a device-to-host copy
    (``kernel_launch_s``) and makes the host wait for the GPU."""
    per_op = _host_op_seconds(ctx)
    loop = per_op * get_framework(ctx.plan.framework).host.expert_loop_op_scale
    chosen = [op for op in ops if op.phase in phases]
    sync = np.array([op.kind == "host_sync" for op in chosen], dtype=bool)
    return OpStream(np.array([loop if op.name.startswith(EXPERT_LOOP_OP) else per_op for op in chosen]),
                    np.array([ctx.dev.cal.kernel_launch_s if op.kind == "host_sync" else op.exposed_s
                              for op in chosen]), sync)


def _host_lump(seconds: float) -> OpStream:
    """Host code that launches nothing (schedule, loss and checkpoint bookkeeping): host seconds only."""
    return OpStream(np.array([max(0.0, seconds)]), np.zeros(1), np.zeros(1, dtype=bool))


def _queued_seconds(ctx: Context, parts, emb, head, host_s: float) -> tuple[float, float]:
    """Forward and backward seconds of one micro-batch of a stage whose forward synchronises the host
    (Megatron-Core's MoE token counts: moe_dispatch.host_sync_ops), from the launch queue of
    back-to-back micro-batches (launch_queue.steady_microbatch_seconds) instead of the GPU's sum:
    the host cannot run ahead past a synchronisation, so host-heavy and GPU-heavy stretches between
    two of them add up. Forward: embedding, layers in order, head; backward: head, layers in reverse
    (each layer's recomputed forward, then its backward), embedding. A fractional layer count (a
    recompute share) rounds to whole layers. The host's seconds not tied to an op (schedule and loss
    code, checkpoint calls, hooks: _host_seconds) open the forward and the backward."""
    layers = [(o, max(1, round(n))) for o, n in parts if o is not emb and o is not head and n > 0]
    fwd = ([_op_stream(ctx, emb.ops, ("fwd",))] if emb else []) + \
        [s for o, n in layers for s in [_op_stream(ctx, o.ops, ("fwd",))] * n] + \
        ([_op_stream(ctx, head.ops, ("fwd",))] if head else [])
    bwd_of = (lambda o: _op_stream(ctx, [op for op in o.ops if op.phase == "recompute"]
                                   + [op for op in o.ops if op.phase == "bwd"], ("recompute", "bwd")))
    bwd = ([bwd_of(head)] if head else []) + [s for o, n in reversed(layers) for s in [bwd_of(o)] * n] + \
        ([bwd_of(emb)] if emb else [])
    chunk = _host_chunk_seconds(ctx)
    issued = sum(float(s.host_s.sum()) for s in fwd + bwd) + chunk
    forward = OpStream.concat([_host_lump(chunk)] + fwd)
    backward = OpStream.concat([_host_lump(host_s - issued)] + bwd)
    return steady_microbatch_seconds(forward, backward)


def _checkpointed_regions(p: ParallelPlan, layers: range) -> int:
    """Checkpointed regions a stage's micro-batch passes through: one per layer under selective
    (the attention core) or full recompute (Megatron-Core's uniform method, one layer per call),
    at most ``recompute_layers`` under full; none without recompute."""
    if p.recompute == "none":
        return 0
    if p.recompute == "full" and p.recompute_layers is not None:
        return min(p.recompute_layers, len(layers))
    return len(layers)


def _optimizer_host_seconds(ctx: Context, layers: range, first: bool, last: bool) -> float:
    """Host seconds to issue one optimizer step over a stage's parameter tensors: a fixed host
    cost per tensor (fused AdamW's per-tensor bookkeeping; foreach AdamW over FSDP2's DTensor
    shards dispatches every op through DTensor, which costs several times more)."""
    cal, p = ctx.dev.cal, ctx.plan
    per = cal.fsdp_optimizer_tensor_host_s if p.recipe == "torch_fsdp" else cal.optimizer_tensor_host_s
    return per * _stage_param_tensors(ctx.model, layers, first, last) if per > 0 else 0.0


def _zero3_layer_comm(ctx: Context, layers: range) -> tuple[float, float, float]:
    """(parameters of one layer, its all-gather seconds, its gradient reduce-scatter seconds) on one
    device under ZeRO-3. FSDP and Megatron gather a layer in one call; DeepSpeed (recipe ``zero``)
    gathers module by module, so each layer pays one call's fixed cost and ring latency per module
    (its gradients go out in reduce_bucket_size buckets). FSDP2 reduces in fp32 (reduce_dtype)."""
    p = ctx.plan
    n_dp = p.dp * p.cp
    dense, expert = stage_params(ctx, layers, False, False)
    block = (dense + expert) / max(1, len(layers))            # parameters of one layer
    grad_bytes = 4 if p.recipe == "torch_fsdp" else 2         # FSDP2 reduce_dtype fp32
    calls = rs_calls = 1
    if p.recipe == "zero":   # a gather per module; gradients reduced in reduce_bucket_size buckets
        calls = layer_param_tensors(ctx.model, layers.stop - 1, biases=False)
        rs_calls = max(1, math.ceil(block / DS_REDUCE_BUCKET))
    ag = calls * collective_time(ctx.fabric, "all_gather", block * 2 / n_dp / calls, n_dp, p.tp)
    if p.offload_params:   # ZeRO-Infinity: each layer's shard comes over the host link first
        ag += block * 2 / n_dp / ctx.host_link_Bps
    rs = rs_calls * collective_time(ctx.fabric, "reduce_scatter", block * grad_bytes / rs_calls, n_dp, p.tp)
    return block, ag, rs


def _zero3_exposed(ctx: Context, ag: float, rs: float, compute: float) -> float:
    """Exposed seconds of one layer's all-gather ``ag`` and reduce-scatter ``rs`` (0 in forward)
    beside ``compute`` seconds of its compute: prefetched under it, only the excess is exposed (the
    hidden part slows by comm_overlap_slowdown), or all of it where the plan turns the overlap off
    (overlap_param_gather, overlap_grad_reduce)."""
    p = ctx.plan
    hideable = (ag if p.overlap_param_gather else 0.0) + (rs if p.overlap_grad_reduce else 0.0)
    slow = ctx.dev.cal.comm_overlap_slowdown
    return ag + rs - hideable + max(0.0, hideable - compute) + slow * min(hideable, compute)


def _zero3_gather_exposed(ctx: Context, layers: range, f: float, b: float) -> tuple[float, float]:
    """ZeRO-3 per-layer parameter all-gather (fwd, bwd) and gradient reduce-scatter (bwd) of one
    micro-batch, prefetched under the layer's compute (_zero3_exposed), and FSDP2's copies; under a
    framework whose ZeRO-3 gathers each parameter after a device synchronize (``zero3_gather:
    per_param_sync``, DeepSpeed 2021) the replay of simulator.zero3_2021.stage_exposed instead. Under
    FSDP2 with a deferred gradient sync the micro-batch reduces nothing and accumulates its
    gradients instead; the last micro-batch's reduction is fsdp_deferred_sync_seconds, once a step."""
    p = ctx.plan
    n_dp = p.dp * p.cp
    block, ag, rs = _zero3_layer_comm(ctx, layers)
    n = len(layers)
    if get_framework(p.framework).zero3_gather == "per_param_sync":   # DeepSpeed 2021 (simulator/zero3_2021.py)
        return zero3_2021.stage_exposed(ctx, layers, f, b, block)
    deferred = p.fsdp_defers_sync
    f_exp = _zero3_exposed(ctx, ag, 0.0, f / n)
    b_exp = _zero3_exposed(ctx, ag, 0.0 if deferred else rs, b / n)
    if p.recipe == "torch_fsdp":
        # FSDP2 copies: shard cast fp32->bf16 and all-gather copy-out per pass; in backward the
        # bf16 gradients cast to fp32 and copied into the reduce-scatter buffer, or, deferred,
        # added into the fp32 accumulators (fsdp_deferred_sync_seconds)
        f_exp += memory_time(ctx.dev, 6 * block / n_dp + 4 * block, launches=2)
        if deferred:
            b_exp += memory_time(ctx.dev, 6 * block / n_dp + 4 * block, launches=2) + _fsdp_accumulate_s(ctx, block)
        else:
            b_exp += memory_time(ctx.dev, 6 * block / n_dp + 4 * block + 6 * block + 8 * block, launches=4)
    return n * f_exp, n * b_exp


def _fsdp_accumulate_s(ctx: Context, block: float) -> float:
    """Seconds to add one layer's bf16 unsharded gradient into its fp32 accumulator in place
    (FSDPParam.accumulate_unsharded_grad_if_needed, torch/distributed/fsdp/_fully_shard/_fsdp_param.py:
    ``unsharded_accumulated_grad += unsharded_param.grad``): read 4 + 2, write 4 bytes per parameter."""
    return memory_time(ctx.dev, 10 * block)


def fsdp_deferred_sync_seconds(ctx: Context, layers: range, b: float) -> float:
    """Exposed seconds once per step that FSDP2's deferred gradient sync adds to
    ``m`` micro-batches costed as _zero3_gather_exposed's deferred ones (``b``: the stage's backward
    compute seconds of one micro-batch, ZeRO-3 excluded). Per layer: the last micro-batch's fp32
    reduce-scatter, exposed beyond its all-gather under the layer's backward (_zero3_exposed), and its
    copy of the fp32 accumulator into the reduce-scatter input (foreach_reduce_scatter_copy_in: read
    4, write 4 bytes per parameter, no cast: the accumulator is already in reduce_dtype); and the
    first micro-batch's cast of its bf16 gradient into a new fp32 accumulator
    (FSDPParam.to_accumulated_grad_if_needed: read 2, write 4) where the m micro-batches were
    costed with an in-place add each. With one micro-batch this makes the step every_microbatch's
    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py FSDPParamGroup.post_backward,
    _fsdp_collectives.py foreach_reduce). Like ZeRO-3's per-layer traffic, not in dp_comm_total_s."""
    n = len(layers)
    block, ag, rs = _zero3_layer_comm(ctx, layers)
    comm = _zero3_exposed(ctx, ag, rs, b / n) - _zero3_exposed(ctx, ag, 0.0, b / n)
    copies = memory_time(ctx.dev, 8 * block) + memory_time(ctx.dev, 6 * block) - _fsdp_accumulate_s(ctx, block)
    return n * (comm + copies)


def dp_comm_seconds(ctx: Context, dense: float, expert: float) -> float:
    """Seconds of one device's data-parallel gradient reduction (and, from ZeRO-1, parameter
    gather) for ``dense`` and ``expert`` parameters, before any overlap, once each; increasing
    in both. ZeRO-3 is costed per layer instead (_zero3_gather_exposed) and gives 0 here."""
    return sum(dp_comm_parts(ctx, dense, expert))


def dp_comm_parts(ctx: Context, dense: float, expert: float) -> tuple[float, float]:
    """(gradient reduction, parameter gather) seconds of one device's data-parallel
    communication: an all-reduce of the gradients under ZeRO-0; under ZeRO-1/2 a reduce-scatter
    of the gradients and an all-gather of the updated bf16 parameters (ZeRO paper §5)."""
    p = ctx.plan
    grad_bytes = 2 if p.recipe == "zero" else 4
    dp_group = p.dp * p.cp
    reduce = gather = 0.0
    for params, n, stride in ((dense, dp_group, p.tp), (expert, max(1, dp_group * p.tp // (p.ep * p.expert_tp)),
                                                        p.ep * p.expert_tp)):
        if params <= 0 or n <= 1 or p.zero_stage == 3:
            continue
        if p.zero_stage == 0:
            reduce += collective_time(ctx.fabric, "all_reduce", params * grad_bytes, n, stride)
        else:
            reduce += collective_time(ctx.fabric, "reduce_scatter", params * grad_bytes, n, stride)
            gather += collective_time(ctx.fabric, "all_gather", params * 2 / n, n, stride)
    return reduce, gather


def _stage_data_parallel(ctx: Context, hw: Hardware, r: range, first: bool, last: bool,
                         cost: StageCost) -> tuple[float, float, float, float, float]:
    """One stage's data-parallel communication once per step (exposed, total), its optimizer step,
    and where the framework shards gradients under ZeRO-2 (Megatron FSDP optim_grads, DeepSpeed
    stage 2), the gradient reduce-scatter it runs after every micro-batch (exposed, total), hidden
    under that micro-batch's backward when overlap_grad_reduce is on."""
    p = ctx.plan
    dp_group = p.dp * p.cp
    dense, expert = stage_params(ctx, r, first, last)
    reduce, gather = dp_comm_parts(ctx, dense, expert)
    per_microbatch = p.zero_stage == 2 and get_framework(p.framework).grads_per_microbatch(2)
    if per_microbatch:   # sharded gradients: reduced under every micro-batch's backward, gathered once
        step_comm, mb_comm = gather, reduce
        mb_exposed = _overlapped(ctx, reduce, cost.backward_s, dense + expert) if p.overlap_grad_reduce else reduce
    else:
        step_comm, mb_comm, mb_exposed = reduce + gather, 0.0, 0.0
    if p.overlap_grad_reduce:
        hidden = (0.0 if per_microbatch else cost.backward_s) + (cost.forward_s if p.overlap_param_gather else 0.0)
        exposed = _overlapped(ctx, step_comm, hidden, dense + expert)
    else:
        exposed = step_comm
    if p.recipe == "torch_amp" and p.zero_stage == 0 and dp_group > 1:
        # DDP copies each fp32 gradient into its bucket and back after the all-reduce
        exposed += memory_time(ctx.dev, 16 * (dense + expert), launches=2)
    return exposed, step_comm, _optimizer_time(ctx, hw, dense, expert), mb_exposed, mb_comm


def _overlapped(ctx: Context, comm: float, hidden: float, params: float) -> float:
    """Exposed seconds of ``comm`` overlapped with ``hidden`` seconds of compute: the last bucket
    (BUCKET_PARAMS of the parameters) is never hidden, and the hidden part slows by
    comm_overlap_slowdown (calibrated on DDP/FSDP steps)."""
    last_bucket = comm * min(1.0, BUCKET_PARAMS / max(params, 1.0))
    exposed = max(last_bucket, comm - hidden)
    return exposed + ctx.dev.cal.comm_overlap_slowdown * (comm - exposed)


def _optimizer_time(ctx: Context, hw: Hardware, dense: float, expert: float) -> float:
    """Adam step over this device's shard: HBM-bound on the GPU, or host-bound when offloaded."""
    p = ctx.plan
    shard = dense / (p.dp * p.cp) + expert / max(1, p.dp * p.cp * p.tp // (p.ep * p.expert_tp))
    params = shard if p.zero_stage >= 1 else dense + expert
    if p.offload_optimizer:
        link = hw.node.host_link.bandwidth_per_direction_Bps
        cpu = hw.node.host_adam_params_per_s / hw.node.gpus_per_node
        return params * 4 / link + params / cpu + params * 2 / link
    per_param = get_framework(p.framework).kernels.choices(p.attention).optimizer_bytes or OPTIMIZER_BYTES[p.recipe]
    return memory_time(ctx.dev, params * per_param, launches=2)


def _result(model, hardware, plan, cal, stages, mems, st: _Step, events) -> Result:
    pipe, p2p, overlap_p2p, dp_exposed, opt, step = st.pipe, st.p2p, st.overlap_p2p, st.dp_exposed, st.optimizer, st.step
    links, p2p = p2p, _max_p2p(p2p)
    m = plan.microbatches()
    worst = max(stages, key=lambda s: s.forward_s + s.backward_s)
    per_mb = worst.forward_s + worst.backward_s
    busy = m * per_mb
    p2p_exposed = 0.0
    if plan.pp > 1:
        p2p_exposed = _p2p_exposed(plan.pp, m, plan.vp, links, overlap_p2p, cal.comm_overlap_slowdown)
    breakdown = {k: v * m for k, v in worst.groups.items()}
    breakdown["pp"] = p2p_exposed
    breakdown["bubble"] = max(0.0, pipe - busy - p2p_exposed)
    breakdown["dp"] = breakdown.get("dp", 0.0) + dp_exposed
    breakdown["optimizer"] = opt
    if st.host_bound > 0:
        breakdown["host"] = st.host_bound
    tokens = plan.gbs * plan.seq
    accs = [hardware.accelerator] if st.stage_devices is None else [hw.accelerator for _, _, hw in st.stage_devices]
    # mean peak over the devices (each stage holds the same number of GPUs)
    peak = sum(a.peak_flops(precision_peak_dtype(plan.precision)) for a in accs) / len(accs)
    bf16_peak = sum(a.peak_flops("bf16") for a in accs) / len(accs)
    model_flops = step_model_flops(model, plan.seq, plan.gbs)
    rec_frac = 1.0 if plan.recompute_layers is None else min(1.0, plan.recompute_layers * plan.pp / model.num_layers)
    # module recompute without the attention core (recompute_modules) counts no recomputed FLOPs here:
    # its re-run norms and activations are memory-bound, and the MLA up-projections it re-runs are not
    # counted (HFU a little low for such plans)
    rec_kind = "none" if plan.recompute == "selective" and not plan.recomputes_core_attn else plan.recompute
    hw_flops = step_hardware_flops(model, plan.seq, plan.gbs, rec_kind, rec_frac)
    mem = max(mems, key=lambda x: x.total_bytes)
    return Result(
        model=model.name, cluster="+".join(dict.fromkeys(plan.stage_clusters or (hardware.cluster.name,))),
        accelerator="+".join(dict.fromkeys(a.name for a in accs)),
        num_gpus=hardware.num_gpus, plan=plan, calibration=cal.name, calibration_used=cal, step_time_s=step,
        tokens_per_s=tokens / step, model_flops=model_flops, hardware_flops=hw_flops,
        mfu=model_flops / (step * hardware.num_gpus * bf16_peak),
        hfu=hw_flops / (step * hardware.num_gpus * bf16_peak),
        mfu_precision_peak=model_flops / (step * hardware.num_gpus * peak),
        memory=mem, stage_memory=mems, stages=stages, breakdown=breakdown, pipeline_s=pipe,
        dp_comm_total_s=st.dp_total, p2p_s=p2p, timeline=events, host_issue_s=st.host_issue,
        host_optimizer_s=st.host_optimizer, split_note=split_note(model, plan), model_tags=tuple(model_tags(model)),
        clock_fraction=st.clock_fraction, full_clock_step_time_s=st.full_clock_step)
