"""Megatron exports checked by megatron-core alone (the PyPI wheel; no Megatron-LM checkout).

The exported ``pretrain_gpt.py`` command line is read back into flag values with meshcast's own
reader (simulator.frameworks.megatron_config.parse_flags): every value given to megatron-core
comes from the exported text, never from the plan. Megatron-LM's core_transformer_config_from_args
copies every argument whose name is a config field; the same happens here, with its renames
(--num-experts -> num_moe_experts, --swiglu -> gated_linear_unit + silu, ...). Then megatron-core's
own checks run:

- TransformerConfig / MLATransformerConfig (and the ModelParallelConfig it inherits) __post_init__:
  pipeline layout, first/last stage, account-for-embedding/loss, virtual pipeline, MoE, MLA, GQA,
  recompute, fp8, sequence parallelism;
- DistributedDataParallelConfig and OptimizerConfig __post_init__;
- ConstantNumMicroBatchesCalculator (global batch = micro-batch x data parallel x micro-batches);
- parallel_state.RankGenerator for the dense and the expert rank layout, with the divisibility
  and same-pipeline-groups checks of parallel_state.initialize_model_parallel (which needs a
  process group, so its arithmetic is repeated here around the RankGenerator calls).

A flag that reaches none of these and is not a training-loop or model-builder argument fails the
check: a misspelt flag cannot slip through.
"""
from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

# Arguments pretrain_gpt.py gives to the model builder, data or training loop, not to a core config.
TRAINING_ONLY = {
    "--seq-length", "--max-position-embeddings", "--micro-batch-size", "--global-batch-size", "--vocab-size",
    "--make-vocab-size-divisible-by", "--position-embedding-type", "--untie-embeddings-and-output-weights",
    "--train-iters", "--lr-decay-style", "--lr-warmup-iters", "--log-interval", "--eval-iters", "--mock-data",
    "--tokenizer-type", "--split", "--ckpt-format", "--group-query-attention", "--multi-latent-attention",
    "--num-virtual-stages-per-pipeline-rank", "--no-overlap-p2p-communication",
    "--rotary-base",   # a GPTModel argument (TransformerConfig has none; MLATransformerConfig does)
}


def megatron_core_modules():
    """The megatron.core classes the check builds, or (None, reason) when the wheel does not import."""
    try:
        import torch
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.parallel_state import RankGenerator
        from megatron.core.transformer.enums import AttnBackend
        from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    except Exception as exc:   # noqa: BLE001 - any import failure is a reason to skip
        return None, f"megatron-core does not import: {type(exc).__name__}: {exc}"
    return types_namespace(locals()), ""


def types_namespace(found: dict):
    """The imported names as attributes (megatron_core_modules' result)."""
    return type("MegatronCore", (), {k: v for k, v in found.items() if not k.startswith("_")})


@dataclass
class CoreConfigs:
    """What megatron-core built from an exported command line."""
    transformer: object
    ddp: object
    optimizer: object
    data_parallel: int
    num_microbatches: int
    expert_data_parallel: int


def core_configs(core, text: str, world_size: int) -> CoreConfigs:
    """Build megatron-core's configs from an exported launch script and run their checks;
    AssertionError/ValueError/RuntimeError from megatron-core means it rejects the export."""
    from simulator.frameworks.megatron_config import parse_flags
    vals, _ = parse_flags(text)
    used: set[str] = set()
    tcls = core.MLATransformerConfig if "--multi-latent-attention" in vals else core.TransformerConfig
    tkw = _field_values(tcls, vals, used) | _renamed(core, vals, used)
    transformer = tcls(**tkw)
    ddp = core.DistributedDataParallelConfig(**_field_values(core.DistributedDataParallelConfig, vals, used))
    okw = _field_values(core.OptimizerConfig, vals, used)
    okw.update(params_dtype=tkw["params_dtype"], optimizer="adam")
    optimizer = _optimizer_config(core, okw)
    unused = sorted(set(vals) - used - TRAINING_ONLY)
    assert not unused, f"flags no megatron-core config takes: {unused}"
    dp, edp = _rank_layout(core, transformer, world_size)
    calc = core.ConstantNumMicroBatchesCalculator(int(vals["--global-batch-size"]), int(vals["--micro-batch-size"]),
                                                 dp, False, 0)
    return CoreConfigs(transformer, ddp, optimizer, dp, calc.get(), edp)


def _optimizer_config(core, kw: dict):
    """OptimizerConfig(**kw) with is_te_min_version answering True (the launch targets Transformer
    Engine >= 2.1; without TE installed megatron-core compares None with a version and raises
    TypeError). The shim only decides store_param_remainders; no check is skipped."""
    import megatron.core.optimizer.optimizer_config as oc
    saved = oc.is_te_min_version
    oc.is_te_min_version = lambda *a, **k: True
    try:
        return core.OptimizerConfig(**kw)
    finally:
        oc.is_te_min_version = saved


def _field_values(cls, vals: dict, used: set) -> dict:
    """{field: value} for every flag named like a field of ``cls`` (--a-b -> a_b), as Megatron-LM's
    core_transformer_config_from_args copies arguments onto config fields."""
    out = {}
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if flag in vals and f.init:
            out[f.name] = _value(f, vals[flag])
            used.add(flag)
    return out


def _value(f: dataclasses.Field, text):
    """A flag's text as the field's type: a bare flag is True; numbers as int or float."""
    if text is None:
        return True
    if f.name == "moe_layer_freq":
        return _list_expr(text) if "[" in text else int(text)
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _list_expr(text: str) -> list:
    """--moe-layer-freq's list expression (e.g. ``([0]*3+[1]*58)``), as Megatron-LM evaluates it."""
    from simulator.frameworks.megatron_config import _eval_list
    return _eval_list(ast.parse(text.strip(), mode="eval").body)


def _renamed(core, vals: dict, used: set) -> dict:
    """The arguments Megatron-LM renames or derives on the way to TransformerConfig
    (megatron/training/argument_utils.py core_transformer_config_from_args, validate_args)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.activations import squared_relu
    dtype = torch.float16 if "--fp16" in vals else torch.bfloat16 if "--bf16" in vals else torch.float32
    kw = {"params_dtype": dtype, "pipeline_dtype": dtype, "deallocate_pipeline_outputs": True,
          "apply_rope_fusion": False,   # its check is that Transformer Engine is installed (no CPU build)
          "num_query_groups": int(vals["--num-query-groups"]) if "--group-query-attention" in vals else None}
    layout = vals.get("--pipeline-model-parallel-layout") or ""
    virtual = "--num-virtual-stages-per-pipeline-rank" in vals or \
        layout.count("|") + 1 > int(vals.get("--pipeline-model-parallel-size") or 1)
    overlap = virtual and "--no-overlap-p2p-communication" not in vals   # validate_args: only interleaved
    kw.update(overlap_p2p_comm=overlap, batch_p2p_comm=not overlap)
    renames = {"--num-experts": "num_moe_experts", "--decoder-first-pipeline-num-layers":
               "num_layers_in_first_pipeline_stage", "--decoder-last-pipeline-num-layers":
               "num_layers_in_last_pipeline_stage", "--num-virtual-stages-per-pipeline-rank":
               "virtual_pipeline_model_parallel_size", "--fp8-format": "fp8"}
    for flag, name in renames.items():
        if flag in vals:
            kw[name] = vals[flag] if name == "fp8" else int(vals[flag])
            used.add(flag)
    if "--swiglu" in vals:
        kw.update(activation_func=F.silu, gated_linear_unit=True)
    if "--squared-relu" in vals:
        kw["activation_func"] = squared_relu
    if "--disable-bias-linear" in vals:
        kw["add_bias_linear"] = False
    if "--attention-backend" in vals:
        kw["attention_backend"] = core.AttnBackend[vals["--attention-backend"]]
    used.update({"--swiglu", "--squared-relu", "--disable-bias-linear", "--attention-backend", "--fp16", "--bf16",
                 "--num-query-groups"} & set(vals))
    return kw


def _rank_layout(core, cfg, world: int) -> tuple[int, int]:
    """(data parallel, expert data parallel) as parallel_state.initialize_model_parallel derives them,
    with its divisibility checks, and RankGenerator's groups for both layouts."""
    tp, pp, cp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size
    ep, etp = cfg.expert_model_parallel_size, cfg.expert_tensor_parallel_size or tp
    if world % (tp * pp * cp):
        raise RuntimeError(f"world_size ({world}) is not divisible by {tp * pp * cp}")
    dp = world // (tp * pp * cp)
    if world % (etp * ep * pp):
        raise RuntimeError(f"world_size ({world}) is not divisible by expert_tensor_model_pipeline_parallel "
                           f"size ({etp * ep * pp})")
    edp = world // (etp * ep * pp)
    order = "tp-cp-ep-dp-pp"
    dense = core.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    expert = core.RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order)
    assert dense.get_ranks("pp") == expert.get_ranks("pp"), "pipeline groups differ for dense and expert layers"
    return dp, edp
