"""FLOP counts against the closed forms of the Megatron-LM papers, and plan invariance."""
import pytest

from models import load_model
from models.schema import ModelSpec
from simulator import ParallelPlan, simulate
from simulator.flops import megatron_gpt_flops, step_model_flops


@pytest.mark.parametrize("name", ["gpt-1.7b", "gpt-22b", "gpt3-175b", "gpt-1t"])
def test_gpt_model_flops_equal_megatron_closed_form(name):
    m = load_model(name)
    ours = step_model_flops(m, m.seq_len, 512)
    ref = megatron_gpt_flops(512, m.seq_len, m.num_layers, m.hidden, m.vocab)
    assert ours == pytest.approx(ref, rel=1e-3)


def test_gqa_swiglu_flops_closed_form():
    # Llama-3 70B: per token forward 2*(h*(a+2kv)*d + a*d*h + 3*h*f) + 4*s*a*d per layer, + 2hV
    m = load_model("llama3-70b")
    h, a, kv, d, f, s, L, V = 8192, 64, 8, 128, 28672, 8192, 80, 128256
    per_token = 3 * (L * (2 * (h * (a + 2 * kv) * d + a * d * h + 3 * h * f) + 4 * s * a * d) + 2 * h * V)
    assert step_model_flops(m, s, 1) == pytest.approx(per_token * s, rel=1e-3)


def test_moe_flops_count_top_k_experts_only():
    m = load_model("mixtral-8x7b")
    h, f, L, V, s = 4096, 14336, 32, 32000, 4096
    e = m.moe
    per_layer = 2 * (h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * f * e.top_k + h * e.num_experts) + 4 * s * 32 * 128
    assert step_model_flops(m, s, 1) == pytest.approx(3 * (L * per_layer + 2 * h * V) * s, rel=1e-3)


def _counted(model, hw, plan):
    r = simulate(model, hw, plan)
    p = r.plan
    return p.microbatches() * p.dp * p.tp * p.cp * sum(s.flops for s in r.stages)


@pytest.mark.parametrize("plan", [
    ParallelPlan(tp=1, pp=1, mbs=1, gbs=64),
    ParallelPlan(tp=8, pp=1, mbs=2, gbs=64),
    ParallelPlan(tp=4, pp=4, mbs=1, gbs=64),
    ParallelPlan(tp=2, pp=2, cp=2, mbs=1, gbs=64),
    ParallelPlan(tp=8, pp=2, vp=2, mbs=1, gbs=64, recompute="full"),
])
def test_counted_step_flops_do_not_depend_on_plan(plan, h100_cluster, gpt_22b):
    base = _counted(gpt_22b, h100_cluster, ParallelPlan(tp=1, pp=1, mbs=1, gbs=64, zero_stage=3))
    assert _counted(gpt_22b, h100_cluster, plan) == pytest.approx(base, rel=1e-3)


def test_counted_gemm_flops_match_closed_form(h100_cluster, gpt_22b):
    # op-graph GEMM FLOPs (fwd + dgrad + wgrad) equal 3 x 2 x params-in-GEMMs x tokens
    r = simulate(gpt_22b, h100_cluster, ParallelPlan(tp=8, pp=1, mbs=1, gbs=8))
    from simulator.engine import Context, device_model, _fabric
    from simulator.lowering import layer_ops
    ctx = Context(gpt_22b, r.plan, device_model(h100_cluster.accelerator, __import__("simulator").DEFAULT_CALIBRATION),
                  _fabric(h100_cluster, __import__("simulator").DEFAULT_CALIBRATION))
    ops = layer_ops(ctx, moe=False)
    gemm = sum(op.flops for op in ops if op.kind == "gemm" and op.phase != "recompute")
    h, T = 6144, 2048
    assert gemm * 8 == pytest.approx(3 * 2 * 12 * h * h * T, rel=1e-6)
