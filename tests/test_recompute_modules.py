"""Megatron-Core's selective recompute of named modules (plan.recompute_modules, lowering.recomputed):
the forward ops each module re-runs, the plan checks, the Megatron launch flag and the
Megatron-Bridge recipes that set it (validation/bridge_recipes.py)."""
import pytest

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import PlanError
from models import load_model
from simulator import ParallelPlan
from simulator.calibration import DEFAULT
from simulator.engine import _fabric, device_model
from simulator.lowering import Context, layer_ops
from simulator.plan import plan_from_dict, resolve_plan


def _recomputed(model_name: str, kind, **plan) -> list[str]:
    m = load_model(model_name)
    hw = load_hardware("dgx-h100", 8)
    p = resolve_plan(m, ParallelPlan(mbs=1, gbs=8, seq=1024, ep=8 if m.moe else 1, **plan), 8)
    ctx = Context(m, p, device_model(hw.accelerator, DEFAULT), _fabric(hw, DEFAULT))
    return [op.name for op in layer_ops(ctx, kind) if op.phase == "recompute"]


def test_default_selective_recomputes_the_attention_core_only():
    assert _recomputed("llama3-8b", False, recompute="selective") == ["attention.core"]
    assert _recomputed("llama3-8b", False, recompute="selective", recompute_modules=("core_attn",)) == \
        ["attention.core"]


def test_each_module_reruns_its_forward_ops():
    """moe_act: the routed experts' activation (not the shared expert's); layernorm: the norms
    Transformer Engine keeps as modules of their own (an MoE block's pre-MLP norm, MLA's input norm;
    a dense layer fuses both into its linears); mla_up_proj: Q and KV up-projections and RoPE."""
    assert _recomputed("qwen3-30b-a3b", True, recompute="selective", recompute_modules=("moe_act",)) == \
        ["moe.experts.act"]
    assert _recomputed("qwen3-30b-a3b", True, recompute="selective", recompute_modules=("layernorm",)) == \
        ["mlp.norm"]
    assert _recomputed("llama3-8b", False, recompute="selective", recompute_modules=("layernorm",)) == []
    mla = _recomputed("deepseek-v3", True, recompute="selective", recompute_modules=("mla_up_proj",))
    # (RoPE too where the framework runs it as separate kernels: none for this model here)
    assert [n for n in mla if n != "attention.rope"] == ["attention.q_up", "attention.kv_up"]
    both = _recomputed("deepseek-v3", True, recompute="selective", recompute_modules=("layernorm", "moe_act"))
    assert sorted(both) == ["attention.norm", "mlp.norm", "moe.experts.act"]


def test_recompute_modules_need_selective_and_known_names():
    m = load_model("llama3-8b")
    with pytest.raises(PlanError, match="recompute_modules"):
        resolve_plan(m, ParallelPlan(gbs=8, recompute="full", recompute_modules=("layernorm",)), 8)
    with pytest.raises(PlanError, match="recompute_modules"):
        resolve_plan(m, ParallelPlan(gbs=8, recompute="selective", recompute_modules=("moe",)), 8)
    plan = plan_from_dict({"recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]})
    assert plan.recompute_modules == ("layernorm", "moe_act")
    assert plan.to_dict()["recompute_modules"] == ["layernorm", "moe_act"]
    assert not plan.recomputes_core_attn
    assert ParallelPlan(recompute="selective").recomputes_core_attn


def test_megatron_launch_flag_round_trips():
    from simulator.frameworks.megatron_config import format_args, megatron_arguments, read_config
    m = load_model("deepseek-v3")
    plan = resolve_plan(m, ParallelPlan(ep=8, mbs=1, gbs=8, recompute="selective",
                                        recompute_modules=("mla_up_proj", "moe_act")), 8)
    args = megatron_arguments(m, plan)[0]
    i = args.index("--recompute-modules")
    assert args[i + 1:i + 3] == ["mla_up_proj", "moe_act"]
    back = read_config("torchrun pretrain_gpt.py " + format_args(args), m, 8)
    assert back.plan.recompute == "selective" and back.plan.recompute_modules == ("mla_up_proj", "moe_act")
    only_unmodelled = read_config("torchrun pretrain_gpt.py --recompute-granularity selective "
                                  "--recompute-modules moe --micro-batch-size 1 --global-batch-size 8", m, 8)
    assert only_unmodelled.plan.recompute == "none"


def test_bridge_recipes_recompute_modules_are_read():
    """The Megatron-Bridge rows whose recipe names recompute modules run them: DeepSeek-V3's
    mla_up_proj, Nemotron 3 Super B300 NVFP4's moe_act and layernorm, GPT-OSS GB200 BF16's."""
    from validation.published import compare_published, published_csvs
    done, _ = compare_published(published_csvs())
    named = [c for c in done if c.plan.get("recompute_modules")]
    assert len(named) == 10
    assert all(c.plan["recompute"] == "selective" for c in named)
    assert {tuple(c.plan["recompute_modules"]) for c in named} == {("mla_up_proj",), ("moe_act", "layernorm"),
                                                                  ("layernorm", "moe_act")}
    assert all("recompute_modules=" in c.note and "activation memory recomputing" in c.note for c in named)
