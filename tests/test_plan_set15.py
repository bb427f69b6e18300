"""Session 31 on two NVLink-connected H200s (issue #11), every set predicted before it ran:

* set 15 (grid native14, logs/prereg15_h200x2_plan.txt, model of 66a3580): Qwen2.5-3B's shape at s4096,
  never run under either framework, every plan family under Megatron-Core local and torch-native;
* moe3 (logs/prereg_moe3_h200x2_plan.txt, same model): the first MoE steps with expert parallelism;
* collectives registration 19 (logs/prereg_collectives19_h200x2.txt, model of 1b1d7f4): the committed
  profile and the ring start-up candidate (logs/h200-sxm_coll19_candidate.yaml) on a fresh run.

Each plan is scored under the registered rule: every host cost scaled by its own twin's measured /
predicted step seconds (validation/host_speed.py). The figures are today's model; at the commit that
added this file they were the registered figures (the model did not change between the registration
and the scoring).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from simulator.calibration import calibration_for
from validation.accuracy import plan_families_of, plan_groups, summarize
from validation.hardware import hardware_for
from validation.host_speed import evaluate_per_plan_twins, plan_host_speeds, twin_key, twin_ratio_by_index
from validation.prereg_collectives import registered
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
SET15_MEGATRON = MEAS / "h200x2_plan_native14_megatron.json"
SET15_TORCH = MEAS / "h200x2_plan_native14_torch.json"
MOE3 = MEAS / "h200x2_plan_moe3.json"
COLL19 = MEAS / "h200x2_collectives19.json"
PREREG15 = MEAS / "logs" / "prereg15_h200x2_plan.txt"
PREREG_MOE3 = MEAS / "logs" / "prereg_moe3_h200x2_plan.txt"
PREREG_COLL19 = MEAS / "logs" / "prereg_collectives19_h200x2.txt"


def _scored(path: Path):
    """(records' results under per-plan twins, plan_step summary, plan groups) of a plan file."""
    mf = load_measurements(path)
    hw = hardware_for(mf)
    res, unsupported = evaluate_per_plan_twins(mf, hw, calibration_for(hw.accelerator)[0])
    assert not unsupported
    summary = {s.kind: s for s in summarize(res)}["plan_step"]
    return res, summary, plan_groups(res, float(mf.info["total_memory_bytes"]))


def _family_mape(res) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for r in res:
        if r.time_error is not None:
            for fam in plan_families_of(r.record):
                by.setdefault(fam, []).append(abs(r.time_error))
    return {f: sum(v) / len(v) for f, v in by.items()}


def test_the_sets_were_registered_by_the_model_before_they_ran():
    for log in (PREREG15, PREREG_MOE3):
        assert "BEFORE the run, with the model at commit 66a3580" in log.read_text()


def test_set15_megatron_every_plan_within_3_percent():
    """Megatron-Core local, 8 plans (dp + distributed optimizer twice: see the verdict test): 1.6%
    MAPE (1.64% since session 36's membound66 softmax parameters; 1.87% since session 39 adopted m78copy, worst
    2.5%), worst 2.7% before (tp and tp + sp with full recompute), peak memory 1.8% (selective recompute +6.0%,
    the rest within 2.0%); plain DDP predicted not to fit (137.7 GiB) and out of memory."""
    res, s, _ = _scored(SET15_MEGATRON)
    assert s.count == 9 and s.mape <= 0.0188 and s.worst_abs_error <= 0.0274 and s.memory_mape <= 0.0185
    assert max(_family_mape(res).values()) <= 0.0274


def test_set15_megatron_verdicts_and_the_one_that_ran_after_four_cases():
    """8/9 verdicts as run. dp + distributed optimizer (predicted 118.7 GiB allocated: fits) ran out of
    memory as the fifth case of its process, when the case before it showed 24.4 GiB held outside
    PyTorch's allocator (9.9 GiB in a fresh process); run alone in a fresh process on the same machine
    it fit (116.4 GiB allocated, +2.0% predicted) and was the fastest plan measured. A launch runs one
    plan per process, so the fresh-process record is the one a team's run would see."""
    res, s, _ = _scored(SET15_MEGATRON)
    assert (s.fit_correct, s.fit_total) == (8, 9)
    dp_z1 = [r for r in res if r.record["zero_stage"] == 1 and r.record["recompute"] == "none"]
    assert [bool(r.record.get("oom")) for r in dp_z1] == [True, False]
    assert abs(dp_z1[1].memory_error) <= 0.021
    outside = [r.record.get("outside_allocator_bytes") or 0 for r in res]
    assert max(outside) > 24e9 > 2 * 9.9e9 > min(o for o in outside if o)


def test_set15_megatron_meets_tau_and_pick():
    """Kendall tau 0.905 over the 7 timed plans (one discordant pair of 21: interleaved predicted 2.1%
    faster than tp, measured 1.9% slower), meshcast's pick (dp + distributed optimizer) the measured best."""
    _, _, groups = _scored(SET15_MEGATRON)
    assert len(groups) == 1 and groups[0].timed == 7
    assert groups[0].kendall_tau >= 0.90 and groups[0].pick_ok and groups[0].pick_regret == 0.0


def test_set15_torch_native_meets_every_target():
    """torch-native: 3.3% MAPE (DDP -3.0%, FSDP2 -0.6%, DTensor TP + SP -7.4%, pp -0.9%, interleaved
    -5.3%, cp +2.6%), peak memory 0.84%, 6/6 verdicts, tau 1.0, pick right. cp within 10% for the first
    time since set 11 (set 14: -11.5%)."""
    res, s, groups = _scored(SET15_TORCH)
    assert s.count == 6 and s.mape <= 0.0329 and s.worst_abs_error <= 0.0744 and s.memory_mape <= 0.0085
    assert (s.fit_correct, s.fit_total) == (6, 6)
    assert len(groups) == 1 and groups[0].kendall_tau == 1.0 and groups[0].pick_ok
    cp = [r for r in res if r.record.get("cp", 1) > 1]
    assert len(cp) == 1 and abs(cp[0].time_error) <= 0.027


def test_moe3_as_registered_meets_the_moe_target():
    """moe3: 14.7% MAPE over 8 plans (issue #12's MoE target is 15%), peak memory 3.2%, 8/8 verdicts.
    The four expert-parallel plans +3.7% (16x4, distributed optimizer), -9.4% (16x4, DDP), -2.3% (8x2),
    +15.0% (64x8; +14.9% before session 39 adopted m78copy). The worst is tp + sp (+61.8%): next test."""
    res, s, groups = _scored(MOE3)
    assert s.count == 8 and s.mape <= 0.1475 and s.worst_abs_error <= 0.6185 and s.memory_mape <= 0.033
    assert (s.fit_correct, s.fit_total) == (8, 8)
    ep = sorted(r.time_error for r in res if r.record.get("ep", 1) > 1)
    assert len(ep) == 4 and max(abs(e) for e in ep) <= 0.1504
    by_model = {g.group["name"]: g for g in groups}
    assert by_model["moe-16x4"].kendall_tau == 1.0 and all(g.pick_ok for g in groups)


def test_moe3_tp_sp_plan_ran_faster_than_its_own_twin():
    """Why tp + sp is +62% under the registered rule: its MoE twin (host-moe-16, the same plan at
    microsecond kernel sizes) took 1.63 s a step, 1.97x its prediction, while the real plan took
    1.01 s; the only other twin slower than its plan is moe-64x8's (1.31 s against 1.19 s). Under the
    reference host the plan is -10%: the twin, not the plan, carried a cost the model does not see. Not
    explained: one layout."""
    mf = load_measurements(MOE3)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    ratios = twin_ratio_by_index(mf, hw, cal)
    plans = {twin_key(r): r["time_s"] for r in mf.records if not r["name"].startswith("host-")}
    twins = {twin_key(mf.records[i]): mf.records[i]["time_s"] for i in ratios}
    ratio = {k: twins[k] / plans[k] for k in plans}
    tp = [k for k in plans if k[5] == 2]                   # key: gated, framework, seq, layers, world, tp, ...
    assert len(tp) == 1 and ratio[tp[0]] > 1.55
    assert sorted(ratio.values())[-2] < 1.11
    factors = plan_host_speeds(mf, hw, cal)[0]
    assert statistics.median(factors.values()) > 1.8      # a host about half the reference's speed


def test_moe3_misses_the_plan_family_target():
    """Issue #11 asks every plan family within 10%: moe3's tp + sp (+61.8%) and pp (+10.9%) are not."""
    res, _, _ = _scored(MOE3)
    fam = _family_mape(res)
    assert fam["tp + sp"] > 0.10 and fam["pp 1F1B"] > 0.10
    assert fam["dp + distributed optimizer"] <= 0.072 and fam["dp"] <= 0.095
    assert fam["ep"] <= 0.0763            # the four ep = 2 plans: +3.7, -9.4, -2.3, +15.0%


def _registered_collectives():
    return registered(PREREG_COLL19)


def _coll19_mape(min_bytes: int = 0, max_bytes: int = 1 << 62) -> dict[str, tuple[float, float]]:
    reg = _registered_collectives()
    errs: dict[str, tuple[list, list]] = {}
    for r in load_measurements(COLL19).records:
        key = (r["kind"], int(r["bytes"]))
        if r.get("time_s") and key in reg and min_bytes <= key[1] <= max_bytes:
            e = errs.setdefault(r["kind"], ([], []))
            for i in (0, 1):
                e[i].append(abs(reg[key][i] / r["time_s"] - 1))
    return {k: (statistics.mean(a), statistics.mean(c)) for k, (a, c) in errs.items()}


def test_collectives19_every_registered_case_ran():
    assert len(_registered_collectives()) == 120
    assert sum(1 for r in load_measurements(COLL19).records if r.get("time_s")) == 120


def test_collectives19_the_candidate_wins_on_large_ring_calls_only():
    """From 256 MiB the ring start-up candidate is better on every ring kind, as registered (all-reduce
    11.0 -> 4.4%, all-gather 16.0 -> 7.6%, reduce-scatter 7.2 -> 2.3%; the other kinds equal), while
    the committed profile is better at 16-64 MiB (the candidate's lower medium-size bandwidth: all-reduce
    10.5 vs 13.4%), where a training step's gradient buckets sit. Not adopted (docs/cost_model.md §3)."""
    big = _coll19_mape(min_bytes=256 << 20)
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        assert big[kind][1] < big[kind][0] - 0.04
    assert big["all_reduce"][1] <= 0.045 and big["all_gather"][1] <= 0.077 and big["reduce_scatter"][1] <= 0.024
    mid = _coll19_mape(min_bytes=16 << 20, max_bytes=64 << 20)
    assert mid["all_reduce"][0] < mid["all_reduce"][1]


def test_collectives19_small_calls_ran_at_half_the_latency_of_earlier_machines():
    """Below 1 MiB this machine's all-reduce took 28-33 us (earlier 2-GPU runs: ~55-63 us, predicted 53 us)
    and send/recv 47-77 us (earlier ~40 us): both profiles miss small calls by 20-80% here, which is why
    the all-size MAPE (28.7% committed, 28.3% candidate) says nothing about either."""
    small = [r["time_s"] for r in load_measurements(COLL19).records
             if r["kind"] == "all_reduce" and int(r["bytes"]) <= 1 << 20]
    assert len(small) == 11 and max(small) < 34e-6 and min(small) > 27e-6
    reg = _registered_collectives()
    assert all(reg[("all_reduce", b)][0] > 52e-6 for b in (1024, 1 << 20))
