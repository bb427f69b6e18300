"""Integer programs for the coupled inner choices of a pipeline: layers per stage, recompute per
stage, and (heterogeneous clusters) which GPU type runs which stage.

Costs come from ``simulate()``: :func:`profile_chain` simulates a few probe plans of one shape on
one homogeneous hardware and reads each stage's time and memory from the Result, from which it
solves the per-layer coefficients (time per layer, per recomputed layer, embedding and head
extras; states, activations, logits bytes) and checks them against a further simulate() call.
Nothing here estimates a cost on its own.

Solvers go through PuLP: HiGHS by default (``pulp.HiGHS`` through highspy, else ``HiGHS_CMD``),
CBC as an option (``pulp.PULP_CBC_CMD``, bundled with PuLP 3.x; PuLP 4 no longer bundles it).
Every solve has a time limit and a relative gap, and :func:`solve` checks the real solution
status (``prob.sol_status``), the integrality of every integer variable and, where the solver
reports it, the gap: a time-limited solve that PuLP labels "Optimal" while holding a merely
feasible answer is an error, not a result.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import pulp

from hardware_specs.catalog import Hardware
from hardware_specs.errors import MeshcastError
from models.schema import ModelSpec
from simulator.calibration import DEFAULT, Calibration
from simulator.engine import simulate
from simulator.plan import ParallelPlan, resolve_plan
from simulator.schedule import pipeline_time

INT_TOL = 1e-6
LINEAR_TOL = 1e-6


class ILPError(MeshcastError):
    """A solver is missing, a program is infeasible, or a solve is not proven optimal."""


# ---- solving -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SolveInfo:
    """What the solver proved: status names, objective, relative gap (None if not reported)."""

    solver: str
    status: str
    sol_status: str
    objective: float
    gap: Optional[float]
    time_s: float


def make_solver(name: str = "highs", time_limit_s: float = 10.0, gap_rel: float = 1e-6, msg: bool = False):
    """A PuLP solver object: ``highs`` (HiGHS API, else HiGHS_CMD) or ``cbc`` (PULP_CBC_CMD)."""
    if time_limit_s is None or time_limit_s <= 0:
        raise ILPError("time_limit", f"must be positive seconds, got {time_limit_s!r}")
    if name == "highs":
        api = getattr(pulp, "HiGHS", None)
        if api is not None and api(msg=False).available():
            return api(msg=msg, timeLimit=time_limit_s, gapRel=gap_rel)
        cmd = getattr(pulp, "HiGHS_CMD", None)
        if cmd is not None and cmd(msg=False).available():
            return cmd(msg=msg, timeLimit=time_limit_s, gapRel=gap_rel)
        raise ILPError("solver", "HiGHS is not available to PuLP: install highspy (pip install highspy) "
                                 "or the highs binary, or use --solver cbc")
    if name == "cbc":
        cbc = getattr(pulp, "PULP_CBC_CMD", None)
        if cbc is not None:
            with warnings.catch_warnings():   # PuLP 3.3 deprecates it (removed in 4) but still bundles CBC
                warnings.simplefilter("ignore", DeprecationWarning)
                solver = cbc(msg=msg, timeLimit=time_limit_s, gapRel=gap_rel)
                if solver.available():
                    return solver
        coin = getattr(pulp, "COIN_CMD", None)   # a CBC binary on PATH (pip install pulp[cbc])
        if coin is not None and coin(msg=False).available():
            return coin(msg=msg, timeLimit=time_limit_s, gapRel=gap_rel)
        raise ILPError("solver", f"PuLP {pulp.__version__} finds no CBC (PULP_CBC_CMD's bundled binary is gone "
                                 "in PuLP 4; pip install 'pulp[cbc]' for COIN_CMD); use --solver highs")
    raise ILPError("solver", f"must be highs or cbc, got {name!r}")


def _highs_gap(prob: pulp.LpProblem) -> Optional[float]:
    model = getattr(prob, "solverModel", None)
    if model is None or not hasattr(model, "getInfo"):
        return None
    try:
        info = model.getInfo()
        gap = float(info.mip_gap)
    except Exception:       # noqa: BLE001 - older highspy: no MIP info
        return None
    return gap if math.isfinite(gap) and gap >= 0 else None


def new_var(prob: pulp.LpProblem, name: str, low=None, high=None, cat: str = pulp.LpContinuous) -> pulp.LpVariable:
    """A variable attached to ``prob`` (PuLP 3.3's add_variable; LpVariable before it)."""
    add = getattr(prob, "add_variable", None)
    if add is not None:
        return add(name, low, high, cat=cat)
    return pulp.LpVariable(name, low, high, cat=cat)


def classify(status: int, sol_status: int) -> str:
    """What a solve ended with, from PuLP's problem status and solution status together:
    infeasible, unbounded, no_solution (stopped before any), feasible (unproven) or optimal.

    Both are needed: CBC reports an integer-infeasible MIP as status Infeasible with solution
    status "no solution found", which alone reads like a time limit; HiGHS sets both."""
    if status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return "infeasible"
    if status == pulp.LpStatusUnbounded or sol_status == pulp.LpSolutionUnbounded:
        return "unbounded"
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return "feasible"
    if sol_status == pulp.LpSolutionOptimal:
        return "optimal"
    return "no_solution"


def solve(prob: pulp.LpProblem, solver: str = "highs", time_limit_s: float = 10.0,
          gap_rel: float = 1e-6) -> SolveInfo:
    """Solve ``prob`` and prove it: status, integrality and gap, or raise :class:`ILPError`."""
    s = make_solver(solver, time_limit_s, gap_rel)
    t0 = time.perf_counter()
    try:
        prob.solve(s)
    except pulp.PulpSolverError as exc:
        raise ILPError("solver", f"{prob.name}: {s.name} failed: {exc}") from None
    elapsed = time.perf_counter() - t0
    sol = prob.sol_status
    names = pulp.LpSolution
    outcome = classify(prob.status, sol)
    if outcome == "infeasible":
        raise ILPError("solver", f"{prob.name}: infeasible (no assignment satisfies the constraints)")
    if outcome == "unbounded":
        raise ILPError("solver", f"{prob.name}: unbounded (a missing constraint)")
    if outcome == "no_solution":
        raise ILPError("solver", f"{prob.name}: no solution within the {time_limit_s:g} s time limit "
                                 f"({pulp.LpStatus[prob.status]})")
    gap = _highs_gap(prob) if "HiGHS" in s.name else None
    if sol == pulp.LpSolutionIntegerFeasible:
        # a time-limited (or interrupted) solve: PuLP says "Optimal", the solver proved nothing
        if gap is None or gap > gap_rel:
            shown = "unknown" if gap is None else f"{gap:.3g}"
            raise ILPError("solver", f"{prob.name}: stopped at the {time_limit_s:g} s time limit with a feasible, "
                                     f"unproven solution (gap {shown} > {gap_rel:g}); raise --time-limit")
    elif sol != pulp.LpSolutionOptimal:
        raise ILPError("solver", f"{prob.name}: solver status {names.get(sol, sol)}")
    for v in prob.variables():
        if v.varValue is None:
            raise ILPError("solver", f"{prob.name}: variable {v.name} has no value")
        if v.cat == pulp.LpInteger and abs(v.varValue - round(v.varValue)) > INT_TOL:
            raise ILPError("solver", f"{prob.name}: integer variable {v.name} = {v.varValue} is fractional")
    if gap is not None and gap > gap_rel * (1 + 1e-9) + 1e-12:
        raise ILPError("solver", f"{prob.name}: relative gap {gap:.3g} above the requested {gap_rel:g}")
    obj = pulp.value(prob.objective)
    return SolveInfo(s.name, pulp.LpStatus[prob.status], names.get(sol, str(sol)),
                     float(obj) if obj is not None else 0.0, gap, elapsed)


# ---- stage costs from simulate() ---------------------------------------------------------------
@dataclass(frozen=True)
class ChainProfile:
    """Per-stage cost of one shape on one hardware, as linear coefficients read off simulate().

    Stage s with n layers of which r are recomputed (full recompute) costs, per micro-batch,
      time   n·t_layer + r·t_recompute + [s=0]·t_first + [s=last]·t_last                (s)
      bytes  (states + in_flight[s]·act + [s=last]·logits)·frag + workspace
             states = n·states_layer + [s=0]·states_first + [s=last]·states_last
             act    = (n-r)·act_layer + r·act_recomputed + [s=0]·act_first, plus [r>0]·act_rebuild
                      once (the layer being rebuilt), not per in-flight micro-batch
    and the step's pipeline time is pipeline_time(stage times) (simulator.schedule).
    ``rebuild_always``: the simulator's full recompute keeps one rebuilt layer even at r = 0.
    """

    name: str
    num_layers: int
    pp: int
    vp: int
    microbatches: int
    p2p_s: float
    overlap_p2p: bool
    t_layer: float
    t_recompute: float
    t_first: float
    t_last: float
    states_layer: float
    states_first: float
    states_last: float
    act_layer: float
    act_recomputed: float
    act_rebuild: float
    act_first: float
    logits_last: float
    in_flight: tuple
    frag: float
    workspace: float
    capacity: float
    step_extra_s: float = 0.0   # data-parallel + optimizer seconds of the probe (not in the ILP)
    rebuild_always: bool = True
    overlap_cost: float = 0.0   # share of an overlapped pipeline send still charged (comm_overlap_slowdown)

    def stage_time(self, s: int, layers: int, recomputed: int) -> float:
        return (layers * self.t_layer + recomputed * self.t_recompute
                + (self.t_first if s == 0 else 0.0) + (self.t_last if s == self.pp - 1 else 0.0))

    def stage_bytes(self, s: int, layers: int, recomputed: int, full_recompute: bool = True) -> float:
        states = layers * self.states_layer + (self.states_first if s == 0 else 0.0) \
            + (self.states_last if s == self.pp - 1 else 0.0)
        rebuild = recomputed > 0 or (full_recompute and self.rebuild_always)
        act = (layers - recomputed) * self.act_layer + recomputed * self.act_recomputed \
            + (self.act_first if s == 0 else 0.0)
        live = states + self.in_flight[s] * act + (self.act_rebuild if rebuild else 0.0) \
            + (self.logits_last if s == self.pp - 1 else 0.0)
        return live * self.frag + self.workspace

    def pipeline(self, times: Sequence[float]) -> float:
        return pipeline_time(list(times), [0.0] * len(times), self.microbatches, self.vp, self.p2p_s,
                             self.overlap_p2p, self.overlap_cost)


def _probe_splits(L: int, pp: int, vp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    blocks = L // vp
    if blocks < pp or L % vp:
        raise ILPError("layers_per_stage", f"{L} layers do not fill {pp} stages of {vp}-layer blocks")
    base, extra = divmod(blocks, pp)
    a = [base + (1 if i >= pp - extra else 0) for i in range(pp)]     # larger stages last
    b = list(a)
    if b[0] > 1:
        b[0] -= 1
        b[-1] += 1
    elif b[-1] > 1:
        b[-1] -= 1
        b[0] += 1
    else:
        raise ILPError("layers_per_stage", "one block per stage: no split to choose")
    if pp > 2:      # vary a middle stage too
        j = 1
        if b[j] > 1:
            b[j] -= 1
            b[0] += 1
    return tuple(x * vp for x in a), tuple(x * vp for x in b)


def profile_chain(model: ModelSpec, hardware: Hardware, plan: ParallelPlan,
                  calibration: Calibration = DEFAULT) -> ChainProfile:
    """Read per-layer coefficients of ``plan``'s shape on ``hardware`` off simulate() probes.

    Needs pp >= 2, a model whose layers are all alike (all dense or all MoE) and a recipe with
    linear memory (not torch_amp); raises ILPError otherwise or when the simulated stages do not
    follow the linear form (checked on a further probe)."""
    import numpy as np

    if plan.pp < 2:
        raise ILPError("pp", "a pipeline chain needs pp >= 2")
    kinds = {model.layer_kind(i) for i in range(model.num_layers)}
    if len(kinds) > 1:
        raise ILPError("model", f"{model.name} mixes layer kinds ({', '.join(sorted(kinds))}); the chain ILP "
                                "needs uniform layers")
    if plan.recipe == "torch_amp":
        raise ILPError("recipe", "torch_amp memory is not linear in the layers per stage")
    L, pp, vp = model.num_layers, plan.pp, plan.vp
    s1, s2 = _probe_splits(L, pp, vp)
    base = replace(plan, recompute_layers=None)

    def run(split, rec, n=None):
        p = replace(base, layers_per_stage=split, recompute=rec, recompute_layers=n)
        return simulate(model, hardware, p, calibration)

    r_none = run(s1, "none")
    r_full1 = run(s1, "full")
    r_full2 = run(s2, "full")
    last = pp - 1
    # time: c = n·t + r·d + first·e0 + last·e1
    rows, rhs = [], []
    for res, split, rec in ((r_none, s1, False), (r_full1, s1, True), (r_full2, s2, True)):
        for s, n in enumerate(split):
            rows.append([n, n if rec else 0, s == 0, s == last])
            st = res.stages[s]
            rhs.append(st.forward_s + st.backward_s)
    t, d, e0, e1 = _lstsq(np, rows, rhs, "stage time")
    # states: n·w + first·w0 + last·w1 (weights + gradients + optimizer)
    rows, rhs = [], []
    for res, split in ((r_none, s1), (r_full2, s2)):
        for s, n in enumerate(split):
            m = res.stage_memory[s]
            rows.append([n, s == 0, s == last])
            rhs.append(m.weights_bytes + m.gradients_bytes + m.optimizer_bytes)
    w, w0, w1 = _lstsq(np, rows, rhs, "model states")
    # activations: in_flight·((n-r)·a + r·x + first·af) + rebuild·b (one rebuilt layer, once)
    rows, rhs = [], []
    for res, split, rec in ((r_none, s1, False), (r_full1, s1, True), (r_full2, s2, True)):
        for s, n in enumerate(split):
            m = res.stage_memory[s]
            f = m.in_flight_microbatches
            rows.append([0 if rec else f * n, f * n if rec else 0, 1 if rec else 0, f * (s == 0)])
            rhs.append(m.activations_bytes)
    a, x, rb, af = _lstsq(np, rows, rhs, "activations")
    lg = r_none.stage_memory[last].logits_bytes
    m0 = r_none.stage_memory[0]
    frag = (m0.total_bytes - m0.workspace_bytes) / m0.peak_allocated_bytes
    prof = ChainProfile(
        name=hardware.accelerator.name, num_layers=L, pp=pp, vp=vp,
        microbatches=r_none.plan.microbatches(), p2p_s=r_none.p2p_s,
        overlap_p2p=(plan.overlap_p2p if plan.overlap_p2p is not None else plan.pipeline_schedule == "interleaved"),
        t_layer=t, t_recompute=d, t_first=e0, t_last=e1, states_layer=w, states_first=w0, states_last=w1,
        act_layer=a, act_recomputed=x, act_rebuild=rb, act_first=af, logits_last=lg,
        in_flight=tuple(m.in_flight_microbatches for m in r_none.stage_memory), frag=frag,
        workspace=m0.workspace_bytes, capacity=hardware.accelerator.hbm_capacity_bytes,
        step_extra_s=r_none.step_time_s - r_none.pipeline_s, overlap_cost=calibration.comm_overlap_slowdown)
    _check_profile(prof, run(s2, "full", 1), s2, 1)
    return prof


def _lstsq(np, rows, rhs, what: str):
    A = np.array(rows, dtype=float)
    b = np.array(rhs, dtype=float)
    sol, *_ = np.linalg.lstsq(A, b, rcond=None)
    resid = np.abs(A @ sol - b)
    if resid.max() > LINEAR_TOL * max(1.0, float(np.abs(b).max())):
        raise ILPError("profile", f"simulated {what} is not linear in the layers per stage "
                                  f"(residual {resid.max():.3g}); the chain ILP cannot use it")
    return [float(v) for v in sol]


def _check_profile(prof: ChainProfile, res, split, n) -> None:
    for s, layers in enumerate(split):
        r = min(n, layers)
        st = res.stages[s]
        want_t, got_t = prof.stage_time(s, layers, r), st.forward_s + st.backward_s
        want_m, got_m = prof.stage_bytes(s, layers, r), res.stage_memory[s].total_bytes
        if abs(want_t - got_t) > LINEAR_TOL * max(got_t, 1e-9) or abs(want_m - got_m) > LINEAR_TOL * got_m:
            raise ILPError("profile", f"stage {s}: profile predicts {want_t:.6g} s / {want_m:.6g} B, "
                                      f"simulate() gives {got_t:.6g} s / {got_m:.6g} B")


# ---- the chain program -------------------------------------------------------------------------
@dataclass(frozen=True)
class ChainSolution:
    """Layers, recomputed layers and GPU type per stage; the pipeline seconds they give."""

    layers: tuple
    recomputed: tuple
    recompute_layers: Optional[int]     # uniform mode: the N every stage uses (None: all)
    types: tuple                        # profile name per stage
    stage_times: tuple
    stage_bytes: tuple
    pipeline_s: float
    info: SolveInfo


RECOMPUTE_CHOICES = ("none", "uniform", "per_stage")


_GIB_INV = 1.0 / 2**30   # memory rows of the chain ILP are stated in GiB


def solve_chain(profiles, usable, *, recompute: str = "uniform", counts: Optional[Sequence[int]] = None,
                stage_width: int = 1, solver: str = "highs", time_limit_s: float = 10.0,
                gap_rel: float = 1e-6) -> ChainSolution:
    """Choose layers per stage, recomputed layers per stage and a GPU type per stage.

    ``profiles``: one ChainProfile per GPU type (same pp, vp, micro-batches and layers);
    ``usable``: usable bytes per device of each type (capacity minus headroom); ``counts``: GPUs
    of each type (None: unlimited); a stage takes ``stage_width`` = tp*cp*dp GPUs of its type.
    ``recompute``: ``none`` (r = 0), ``uniform`` (r_s = min(N, n_s) for one N >= 1: what
    Megatron-LM's --recompute-num-layers and the simulator express), ``per_stage`` (any r_s).

    Minimises the pipeline time (m-1)·W + Σ_s c_s / v + (1 - 1/v)·W, W >= c_s: the closed form of
    simulator.schedule.pipeline_time without its constant point-to-point terms."""
    profiles = list(profiles) if isinstance(profiles, (list, tuple)) else [profiles]
    usable = list(usable) if isinstance(usable, (list, tuple)) else [usable] * len(profiles)
    if recompute not in RECOMPUTE_CHOICES:
        raise ILPError("recompute", f"must be one of {', '.join(RECOMPUTE_CHOICES)}; got {recompute!r}")
    p0 = profiles[0]
    for p in profiles[1:]:
        if (p.pp, p.vp, p.num_layers, p.microbatches) != (p0.pp, p0.vp, p0.num_layers, p0.microbatches):
            raise ILPError("profiles", "every GPU type's profile must share pp, vp, layers and micro-batches")
    pp, vp, L, m = p0.pp, p0.vp, p0.num_layers, p0.microbatches
    G = len(profiles)
    blocks = L // vp
    bmax = blocks - (pp - 1)
    if bmax < 1:
        raise ILPError("pp", f"{L} layers cannot fill {pp} stages")
    alpha = (m - 1) + (1 - 1 / vp)
    beta = 1 / vp
    prob = pulp.LpProblem("stage_assignment", pulp.LpMinimize)
    S = range(pp)
    B = [new_var(prob, f"blocks_{s}", 1, bmax, pulp.LpInteger) for s in S]
    R = [new_var(prob, f"recomputed_{s}", 0, bmax * vp, pulp.LpInteger) for s in S]
    U = [new_var(prob, f"any_recompute_{s}", 0, 1, pulp.LpBinary) for s in S]
    C = [new_var(prob, f"stage_time_{s}", 0) for s in S]
    W = new_var(prob, "worst_stage_time", 0)
    Z = [[new_var(prob, f"type_{s}_{g}", 0, 1, pulp.LpBinary) for g in range(G)] for s in S]
    # objective: the pipeline time of the stage times (constant p2p terms dropped)
    prob += alpha * W + beta * pulp.lpSum(C)
    prob += pulp.lpSum(B) == blocks, "all_layers_assigned"           # Σ_s n_s = L (in vp blocks)
    for s in S:
        prob += W >= C[s], f"worst_ge_stage_{s}"                     # W = max_s c_s at the optimum
        prob += pulp.lpSum(Z[s]) == 1, f"one_type_stage_{s}"          # each stage runs on one GPU type
        prob += R[s] <= vp * B[s], f"recompute_le_layers_{s}"        # r_s <= n_s
        prob += R[s] <= bmax * vp * U[s], f"rebuild_flag_{s}"         # r_s > 0 => u_s = 1
        if recompute == "none":
            prob += R[s] == 0, f"no_recompute_{s}"
    if recompute == "uniform":
        # r_s = min(N, n_s): r_s <= N, r_s <= n_s, and r_s reaches one of them (q_s picks which)
        N = new_var(prob, "recompute_num_layers", 1, bmax * vp, pulp.LpInteger)
        M = bmax * vp
        for s in S:
            q = new_var(prob, f"min_is_N_{s}", 0, 1, pulp.LpBinary)
            prob += R[s] <= N, f"recompute_le_N_{s}"
            prob += R[s] >= N - M * (1 - q), f"recompute_ge_N_{s}"
            prob += R[s] >= vp * B[s] - M * q, f"recompute_ge_layers_{s}"
            prob += U[s] == 1, f"rebuild_uniform_{s}"
    if counts is not None:
        for g in range(G):   # Σ_s z_sg · width <= GPUs of type g
            prob += pulp.lpSum(Z[s][g] for s in S) * stage_width <= counts[g], f"gpus_of_type_{g}"
    for g, p in enumerate(profiles):
        # big-M constants: upper bounds of each expression over every (n_s, r_s) <= L
        big_t = (p.t_layer + max(0.0, p.t_recompute)) * L + abs(p.t_first) + abs(p.t_last) + 1.0
        live_cap = (usable[g] - p.workspace) / p.frag
        for s in S:
            first, lst = s == 0, s == pp - 1
            # c_s >= time on type g, relaxed by big_t unless stage s runs on g
            prob += C[s] >= p.t_layer * vp * B[s] + p.t_recompute * R[s] + (p.t_first if first else 0) \
                + (p.t_last if lst else 0) - big_t * (1 - Z[s][g]), f"time_{s}_{g}"
            # live bytes on type g <= (usable - workspace) / frag, relaxed unless stage s runs on g
            f = p.in_flight[s]
            live = (p.states_layer * vp * B[s] + (p.states_first if first else 0) + (p.states_last if lst else 0)
                    + p.act_rebuild * U[s] + f * (p.act_layer * (vp * B[s] - R[s]) + p.act_recomputed * R[s]
                           + (p.act_first if first else 0)) + (p.logits_last if lst else 0))
            live_ub = (p.states_layer * L + abs(p.states_first) + abs(p.states_last) + p.logits_last
                       + f * (max(p.act_layer, p.act_recomputed, 0.0) * L + abs(p.act_rebuild) + abs(p.act_first)))
            big_m = max(0.0, live_ub - live_cap) + 1.0
            # in GiB: byte-sized coefficients (~1e10) leave CBC's absolute tolerances no room at the
            # boundary (a capacity exactly at the least need read as infeasible)
            prob += live * _GIB_INV <= (live_cap + big_m * (1 - Z[s][g])) * _GIB_INV, f"memory_{s}_{g}"
    info = solve(prob, solver, time_limit_s, gap_rel)
    layers = tuple(int(round(b.varValue)) * vp for b in B)
    rec = tuple(int(round(r.varValue)) for r in R)
    types = tuple(max(range(G), key=lambda g: Z[s][g].varValue) for s in S)
    times = tuple(profiles[types[s]].stage_time(s, layers[s], rec[s]) for s in S)
    full = recompute == "uniform"
    mem = tuple(profiles[types[s]].stage_bytes(s, layers[s], rec[s], full) for s in S)
    n_uniform = None
    if recompute == "uniform":
        n_val = int(round(N.varValue))
        n_uniform = None if n_val >= max(layers) else n_val
    return ChainSolution(layers, rec, n_uniform, tuple(profiles[g].name for g in types), times, mem,
                         profiles[0].pipeline(times), info)


# ---- exhaustive reference (tests, and tiny instances) ------------------------------------------
def brute_force_chain(profiles, usable, *, recompute: str = "uniform", counts=None, stage_width: int = 1):
    """Enumerate every composition, recompute choice and type assignment: (pipeline_s, layers,
    recomputed, types) of the best, or None. Exponential; for tests on small instances."""
    profiles = list(profiles) if isinstance(profiles, (list, tuple)) else [profiles]
    usable = list(usable) if isinstance(usable, (list, tuple)) else [usable] * len(profiles)
    p0 = profiles[0]
    pp, vp, L = p0.pp, p0.vp, p0.num_layers
    best = None
    for comp in _compositions(L // vp, pp):
        layers = tuple(b * vp for b in comp)
        if recompute == "none":
            rec_opts = [tuple([0] * pp)]
        elif recompute == "uniform":
            rec_opts = sorted({tuple(min(n, x) for x in layers) for n in range(1, max(layers) + 1)})
        else:
            rec_opts = itertools.product(*[range(x + 1) for x in layers])
        rec_opts = list(rec_opts)
        for types in itertools.product(range(len(profiles)), repeat=pp):
            if counts is not None and any(types.count(g) * stage_width > counts[g] for g in range(len(profiles))):
                continue
            for rec in rec_opts:
                ok = all(profiles[types[s]].stage_bytes(s, layers[s], rec[s], recompute == "uniform")
                         <= usable[types[s]] for s in range(pp))
                if not ok:
                    continue
                times = [profiles[types[s]].stage_time(s, layers[s], rec[s]) for s in range(pp)]
                t = p0.pipeline(times)
                if best is None or t < best[0] - 1e-12:
                    best = (t, layers, rec, tuple(profiles[g].name for g in types))
    return best


def _compositions(n: int, k: int):
    """Ordered ways to write n as k positive parts."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        edges = (0,) + cuts + (n,)
        yield tuple(edges[i + 1] - edges[i] for i in range(k))


# ---- heterogeneous clusters --------------------------------------------------------------------
@dataclass(frozen=True)
class HeteroPlan:
    """A pipeline whose stages run on different GPU types (one plan per type for simulate)."""

    plan: ParallelPlan
    solution: ChainSolution
    step_time_s: float          # pipeline (ILP) + the slowest type's data-parallel/optimizer time
    gpus_by_type: dict


def plan_heterogeneous(model: ModelSpec, pools: Sequence[tuple[Hardware, int]], plan: ParallelPlan, *,
                       recompute: str = "uniform", min_headroom_bytes: float = 0.0,
                       calibration: Calibration = DEFAULT, solver: str = "highs",
                       time_limit_s: float = 10.0) -> HeteroPlan:
    """Assign the stages of ``plan`` (degrees fixed) to GPU types and layers to stages.

    ``pools``: (hardware, GPUs available) per type; each type's stage costs come from simulate()
    on that hardware alone (the simulator has one accelerator per Hardware)."""
    from simulator.engine import stage_hardware

    width = plan.tp * plan.cp * (plan.dp or 1)
    n = width * plan.pp
    hw0 = replace(pools[0][0], num_gpus=n)
    profiles, usable, counts, clusters = [], [], [], []
    for hw, count in pools:
        # each type on its own calibration, exactly as simulate() costs a stage of that cluster
        probe = replace(plan, num_gpus=n, stage_clusters=(hw.cluster.name,) * plan.pp)
        hw_n, cal = stage_hardware(hw0, probe, calibration, 0)
        p = resolve_plan(model, replace(plan, num_gpus=n), n)
        prof = profile_chain(model, hw_n, p, cal)
        profiles.append(prof)
        usable.append(hw.accelerator.hbm_capacity_bytes - min_headroom_bytes)
        counts.append(count)
        clusters.append(hw.cluster.name)
    sol = solve_chain(profiles, usable, recompute=recompute, counts=counts, stage_width=width, solver=solver,
                      time_limit_s=time_limit_s)
    by_type: dict = {}
    for t in sol.types:
        by_type[t] = by_type.get(t, 0) + width
    names = [prof.name for prof in profiles]
    out = replace(plan, num_gpus=n, layers_per_stage=sol.layers,
                  recompute="full" if recompute != "none" else plan.recompute,
                  recompute_layers=sol.recompute_layers,
                  stage_clusters=tuple(clusters[names.index(t)] for t in sol.types))
    # the step as simulate() runs the plan stage by stage: the ILP's pipeline plus the sends
    # between clusters (the ILP drops send terms), data-parallel and optimizer of the slowest stage
    step = simulate(model, hw0, out, calibration).step_time_s
    return HeteroPlan(out, sol, step, by_type)
