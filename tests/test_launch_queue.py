"""The launch queue of an eager framework (simulator/launch_queue.py) and where the engine uses it:
a stage whose forward synchronises the host (Megatron-Core's MoE token counts)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.launch_queue import OpStream, run, steady_microbatch_seconds


def _stream(host, gpu, sync=None):
    sync = sync if sync is not None else [False] * len(host)
    return OpStream(np.array(host, float), np.array(gpu, float), np.array(sync, bool))


def test_gpu_bound_stream_takes_the_gpu_time_plus_the_first_issue():
    host_t, gpu_t = run(_stream([1.0] * 4, [10.0] * 4))
    assert gpu_t == pytest.approx(1.0 + 40.0) and host_t == pytest.approx(4.0)


def test_host_bound_stream_takes_the_host_time_plus_the_last_kernel():
    _, gpu_t = run(_stream([10.0] * 4, [1.0] * 4))
    assert gpu_t == pytest.approx(40.0 + 1.0)


def test_host_heavy_then_gpu_heavy_overlap_without_a_sync_and_add_up_across_one():
    """GPU-heavy kernels first, then host-heavy ones: the GPU works off its backlog while the host
    issues, about max(host, GPU). The same stretches the other way round with a synchronisation
    between each pair: host and GPU take turns, about host + GPU."""
    gpu_heavy, host_heavy = ([1.0], [30.0]), ([30.0], [1.0])
    h = gpu_heavy[0] + host_heavy[0]
    g = gpu_heavy[1] + host_heavy[1]
    _, overlapped = run(_stream(h * 4, g * 4))
    _, synced = run(_stream(h[::-1] * 4, g[::-1] * 4, [False, True] * 4))
    assert overlapped < 1.1 * max(sum(h) * 4, sum(g) * 4)
    assert synced == pytest.approx(4 * (30.0 + 30.0 + 1.0))


def test_sync_waits_for_the_gpu_to_drain():
    host_t, gpu_t = run(_stream([1.0, 1.0], [50.0, 1.0], [True, False]))
    # the host waits until the first kernel ends (51), then issues the second
    assert host_t == pytest.approx(52.0) and gpu_t == pytest.approx(53.0)


def test_steady_state_splits_a_microbatch_into_forward_and_backward():
    fwd = _stream([2.0, 2.0], [1.0, 5.0], [True, False])
    bwd = _stream([1.0] * 3, [4.0] * 3)
    f, b = steady_microbatch_seconds(fwd, bwd)
    assert f > 0 and b > 0
    # three micro-batches back to back end at the cold first one plus two steady periods
    host_t = gpu_t = 0.0
    ends = []
    for _ in range(3):
        host_t, gpu_t = run(bwd, *run(fwd, host_t, gpu_t))
        ends.append(gpu_t)
    assert ends[2] - ends[1] == pytest.approx(f + b)


def test_engine_queues_only_stages_that_synchronise():
    """A MoE plan under Megatron-Core's alltoall dispatcher (a host sync per MoE layer forward) is
    costed through the launch queue, which can only add time to the GPU's sum; the same plan with
    the sync switched off (moe_host_sync False) keeps the GPU's sum."""
    from dataclasses import replace
    from simulator.calibration import calibration_for
    from simulator.engine import simulate
    from validation.hardware import hardware_for
    from validation.predict import plan_model, record_plan
    from validation.records import MeasurementFile
    rec = dict(kind="plan_step", framework="megatron-core-local", name="moe-8x2", layers=8, hidden=2048, heads=16,
               kv_heads=8, ffn_hidden=5632, vocab=32768, seq=2048, norm="rmsnorm", activation="swiglu",
               position="rope", linear_bias=False, experts=8, topk=2, moe_ffn_hidden=5632, world=1, tp=1, pp=1,
               dp=1, zero_stage=0, recompute="none", mbs=1, gbs=8)
    hw = hardware_for(MeasurementFile(path="x", info={"gpu": "NVIDIA H200"}, records=[]))
    cal = calibration_for(hw.accelerator)[0]
    plan = record_plan(rec)
    synced = simulate(plan_model(rec), hw, plan, cal)
    free = simulate(plan_model(rec), hw, replace(plan, moe_host_sync=False), cal)
    assert synced.step_time_s > free.step_time_s
    f_sync = synced.stages[0].forward_s + synced.stages[0].backward_s
    f_free = free.stages[0].forward_s + free.stages[0].backward_s
    assert f_sync > f_free * 1.05
