"""A plan's simulated step must not depend on which plans were simulated before it (the lowering
and stage caches once left the micro-batch count out of their keys)."""
from __future__ import annotations

from hardware_specs import load_hardware
from models import load_model
from simulator.calibration import calibration_for
from simulator.engine import simulate
from simulator.plan import ParallelPlan


def _step(model, gbs: int) -> float:
    hw = load_hardware("dgx-h100", 8)
    plan = ParallelPlan(dp=8, gbs=gbs, seq=2048, mbs=1, zero_stage=0, framework="torchtitan", num_gpus=8)
    return simulate(model, hw, plan, calibration_for(hw.accelerator)[0]).step_time_s


def test_step_time_does_not_depend_on_the_order_of_simulation():
    cold = _step(load_model("llama3-8b").model_copy(), 64)
    shared = load_model("llama3-8b").model_copy()
    _step(shared, 8)                       # one micro-batch per rank: no gradient accumulation
    assert _step(shared, 64) == cold


def _host_issue(model, vp: int, pp: int) -> float:
    hw = load_hardware("dgx-h100", 8)
    plan = ParallelPlan(dp=8 // pp, pp=pp, vp=vp, gbs=64, seq=2048, mbs=1, zero_stage=0,
                        framework="megatron-core-local", num_gpus=8)
    return simulate(model, hw, plan, calibration_for(hw.accelerator)[0]).host_issue_s


def test_host_time_of_a_virtual_pipeline_does_not_come_from_a_cached_plain_stage():
    """The host's per-chunk schedule code depends on vp and on whether there is a pipeline at all,
    which the stage cache once shared between plans differing only in pipeline-level fields."""
    cold = _host_issue(load_model("llama3-8b").model_copy(), 2, 2)
    shared = load_model("llama3-8b").model_copy()
    _host_issue(shared, 1, 2)
    assert _host_issue(shared, 2, 2) == cold
