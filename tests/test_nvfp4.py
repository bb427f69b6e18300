"""NVFP4 training (plan precision ``nvfp4``): Transformer Engine's NVFP4BlockScaling recipe as
Megatron-Core runs it. Where it is accepted, what its GEMMs and quantization cost, what it saves
for backward, its Megatron launch flags (written and read back) and the published rows it reads
(docs/cost_model.md "NVFP4"; docs/validation.md "Published runs")."""
from __future__ import annotations

import pytest

from hardware_specs import load_hardware
from hardware_specs.errors import PlanError, SpecError
from models import load_model
from simulator import ParallelPlan, load_calibration, simulate
from simulator.compute import (DTYPE_BYTES, NVFP4_QUANTIZE_BYTES_PER_ELEMENT, gemm_bytes, gemm_time, memory_time,
                               nvfp4_quantize_time)
from simulator.engine import device_model
from simulator.frameworks import get_framework
from simulator.frameworks.launch import export_config, import_config
from simulator.frameworks.megatron_config import read_config
from simulator.lowering import Context, _gemm, _gemm_bwd
from simulator.memory import layer_activation_bytes
from simulator.plan import check_precision, plan_from_dict, resolve_plan

PLAN70 = dict(tp=2, pp=4, vp=5, mbs=1, gbs=256, seq=8192)


@pytest.fixture(scope="module")
def m70():
    return load_model("llama3-70b")


@pytest.mark.parametrize("cluster", ["dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"])
def test_nvfp4_runs_where_there_are_fp4_tensor_cores(m70, cluster):
    r = simulate(m70, load_hardware(cluster, 64), ParallelPlan(precision="nvfp4", **PLAN70), load_calibration("h100-sxm"))
    assert r.step_time_s > 0 and r.plan.precision == "nvfp4"


@pytest.mark.parametrize("cluster", ["dgx-h100", "dgx-a100-superpod"])
def test_nvfp4_refused_without_fp4_tensor_cores(m70, cluster):
    hw = load_hardware(cluster, 64)
    with pytest.raises(PlanError) as err:
        simulate(m70, hw, ParallelPlan(precision="nvfp4", **PLAN70))
    assert err.value.field == "precision" and "fp4 (NVFP4)" in str(err.value)
    check_precision("bf16", hw.accelerator)


def test_plan_yaml_and_frameworks():
    assert plan_from_dict({"precision": "nvfp4"}).precision == "nvfp4"
    with pytest.raises(SpecError):
        plan_from_dict({"precision": "fp4"})
    offers = {name: "nvfp4" in get_framework(name).precision
              for name in ("megatron-core", "megatron-core-local", "torchtitan", "deepspeed", "pytorch")}
    assert offers == {"megatron-core": True, "megatron-core-local": False, "torchtitan": False, "deepspeed": False,
                      "pytorch": False}


def _ctx(model, precision, cluster="gb200-nvl72", gpus=64):
    hw = load_hardware(cluster, gpus)
    plan = resolve_plan(model, ParallelPlan(precision=precision, **PLAN70), gpus)
    from simulator.engine import _fabric
    cal = load_calibration("h100-sxm")
    return Context(model, plan, device_model(hw.accelerator, cal), _fabric(hw, cal))


def test_gemm_cost_fprop_dgrad_quantize_wgrad_does_not(m70):
    ctx = _ctx(m70, "nvfp4")
    assert ctx.gemm_dtype == "fp4"
    m, n, k = 8192, 4096, 8192
    fwd = _gemm(ctx, "mlp.up", m, n, k, "fwd")
    assert fwd.time_s == pytest.approx(gemm_time(ctx.dev, m, n, k, "fp4") + nvfp4_quantize_time(ctx.dev, m * k))
    dgrad, wgrad = _gemm_bwd(ctx, fwd)
    assert dgrad.time_s == pytest.approx(gemm_time(ctx.dev, m, k, n, "fp4") + nvfp4_quantize_time(ctx.dev, m * n))
    assert wgrad.time_s == pytest.approx(gemm_time(ctx.dev, k, n, m, "fp4"))
    # two memory-bound passes: amax (read bf16), fused cast (read bf16, write two NVFP4 copies + scales)
    assert NVFP4_QUANTIZE_BYTES_PER_ELEMENT == pytest.approx(2 + 2 + 2 * (0.5 + 1 / 16))
    assert nvfp4_quantize_time(ctx.dev, 1e8) == pytest.approx(memory_time(ctx.dev, 5.125e8, launches=2))
    # inputs read at half a byte plus one scale byte per 16; bf16 output
    assert gemm_bytes(m, n, k, "fp4") == pytest.approx((m * k + k * n) * (0.5 + 1 / 16) + m * n * 2)
    # the fp4 GEMM runs at the accelerator's fp4 peak: twice the fp8 rate on GB200 (10 vs 5 PF)
    assert ctx.dev.accelerator.peak_flops("fp4") == 2 * ctx.dev.accelerator.peak_flops("fp8")
    big = 16384
    assert gemm_time(ctx.dev, big, big, big, "fp4") < gemm_time(ctx.dev, big, big, big, "fp8")


def test_attention_router_and_head_stay_bf16(m70):
    r = simulate(m70, load_hardware("gb200-nvl72", 64), ParallelPlan(precision="nvfp4", **PLAN70),
                 load_calibration("h100-sxm"), with_ops=True)
    ops = [op for lst in r.ops.values() for op in lst] if isinstance(r.ops, dict) else []
    gemms = [op for op in ops if op.kind == "gemm"]
    assert gemms
    for op in gemms:
        assert op.shape[4] == ("bf16" if op.name.startswith("head.") else "fp4"), op.name
    b = simulate(m70, load_hardware("gb200-nvl72", 64), ParallelPlan(precision="bf16", **PLAN70),
                 load_calibration("h100-sxm"), with_ops=True)
    att = lambda res: sorted(op.time_s for lst in res.ops.values() for op in lst if op.kind == "attention")
    assert att(r) == att(b)


def test_step_order_and_mfu_peak(m70):
    hw, cal = load_hardware("gb200-nvl72", 64), load_calibration("h100-sxm")
    t = {p: simulate(m70, hw, ParallelPlan(precision=p, **PLAN70), cal) for p in ("bf16", "fp8", "nvfp4")}
    assert t["nvfp4"].step_time_s < t["fp8"].step_time_s < t["bf16"].step_time_s
    r = t["nvfp4"]
    assert r.mfu_precision_peak == pytest.approx(r.mfu * hw.accelerator.peak_flops("bf16") / hw.accelerator.peak_flops("fp4"))


def test_saved_gemm_inputs_are_nvfp4(m70):
    by = {p: layer_activation_bytes(_ctx(m70, p), False) for p in ("bf16", "fp8", "nvfp4")}
    assert by["nvfp4"] < by["fp8"] < by["bf16"]
    # the three saved GEMM inputs (QKV in, fc1 in, fc2 in): 1 byte each in fp8, 0.5625 in nvfp4
    ctx = _ctx(m70, "nvfp4")
    h, f = m70.hidden, m70.ffn_hidden // ctx.plan.tp
    elements = 2 * ctx.sp_tokens * h + ctx.tokens * f
    assert by["fp8"] - by["nvfp4"] == pytest.approx(elements * (1 - 0.5625))


def test_megatron_export_round_trip(m70):
    plan = resolve_plan(m70, ParallelPlan(precision="nvfp4", **PLAN70), 64)
    cfg = export_config(m70, plan)
    assert "--fp4-format e2m1" in cfg.text and "--fp4-recipe nvfp4" in cfg.text and "--fp4-param-gather" in cfg.text
    assert "--fp8-format" not in cfg.text and "--bf16" in cfg.text
    back = import_config(cfg.format, cfg.text, m70, 64)
    assert back.plan.precision == "nvfp4"
    hw, cal = load_hardware("gb200-nvl72", 64), load_calibration("h100-sxm")
    assert simulate(m70, hw, back.plan, cal).step_time_s == simulate(m70, hw, plan, cal).step_time_s


def test_megatron_reader_fp4_flags():
    assert read_config("pretrain_gpt.py --bf16 --fp4-format e2m1").plan.precision == "nvfp4"
    assert read_config("pretrain_gpt.py --fp4-format e2m1 --fp4-recipe nvfp4").plan.precision == "nvfp4"
    with pytest.raises(SpecError) as err:
        read_config("pretrain_gpt.py --fp4-format e2m1 --fp4-recipe custom")
    assert "--fp4-recipe" in str(err.value)


def test_published_nvfp4_rows_are_read():
    from validation.published import compare_published
    done, skipped = compare_published(["validation/published/published_runs_more.csv"])
    assert not [s for s in skipped if "NVFP4" in s.reason]
    rows = [c for c in done if "NVFP4" in c.dtype and not c.model.startswith("Nemotron_3")]
    assert len(rows) == 10 and all(c.plan["precision"] == "nvfp4" for c in rows)
    hybrid = [c for c in done if "NVFP4" in c.dtype and c.model.startswith("Nemotron_3")]
    assert len(hybrid) == 9 and all(c.plan["precision"] == "nvfp4" for c in hybrid)   # Super, all layers fp4
    assert all("bf16_with_nvfp4_mixed" in c.note for c in rows)
