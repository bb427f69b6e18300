"""Layers and GEMMs kept out of a quantized plan's precision: ``bf16_layers`` (Megatron-Core's
--first-last-layers-bf16) and ``gemm_precision`` (its --te-precision-config-file matchers), as the
cost model, plan files and the Megatron export treat them (docs/cost_model.md, NVFP4)."""
import pytest

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import PlanError, SpecError
from models.catalog import load_model
from simulator.calibration import calibration_for
from simulator.engine import bf16_kinds_in, bf16_layer_range, simulate
from simulator.plan import ParallelPlan, gemm_precision_override, plan_from_dict, resolve_plan

def test_bf16_layer_range_is_megatron_cores_first_and_last_layers():
    m = load_model("nemotron-3-super-120b-a12b")
    plan = ParallelPlan(precision="nvfp4", bf16_layers=(0, 14))
    assert bf16_layer_range(m, plan) == (range(74, 88),)
    assert bf16_kinds_in(m, plan, range(0, 88)) == {"mamba": 6, "moe": 7, "attention": 1}
    assert bf16_kinds_in(m, plan, range(0, 74)) == {}
    assert bf16_layer_range(m, ParallelPlan(precision="nvfp4", bf16_layers=(2, 1))) == (range(0, 2), range(87, 88))
    assert bf16_layer_range(m, ParallelPlan(precision="bf16", bf16_layers=(0, 14))) == ()   # nothing quantized
    assert bf16_layer_range(m, ParallelPlan(precision="fp8", bf16_layers=(60, 60))) == (range(0, 60), range(60, 88))


def test_gemm_precision_overrides_apply_only_in_quantized_layers():
    p = ParallelPlan(precision="nvfp4", gemm_precision=(("attention.qkv", "bf16"), ("mamba.out_proj", "fp8")))
    assert gemm_precision_override(p, "attention.qkv") == "bf16"
    assert gemm_precision_override(p, "mamba.out_proj") == "fp8"
    assert gemm_precision_override(p, "mlp.up") is None
    assert gemm_precision_override(ParallelPlan(precision="bf16", gemm_precision=p.gemm_precision),
                                   "mamba.out_proj") is None


def test_bf16_layers_cost_between_the_quantized_and_the_bf16_step():
    """Keeping layers in bf16 slows an NVFP4 step, all of them gives the bf16 step's layers; an
    override to bf16 of one GEMM slows it too."""
    model = load_model("llama3-8b")
    hw = load_hardware("dgx-b200", 8)
    cal, _ = calibration_for(hw.accelerator, None)
    base = dict(tp=1, pp=1, mbs=1, gbs=8)

    def step(**kw):
        return simulate(model, hw, ParallelPlan(**base, **kw), cal)

    fp4 = step(precision="nvfp4").step_time_s
    tail = step(precision="nvfp4", bf16_layers=(0, 8)).step_time_s
    every = step(precision="nvfp4", bf16_layers=(16, 16))
    bf16 = step(precision="bf16")
    assert fp4 < tail < bf16.step_time_s
    assert every.stages[0].forward_s == pytest.approx(bf16.stages[0].forward_s, rel=1e-9)
    qkv = step(precision="nvfp4", gemm_precision=(("attention.qkv", "bf16"),)).step_time_s
    assert fp4 < qkv < bf16.step_time_s


def test_pipeline_stages_with_the_same_mix_but_bf16_layers_are_costed_apart():
    """The stage cache keys on which layers run in bf16: the last stage holds them."""
    model = load_model("llama3-8b")
    hw = load_hardware("dgx-b200", 8)
    cal, _ = calibration_for(hw.accelerator, None)
    r = simulate(model, hw, ParallelPlan(pp=2, mbs=1, gbs=16, precision="nvfp4", bf16_layers=(0, 4)), cal)
    assert r.stages[1].forward_s > r.stages[0].forward_s * 1.05


def test_mixed_precision_plan_fields_read_from_a_plan_file_and_checked():
    p = plan_from_dict({"precision": "nvfp4", "bf16_layers": [0, 14], "gemm_precision": {"attention.qkv": "bf16"}})
    assert p.bf16_layers == (0, 14) and p.gemm_precision == (("attention.qkv", "bf16"),)
    assert p.to_dict()["bf16_layers"] == [0, 14] and p.to_dict()["gemm_precision"] == {"attention.qkv": "bf16"}
    assert plan_from_dict(p.to_dict()) == p
    with pytest.raises(SpecError, match="bf16_layers"):
        plan_from_dict({"bf16_layers": [1]})
    with pytest.raises(SpecError, match="gemm_precision.attention.qkv"):
        plan_from_dict({"gemm_precision": {"attention.qkv": "int4"}})
    model = load_model("llama3-8b")
    with pytest.raises(PlanError, match="bf16_layers"):
        resolve_plan(model, ParallelPlan(bf16_layers=(-1, 2)), 8)


def test_megatron_export_states_the_bf16_layers_and_reads_them_back():
    from simulator.frameworks.megatron_config import megatron_arguments, read_config
    model = load_model("llama3-8b")
    plan = resolve_plan(model, ParallelPlan(mbs=1, gbs=8, precision="nvfp4", bf16_layers=(1, 3),
                                            gemm_precision=(("attention.qkv", "bf16"),)), 8)
    args, notes = megatron_arguments(model, plan)
    text = " ".join(args)
    assert "--first-last-layers-bf16 --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 3" in text
    assert any("--te-precision-config-file" in n for n in notes)
    assert read_config(text, model, 8).plan.bf16_layers == (1, 3)
