"""Every exported launch config of the grid passes the framework's own checks (the optional
``frameworks`` extra: torch CPU, megatron-core, torchtitan 0.2.x, deepspeed):

- megatron-core (the wheel alone): its configs built from the exported command line, their
  __post_init__ checks, the micro-batch calculator and rank layout (tests/megatron_core_check.py);
- Megatron-LM, where MESHCAST_MEGATRON_LM names a checkout: megatron.training.arguments
  parse_args + validate_args, then
  core_transformer_config_from_args (TransformerConfig.__post_init__: pipeline layout, MoE, MLA);
- torchtitan: ConfigManager.parse_args(--job.config_file) and ParallelDims (its degree checks);
- DeepSpeed: DeepSpeedConfig (batch arithmetic, ZeRO config with extra keys forbidden).

Each test skips with the reason when its framework is not installed.
"""
from __future__ import annotations

import pytest

from models import load_model
from simulator.frameworks.launch import export_config
from simulator.frameworks.megatron_config import megatron_arguments
from simulator.plan import ParallelPlan, resolve_plan
from tests.frameworks_support import (deepspeed_config, megatron_arguments_module, megatron_validate, torchtitan_job,
                                     torchtitan_modules)
from tests.megatron_core_check import core_configs, megatron_core_modules
from tests.launch_grid import GRID

# the frameworks warn about performance choices and missing GPU libraries (apex, TE); not failures
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning",
                                        "ignore::FutureWarning")


def _cases(fmt: str):
    out = []
    for i, (name, gpus, plan) in enumerate(GRID):
        model = load_model(name)
        resolved = resolve_plan(model, plan, gpus)
        if export_config(model, resolved).format == fmt:
            out.append(pytest.param(model, gpus, resolved, id=f"{name}-{plan.framework}-{i}"))
    return out


@pytest.fixture(scope="module")
def megatron():
    module, why = megatron_arguments_module()
    if module is None:
        pytest.skip(why)
    return module


@pytest.fixture(scope="module")
def core():
    found, why = megatron_core_modules()
    if found is None:
        pytest.skip(why)
    return found


@pytest.mark.parametrize("model,gpus,plan", _cases("megatron"))
def test_megatron_core_accepts_the_export(core, model, gpus, plan):
    cfg = core_configs(core, export_config(model, plan).text, gpus)
    t = cfg.transformer
    assert (t.tensor_model_parallel_size, t.pipeline_model_parallel_size, t.context_parallel_size) == \
        (plan.tp, plan.pp, plan.cp)
    assert (cfg.data_parallel, cfg.num_microbatches) == (plan.dp, plan.microbatches())
    assert (t.virtual_pipeline_model_parallel_size or 1) == plan.vp and t.sequence_parallel == plan.sp
    assert t.num_layers == model.num_layers and t.hidden_size == model.hidden
    assert t.num_attention_heads == model.num_heads and t.gated_linear_unit == model.gated_mlp
    assert t.num_query_groups in (model.kv_heads, None) or model.mla is not None
    assert cfg.ddp.use_distributed_optimizer == (plan.zero_stage >= 1) == cfg.optimizer.use_distributed_optimizer
    assert cfg.ddp.use_megatron_fsdp == (plan.zero_stage >= 2)
    assert (t.fp8 is not None) == (plan.precision == "fp8") and t.bf16 == (plan.precision in ("bf16", "fp8"))
    if model.moe is not None:
        assert (t.num_moe_experts, t.expert_model_parallel_size, t.expert_tensor_parallel_size) == \
            (model.moe.num_experts, plan.ep, plan.expert_tp)
        assert cfg.expert_data_parallel == plan.num_gpus // (plan.ep * plan.expert_tp * plan.pp)
    if model.mla is not None:
        assert (t.kv_lora_rank, t.v_head_dim) == (model.mla.kv_lora_rank, model.mla.v_head_dim)
    if plan.recompute == "full":
        assert t.recompute_granularity == "full" and t.recompute_num_layers * plan.vp >= (plan.recompute_layers or 1)
    layout = t.pipeline_model_parallel_layout
    if layout is not None and plan.layers_per_stage:
        per_rank = [sum(str(x).count("decoder") for v in rank for x in v) for rank in layout.layout]
        assert tuple(per_rank) == tuple(plan.layers_per_stage)


@pytest.mark.parametrize("change,match", [
    (("--num-query-groups 8", "--num-query-groups 7"), "num_query_groups|divisible|groups"),
    (("--decoder-first-pipeline-num-layers 18", "--decoder-first-pipeline-num-layers 17"), "layers|divisible"),
    (("--global-batch-size 256", "--global-batch-size 250"), "global batch|divisible"),
    (("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 3"), "multiple of tensor_model_parallel_size"),
])
def test_megatron_core_rejects_a_broken_export(core, change, match):
    """The wheel's checks bite: one value changed in a valid export makes megatron-core refuse it."""
    model = load_model("llama3-70b")
    plan = resolve_plan(model, ParallelPlan(tp=8, pp=4, vp=2, mbs=1, gbs=256, layers_per_stage=(18, 22, 22, 18)), 256)
    text = export_config(model, plan).text.replace(*change)
    assert text != export_config(model, plan).text
    with pytest.raises((AssertionError, ValueError, RuntimeError), match=match):
        core_configs(core, text, 256)


def test_megatron_core_refuses_a_misspelt_flag(core):
    model = load_model("llama3-8b")
    plan = resolve_plan(model, ParallelPlan(tp=2, mbs=1, gbs=64), 64)
    with pytest.raises(AssertionError, match="--sequence-paralel"):
        core_configs(core, export_config(model, plan).text.replace("--sequence-parallel", "--sequence-paralel"), 64)


@pytest.mark.parametrize("model,gpus,plan", _cases("megatron"))
def test_megatron_lm_accepts_the_export(megatron, model, gpus, plan):
    text = export_config(model, plan).text
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text else {}
    ns = megatron_validate(megatron, megatron_arguments(model, plan)[0], gpus, env)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == \
        (plan.tp, plan.pp, plan.cp)
    assert ns.data_parallel_size == plan.dp
    assert (ns.virtual_pipeline_model_parallel_size or 1) == plan.vp
    assert ns.global_batch_size == plan.gbs and ns.micro_batch_size == plan.mbs and ns.seq_length == plan.seq
    assert bool(ns.use_distributed_optimizer) == (plan.zero_stage >= 1)
    assert bool(ns.use_megatron_fsdp) == (plan.zero_stage >= 2)
    from megatron.training.argument_utils import core_transformer_config_from_args
    ns.padded_vocab_size = model.vocab
    ns.apply_rope_fusion = False   # its check is that Transformer Engine is installed (no CPU build)
    cfg = core_transformer_config_from_args(ns)
    assert cfg.num_layers == model.num_layers and cfg.hidden_size == model.hidden
    assert cfg.ffn_hidden_size == model.ffn_hidden and cfg.num_attention_heads == model.num_heads
    assert cfg.gated_linear_unit == model.gated_mlp and cfg.add_bias_linear == model.linear_bias
    assert cfg.normalization == ("RMSNorm" if model.norm == "rmsnorm" else "LayerNorm")
    if model.mla is not None:
        assert (cfg.kv_lora_rank, cfg.q_lora_rank, cfg.v_head_dim) == \
            (model.mla.kv_lora_rank, model.mla.q_lora_rank, model.mla.v_head_dim)
    else:
        assert cfg.kv_channels == model.dim_head
    assert cfg.num_query_groups in (model.kv_heads, None) or model.mla is not None
    if model.moe is not None:
        assert cfg.num_moe_experts == model.moe.num_experts and cfg.moe_router_topk == model.moe.top_k
        assert cfg.moe_ffn_hidden_size == model.moe.expert_ffn_hidden
        freq = cfg.moe_layer_freq
        flags = [int(i % freq == 0) for i in range(model.num_layers)] if isinstance(freq, int) else list(freq)
        assert flags == [int(model.is_moe_layer(i)) for i in range(model.num_layers)]
    layout = getattr(cfg, "pipeline_model_parallel_layout", None)
    if layout is not None and plan.layers_per_stage:
        per_rank = [sum(str(x).count("decoder") for v in rank for x in v) for rank in layout.layout]
        assert tuple(per_rank) == tuple(plan.layers_per_stage)


@pytest.mark.parametrize("model,gpus,plan", _cases("torchtitan"))
def test_torchtitan_accepts_the_export(model, gpus, plan, tmp_path):
    found, why = torchtitan_modules()
    if found is None:
        pytest.skip(why)
    job, dims = torchtitan_job(found, export_config(model, plan).text, gpus, tmp_path)
    par = job.parallelism
    assert dims.dp_replicate * dims.dp_shard == plan.dp
    assert job.training.global_batch_size == plan.gbs and job.training.seq_len == plan.seq
    if plan.pp > 1:
        parts = par.module_fqns_per_model_part
        assert len(parts) == plan.pp * plan.vp
        assert sum(fqn.startswith("layers.") for part in parts for fqn in part) == model.num_layers
        assert job.training.local_batch_size % par.pipeline_parallel_microbatch_size == 0


@pytest.mark.parametrize("model,gpus,plan", _cases("deepspeed"))
def test_deepspeed_accepts_the_export(model, gpus, plan):
    config = pytest.importorskip("deepspeed.runtime.config", reason="deepspeed is not installed")
    cfg = deepspeed_config(config, export_config(model, plan).text, plan.dp)
    assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu) == (plan.gbs, plan.mbs)
    assert cfg.gradient_accumulation_steps == plan.microbatches()
    assert cfg.zero_optimization_stage == plan.zero_stage
    assert cfg.bfloat16_config.enabled == (plan.precision == "bf16")
    assert cfg.float16_config.enabled == (plan.precision == "fp16")
    if plan.zero_stage == 3:
        assert cfg.zero_config.max_live_parameters == 1_000_000_000
        assert cfg.zero_config.prefetch_bucket_size == 50_000_000
    if plan.pp > 1:
        assert cfg.pipeline["stages"] == plan.pp


def test_simulated_deepspeed_budgets_are_deepspeeds_defaults():
    """simulator.memory's ZeRO budgets are DeepSpeedZeroConfig's defaults (nothing set)."""
    zero = pytest.importorskip("deepspeed.runtime.zero.config", reason="deepspeed is not installed")
    from simulator.memory import DS_MAX_LIVE_PARAMS, DS_PREFETCH_PARAMS, DS_REDUCE_BUCKET
    d = zero.DeepSpeedZeroConfig()
    assert (d.max_live_parameters, d.prefetch_bucket_size, d.reduce_bucket_size) == \
        (DS_MAX_LIVE_PARAMS, DS_PREFETCH_PARAMS, DS_REDUCE_BUCKET)
