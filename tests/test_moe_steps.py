"""The first measured MoE training steps (session 19, one H200, Megatron-Core 0.19.2 local spec):
set moe1, predicted before it ran (validation/measurements/logs/prereg_moe1_h200.txt, model of
6f5efd2), pinned as registered; and the host-bound MoE steps that fitted expert_loop_op_scale."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration import calibration_for
from validation.accuracy import evaluate, plan_groups, summarize
from validation.hardware import hardware_for
from validation.host_speed import evaluate_per_plan_twins, is_twin
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
MOE1 = MEAS / "h200_plan_moe1.json"            # 8 plans and 4 dense twins, one process per batch
MOE1_ALONE = MEAS / "h200_plan_moe1_alone.json"   # six of them again, each in its own process
HOST = MEAS / "h200_moe_host.json"             # fit data of expert_loop_op_scale
DIAG = MEAS / "h200_moe_diag.json"             # session 20: profiled MoE steps, each alone, another machine


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
    assert s.count == 8 and s.mape <= 0.2035 and (s.fit_correct, s.fit_total) == (7, 8)
    timed = [r.time_error for r in res if r.time_error is not None]
    assert len(timed) == 7 and all(e < 0 for e in timed)      # too fast, every one
    assert s.worst_abs_error <= 0.358


def test_moe_diagnostic_run_time_and_where_it_goes():
    """The session-20 diagnostic run (h200_moe_diag.json, another H200 machine, each MoE case alone,
    profiled): 31.5% MAPE under the dense twins' factors, every plan too fast (worst moe-64x8 mbs2,
    -49.8%). The kernel profile puts the GPU's busy time at 485 ms of moe-8x2 mbs1's 972 ms step
    (the model's GPU time is 553 ms, so the GPU side is not what is missing) and counts one host
    synchronisation per MoE layer forward (cudaEventSynchronize, 8 layers x 8 micro-batches)."""
    res, _ = _results(DIAG, twins=True)
    s = {x.kind: x for x in summarize(res)}["plan_step"]
    assert s.count == 6 and s.mape <= 0.3155 and s.worst_abs_error <= 0.4985
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
