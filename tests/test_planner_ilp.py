"""planners.ilp: solver status checks, stage costs read off simulate(), and the chain ILP
(layers per stage, recompute per stage, GPU type per stage) against brute force."""
from __future__ import annotations

import random

import pulp
import pytest

from hardware_specs import load_hardware
from models.schema import ModelSpec, MoEConfig
from planners.ilp import (ILPError, brute_force_chain, make_solver, new_var, plan_heterogeneous, profile_chain,
                          solve, solve_chain)
from simulator import ParallelPlan, resolve_plan, simulate

GB = 1e9
# 8 layers with a large vocabulary: the embedding/head and the first stages' in-flight
# activations make stage costs unequal, so the split and the recompute choices matter.
SMALL = ModelSpec(name="ilp-small", num_layers=8, hidden=2048, ffn_hidden=5632, num_heads=16, num_kv_heads=4,
                  vocab=32000, seq_len=8192, activation="swiglu", norm="rmsnorm")


def _profile(cluster: str):
    """tp=2 x dp=4 x pp=3 on 24 GPUs, 12 micro-batches of 2 x 8192 tokens."""
    hw = load_hardware(cluster, 24)
    plan = resolve_plan(SMALL, ParallelPlan(tp=2, pp=3, mbs=2, gbs=96, seq=8192, layers_per_stage=(3, 3, 2)), 24)
    return profile_chain(SMALL, hw, plan), hw, plan


@pytest.fixture(scope="module")
def h100():
    return _profile("dgx-h100")


@pytest.fixture(scope="module")
def a100():
    return _profile("dgx-a100-superpod")


# ---- solver plumbing ---------------------------------------------------------------------------
def _toy(name="toy"):
    prob = pulp.LpProblem(name, pulp.LpMinimize)
    x = new_var(prob, "x", 0, 10, pulp.LpInteger)
    y = new_var(prob, "y", 0, 10, pulp.LpInteger)
    prob += 3 * x + 2 * y
    prob += 2 * x + 3 * y >= 7
    return prob, x, y


def test_both_solvers_exist_and_agree():
    assert pulp.__version__.startswith("3."), "pinned pulp>=3.3,<4 (PuLP 4 needs Python 3.12, drops CBC)"
    assert make_solver("highs").name == "HiGHS"
    assert make_solver("cbc").name in ("PULP_CBC_CMD", "COIN_CMD")
    objs = []
    for solver in ("highs", "cbc"):
        prob, x, y = _toy()
        info = solve(prob, solver, time_limit_s=5)
        assert info.sol_status == "Optimal Solution Found"
        objs.append(info.objective)
    assert objs[0] == pytest.approx(6.0) and objs[1] == pytest.approx(6.0)   # x=0, y=3


def test_infeasible_program_raises():
    prob, x, y = _toy("infeasible")
    prob += x + y <= 1
    with pytest.raises(ILPError, match="infeasible"):
        solve(prob, "highs", time_limit_s=5)
    prob, x, y = _toy("infeasible_cbc")
    prob += x + y <= 1
    with pytest.raises(ILPError, match="infeasible"):
        solve(prob, "cbc", time_limit_s=5)


def test_time_limited_feasible_answer_is_not_accepted(monkeypatch):
    """PuLP maps HiGHS' time limit to status 'Optimal' with sol_status 'IntegerFeasible'."""
    prob, x, y = _toy("time_limited")

    def fake_solve(self, solver=None, **kw):
        x.varValue, y.varValue = 2.0, 1.0
        self.status, self.sol_status = pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
        return self.status

    monkeypatch.setattr(pulp.LpProblem, "solve", fake_solve)
    with pytest.raises(ILPError, match="time limit"):
        solve(prob, "cbc", time_limit_s=1)


def test_fractional_integer_is_caught(monkeypatch):
    prob, x, y = _toy("fractional")

    def fake_solve(self, solver=None, **kw):
        x.varValue, y.varValue = 0.5, 2.0
        self.status, self.sol_status = pulp.LpStatusOptimal, pulp.LpSolutionOptimal
        return self.status

    monkeypatch.setattr(pulp.LpProblem, "solve", fake_solve)
    with pytest.raises(ILPError, match="fractional"):
        solve(prob, "highs", time_limit_s=1)


def test_bad_solver_name_and_time_limit():
    with pytest.raises(ILPError, match="highs or cbc"):
        make_solver("gurobi")
    with pytest.raises(ILPError, match="time_limit|positive"):
        make_solver("highs", time_limit_s=0)


# ---- costs from simulate() ---------------------------------------------------------------------
def test_profile_reproduces_simulate(h100):
    prof, hw, plan = h100
    rng = random.Random(3)
    for _ in range(6):
        cuts = sorted(rng.sample(range(1, 8), 2))
        split = (cuts[0], cuts[1] - cuts[0], 8 - cuts[1])
        n = rng.choice([1, 2, 3, None])
        rec = rng.choice(["none", "full"])
        res = simulate(SMALL, hw, ParallelPlan(**{**plan.__dict__, "layers_per_stage": split, "recompute": rec,
                                                  "recompute_layers": n if rec == "full" else None}))
        for s, layers in enumerate(split):
            r = 0 if rec == "none" else (layers if n is None else min(n, layers))
            st = res.stages[s]
            assert prof.stage_time(s, layers, r) == pytest.approx(st.forward_s + st.backward_s, rel=1e-9)
            assert prof.stage_bytes(s, layers, r, rec == "full") == pytest.approx(
                res.stage_memory[s].total_bytes, rel=1e-9)
        assert prof.pipeline([prof.stage_time(s, x, 0 if rec == "none" else (x if n is None else min(n, x)))
                              for s, x in enumerate(split)]) == pytest.approx(res.pipeline_s, rel=1e-9)


# ---- the chain ILP against brute force ---------------------------------------------------------
def _tight(prof, frac):
    """A usable capacity from the least any split can need (frac 0; below: infeasible) up to
    what the largest stage needs without recompute (frac 1)."""
    lo = max(prof.stage_bytes(s, 1, 1) for s in range(prof.pp))
    hi = max(prof.stage_bytes(s, prof.num_layers - prof.pp + 1, 0, False) for s in range(prof.pp))
    return lo + frac * (hi - lo)


@pytest.mark.parametrize("frac", [-0.1, 0.0, 0.05, 0.15, 0.5])
def test_uniform_recompute_matches_brute_force(h100, frac):
    prof, hw, plan = h100
    usable = _tight(prof, frac)
    ref = brute_force_chain(prof, usable, recompute="uniform")
    if ref is None:
        with pytest.raises(ILPError, match="infeasible"):
            solve_chain(prof, usable, recompute="uniform")
        return
    sol = solve_chain(prof, usable, recompute="uniform")
    assert sol.pipeline_s == pytest.approx(ref[0], rel=1e-7)
    assert max(sol.stage_bytes) <= usable * (1 + 1e-9)
    assert sol.info.sol_status == "Optimal Solution Found"


@pytest.mark.parametrize("frac", [0.0, 0.05, 0.15, 0.5])
def test_per_stage_recompute_matches_brute_force(h100, frac):
    prof, hw, plan = h100
    usable = _tight(prof, frac)
    ref = brute_force_chain(prof, usable, recompute="per_stage")
    sol = solve_chain(prof, usable, recompute="per_stage")
    assert ref is not None
    assert sol.pipeline_s == pytest.approx(ref[0], rel=1e-7)
    assert list(sol.recomputed) == [min(r, n) for r, n in zip(sol.recomputed, sol.layers)]
    # per-stage recompute never loses to one count for every stage, and when memory is tight
    # it strictly wins
    uni = brute_force_chain(prof, usable, recompute="uniform")
    assert sol.pipeline_s <= uni[0] * (1 + 1e-9)
    if frac < 0.3:
        assert sol.pipeline_s < uni[0] * (1 - 1e-6)


def test_uniform_solution_simulates_to_the_ilp_pipeline(h100):
    prof, hw, plan = h100
    usable = _tight(prof, 0.15)
    sol = solve_chain(prof, usable, recompute="uniform", solver="cbc")
    res = simulate(SMALL, hw, ParallelPlan(**{**plan.__dict__, "layers_per_stage": sol.layers,
                                              "recompute": "full", "recompute_layers": sol.recompute_layers}))
    assert res.pipeline_s == pytest.approx(sol.pipeline_s, rel=1e-9)
    assert max(m.total_bytes for m in res.stage_memory) <= usable * (1 + 1e-9)


@pytest.mark.parametrize("counts,frac", [((24, 48), 0.2), ((48, 24), 0.2), ((24, 24), 0.5), ((72, 0), 1.0)])
def test_heterogeneous_assignment_matches_brute_force(h100, a100, counts, frac):
    """Stages of 8 GPUs (tp=2 x dp=4) on H100 or A100 under per-type GPU counts and memory."""
    ph, pa = h100[0], a100[0]
    usable = [_tight(ph, frac), _tight(pa, frac)]
    ref = brute_force_chain([ph, pa], usable, recompute="per_stage", counts=counts, stage_width=8)
    if ref is None:
        with pytest.raises(ILPError):
            solve_chain([ph, pa], usable, recompute="per_stage", counts=counts, stage_width=8)
        return
    sol = solve_chain([ph, pa], usable, recompute="per_stage", counts=counts, stage_width=8)
    assert sol.pipeline_s == pytest.approx(ref[0], rel=1e-7)
    for g, name in enumerate((ph.name, pa.name)):
        assert sol.types.count(name) * 8 <= counts[g]


def test_heterogeneous_prefers_the_faster_gpu_when_it_can(h100, a100):
    ph, pa = h100[0], a100[0]
    sol = solve_chain([ph, pa], [ph.capacity, pa.capacity], recompute="none", counts=(24, 24), stage_width=8)
    assert set(sol.types) == {"h100-sxm"}
    sol = solve_chain([ph, pa], [ph.capacity, pa.capacity], recompute="none", counts=(16, 24), stage_width=8)
    assert sorted(sol.types) == ["a100-80gb-sxm", "h100-sxm", "h100-sxm"]
    # the A100 stage gets fewer layers than an H100 stage would
    a_stage = sol.types.index("a100-80gb-sxm")
    assert sol.layers[a_stage] <= min(x for x, t in zip(sol.layers, sol.types) if t == "h100-sxm") + 1


def test_plan_heterogeneous_end_to_end():
    pools = [(load_hardware("dgx-h100", 16), 16), (load_hardware("dgx-a100-superpod", 8), 8)]
    plan = ParallelPlan(tp=2, pp=3, dp=4, mbs=1, gbs=48, seq=4096, layers_per_stage=(3, 3, 2))
    out = plan_heterogeneous(SMALL, pools, plan, recompute="uniform", time_limit_s=10)
    assert sum(out.plan.layers_per_stage) == SMALL.num_layers
    assert out.gpus_by_type.get("h100-sxm", 0) <= 16 and out.gpus_by_type.get("a100-80gb-sxm", 0) <= 8
    assert out.step_time_s >= out.solution.pipeline_s > 0


def test_profile_refuses_mixed_layers_and_pp1():
    mixed = ModelSpec(**{**SMALL.model_dump(), "name": "mixed", "moe": MoEConfig(
        num_experts=4, top_k=2, expert_ffn_hidden=1024, first_dense_layers=1)})
    hw = load_hardware("dgx-h100", 8)
    with pytest.raises(ILPError, match=r"mixes layer kinds \(dense, moe\)"):
        profile_chain(mixed, hw, resolve_plan(mixed, ParallelPlan(tp=2, pp=2, gbs=8, seq=8192), 8))
    with pytest.raises(ILPError, match="pp >= 2"):
        profile_chain(SMALL, hw, resolve_plan(SMALL, ParallelPlan(tp=2, pp=1, gbs=8, seq=8192), 8))
