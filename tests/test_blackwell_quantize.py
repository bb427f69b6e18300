"""Transformer Engine's fp8 quantization passes on Blackwell (session 24): MXFP8 writes a row-wise and
a column-wise copy per quantization (quantizer.cpp MXFP8Quantizer), and on GPUs whose fp8 GEMMs take
any layout (nvte_is_non_tn_fp8_gemm_supported, sm_100+) the weight-gradient GEMM has no pass of its own."""
import pytest

from hardware_specs.catalog import load_hardware
from models.catalog import load_model
from simulator import DEFAULT_CALIBRATION, ParallelPlan
from simulator.compute import memory_time
from simulator.engine import _fabric, device_model
from simulator.lowering import (FP8_QUANTIZE_BYTES, MXFP8_QUANTIZE_BYTES, Context, fp8_quantize_bytes_per_element,
                                fp8_quantize_time, layer_ops, non_tn_fp8_gemm)
from simulator.plan import resolve_plan


def _ctx(cluster: str, **plan) -> Context:
    model = load_model("llama3-8b").model_copy(update={"num_layers": 2})
    hw = load_hardware(cluster, 8)
    p = resolve_plan(model, ParallelPlan(**{"tp": 1, "mbs": 1, "gbs": 8, "seq": 4096, "precision": "fp8", **plan}), 8)
    return Context(model, p, device_model(hw.accelerator, DEFAULT_CALIBRATION), _fabric(hw, DEFAULT_CALIBRATION))


def _gemms(ctx):
    return {(op.name, op.phase): op for op in layer_ops(ctx, "dense", recompute=False) if op.kind == "gemm"}


def test_mxfp8_writes_both_copies_with_one_scale_byte_per_32():
    """read bf16 (2) + two fp8 copies (1 each) + two sets of E8M0 scales (1/32 each) = 4.0625 bytes."""
    assert MXFP8_QUANTIZE_BYTES == pytest.approx(2 + 2 * (1 + 1 / 32))
    assert fp8_quantize_bytes_per_element("mxfp8") == MXFP8_QUANTIZE_BYTES
    for recipe in (None, "delayed", "tensorwise"):
        assert fp8_quantize_bytes_per_element(recipe) == FP8_QUANTIZE_BYTES == 3.0


def test_blackwell_is_non_tn_and_hopper_is_not():
    assert non_tn_fp8_gemm(_ctx("gb200-nvl72").dev)
    assert not non_tn_fp8_gemm(_ctx("dgx-h100").dev)


def test_blackwell_wgrad_gemm_costs_no_quantize_pass_hopper_keeps_its_pass():
    """The wgrad GEMM's quantize pass is gone on Blackwell (any recipe) and unchanged on Hopper."""
    n = 1e8
    for recipe in (None, "tensorwise", "mxfp8"):
        bw = _ctx("gb200-nvl72", fp8_recipe=recipe)
        assert fp8_quantize_time(bw, n, quantize=False) == 0.0
    h = _ctx("dgx-h100")
    assert fp8_quantize_time(h, n, quantize=False) == pytest.approx(memory_time(h.dev, 3 * n))


def test_mxfp8_forward_and_dgrad_quantizations_cost_the_column_wise_copy_on_blackwell():
    """Against current scaling's 5-byte 3-kernel pass, MXFP8's is one 4.0625-byte kernel; against a
    delayed-scaling cast, the difference on a dense GEMM is exactly the 1.0625 extra bytes per element."""
    mx, dl = _ctx("gb200-nvl72", fp8_recipe="mxfp8"), _ctx("gb200-nvl72", fp8_recipe="delayed")
    n = 1e8
    assert fp8_quantize_time(mx, n) == pytest.approx(memory_time(mx.dev, MXFP8_QUANTIZE_BYTES * n))
    g_mx, g_dl = _gemms(mx), _gemms(dl)
    m, _, k = g_mx[("mlp.up", "fwd")].shape[:3]
    extra = memory_time(mx.dev, MXFP8_QUANTIZE_BYTES * m * k) - memory_time(dl.dev, FP8_QUANTIZE_BYTES * m * k)
    assert g_mx[("mlp.up", "fwd")].time_s - g_dl[("mlp.up", "fwd")].time_s == pytest.approx(extra)
    assert g_mx[("mlp.up.wgrad", "bwd")].time_s == g_dl[("mlp.up.wgrad", "bwd")].time_s
    assert g_mx[("mlp.up.dgrad", "bwd")].time_s > g_dl[("mlp.up.dgrad", "bwd")].time_s
