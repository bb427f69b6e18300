"""meshcast plan: the search returns the brute-force best under the same cost model, explains
infeasible requests, and writes plans that Megatron-LM and ``meshcast simulate`` accept."""
from __future__ import annotations

import json
import time

import pytest

from hardware_specs.errors import MeshcastError
from models import load_model
from models.schema import ModelSpec, MoEConfig
from planners.report import pareto_front, why_loses, write_plan_yaml
from planners.search import Objective, brute_force, search
from planners.space import layer_splits, make_constraints, parse_count_range
from simulator import ParallelPlan, load_plan, simulate
from hardware_specs import load_hardware

TINY = ModelSpec(name="tiny-gpt", num_layers=8, hidden=1024, ffn_hidden=4096, num_heads=16, vocab=32000,
                 seq_len=2048)
MED = ModelSpec(name="med-llama", num_layers=12, hidden=4096, ffn_hidden=14336, num_heads=32, num_kv_heads=8,
                vocab=128256, seq_len=8192, activation="swiglu", norm="rmsnorm")
TINY_MOE = ModelSpec(name="tiny-moe", num_layers=4, hidden=1024, ffn_hidden=3584, num_heads=16, num_kv_heads=4,
                     vocab=32000, seq_len=4096, activation="swiglu", norm="rmsnorm",
                     moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden=3584))

# (model, cluster, constraint options, objective): small enough to simulate every plan.
INSTANCES = {
    # the whole space of a small GPT on two DGX A100 nodes
    "gpt-a100-16": (TINY, "dgx-a100-superpod", dict(gpus=16, gbs=32, max_mbs=2, max_cp=2), Objective()),
    # memory binds: uneven split with full recompute of N layers per stage wins
    "llama-h100-8-tight": (MED, "dgx-h100", dict(gpus=8, gbs=16, max_mbs=1, max_cp=2, min_headroom_gb=70),
                           Objective()),
    # MoE: expert parallelism and expert tensor parallelism
    "moe-h100-16": (TINY_MOE, "dgx-h100", dict(gpus=16, gbs=32, max_mbs=1, max_cp=1), Objective()),
    # a GPU range, cost objective, token budget and deadline
    "llama-a100-range-cost": (MED, "dgx-a100-superpod", dict(gpus="8:16", gbs=32, max_mbs=1, max_cp=1,
                                                             min_headroom_gb=60),
                              Objective("cost", 1e10, 3.0, 2.0)),
    # torch autocast recipe (fp32 weights, no ZeRO sharding of the states' bound) under tight memory
    "llama-h100-8-torch-amp": (MED, "dgx-h100", dict(gpus=8, gbs=16, max_mbs=1, max_cp=2, min_headroom_gb=60,
                                                     base=ParallelPlan(framework="torchtitan")), Objective()),
    # a global-batch range (brute force tries every batch of the range)
    "gpt-a100-gbs-range": (TINY, "dgx-a100-superpod", dict(gpus=8, gbs="16:24", max_mbs=1, max_cp=1,
                                                           min_headroom_gb=83), Objective()),
}


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_search_equals_brute_force(name):
    model, cluster, opts, objective = INSTANCES[name]
    c = make_constraints(model, cluster, **opts)
    ref = brute_force(model, cluster, c, objective=objective, top=3)
    res = search(model, cluster, c, objective=objective, top=3)
    assert not res.notes, res.notes                       # no bound exceeded simulate()
    assert len(res.candidates) == len(ref) == 3
    for (score, r_ref), cand in zip(ref, res.candidates):
        assert cand.score == pytest.approx(score, rel=1e-9)
        assert cand.result.memory.total_bytes <= cand.capacity_bytes - c.min_headroom_bytes
    # and it simulated a small fraction of the space
    assert res.stats.simulated < 200


def test_tight_memory_instance_exercises_the_inner_choices():
    # without tp and cp, 64 GB of required headroom forces a pipeline with an uneven split
    # and full recompute of some layers per stage
    model, cluster, opts, objective = INSTANCES["llama-h100-8-tight"]
    opts = dict(opts, max_tp=1, max_cp=1, min_headroom_gb=64)
    best = search(model, cluster, make_constraints(model, cluster, **opts), top=1).best.plan
    assert best.pp > 1 and best.layers_per_stage is not None and len(set(best.layers_per_stage)) > 1
    assert best.recompute == "full" and best.recompute_layers is not None


def test_inner_ilp_mode_never_worse():
    model, cluster, opts, objective = INSTANCES["llama-h100-8-tight"]
    c = make_constraints(model, cluster, **opts)
    enum = search(model, cluster, c, top=1)
    ilp = search(model, cluster, c, top=1, inner="ilp")
    assert ilp.stats.ilp_solves > 0
    assert ilp.best.score <= enum.best.score * (1 + 1e-12)


def test_llama70b_1024_gpus_is_quick_and_sensible():
    m = load_model("llama3-70b")
    c = make_constraints(m, "dgx-h100", gpus=1024, gbs=1024, seq=8192)
    t0 = time.perf_counter()
    res = search(m, "dgx-h100", c, top=3)
    assert time.perf_counter() - t0 < 10
    best = res.best
    assert best.plan.tp <= 8 and best.result.fits and 0.2 < best.result.mfu < 0.8
    assert not res.notes


# ---- infeasible requests name the binding constraint -------------------------------------------
def test_memory_infeasible_names_the_footprint():
    m = load_model("llama3-70b")
    with pytest.raises(MeshcastError) as exc:
        search(m, "dgx-h100", make_constraints(m, "dgx-h100", gpus=8, gbs=64, seq=8192, max_cp=2, max_mbs=2), top=1)
    assert exc.value.field == "memory"
    assert "needs" in exc.value.reason and "GB per GPU at the smallest footprint" in exc.value.reason
    assert "h100-sxm has 85.9 GB" in exc.value.reason


def test_headroom_infeasible_names_the_headroom():
    with pytest.raises(MeshcastError) as exc:
        search(MED, "dgx-h100", make_constraints(MED, "dgx-h100", gpus=8, gbs=16, min_headroom_gb=80), top=1)
    assert exc.value.field == "min_headroom_gb"
    assert "after the 80 GB --min-headroom-gb" in exc.value.reason


def test_deadline_infeasible_says_by_how_much():
    c = make_constraints(MED, "dgx-h100", gpus="8:16", gbs=32, max_cp=1)
    with pytest.raises(MeshcastError) as exc:
        search(MED, "dgx-h100", c, objective=Objective("cost", 1e12, 1.0, 2.5), top=1)
    assert exc.value.field == "days"
    assert "the fastest plan" in exc.value.reason and "x the 1-day limit" in exc.value.reason


def test_structural_infeasibility():
    with pytest.raises(MeshcastError) as exc:
        search(MED, "dgx-h100", make_constraints(MED, "dgx-h100", gpus=16, gbs=16, fixed={"tp": 3}), top=1)
    assert exc.value.field == "tp"
    with pytest.raises(MeshcastError) as exc:
        search(MED, "dgx-h100", make_constraints(MED, "dgx-h100", gpus=16, gbs=7, fixed={"tp": 4, "pp": 1, "cp": 1}), top=1)
    assert exc.value.field == "gbs"


def test_bad_ranges():
    assert parse_count_range("512:2048", "gpus") == (512, 2048, None)
    with pytest.raises(MeshcastError, match="empty"):
        parse_count_range("64:8", "gpus")
    with pytest.raises(MeshcastError):
        make_constraints(MED, "dgx-h100", gpus="1e9", gbs=16)


# ---- the split family ---------------------------------------------------------------------------
def test_layer_splits():
    assert (7,) + (8,) * 14 + (7,) in layer_splits(126, 16, 1)          # Llama 3 405B's split
    assert None in layer_splits(24, 4, 2)
    for split in layer_splits(24, 4, 2):
        if split is not None:
            assert sum(split) == 24 and all(x % 2 == 0 and x >= 2 for x in split)
            assert len(set(split[1:-1])) == 1


# ---- outputs ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tight_result():
    model, cluster, opts, _ = INSTANCES["llama-h100-8-tight"]
    return search(model, cluster, make_constraints(model, cluster, **opts), top=3, keep_explored=True)


def test_runner_up_sentence(tight_result):
    best, second = tight_result.candidates[:2]
    text = why_loses(best, second, "the runner-up")
    assert text.startswith(f"the runner-up ({second.shape.describe()}) loses ") and "%" in text


def test_plan_yaml_round_trip(tight_result, tmp_path):
    best = tight_result.best
    path = tmp_path / "plan.yaml"
    write_plan_yaml(best, path, MED.name, "dgx-h100")
    plan = load_plan(path)
    assert plan == best.plan
    again = simulate(MED, load_hardware("dgx-h100", best.result.num_gpus), plan)
    assert again.step_time_s == pytest.approx(best.result.step_time_s, rel=1e-12)


def test_pareto_front():
    pts = [(10, 1), (9, 5), (8, 4), (10, 0.5), (7, 6)]
    assert sorted(pareto_front(pts)) == [0, 1, 4]


# ---- the command line ---------------------------------------------------------------------------
def _cli(argv, capsys):
    from meshcast.cli import main
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_json_plan_and_html(tmp_path, capsys):
    rc, out, err = _cli(["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--gbs", "1024",
                         "--seq", "8192", "--top", "3", "--no-progress", "--json", "--write-plan",
                         str(tmp_path / "p.yaml"), "-o", str(tmp_path / "p.html")], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["search"]["optimal"] is True
    first = doc["plans"][0]
    assert first["plan"] == load_plan(tmp_path / "p.yaml").to_dict()
    assert first["headroom_bytes"] >= 0 and len(first["stage_headroom_bytes"]) == first["plan"]["pp"]
    assert "--tensor-model-parallel-size" in first["megatron_args"]
    assert doc["plans"][1]["why"].startswith("the runner-up (")
    html = (tmp_path / "p.html").read_text()
    assert "Pareto front" in html and len(html) > 1_000_000          # plotly.js inlined: self-contained


def test_cli_text(capsys):
    rc, out, err = _cli(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "64",
                         "--seq", "8192", "--top", "2", "--max-cp", "2", "--no-progress", "--megatron-args"], capsys)
    assert rc == 0, err
    assert "the runner-up (" in out and ("loses" in out or "is a tie" in out)
    assert "80% band" in out and "min headroom" in out
    assert "megatron launch config" in out and "--micro-batch-size" in out and "pretrain_gpt.py" in out
    assert "provably the best of the space under the cost model" in out


def test_cli_errors_exit_2(capsys):
    rc, out, err = _cli(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "1", "--gbs", "8",
                         "--seq", "8192", "--no-progress"], capsys)
    assert rc == 2 and err.startswith("error: memory: needs ") and "85.9 GB" in err
    rc, out, err = _cli(["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64", "--gbs", "64",
                         "--days", "3", "--no-progress"], capsys)
    assert rc == 2 and err.startswith("error: days:")
    rc, out, err = _cli(["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gbs", "64", "--solver", "cplex"],
                        capsys)                 # argparse's usage errors: the same one line, exit 2
    assert rc == 2 and err.startswith("error: solver: invalid choice 'cplex'") and err.count("\n") == 1


def test_cli_heterogeneous_pools(capsys):
    rc, out, err = _cli(["plan", "--model", "llama3-70b", "--pool", "dgx-h100:256", "--pool", "dgx-a100-superpod:256",
                         "--tp", "8", "--pp", "8", "--dp", "8", "--gbs", "512", "--seq", "8192", "--json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    types = [s["gpu_type"] for s in doc["stages"]]
    assert set(types) == {"h100-sxm", "a100-80gb-sxm"} and sum(s["layers"] for s in doc["stages"]) == 80
    h = [s["layers"] for s in doc["stages"] if s["gpu_type"] == "h100-sxm"]
    a = [s["layers"] for s in doc["stages"] if s["gpu_type"] == "a100-80gb-sxm"]
    assert min(h) > max(a)             # the faster GPUs carry more layers
    assert doc["solver"]["status"] == "Optimal"
    rc, out, err = _cli(["plan", "--model", "llama3-70b", "--pool", "dgx-h100:64", "--pool", "dgx-a100-superpod:64",
                         "--tp", "8", "--pp", "8", "--dp", "8", "--gbs", "512"], capsys)
    assert rc == 2 and err.startswith("error: pool: 8 stages")


@pytest.mark.parametrize("seq", [1, 2, 3, 7])
def test_sequences_too_short_to_split_leave_only_plans_that_split_them(seq):
    """With sequence parallelism Megatron-Core splits each rank's seq/cp tokens evenly over tp: a
    2-token sequence has no tp=4 plan (the planner used to cost such plans, with no token on a rank,
    and divide by zero); every plan it returns splits the sequence, and simulate accepts it."""
    model = load_model("llama3-8b")
    res = search(model, "dgx-h100", make_constraints(model, "dgx-h100", gpus=8, gbs=64, seq=seq), top=5)
    assert res.candidates
    for cand in res.candidates:
        p = cand.plan
        assert not p.sp or (seq // p.cp) % p.tp == 0
        assert simulate(model, load_hardware("dgx-h100", 8), p).step_time_s > 0
