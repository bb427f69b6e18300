"""The first measured MoE training steps (session 19, one H200, Megatron-Core 0.19.2 local spec):
set moe1, predicted before it ran (validation/measurements/logs/prereg_moe1_h200.txt, model of
6f5efd2), pinned as registered; and the host-bound MoE steps that fitted expert_loop_op_scale."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration import calibration_for
from validation.accuracy import evaluate, plan_groups, summarize
from validation.hardware import hardware_for
from validation.host_speed import evaluate_per_plan_twins, is_twin, non_twin_indices, twin_key, twin_ratio_by_index
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
MOE1 = MEAS / "h200_plan_moe1.json"            # 8 plans and 4 dense twins, one process per batch
MOE1_ALONE = MEAS / "h200_plan_moe1_alone.json"   # six of them again, each in its own process
HOST = MEAS / "h200_moe_host.json"             # fit data of expert_loop_op_scale
DIAG = MEAS / "h200_moe_diag.json"             # session 20: profiled MoE steps, each alone, another machine
MOE2 = MEAS / "h200_plan_moe2.json"            # session 21: set moe2, registered in session 20 (model de8a4cf)
PREREG2 = MEAS / "logs" / "prereg_moe2_h200.txt"
MOE2_H100 = MEAS / "h100_plan_moe2.json"       # session 21: the same grid on one H100, registered first
PREREG2_H100 = MEAS / "logs" / "prereg_moe2_h100.txt"


def _results(path: Path, twins: bool):
    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    if twins:
        res, unsupported = evaluate_per_plan_twins(mf, hw, cal)
    else:
        res, unsupported = evaluate(mf, hw, cal, [i for i, r in enumerate(mf.records) if not is_twin(r)])
    assert not unsupported
    return res, float(mf.info["total_memory_bytes"])


def test_moe1_time_with_per_plan_twins():
    """As registered (logs/prereg_moe1_h200.txt, model 6f5efd2) every MoE plan was predicted too
    fast, by 13-43% (26.7% MAPE), each under its dense twin's host factor. Session 20 costs a
    stage whose forward synchronises the host (Megatron-Core's alltoall dispatcher, once per MoE
    layer) through the launch queue (simulator/launch_queue.py): 20.3%, worst 35.8%, still every
    plan too fast. Developed on this set: development data since session 20. 7/8 verdicts: moe-64x8
    mbs2 ran out of memory here only because the case before it in the process left ~70 GiB
    allocated (alone it fits: next test)."""
    res, _ = _results(MOE1, twins=True)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    # 20.35 -> 20.65%, worst 35.8 -> 36.2% with session 23's membound42 / gemm32 profiles (cheaper memory-bound
    # kernels on steps predicted too fast)
    assert s.count == 8 and s.mape <= 0.2065 and (s.fit_correct, s.fit_total) == (7, 8)
    timed = [r.time_error for r in res if r.time_error is not None]
    assert len(timed) == 7 and all(e < 0 for e in timed)      # too fast, every one
    assert s.worst_abs_error <= 0.3621


def test_moe_diagnostic_run_time_and_where_it_goes():
    """The session-20 diagnostic run (h200_moe_diag.json, another H200 machine, each MoE case alone,
    profiled): 31.5% MAPE under the dense twins' factors, every plan too fast (worst moe-64x8 mbs2,
    -49.8%). The kernel profile puts the GPU's busy time at 485 ms of moe-8x2 mbs1's 972 ms step
    (the model's GPU time is 553 ms, so the GPU side is not what is missing) and counts one host
    synchronisation per MoE layer forward (cudaEventSynchronize, 8 layers x 8 micro-batches)."""
    res, _ = _results(DIAG, twins=True)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    # 31.55 -> 31.93%, worst 49.85 -> 49.9% with session 23's membound42 / gemm32 profiles
    assert s.count == 6 and s.mape <= 0.3194 and s.worst_abs_error <= 0.4991
    assert all(r.time_error < 0 for r in res)
    mf = load_measurements(DIAG)
    r = next(r for r in mf.records if r["name"] == "moe-8x2" and r["mbs"] == 1 and r["gbs"] == 8)
    assert r["profile_busy_s"] < 0.55 * r["time_s"]
    syncs = dict((name, calls) for name, _, calls in r["hostprof_runtime_top"])
    assert syncs["cudaEventSynchronize"] == 8 * 8


@pytest.mark.xfail(strict=True, reason="MoE steps 20.3% (26.7% as registered): the host's MoE cost and the overlap "
                                       "the launch queue allows are still too optimistic")
def test_moe1_meets_the_moe_target():
    res, _ = _results(MOE1, twins=True)
    assert {x.kind: x for x in summarize(res)}["plan_step"].mape <= 0.15


def test_moe1_peak_memory_of_plans_run_alone():
    """Peak allocated memory of every MoE plan measured alone in its process (the six re-run ones,
    and the two that ran first in theirs in moe1): within 1.7% each, 0.9% MAPE over the six, every
    verdict right (moe-64x8 mbs2's out-of-memory in moe1 came from the memory the case before it
    left allocated; alone it peaked at 55.6 GiB, predicted 56.6)."""
    res, mem = _results(MOE1_ALONE, twins=False)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    assert s.count == 6 and s.memory_mape <= 0.0093 and (s.fit_correct, s.fit_total) == (6, 6)
    first, _ = _results(MOE1, twins=False)
    alone_first = [r for r in first if r.record["name"] == "moe-8x2" and r.record["mbs"] == 1
                   or r.record["name"] == "moe-64x8" and r.record["recompute"] == "full"]
    assert len(alone_first) == 2
    for r in alone_first:
        assert abs(r.memory_error) <= 0.011


def test_expert_loop_fit_data_within_its_residuals():
    """The host-bound tiny MoE steps expert_loop_op_scale was fitted on (4 to 64 experts), each
    under the file's dense twin: -4/+6/-9/+3% as fitted (fit data, not a test of the model)."""
    res, _ = _results(HOST, twins=True)
    errs = sorted(abs(r.time_error) for r in res)
    assert len(errs) == 4 and errs[-1] <= 0.09


def test_moe2_as_registered_meets_the_moe_target():
    """Set moe2 (16 experts top-4 at micro-batch 1 and 2, 32 experts top-4 with and without selective
    recompute, 8x2 at sequence 4096), registered in session 20 by the model of de8a4cf (the launch
    queue, MoE twins) and run in session 21 on a newly lent H200,
    each plan alone in its process, under the registered rule (each plan with its own MoE twin's
    measured / predicted factor): 12.7% MAPE, worst -21.6% (moe-32x4 with selective recompute, whose
    six steps spread 1.53-1.95 s), errors of both signs; peak memory 0.96% MAPE, 5/5 verdicts. Today's
    model (session 23's membound42 / gemm32 profiles): 12.85%, worst -21.7%; 12.87% since session 36 adopted the
    membound66 softmax parameters (Megatron-Core local attention's fp32 softmax slightly slower); 12.89%, worst
    -21.7%, since session 39 adopted m78copy (the local attention's kernels each at its own measured model)."""
    assert "model at commit de8a4cf" in PREREG2.read_text()
    res, _ = _results(MOE2, twins=True)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    assert s.count == 5 and s.mape <= 0.1290 and s.worst_abs_error <= 0.2174
    assert s.memory_mape <= 0.0097 and (s.fit_correct, s.fit_total) == (5, 5)
    signs = {r.time_error > 0 for r in res}
    assert signs == {True, False}


def test_moe2_own_twins_against_dense_twins():
    """The three plans that ran a dense twin as well: under the dense twins' factors (the rule before
    session 20) they are -26.5 / -25.4 / -16.0%; under their own MoE twins -6.6 / -16.2 / +18.1%. The
    MoE twins' factors (1.45-1.71) are above every dense twin's (1.10-1.30): a MoE layer's host code
    runs slower on this host than the dense model predicts it."""
    mf = load_measurements(MOE2)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    ratios = twin_ratio_by_index(mf, hw, cal)
    moe_twins = [r for i, r in ratios.items() if mf.records[i].get("experts")]
    dense_twins = {twin_key(mf.records[i], moe=False): r for i, r in ratios.items() if not mf.records[i].get("experts")}
    assert len(moe_twins) == 5 and len(dense_twins) == 3 and min(moe_twins) > max(dense_twins.values())
    factors = {i: dense_twins[twin_key(mf.records[i], moe=False)] for i in non_twin_indices(mf)
               if twin_key(mf.records[i], moe=False) in dense_twins}
    dense, _ = evaluate_per_plan_twins(mf, hw, cal, factors)
    own = {r.index: r.time_error for r in evaluate_per_plan_twins(mf, hw, cal)[0]}
    assert len(dense) == 3
    assert sum(abs(r.time_error) for r in dense) / 3 > 0.22 > sum(abs(own[r.index]) for r in dense) / 3 + 0.08


def test_moe2_on_h100_as_registered():
    """The moe2 grid on one H100 (the first MoE steps on an H100), registered at session 21's start by
    the model of 7370b04 (the same step model as de8a4cf) after the H200 run had been scored, run on a
    newly lent machine whose host issued kernels 2-3x slower than the reference (MoE twins' factors
    2.0-2.9): 7.2% MAPE as registered, worst -11.0% (selective recompute again the slowest against
    its prediction), memory 0.96%, 5/5 verdicts (moe-8x2 s4096 at 61 GiB allocated fits 80 GB, as
    predicted). Under the dense twins' factors the three plans with one are -27 / -42 / -10%."""
    assert "model at commit 7370b04" in PREREG2_H100.read_text()
    res, _ = _results(MOE2_H100, twins=True)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    assert s.count == 5 and s.mape <= 0.0724 and s.worst_abs_error <= 0.1096
    assert s.memory_mape <= 0.0097 and (s.fit_correct, s.fit_total) == (5, 5)
    mf = load_measurements(MOE2_H100)
    assert mf.info["gpu"].startswith("NVIDIA H100")
    worst = max(res, key=lambda r: abs(r.time_error))
    assert worst.record["recompute"] == "selective" and worst.time_error < 0
