"""Best-first branch and bound over parallel plans, with simulate() as the only cost model.

Every outer shape (planners.space) gets a lower bound on its step time (planners.bounds) before
anything is simulated; shapes, then their layer splits, then their recompute counts are
expanded best bound first. A node whose bound cannot beat the k-th best layout found so far is
never simulated, and the search stops when the best remaining bound cannot: the plans returned
are the best under the cost model, not a sample. Memory lower bounds discard whole shapes
(model states alone above capacity, first or last stage above capacity at their smallest).

Objective: seconds per token (throughput; with fixed GPUs and batch, the step time), or with a
token budget the GPU-hours (hence dollars) to train it, under an optional deadline.
"""
from __future__ import annotations

import heapq
import math
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from hardware_specs.catalog import load_cluster, load_node
from hardware_specs.errors import MeshcastError, PlanError
from models.schema import ModelSpec
from simulator.calibration import DEFAULT, Calibration
from simulator.engine import simulate
from simulator.frameworks import get_framework
from simulator.frameworks.rules import recompute_at_least
from simulator.plan import ParallelPlan
from simulator.result import Result

from planners.bounds import Oracle
from planners.space import (Constraints, Rejections, Shape, enumerate_shapes, layer_splits,
                            split_tuple)

GB = 1e9
_SHAPE, _SPLIT, _READY, _ILP = 0, 1, 2, 3


@dataclass(frozen=True)
class Objective:
    """What "best" means. ``throughput``: least seconds per token. ``cost``: least GPU-seconds
    per token (dollars to train ``tokens`` at ``price_per_gpu_hour``); ``days`` bounds the
    wall-clock time to train ``tokens`` in either case."""

    kind: str = "throughput"
    tokens: Optional[float] = None
    days: Optional[float] = None
    price_per_gpu_hour: Optional[float] = None

    def score(self, step_s: float, gpus: int, tokens_per_step: int) -> float:
        per_token = step_s / tokens_per_step
        return per_token * gpus if self.kind == "cost" else per_token

    def deadline_step(self, tokens_per_step: int) -> float:
        """Longest step that still trains ``tokens`` within ``days``."""
        if self.days is None or self.tokens is None:
            return math.inf
        return tokens_per_step * self.days * 86400.0 / self.tokens


@dataclass
class Candidate:
    """A simulated plan that fits, with its objective score (lower is better)."""

    result: Result
    shape: Shape
    score: float
    capacity_bytes: float
    objective: Objective

    @property
    def plan(self) -> ParallelPlan:
        return self.result.plan

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.result.memory.total_bytes

    @property
    def train_days(self) -> Optional[float]:
        if self.objective.tokens is None:
            return None
        return self.objective.tokens / self.result.tokens_per_s / 86400.0

    @property
    def cost_usd(self) -> Optional[float]:
        o = self.objective
        if o.tokens is None or o.price_per_gpu_hour is None:
            return None
        return o.tokens / self.result.tokens_per_s / 3600.0 * self.result.num_gpus * o.price_per_gpu_hour


@dataclass
class SearchStats:
    """Counters of one search: shapes bounded and expanded, pruning, simulate() calls, time."""
    shapes: int = 0
    shapes_expanded: int = 0
    shapes_memory_pruned: int = 0
    shapes_deadline_pruned: int = 0
    splits_bounded: int = 0
    memory_checks: int = 0
    simulated: int = 0
    simulated_not_fitting: int = 0
    rejected_by_simulator: int = 0
    ilp_solves: int = 0
    elapsed_s: float = 0.0
    bound_violations: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SearchResult:
    """The ranked candidates, the search statistics and notes (e.g. bound violations)."""
    candidates: list[Candidate]
    stats: SearchStats
    objective: Objective
    constraints: Constraints
    model: ModelSpec
    cluster: str
    notes: list[str] = field(default_factory=list)
    explored: list = field(default_factory=list)
    ties: int = 1               # leading candidates tied within the 80% band (planners/ties.py)
    passed_over: list = field(default_factory=list)   # tied plans that looked faster but extrapolate

    @property
    def best(self) -> Candidate:
        return self.candidates[0]


class _Progress:
    """A one-line counter on stderr for searches that run longer than a second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def update(self, stats: SearchStats, best: Optional[float], queued: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter() - self.start
        if now < 1.0 or now - self.last < 0.2:
            return
        self.last = now
        b = f"{best:.4g}" if best is not None else "-"
        sys.stderr.write(f"\rplan: {stats.shapes} layouts bounded, {stats.shapes_expanded} expanded, "
                         f"{stats.simulated} simulated, {queued} queued, best step {b} s  [{now:.1f} s]")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


class Search:
    """One planning run. ``inner``: ``enum`` (exact over the split family) or ``ilp`` (also the
    ILP's layer split for each expanded shape, planners.ilp)."""

    def __init__(self, model: ModelSpec, cluster: str, constraints: Constraints,
                 calibration: Calibration = DEFAULT, objective: Objective = Objective(), top: int = 5,
                 progress: bool = False, inner: str = "enum", solver: str = "highs",
                 time_limit_s: float = 10.0, hardware: Optional[dict] = None):
        self.model = model
        self.cluster = cluster
        self.c = constraints
        self.cal = calibration
        self.obj = objective
        self.top = max(1, top)
        self.inner = inner
        self.solver = solver
        self.time_limit_s = time_limit_s
        self.oracle = Oracle(model, cluster, calibration, hardware)
        self.stats = SearchStats()
        self.rejections = Rejections()
        self.best: dict[tuple, Candidate] = {}
        self._heap: list = []
        self._count = 0
        self._progress = _Progress(progress)
        self._base_kw = dict(constraints.base.__dict__)
        self._fw = get_framework(constraints.base.framework)
        self._lt: dict = {}
        self._p2ps: dict = {}
        self._extras_cache: dict = {}
        self._kth_cache = math.inf
        self.explored: list[dict] = []      # every simulated plan that fits (for the Pareto plot)
        self.keep_explored = False
        self.mem_pruned: list[tuple[float, Shape]] = []
        self.min_exact: Optional[tuple[float, str]] = None
        node = load_node(load_cluster(cluster).node)
        self.domain = node.intra_node.domain_gpus or node.gpus_per_node

    # ---- thresholds --------------------------------------------------------------------------
    def _kth(self) -> float:
        return self._kth_cache

    def _update_kth(self) -> None:
        if len(self.best) >= self.top:
            self._kth_cache = sorted(c.score for c in self.best.values())[self.top - 1]

    def _threshold(self, shape: Shape) -> float:
        t = self._kth()
        hit = self.best.get(shape.layout())
        return min(t, hit.score) if hit is not None else t

    def _push(self, lb_score: float, shape: Shape, kind: int, payload) -> None:
        self._count += 1
        heapq.heappush(self._heap, (lb_score, shape.tie_rank(), self._count, kind, shape, payload))

    def _plan(self, shape: Shape, split=None, n=None) -> ParallelPlan:
        return ParallelPlan(**{**self._base_kw, "tp": shape.tp, "pp": shape.pp, "dp": shape.dp,
                               "vp": shape.vp, "cp": shape.cp, "ep": shape.ep, "etp": shape.etp,
                               "zero_stage": shape.zero, "recompute": shape.recompute,
                               "recipe": self._fw.recipe(shape.zero),
                               "attention": self.c.base.attention or self._fw.default_attention,
                               "recompute_layers": n, "mbs": shape.mbs, "gbs": shape.gbs,
                               "seq": self.c.seq, "schedule": shape.schedule,
                               "layers_per_stage": split, "num_gpus": shape.gpus})

    def _layer_times(self, shape: Shape):
        key = (shape.gpus, shape.tp, shape.cp, shape.mbs, shape.ep, shape.etp, shape.recompute)
        hit = self._lt.get(key)
        if hit is None:
            hit = self._lt[key] = self.oracle.layer_times(self._plan(shape))
        return hit

    def _p2p(self, shape: Shape) -> float:
        if shape.pp == 1:
            return 0.0
        key = (shape.gpus, shape.tp, shape.cp, shape.dp, shape.mbs)
        hit = self._p2ps.get(key)
        if hit is None:
            hit = self._p2ps[key] = self.oracle.p2p(self._plan(shape))
        return hit

    def _overlap(self, shape: Shape) -> bool:
        o = self.c.base.overlap_p2p
        return o if o is not None else shape.schedule == "interleaved"

    def _pipe(self, shape: Shape, costs: list[float], p2p: float) -> float:
        """Lower bound on the step of these stage costs: their pipeline plus the step's extras."""
        return self.oracle.pipe_bound(costs, shape.microbatches, shape.vp, p2p, self._overlap(shape)) \
            + self._extras(shape)

    def _extras(self, shape: Shape) -> float:
        key = (shape.gpus, shape.tp, shape.cp, shape.dp, shape.ep, shape.etp, shape.pp, shape.zero)
        hit = self._extras_cache.get(key)
        if hit is None:
            hit = self._extras_cache[key] = self.oracle.extras_bound(self._plan(shape))
        return hit

    def _usable(self, gpus: int) -> float:
        return self.oracle.hardware(gpus).accelerator.hbm_capacity_bytes - self.c.min_headroom_bytes

    def _score(self, step: float, shape: Shape) -> float:
        return self.obj.score(step, shape.gpus, shape.gbs * self.c.seq)

    def _note_footprint(self, total: float, what: str) -> None:
        if self.min_exact is None or total < self.min_exact[0]:
            self.min_exact = (total, what)

    # ---- the search --------------------------------------------------------------------------
    def run(self) -> SearchResult:
        t0 = time.perf_counter()
        bounds: dict = {}   # shapes that differ only in the ZeRO stage share their time bound
        for shape in enumerate_shapes(self.model, self.c, self.domain, self.rejections):
            self.stats.shapes += 1
            p2p = self._p2p(shape)
            key = (shape.gpus, shape.tp, shape.cp, shape.pp, shape.dp, shape.ep, shape.etp, shape.mbs, shape.gbs,
                   shape.vp, shape.schedule, shape.recompute)
            lb = bounds.get(key)
            if lb is None:
                lb = bounds[key] = self.oracle.shape_time_bound(
                    self._layer_times(shape), shape.recompute, shape.pp, shape.microbatches, shape.vp, p2p,
                    self._overlap(shape))
            lb += self._extras(shape)
            if lb > self.obj.deadline_step(shape.gbs * self.c.seq):
                self.stats.shapes_deadline_pruned += 1
                continue
            self._push(self._score(lb, shape), shape, _SHAPE, p2p)
        while self._heap:
            lb_score, _, _, kind, shape, payload = heapq.heappop(self._heap)
            if lb_score >= self._kth():
                break
            if lb_score >= self._threshold(shape):
                continue
            if kind == _SHAPE:
                self._expand_shape(shape, payload)
            elif kind == _SPLIT:
                self._expand_split(shape, *payload)
            elif kind == _ILP:
                self._expand_ilp(shape, *payload)
            else:
                self._evaluate(shape, *payload)
            best = min((c.result.step_time_s for c in self.best.values()), default=None)
            self._progress.update(self.stats, best, len(self._heap))
        self._progress.done()
        self.stats.elapsed_s = time.perf_counter() - t0
        self.stats.bound_violations = len(self.oracle.violations)
        cands = sorted(self.best.values(), key=lambda c: (c.score, c.shape.tie_rank()))[: self.top]
        notes = []
        if self.oracle.violations:
            notes.append(f"warning: {len(self.oracle.violations)} lower bounds exceeded simulate(); "
                         f"optimality is not guaranteed (first: {self.oracle.violations[0]})")
        return SearchResult(cands, self.stats, self.obj, self.c, self.model, self.cluster, notes, self.explored)

    def _expand_shape(self, shape: Shape, p2p: float) -> None:
        self.stats.shapes_expanded += 1
        base = self._plan(shape)
        usable = self._usable(shape.gpus)
        mem_lb = self.oracle.memory_bound(base)
        if mem_lb > usable:
            self.stats.shapes_memory_pruned += 1
            self.mem_pruned.append((mem_lb, shape))
            return
        lt = self._layer_times(shape)
        L = self.model.num_layers
        splits = layer_splits(L, shape.pp, shape.vp, self.c.uneven)
        self._queue_splits(shape, splits, p2p)
        if self.inner == "ilp" and shape.pp > 1:
            # the ILP's split, solved only if this node's bound still competes when it is popped
            lb = self.oracle.shape_time_bound(lt, shape.recompute, shape.pp, shape.microbatches, shape.vp, p2p,
                                              self._overlap(shape)) + self._extras(shape)
            self._push(self._score(lb, shape), shape, _ILP, (splits, p2p))

    def _expand_ilp(self, shape: Shape, splits, p2p: float) -> None:
        L = self.model.num_layers
        extra = self._ilp_split(shape, self._plan(shape), self._usable(shape.gpus))
        if extra is not None and extra not in splits and tuple(extra) != split_tuple(None, L, shape.pp):
            self._queue_splits(shape, [extra], p2p)

    def _queue_splits(self, shape: Shape, splits, p2p: float) -> None:
        L = self.model.num_layers
        lt = self._layer_times(shape)
        n0 = 1 if shape.recompute == "full" else None
        deadline = self.obj.deadline_step(shape.gbs * self.c.seq)
        kind = _SPLIT if shape.recompute == "full" else _READY
        for split in splits:
            full = split_tuple(split, L, shape.pp)
            n = n0 if max(full) > 1 else None
            lb = self._pipe(shape, self.oracle.stage_times(lt, full, shape.recompute, n), p2p)
            self.stats.splits_bounded += 1
            if lb > deadline:
                continue
            self._push(self._score(lb, shape), shape, kind, (split, n, p2p, lb))

    def _expand_split(self, shape: Shape, split, n0, p2p: float, lb: float) -> None:
        """Full recompute: find the least recompute count that fits, then queue it."""
        plan = self._plan(shape, split, None)
        usable = self._usable(shape.gpus)
        self.stats.memory_checks += 1
        fixed = self.c.fix("recompute_layers")
        if fixed is not None:
            found = (fixed, 0.0) if max(self.oracle.stage_totals(self._plan(shape, split, fixed))) <= usable else None
        else:
            found = self.oracle.min_recompute_layers(plan, usable)
        if found is None:
            tot = max(self.oracle.stage_totals(plan))
            self._note_footprint(tot, self._describe(shape, split, None))
            return
        n, _ = found
        full = split_tuple(split, self.model.num_layers, shape.pp)
        if n is not None and fixed is None:      # the least count the framework can say, at or above n
            n = recompute_at_least(self._fw, n, max(full), shape.vp)
        lb = self._pipe(shape, self.oracle.stage_times(self._layer_times(shape), full, shape.recompute, n), p2p)
        if lb > self.obj.deadline_step(shape.gbs * self.c.seq):
            return
        self._push(self._score(lb, shape), shape, _READY, (split, n, p2p, lb))

    def _queue_next_recompute(self, shape: Shape, split, n: int, p2p: float, res: Result) -> None:
        """Queue recompute_layers n+1 (or all) after simulating n. Bound: recomputing more adds
        Δ_s to each stage's time; the pipeline cannot get shorter, and the only thing extra work
        can hide is data-parallel communication, by at most max_s Δ_s (the engine hides gradient
        reduction under a stage's own per-micro-batch time; ZeRO-3 gathers under its layers), so
        step(n') >= max(pipeline bound(n'), step(n) - max_s Δ_s)."""
        full = split_tuple(split, self.model.num_layers, shape.pp)
        nxt = recompute_at_least(self._fw, n + 1, max(full), shape.vp)
        lt = self._layer_times(shape)
        before = self.oracle.stage_times(lt, full, shape.recompute, n)
        after = self.oracle.stage_times(lt, full, shape.recompute, nxt)
        lb = max(self._pipe(shape, after, p2p), res.step_time_s - max(a - b for a, b in zip(after, before)))
        if lb > self.obj.deadline_step(shape.gbs * self.c.seq):
            return
        self._push(self._score(lb, shape), shape, _READY, (split, nxt, p2p, lb))

    def _describe(self, shape: Shape, split, n) -> str:
        rec = shape.recompute if shape.recompute != "full" else \
            f"full recompute ({'all' if n is None else n} layers/stage)"
        return f"{shape.describe()} ZeRO-{shape.zero} {rec}" + (f" layers {list(split)}" if split else "")

    def _evaluate(self, shape: Shape, split, n, p2p: float, lb: float) -> None:
        plan = self._plan(shape, split, n)
        usable = self._usable(shape.gpus)
        if shape.recompute != "full":
            self.stats.memory_checks += 1
            pre = self.oracle.stage_totals(plan, sorted({0, shape.pp - 1}))
            if max(pre) > usable:
                self._note_footprint(max(pre), self._describe(shape, split, n))
                return
        try:
            res = simulate(self.model, self.oracle.hardware(shape.gpus), plan, self.cal)
        except PlanError:
            self.stats.rejected_by_simulator += 1
            return
        self.stats.simulated += 1
        if res.step_time_s < lb * (1 - 1e-9):
            self.oracle.violations.append(f"{self._describe(shape, split, n)}: bound {lb:.6g} s > "
                                          f"simulated {res.step_time_s:.6g} s")
        total = res.memory.total_bytes
        if total > usable:
            self.stats.simulated_not_fitting += 1
            self._note_footprint(total, self._describe(shape, split, n))
            return
        self._note_footprint(total, self._describe(shape, split, n))
        if shape.recompute == "full" and n is not None and self.c.fix("recompute_layers") is None:
            self._queue_next_recompute(shape, split, n, p2p, res)
        if res.step_time_s > self.obj.deadline_step(shape.gbs * self.c.seq):
            return
        score = self._score(res.step_time_s, shape)
        if self.keep_explored:
            self.explored.append({"tokens_per_s": res.tokens_per_s, "headroom_bytes": usable + self.c.min_headroom_bytes - total,
                                  "label": self._describe(shape, split, n), "score": score})
        key = shape.layout()
        old = self.best.get(key)
        if old is None or score < old.score:
            cap = self.oracle.hardware(shape.gpus).accelerator.hbm_capacity_bytes
            self.best[key] = Candidate(res, shape, score, cap, self.obj)
            self._update_kth()

    def _ilp_split(self, shape: Shape, base: ParallelPlan, usable: float):
        """The ILP's layer split (and recompute count) for this shape, or None."""
        from planners.ilp import profile_chain, solve_chain
        try:
            prof = profile_chain(self.model, self.oracle.hardware(shape.gpus), base, self.cal)
        except MeshcastError:      # not a linear chain (mixed layers, torch_amp, ...): family only
            return None
        self.stats.ilp_solves += 1
        try:
            sol = solve_chain(prof, usable, recompute="uniform" if shape.recompute == "full" else "none",
                              solver=self.solver, time_limit_s=self.time_limit_s)
        except MeshcastError as exc:
            if exc.field == "solver" and "infeasible" not in exc.reason:
                raise            # a solver failure or an unproven answer is an error, not a skip
            return None
        return tuple(sol.layers)

    # ---- when nothing fits -------------------------------------------------------------------
    def smallest_footprint(self) -> Optional[tuple[float, str]]:
        """The least fullest-device memory over the space (exact, by bound-ordered search)."""
        best = self.min_exact
        L = self.model.num_layers
        for lb, shape in sorted(self.mem_pruned, key=lambda x: x[0]):
            if best is not None and lb >= best[0]:
                break
            for split in layer_splits(L, shape.pp, shape.vp, self.c.uneven):
                plan = self._plan(shape, split, None)
                tot = self.oracle.max_stage_total(plan, best[0] if best else math.inf)
                if best is None or tot < best[0]:
                    best = (tot, self._describe(shape, split, None))
        return best


# ---- entry points ----------------------------------------------------------------------------
def search(model: ModelSpec, cluster: str, constraints: Constraints, *, calibration: Calibration = DEFAULT,
           objective: Objective = Objective(), top: int = 5, progress: bool = False, inner: str = "enum",
           solver: str = "highs", time_limit_s: float = 10.0, keep_explored: bool = False) -> SearchResult:
    """The ``top`` best plans (distinct layouts) for ``model`` on ``cluster`` under ``constraints``.

    Raises MeshcastError naming the binding constraint when no plan qualifies."""
    _check_searchable(model)
    s = Search(model, cluster, constraints, calibration, objective, top, progress, inner, solver, time_limit_s)
    s.keep_explored = keep_explored
    out = s.run()
    if out.candidates:
        return out
    raise _explain_infeasible(s, model, cluster, constraints, calibration, objective, inner, solver, time_limit_s)


def _check_searchable(model: ModelSpec) -> None:
    """The planner's time and memory bounds (planners/bounds.py) are written for attention + FFN
    layers; a hybrid Mamba-2 stack would get bounds that are not bounds. simulate() costs such a
    model; the search does not yet."""
    if model.hybrid:
        raise MeshcastError("model", f"{model.name} is a hybrid Mamba-2/attention stack: `meshcast simulate` costs "
                                     "its plans, the plan search's bounds do not cover Mamba-2 blocks yet")


def _explain_infeasible(s: Search, model, cluster, c: Constraints, cal, objective, inner, solver, tl) -> MeshcastError:
    if s.stats.shapes == 0:
        rej = s.rejections
        if rej.counts:
            fld = rej.binding()
            return MeshcastError(fld, f"no parallel layout is possible: {rej.example[fld]}"
                                 + (f" (and {len(rej.counts) - 1} other kinds of conflict)" if len(rej.counts) > 1 else ""))
        return MeshcastError("gpus", "no parallel layout is possible for these GPU counts and batch")
    if objective.days is not None and (s.stats.shapes_deadline_pruned or s.stats.simulated):
        fast = Search(model, cluster, c, cal, Objective("throughput"), 1, False, inner, solver, tl)
        res = fast.run()
        if res.candidates:
            best = res.candidates[0]
            days = objective.tokens / best.result.tokens_per_s / 86400.0
            return MeshcastError("days", f"the fastest plan ({best.shape.describe()} on {best.shape.gpus} GPUs, "
                                 f"{best.result.tokens_per_s:.4g} tokens/s) trains {objective.tokens:.3g} tokens in "
                                 f"{days:.1f} days, {days / objective.days:.2f}x the {objective.days:g}-day limit")
        s = fast
    acc = s.oracle.hardware(c.gpus[0]).accelerator
    cap = acc.hbm_capacity_bytes
    small = s.smallest_footprint()
    head = c.min_headroom_bytes
    have = f"the {acc.name} has {cap / GB:.1f} GB"
    if head > 0:
        have += f", {(cap - head) / GB:.1f} GB after the {head / GB:g} GB --min-headroom-gb"
    if small is None:
        return MeshcastError("memory", f"no plan fits in memory; {have}")
    need, what = small
    field_name = "min_headroom_gb" if head > 0 and need <= cap else "memory"
    return MeshcastError(field_name, f"needs {need / GB:.1f} GB per GPU at the smallest footprint ({what}); {have}"
                         + _gpus_hint(need, max(c.gpus), cap - head))


def _gpus_hint(need: float, gpus: int, usable: float) -> str:
    """Roughly how many GPUs would hold what ``gpus`` GPUs need ``need`` bytes each of: the
    total (model states and activations, sharded) over the usable HBM per GPU, in whole nodes
    of 8 above 8. Empty when it already fits or the count is unchanged."""
    if usable <= 0 or need <= usable:
        return ""
    n = math.ceil(need * gpus / usable)
    if n > 8:
        n = 8 * math.ceil(n / 8)
    if n <= gpus:
        return ""
    return (f"; roughly {n} GPUs or more would hold it ({need / GB:.1f} GB x {gpus} GPUs spread over "
            f"{usable / GB:.1f} GB each), if the plan shards it further")


def brute_force(model: ModelSpec, cluster: str, constraints: Constraints, *, calibration: Calibration = DEFAULT,
                objective: Objective = Objective(), top: int = 1,
                on_plan: Optional[Callable] = None) -> list[tuple[float, Result]]:
    """Reference for tests: simulate every plan of the space (every batch of a range, every split
    of the family, every recompute count) and return the ``top`` best distinct layouts as
    (score, result). No bounds, no memory shortcuts: fits is decided by simulate()."""
    from planners.space import all_batches, recompute_layer_options
    node = load_node(load_cluster(cluster).node)
    domain = node.intra_node.domain_gpus or node.gpus_per_node
    oracle = Oracle(model, cluster, calibration)
    seen = set()
    best: dict[tuple, tuple[float, Result]] = {}
    L = model.num_layers
    for shape in enumerate_shapes(model, constraints, domain):
        unit = shape.dp * shape.mbs
        for gbs in all_batches(constraints, unit, shape.pp, shape.schedule):
            sh = replace(shape, gbs=gbs)
            if sh in seen:
                continue
            seen.add(sh)
            hw = oracle.hardware(sh.gpus)
            usable = hw.accelerator.hbm_capacity_bytes - constraints.min_headroom_bytes
            for split in layer_splits(L, sh.pp, sh.vp, constraints.uneven):
                full = split_tuple(split, L, sh.pp)
                for n in recompute_layer_options(full, sh.recompute, constraints.fix("recompute_layers"),
                                                 fw=get_framework(constraints.base.framework), vp=sh.vp):
                    plan = sh.to_plan(constraints.base, constraints.seq, split, n)
                    try:
                        res = simulate(model, hw, plan, calibration)
                    except PlanError:
                        continue
                    if on_plan:
                        on_plan(res)
                    if res.memory.total_bytes > usable:
                        continue
                    if res.step_time_s > objective.deadline_step(gbs * constraints.seq):
                        continue
                    score = objective.score(res.step_time_s, sh.gpus, gbs * constraints.seq)
                    key = sh.layout()
                    if key not in best or score < best[key][0]:
                        best[key] = (score, res)
    return sorted(best.values(), key=lambda x: x[0])[:top]
