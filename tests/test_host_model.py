"""The host (CPU) model of eager frameworks: per-op dispatch, FSDP2 units, DDP hooks, optimizer."""
from dataclasses import replace

import pytest

from hardware_specs.catalog import Hardware, load_hardware
from models.catalog import load_model
from models.params import layer_param_tensors, model_param_tensors
from simulator.calibration import DEFAULT
from simulator.engine import simulate
from validation.fit import HOST_PARAMS, fit, host_targets, set_values
from validation.predict import predict_record, reference_gpt, reference_plan

TINY = dict(kind="train_step", layers=8, hidden=128, heads=4, vocab=512, seq=64, micro_batch=1)


def _hw(world: int) -> Hardware:
    hw = load_hardware("h200-2gpu", 2)
    return Hardware(hw.cluster, hw.node, hw.accelerator, world)


def _run(rec: dict, cal):
    return simulate(reference_gpt(rec), _hw(rec.get("world", 1)), reference_plan(rec), cal)


def test_parameter_tensors_of_the_reference_gpt_and_llama():
    ref = reference_gpt(TINY)
    # LN w,b x2; QKV w,b; proj w,b; fc1 w,b; fc2 w,b = 12 per block; embedding, final LN w,b, head
    assert layer_param_tensors(ref, 0) == 12
    assert model_param_tensors(ref) == 12 * 8 + 4
    llama = load_model("llama3-8b")
    # RMSNorm x2, fused QKV, output projection, gate/up/down, no biases
    assert layer_param_tensors(llama, 0) == 7


def test_no_host_parameters_means_the_host_never_limits():
    r = _run(TINY, DEFAULT)
    assert r.host_issue_s == 0 and r.host_optimizer_s == 0
    assert "host" not in r.breakdown


def test_host_bound_step_is_the_hosts_issue_plus_optimizer_time():
    cal = replace(DEFAULT, host_op_s=50e-6, optimizer_tensor_host_s=10e-6)
    gpu = _run(TINY, DEFAULT).step_time_s
    r = _run(TINY, cal)
    assert r.host_optimizer_s == pytest.approx(10e-6 * 100)
    assert r.host_issue_s > gpu                      # tiny model: the host is the bottleneck
    assert r.step_time_s == pytest.approx(r.host_issue_s + r.host_optimizer_s)
    assert r.breakdown["host"] == pytest.approx(r.step_time_s - gpu)


def test_large_model_is_not_host_bound():
    cal = replace(DEFAULT, host_op_s=50e-6, optimizer_tensor_host_s=10e-6)
    big = dict(TINY, layers=8, hidden=4096, heads=32, vocab=50304, seq=2048, micro_batch=2)
    assert _run(big, cal).step_time_s == pytest.approx(_run(big, DEFAULT).step_time_s)


def test_ddp_hooks_cost_per_tensor_per_micro_batch_and_fsdp_its_own_optimizer_rate():
    cal = replace(DEFAULT, ddp_tensor_host_s=40e-6, optimizer_tensor_host_s=5e-6, fsdp_optimizer_tensor_host_s=70e-6)
    single = _run(TINY, cal)
    ddp = _run(dict(TINY, world=2, strategy="ddp"), cal)
    fsdp = _run(dict(TINY, world=2, strategy="fsdp_full_shard"), cal)
    assert ddp.host_issue_s - single.host_issue_s == pytest.approx(40e-6 * 100)
    assert ddp.host_optimizer_s == pytest.approx(5e-6 * 100)
    assert fsdp.host_optimizer_s == pytest.approx(70e-6 * 100)


def test_host_targets_use_the_phase_fields_when_present():
    plain = dict(TINY, time_s=0.01)
    assert host_targets(plain) == [("time_s", 0.01)]
    phased = dict(plain, host_fwd_s=0.002, host_bwd_s=0.003, host_opt_s=0.001)
    assert host_targets(phased) == [("time_s", 0.01), ("host_issue_s", pytest.approx(0.005)),
                                    ("host_optimizer_s", 0.001)]


def test_host_fit_recovers_known_parameters_from_synthetic_phase_records():
    truth = set_values(DEFAULT, HOST_PARAMS, [40e-6, 2e-3, 30e-6, 8e-6, 60e-6])
    samples = []
    for layers in (2, 8, 32):
        for strategy, world in (("single", 1), ("ddp", 2), ("fsdp_full_shard", 2)):
            rec = dict(TINY, layers=layers, world=world, strategy=strategy)
            pred = predict_record(rec, _hw(world), truth)
            rec.update(time_s=pred.time_s, host_fwd_s=pred.host_issue_s / 2, host_bwd_s=pred.host_issue_s / 2,
                       host_opt_s=pred.host_optimizer_s)
            samples += [(rec, _hw(world), what, v) for what, v in host_targets(rec)]
    res = fit(samples, HOST_PARAMS, DEFAULT, seeds=[{"host_op_s": 20e-6, "fsdp_unit_host_s": 1e-3}])
    for p, v in zip(HOST_PARAMS, res.values):
        assert v == pytest.approx(getattr(truth, p.path), rel=0.05), p.path
