"""Cheap, provable bounds for pruning, built from the simulator's own pieces (never a second
cost model): per-layer op times from ``simulator.lowering``, memory from ``simulator.memory``
and the pipeline formula from ``simulator.schedule``.

Time: the step is the pipeline time plus exposed data-parallel communication plus the optimizer
step, each >= 0, so the pipeline time of a plan's stage costs is a lower bound on its step;
for a whole shape (all splits and recompute counts) the balanced stage vector with the least
total work bounds it from below, since the pipeline time (m-1)·max + Σ/v + (1-1/v)·max is
smallest when the stages are equal. Stage costs sum each op's exposed time, as the engine
does; ZeRO-3's exposed gathers (which the engine adds) only make the bound looser.

Memory: model states are linear in the parameters a device holds, so the fullest stage holds
at least the states of the average stage; the first stage holds at least its first ``vp``
layers' states and activations in flight, the last at least its last ``vp`` layers and the
logits (stage memory grows with every layer added).

Every bound is checked against ``simulate()`` at run time (``Oracle.violations``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from hardware_specs.catalog import Hardware, load_hardware
from models.schema import ModelSpec
from simulator.calibration import Calibration
from simulator.comm import fabric_from_hardware
from simulator.engine import (LOWERING_FIELDS, _optimizer_time, device_model, dp_comm_seconds, stage_layer_ranges,
                              summarize_ops)
from simulator.lowering import Context, embedding_ops, last_stage_ops, layer_ops, p2p_time
from simulator.memory import (FRAGMENTATION, WORKSPACE_BYTES, in_flight, model_state_bytes, stage_memory,
                              stage_params)
from simulator.plan import ParallelPlan
from simulator.schedule import pipeline_time

# The plan fields one layer's ops depend on (the simulator's own list), less recompute_layers:
# the bounds cost layers with and without recompute separately.
_LOWERING = tuple(f for f in LOWERING_FIELDS if f != "recompute_layers")


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one layer (forward + recompute + backward) for one micro-batch, by type:
    ``*_rec`` with the plan's recompute, ``*_norec`` without; embedding and head extras."""

    dense_rec: float
    dense_norec: float
    moe_rec: float
    moe_norec: float
    emb: float
    head: float


def _exposed(ops) -> float:
    """A micro-batch's exposed seconds of these ops, summed exactly as the engine sums a stage."""
    s = summarize_ops(ops)
    return s.forward_s + s.backward_s


class Oracle:
    """Caches of simulator pieces for one model, cluster and calibration."""

    def __init__(self, model: ModelSpec, cluster: str, calibration: Calibration,
                 hardware: Optional[dict] = None):
        self.model = model
        self.cluster = cluster
        self.cal = calibration
        self._hw: dict[int, Hardware] = dict(hardware or {})
        self._fabric: dict[int, object] = {}
        self._layers: dict[tuple, LayerTimes] = {}
        self._params: dict[tuple, tuple[float, float]] = {}
        prefix = [0]
        for i in range(model.num_layers):
            prefix.append(prefix[-1] + (1 if model.is_moe_layer(i) else 0))
        self.moe_prefix = prefix
        self.violations: list[str] = []
        self._mem: dict = {}
        self._extras: dict = {}
        self._pieces: dict = {}

    # ---- simulator objects -------------------------------------------------------------------
    def hardware(self, gpus: int) -> Hardware:
        hw = self._hw.get(gpus)
        if hw is None:
            hw = self._hw[gpus] = load_hardware(self.cluster, gpus)
        return hw

    def context(self, plan: ParallelPlan) -> Context:
        gpus = plan.num_gpus
        hw = self.hardware(gpus)
        fab = self._fabric.get(gpus)
        if fab is None:
            fab = self._fabric[gpus] = fabric_from_hardware(hw, self.cal)
        return Context(self.model, plan, device_model(hw.accelerator, self.cal), fab)

    # ---- time ------------------------------------------------------------------------------
    def layer_times(self, plan: ParallelPlan) -> LayerTimes:
        key = (plan.num_gpus, plan.microbatches()) + tuple(getattr(plan, k) for k in _LOWERING)
        hit = self._layers.get(key)
        if hit is None:
            # Pieces are shared between plans: dense layers, the embedding and the head do not
            # depend on expert parallelism, and the no-recompute ops not on the recompute mode.
            base = (plan.num_gpus, plan.microbatches()) + tuple(getattr(plan, k) for k in _LOWERING
                                            if k not in ("ep", "etp", "recompute"))
            experts = (plan.ep, plan.expert_tp)
            moe = self.model.moe is not None
            d_norec = self._ops(("dense", base), plan, lambda c: layer_ops(c, False, recompute=False))
            d_rec = d_norec if plan.recompute == "none" else \
                self._ops(("dense_rec", base, plan.recompute), plan, lambda c: layer_ops(c, False, recompute=True))
            m_norec = m_rec = 0.0
            if moe:
                m_norec = self._ops(("moe", base, experts), plan, lambda c: layer_ops(c, True, recompute=False))
                m_rec = m_norec if plan.recompute == "none" else \
                    self._ops(("moe_rec", base, experts, plan.recompute), plan,
                              lambda c: layer_ops(c, True, recompute=True))
            emb = self._ops(("emb", base), plan, embedding_ops)
            # the MTP depths on the last stage hold a layer: they depend on ep, etp and recompute too
            mtp = (experts, plan.recompute) if self.model.mtp_layers else ()
            head = self._ops(("head", base) + mtp, plan, last_stage_ops)
            hit = self._layers[key] = LayerTimes(d_rec, d_norec, m_rec, m_norec, emb, head)
        return hit

    def _ops(self, key: tuple, plan: ParallelPlan, build) -> float:
        hit = self._pieces.get(key)
        if hit is None:
            hit = self._pieces[key] = _exposed(build(self.context(plan)))
        return hit

    def moe_count(self, start: int, stop: int) -> int:
        return self.moe_prefix[stop] - self.moe_prefix[start]

    def stage_times(self, lt: LayerTimes, split: tuple[int, ...], recompute: str,
                    recompute_layers: Optional[int]) -> list[float]:
        """Per-stage seconds (one micro-batch, forward + backward) of a split, as the engine sums
        them (``recompute_layers`` of each stage's layers recomputed in full)."""
        out, start, last = [], 0, len(split) - 1
        for s, n in enumerate(split):
            n_moe = self.moe_count(start, start + n)
            n_d = n - n_moe
            share = 1.0 if (recompute != "full" or recompute_layers is None) else min(recompute_layers, n) / n
            c = n_d * (share * lt.dense_rec + (1 - share) * lt.dense_norec)
            if n_moe:
                c += n_moe * (share * lt.moe_rec + (1 - share) * lt.moe_norec)
            if s == 0:
                c += lt.emb
            if s == last:
                c += lt.head
            out.append(c)
            start += n
        return out

    def p2p(self, plan: ParallelPlan) -> float:
        return p2p_time(self.context(plan)) if plan.pp > 1 else 0.0

    @staticmethod
    def overlap_p2p(plan: ParallelPlan) -> bool:
        return plan.overlap_p2p if plan.overlap_p2p is not None else plan.pipeline_schedule == "interleaved"

    @staticmethod
    def pipe_bound(costs: list[float], m: int, vp: int, p2p: float, overlap: bool) -> float:
        """Pipeline seconds of these stage costs (simulator.schedule): a lower bound on the step."""
        return pipeline_time(costs, [0.0] * len(costs), m, vp, p2p, overlap)

    def shape_time_bound(self, lt: LayerTimes, recompute: str, pp: int, m: int, vp: int, p2p: float,
                         overlap: bool) -> float:
        """Lower bound on the step of every split and recompute count of a shape."""
        model = self.model
        n_moe = self.moe_count(0, model.num_layers)
        n_d = model.num_layers - n_moe
        total = n_d * lt.dense_norec + n_moe * lt.moe_norec + lt.emb + lt.head
        if recompute != "full":
            total += n_d * (lt.dense_rec - lt.dense_norec) + n_moe * (lt.moe_rec - lt.moe_norec)
        else:   # every stage recomputes at least one layer (recompute_layers >= 1)
            deltas = [lt.dense_rec - lt.dense_norec] if n_d else []
            if n_moe:
                deltas.append(lt.moe_rec - lt.moe_norec)
            total += pp * max(0.0, min(deltas))
        return pipeline_time([total / pp] * pp, [0.0] * pp, m, vp, p2p, overlap)

    def extras_bound(self, plan: ParallelPlan) -> float:
        """Seconds the step spends beyond its pipeline, at least: the fullest stage holds at least
        the average stage's parameters, its data-parallel communication (increasing in them) is
        exposed at least ``comm_overlap_slowdown`` of the way when overlapped, and its optimizer
        step (increasing in them) is never hidden."""
        key = (plan.num_gpus, plan.tp, plan.cp, plan.dp, plan.ep, plan.expert_tp, plan.pp, plan.zero_stage,
               plan.recipe, plan.framework, plan.overlap_grad_reduce, plan.offload_optimizer)
        hit = self._extras.get(key)
        if hit is None:
            ctx = self.context(plan)
            dense, expert = self.param_totals(plan)
            dense, expert = dense / plan.pp, expert / plan.pp
            comm = dp_comm_seconds(ctx, dense, expert)
            exposed = comm * (self.cal.comm_overlap_slowdown if plan.overlap_grad_reduce else 1.0)
            hit = self._extras[key] = exposed + _optimizer_time(ctx, self.hardware(plan.num_gpus), dense, expert)
        return hit

    # ---- memory ----------------------------------------------------------------------------
    def param_totals(self, plan: ParallelPlan) -> tuple[float, float]:
        """(dense, expert) parameters one device column holds summed over all pipeline stages."""
        key = (plan.tp, plan.ep, plan.expert_tp, plan.pp == 1)
        hit = self._params.get(key)
        if hit is None:
            ctx = self.context(plan)
            L = self.model.num_layers
            if plan.pp == 1:
                hit = stage_params(ctx, range(0, L), True, True)
            else:
                a = stage_params(ctx, range(0, L), True, False)
                b = stage_params(ctx, range(L, L), False, True)
                hit = (a[0] + b[0], a[1] + b[1])
            self._params[key] = hit
        return hit

    def states_bound(self, plan: ParallelPlan) -> float:
        """Bytes: the model states of the average stage (the fullest holds at least that)."""
        ctx = self.context(plan)
        dense, expert = self.param_totals(plan)
        w, g, o = model_state_bytes(ctx, dense / plan.pp, expert / plan.pp)
        live = w + o + (0.0 if plan.recipe == "torch_amp" else g)
        return live * (1 + FRAGMENTATION) + WORKSPACE_BYTES

    def memory_bound(self, plan: ParallelPlan) -> float:
        """Lower bound on the fullest device's bytes over every split and recompute count
        (``plan`` should carry the least-memory recompute count, i.e. recompute_layers=None)."""
        ctx = self.context(plan)
        L, pp, vp = self.model.num_layers, plan.pp, plan.vp
        cap = self.hardware(plan.num_gpus).accelerator.hbm_capacity_bytes
        if pp == 1:
            return stage_memory(ctx, 0, range(0, L), True, True, cap).total_bytes
        first = stage_memory(ctx, 0, range(0, vp), True, False, cap).total_bytes
        last = stage_memory(ctx, pp - 1, range(L - vp, L), False, True, cap).total_bytes
        return max(first, last, self.states_bound(plan))

    def _stage_total(self, plan: ParallelPlan, key: tuple, ctx, s: int, r: range, last: int, cap: float) -> float:
        """Total bytes of stage ``s``; memoised on what stage memory depends on (its layer count
        and MoE count, first/last, in-flight micro-batches), as the engine memoises it."""
        k = (key, len(r), self.moe_count(r.start, r.stop), s == 0, s == last,
             in_flight(plan.pipeline_schedule, plan.pp, plan.vp, plan.microbatches(), s))
        hit = self._mem.get(k)
        if hit is None:
            if len(self._mem) > 200_000:
                self._mem.clear()
            hit = self._mem[k] = stage_memory(ctx, s, r, s == 0, s == last, cap).total_bytes
        return hit

    def _mem_setup(self, plan: ParallelPlan):
        key = (plan.num_gpus,) + tuple(v for k, v in plan.__dict__.items() if k != "layers_per_stage")
        ctx = self.context(plan)
        cap = self.hardware(plan.num_gpus).accelerator.hbm_capacity_bytes
        return key, ctx, cap, stage_layer_ranges(self.model, plan)

    def stage_totals(self, plan: ParallelPlan, stages: Optional[list[int]] = None) -> list[float]:
        """Total bytes of each stage (or of ``stages``) under ``plan``, from simulator.memory."""
        key, ctx, cap, ranges = self._mem_setup(plan)
        last = len(ranges) - 1
        idx = range(len(ranges)) if stages is None else stages
        return [self._stage_total(plan, key, ctx, s, ranges[s], last, cap) for s in idx]

    def max_stage_total(self, plan: ParallelPlan, cutoff: float = math.inf) -> float:
        """The fullest stage's bytes, or the first stage total found at or above ``cutoff``
        (first and last stages first: they hold the embedding, the logits and the most
        micro-batches in flight)."""
        key, ctx, cap, ranges = self._mem_setup(plan)
        last = len(ranges) - 1
        order = [0] + ([last] if last else []) + list(range(1, last))
        worst = 0.0
        for s in order:
            worst = max(worst, self._stage_total(plan, key, ctx, s, ranges[s], last, cap))
            if worst >= cutoff:
                break
        return worst

    def min_recompute_layers(self, plan: ParallelPlan, usable: float) -> Optional[tuple]:
        """For full recompute: the least ``recompute_layers`` with every stage within ``usable``
        bytes, as (value, fullest stage bytes) with None meaning all layers; None if even
        recomputing every layer does not fit. Stage memory falls as recompute grows."""
        split = plan.layers_per_stage or tuple([self.model.num_layers // plan.pp] * plan.pp)
        top = max(split)
        full = self.stage_totals(replace(plan, recompute_layers=None))
        if max(full) > usable:
            return None
        if top == 1:
            return (None, max(full))
        lo_totals = self.stage_totals(replace(plan, recompute_layers=1))
        if max(lo_totals) <= usable:
            return (1, max(lo_totals))
        need = 1
        for n, a, b in zip(split, lo_totals, full):     # affine in r between r = 1 and r = n
            if a <= usable or n == 1:
                continue
            slope = (b - a) / (n - 1)
            need = max(need, 1 + math.ceil((usable - a) / slope - 1e-9) if slope < 0 else n)
        return self._confirm_recompute(plan, usable, need, top)

    def _confirm_recompute(self, plan: ParallelPlan, usable: float, need: int, top: int) -> Optional[tuple]:
        """Check the interpolated count against the simulator's memory; search if it was off."""
        def fits(n):
            tot = self.stage_totals(replace(plan, recompute_layers=None if n >= top else n))
            return max(tot) <= usable, max(tot)

        need = min(need, top)
        ok, peak = fits(need)
        if ok and (need == 1 or not fits(need - 1)[0]):
            return (None if need >= top else need, peak)
        lo, hi = 1, top           # binary search: fits(lo-1) false, fits(top) true
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid)[0]:
                hi = mid
            else:
                lo = mid + 1
        ok, peak = fits(lo)
        return (None if lo >= top else lo, peak)
