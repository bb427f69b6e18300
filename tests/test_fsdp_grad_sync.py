"""FSDP2's deferred gradient sync (ParallelPlan.fsdp_grad_sync): what the plan field means, how
validate reads it from plan_step records, what it costs in memory and time, and that neither the
planner nor torchtitan's export offers what torchtitan's config cannot say (docs/cost_model.md)."""
from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from hardware_specs import load_hardware
from hardware_specs.errors import PlanError, SpecError
from models import load_model
from models.params import total_params
from simulator import ParallelPlan, simulate
from simulator.frameworks.launch import export_config
from simulator.plan import plan_from_dict, resolve_plan
from validation.hardware import hardware_for
from validation.predict import plan_model, plan_step_prediction, record_grad_sync, record_plan
from validation.records import load_measurements
from simulator.calibration import calibration_for

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
EVERY, LAST = "every_microbatch", "last_microbatch"
# the harness commit that added the field (99036ac, Sun Nov 22 20:35:32 2026 +0000): records of
# files run before it carry no fsdp_grad_sync and ran the deferred sync
FIELD_ADDED = "2026-11-22T20:35:32+00:00"


def _record(file: str, **match) -> dict:
    recs = load_measurements(MEAS / file).records
    return next(r for r in recs if all(r.get(k) == v for k, v in match.items()))


def _llama_1b_params(r: dict) -> float:
    """Parameters of the harness's llama-1b counted from its dimensions (untied, RMSNorm, no bias)."""
    h, f, v, L = r["hidden"], r["ffn_hidden"], r["vocab"], r["layers"]
    kv = r["kv_heads"] * h // r["heads"]
    return 2 * v * h + h + L * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h)


# ---- the plan field ------------------------------------------------------------------------------
def test_default_is_every_microbatch_and_bad_values_name_the_field():
    assert ParallelPlan().fsdp_grad_sync == EVERY
    m = load_model("llama3-8b")
    with pytest.raises(PlanError, match="fsdp_grad_sync"):
        resolve_plan(m, ParallelPlan(zero_stage=3, framework="torchtitan", fsdp_grad_sync="never"), 8)
    with pytest.raises(SpecError, match="fsdp_grad_sync"):
        plan_from_dict({"fsdp_grad_sync": "sometimes"})
    assert plan_from_dict({"fsdp_grad_sync": LAST}).fsdp_grad_sync == LAST


@pytest.mark.parametrize("framework,zero", [("megatron-core", 3), ("deepspeed", 3), ("torchtitan", 0),
                                            ("pytorch", 0), ("megatron-core-local", 1)])
def test_deferred_sync_is_refused_where_the_plan_is_not_fsdp2(framework, zero):
    m = load_model("llama3-8b")
    with pytest.raises(PlanError, match="fsdp_grad_sync"):
        resolve_plan(m, ParallelPlan(zero_stage=zero, framework=framework, fsdp_grad_sync=LAST, gbs=64), 8)


@pytest.mark.parametrize("framework", ["torchtitan", "pytorch"])
def test_deferred_sync_resolves_under_fsdp2(framework):
    m = load_model("llama3-8b")
    p = resolve_plan(m, ParallelPlan(zero_stage=3, framework=framework, fsdp_grad_sync=LAST, gbs=64), 8)
    assert p.recipe == "torch_fsdp" and p.fsdp_defers_sync


# ---- records -------------------------------------------------------------------------------------
def test_record_plan_reads_the_field_and_the_harness_rule_for_records_without_it():
    old = _record("h200x2_plan_torchtitan.json", zero_stage=3, name="llama-1b")
    assert "fsdp_grad_sync" not in old and record_plan(old).fsdp_grad_sync == LAST
    every = _record("h200x2_plan_native3.json", zero_stage=3, cp=1, name="llama-7b")
    assert every["fsdp_grad_sync"] == EVERY and record_plan(every).fsdp_grad_sync == EVERY
    deferred_cp = _record("h200x2_plan_native2.json", zero_stage=3, cp=2, name="llama-1b", seq=4096)
    assert record_plan(deferred_cp).fsdp_grad_sync == LAST
    ddp = _record("h200x2_plan_torchtitan.json", zero_stage=0)
    megatron = load_measurements(MEAS / "h200x2_plan_megatron.json").records[0]
    assert record_plan(ddp).fsdp_grad_sync == record_plan(megatron).fsdp_grad_sync == EVERY
    assert record_grad_sync(dict(old, fsdp_grad_sync=EVERY)) == EVERY


def test_records_without_the_field_were_all_run_before_the_harness_wrote_it():
    """The absent-field rule holds for every committed file: each torchtitan ZeRO-3 record without
    fsdp_grad_sync is in a file run before commit 99036ac; every one after it carries the field."""
    files = sorted(MEAS.glob("*plan*.json")) + sorted((MEAS / "repeat").glob("*plan*.json"))
    without = set()
    for path in files:
        mf = load_measurements(path)
        for r in mf.records:
            if r.get("framework") == "torchtitan" and r.get("zero_stage") == 3:
                if "fsdp_grad_sync" not in r:
                    assert mf.info["date"] < FIELD_ADDED, path.name
                    without.add(path.name)
                else:
                    assert mf.info["date"] > FIELD_ADDED, path.name
    assert without == {"h200x2_plan_torchtitan.json", "h200x2_plan_prereg.json", "h200x2_plan_prereg_rest.json",
                       "h200x2_plan_prereg2.json", "h200x2_plan_host.json", "h200x2_plan_smoke.json"}


def test_prereg_skeleton_carries_the_policy_the_harness_records():
    from validation.prereg import harness, skeleton
    h = harness()
    sync = [c for c in h.grid("native3") if c.get("fsdp_sync_each")]
    deferred = [c for c in h.grid("native2") if c["plan"]["cp"] > 1]
    assert sync and deferred
    assert all(skeleton(h, c)["fsdp_grad_sync"] == EVERY for c in sync)
    assert all(skeleton(h, c)["fsdp_grad_sync"] == LAST for c in deferred)


# ---- memory --------------------------------------------------------------------------------------
def test_deferred_sync_holds_every_unsharded_fp32_gradient():
    """llama-1b on 2 GPUs, 2 micro-batches: at the start of the second micro-batch's backward the
    deferred sync holds 4 bytes per parameter of the whole model (the fp32 accumulators) where
    reducing every micro-batch holds the fp32 shards (4 bytes / 2 ranks); one block's transient is
    its fp32 reduce-scatter input (4 bytes) instead of its bf16 gradient and fp32 cast (6 bytes)."""
    rec = _record("h200x2_plan_torchtitan.json", zero_stage=3, name="llama-1b")
    mf = load_measurements(MEAS / "h200x2_plan_torchtitan.json")
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    psi = _llama_1b_params(rec)
    assert psi == total_params(plan_model(rec))
    block = (psi - 2 * rec["vocab"] * rec["hidden"] - rec["hidden"]) / rec["layers"]
    n = rec["dp"]
    deferred = plan_step_prediction(dict(rec, fsdp_grad_sync=LAST), hw, cal).peak_memory_bytes
    every = plan_step_prediction(dict(rec, fsdp_grad_sync=EVERY), hw, cal).peak_memory_bytes
    assert deferred - every == pytest.approx(4 * psi * (1 - 1 / n) - 2 * block, rel=1e-9)
    # and the record, measured with the deferred sync, is now within 2% (it was -9.5%)
    assert abs(deferred / rec["peak_memory_bytes"] - 1) < 0.02


def test_one_microbatch_makes_the_policies_the_same_step():
    m, hw = load_model("llama3-8b"), load_hardware("dgx-h100", 16)
    plans = [ParallelPlan(dp=16, zero_stage=3, framework="torchtitan", gbs=16, seq=4096, fsdp_grad_sync=s)
             for s in (EVERY, LAST)]
    a, b = (simulate(m, hw, p) for p in plans)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory.peak_allocated_bytes == pytest.approx(b.memory.peak_allocated_bytes, rel=1e-12)


# ---- time ----------------------------------------------------------------------------------------
def test_deferred_sync_drops_the_reduce_scatter_of_all_but_the_last_microbatch():
    """llama3-8b over 16 H100s on two nodes (reduce-scatters over the scale-out fabric): the
    deferred sync's exposed data-parallel seconds fall by the same amount per micro-batch it does
    not reduce, so by 7 times as much with 8 micro-batches as with 2, and the step gets faster."""
    m, hw = load_model("llama3-8b"), load_hardware("dgx-h100", 16)

    def run(mb: int, sync: str):
        return simulate(m, hw, ParallelPlan(dp=16, zero_stage=3, framework="torchtitan", gbs=16 * mb, seq=4096,
                                            fsdp_grad_sync=sync))

    saving = {mb: run(mb, EVERY).breakdown["dp"] - run(mb, LAST).breakdown["dp"] for mb in (2, 8)}
    assert saving[2] > 0.01 * run(2, EVERY).step_time_s
    assert saving[8] == pytest.approx(7 * saving[2], rel=1e-9)
    assert run(8, LAST).step_time_s < run(8, EVERY).step_time_s


# ---- planner and export --------------------------------------------------------------------------
def test_torchtitan_export_refuses_a_deferred_sync_it_cannot_say():
    m = load_model("llama3-8b")
    deferred = resolve_plan(m, ParallelPlan(zero_stage=3, framework="torchtitan", gbs=64, fsdp_grad_sync=LAST), 8)
    with pytest.raises(PlanError, match="fsdp_grad_sync"):
        export_config(m, deferred)
    one = resolve_plan(m, ParallelPlan(zero_stage=3, framework="torchtitan", gbs=8, fsdp_grad_sync=LAST), 8)
    assert tomllib.loads(export_config(m, one).text)["parallelism"]["data_parallel_shard_degree"] == 8
    every = replace(deferred, fsdp_grad_sync=EVERY)
    assert tomllib.loads(export_config(m, every).text)["training"]["global_batch_size"] == 64


def test_the_planner_never_searches_a_deferred_sync_torchtitan_cannot_say():
    from planners.space import make_constraints
    m = load_model("llama3-8b")
    base = ParallelPlan(framework="torchtitan", fsdp_grad_sync=LAST)
    with pytest.raises(PlanError, match="fsdp_grad_sync"):
        make_constraints(m, "dgx-h100", gpus=8, gbs=64, base=base)
    # plain PyTorch has no config to write: its own loop can defer, so the planner keeps the base's
    c = make_constraints(m, "dgx-h100", gpus=8, gbs=64, base=replace(base, framework="pytorch"))
    assert c.base.fsdp_grad_sync == LAST


def test_plan_search_proposes_every_microbatch(capsys):
    from meshcast.cli import main
    rc = main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64",
               "--framework", "torchtitan", "--top", "3", "--no-progress", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    plans = [c["plan"] for c in out["plans"]]
    assert any(p["zero_stage"] == 3 for p in plans) and all(p["fsdp_grad_sync"] == EVERY for p in plans)
