"""DeepSpeed launch config: the JSON for ``deepspeed.initialize`` (``--deepspeed_config``), and back.

Keys follow DeepSpeed 0.19 (deepspeed/runtime/config.py, zero/config.py, pipe config). What the
model code decides (sequence length, recompute, attention kernel, the pipeline split given to
PipelineModule) is not DeepSpeed config: meshcast records what it simulated under the top-level
key ``"meshcast"``, which DeepSpeed ignores and the reader reads back. docs/frameworks.md maps
every field.
"""
from __future__ import annotations

import json
from typing import Optional

from hardware_specs.errors import SpecError
from models.schema import ModelSpec
from simulator.frameworks.launch import (ALLOC_CONF, ALLOC_WHY, ImportedConfig, LaunchConfig, config_bool, config_int,
                                        config_table, read_guarded)
from simulator.memory import DS_MAX_LIVE_PARAMS, DS_PREFETCH_PARAMS, DS_REDUCE_BUCKET
from simulator.plan import ParallelPlan

# the budgets the simulator assumes (simulator.memory), written out so the run matches them
REDUCE_BUCKET = int(DS_REDUCE_BUCKET)
MAX_LIVE_PARAMETERS = int(DS_MAX_LIVE_PARAMS)
LABEL = "deepspeed config"
PREFETCH_BUCKET = int(DS_PREFETCH_PARAMS)


# ---- writer ------------------------------------------------------------------------------------
def write_config(model: ModelSpec, plan: ParallelPlan) -> LaunchConfig:
    """The DeepSpeed JSON of a resolved plan, with the launcher line and notes."""
    notes = [f"launch: deepspeed --num_gpus {min(8, _gpus(plan))} --num_nodes {max(1, _gpus(plan) // 8)} "
             f"train.py --deepspeed_config ds_config.json",
             f"launch with PYTORCH_CUDA_ALLOC_CONF={ALLOC_CONF}: {ALLOC_WHY}"]
    if plan.pp > 1:
        notes.append(f"pipeline: build deepspeed.pipe.PipelineModule(layers, num_stages={plan.pp}, "
                     f"partition_method=...) placing {list(plan.layers_per_stage or ())} layers per stage "
                     f"(\"uniform\" gives the even split)" if plan.layers_per_stage else
                     f"pipeline: build deepspeed.pipe.PipelineModule(layers, num_stages={plan.pp}, "
                     "partition_method=\"uniform\") and call engine.train_batch()")
    if plan.recompute != "none":
        notes.append(f"recompute ({plan.recompute}) is the model code's choice: wrap layers in "
                     "deepspeed.checkpointing.checkpoint (pipeline: activation_checkpoint_interval)")
    if plan.framework == "deepspeed-0.3":
        notes.append("DeepSpeed v0.3.13-v0.5: the step was predicted for that release's ZeRO-3 (per-parameter "
                     "synchronised gathers); under a newer DeepSpeed this config runs today's ZeRO-3 "
                     "(simulate with --framework deepspeed)")
    doc = {"train_batch_size": plan.gbs, "train_micro_batch_size_per_gpu": plan.mbs,
           "gradient_accumulation_steps": plan.gbs // (plan.mbs * plan.dp),
           **_precision_keys(plan),
           "zero_optimization": _zero(plan), "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
           "steps_per_print": 1, "wall_clock_breakdown": False}
    if plan.pp > 1:
        doc["pipeline"] = {"stages": plan.pp, "partition": "uniform",
                           "activation_checkpoint_interval": 1 if plan.recompute == "full" else 0}
    doc["meshcast"] = _meshcast_keys(model, plan)
    return LaunchConfig("deepspeed", json.dumps(doc, indent=2) + "\n", "ds_config.json", tuple(notes))


def _gpus(plan: ParallelPlan) -> int:
    return plan.num_gpus or plan.dp * plan.pp


def _precision_keys(p: ParallelPlan) -> dict:
    """The fp16 / bf16 blocks; DeepSpeed before v0.5.x (the deepspeed-0.3 profile) knows no bf16 key."""
    keys = {"fp16": {"enabled": p.precision == "fp16"}}
    return keys if p.framework == "deepspeed-0.3" else {"bf16": {"enabled": p.precision == "bf16"}, **keys}


def _zero(p: ParallelPlan) -> dict:
    """The zero_optimization block. Under deepspeed-0.3 contiguous_gradients is off, its ZeRO-3
    default in v0.3.13-v0.3.16 and the all-reduce path simulator.zero3_2021 models."""
    z = {"stage": p.zero_stage, "overlap_comm": p.overlap_grad_reduce,
         "contiguous_gradients": p.framework != "deepspeed-0.3", "reduce_bucket_size": REDUCE_BUCKET}
    if p.zero_stage == 3:
        z["stage3_max_live_parameters"] = MAX_LIVE_PARAMETERS
        z["stage3_prefetch_bucket_size"] = PREFETCH_BUCKET
    if p.offload_optimizer:
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload_params:
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    return z


def _meshcast_keys(m: ModelSpec, p: ParallelPlan) -> dict:
    """What the model code decides, as meshcast simulated it (DeepSpeed ignores this key)."""
    return {"model": m.name, "seq": p.seq, "recompute": p.recompute, "recompute_layers": p.recompute_layers,
            "layers_per_stage": list(p.layers_per_stage) if p.layers_per_stage else None,
            "attention": p.attention, "dropout": p.dropout,
            "overlap_param_gather": p.overlap_param_gather}


# ---- reader ------------------------------------------------------------------------------------
def read_config(text: str, model: Optional[ModelSpec] = None, num_gpus: Optional[int] = None) -> ImportedConfig:
    """The plan (framework deepspeed) a DeepSpeed JSON describes; needs the world size (``num_gpus``)
    for the data-parallel degree."""
    return read_guarded("deepspeed config", _read, text, model, num_gpus)


def _read(text: str, model: Optional[ModelSpec], num_gpus: Optional[int]) -> ImportedConfig:
    """read_config without the conversion of stray value errors into SpecError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError("deepspeed config", f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SpecError("deepspeed config", "expected a JSON object")
    if not num_gpus:
        raise SpecError("gpus", "a DeepSpeed config does not state the world size; give the GPU count (--gpus)")
    z = config_table(doc, "zero_optimization", LABEL)
    pp = config_int(config_table(doc, "pipeline", LABEL), "stages", f"{LABEL}: pipeline", 1)
    if num_gpus % pp:
        raise SpecError("deepspeed config: pipeline.stages", f"{pp} stages do not divide {num_gpus} GPUs")
    dp = num_gpus // pp
    mbs, gbs = _batch(doc, dp)
    ms = config_table(doc, "meshcast", LABEL)
    notes = [] if ms else ["no \"meshcast\" key: sequence length, recompute and layer split are the defaults"]
    lps = ms.get("layers_per_stage")
    zlabel = f"{LABEL}: zero_optimization"
    plan = ParallelPlan(pp=pp, dp=dp, zero_stage=config_int(z, "stage", zlabel, 0, minimum=0), mbs=mbs, gbs=gbs,
                        seq=ms.get("seq"), precision=_precision(doc), recompute=ms.get("recompute", "none"),
                        recompute_layers=ms.get("recompute_layers"), attention=ms.get("attention"),
                        dropout=bool(ms.get("dropout", False)),
                        overlap_grad_reduce=config_bool(z, "overlap_comm", zlabel),
                        overlap_param_gather=bool(ms.get("overlap_param_gather", True)),
                        offload_optimizer=_offloaded(z, "offload_optimizer"),
                        offload_params=_offloaded(z, "offload_param"),
                        layers_per_stage=tuple(lps) if lps else None, framework="deepspeed")
    return ImportedConfig(plan, {}, tuple(notes))


def _batch(doc: dict, dp: int) -> tuple[int, int]:
    """(micro-batch, global batch) from any two of DeepSpeed's three batch keys, as DeepSpeed derives them."""
    gbs, mbs, gas = (config_int(doc, k, LABEL) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                        "gradient_accumulation_steps"))
    if mbs is None and gbs is not None:
        mbs = gbs // (dp * (gas or 1))
        if mbs == 0:
            raise SpecError("deepspeed config: train_batch_size", f"{gbs} is less than one sequence per GPU "
                                                                  f"over data parallel {dp} x accumulation {gas or 1}")
    if gbs is None and mbs is not None:
        gbs = mbs * dp * (gas or 1)
    if mbs is None or gbs is None:
        raise SpecError("deepspeed config: train_batch_size", "give train_batch_size or train_micro_batch_size_per_gpu")
    if gas is not None and gbs != mbs * dp * gas:
        raise SpecError("deepspeed config: train_batch_size",
                        f"{gbs} != micro-batch {mbs} x gradient accumulation {gas} x data parallel {dp}")
    return mbs, gbs


def _precision(doc: dict) -> str:
    """fp16 or bf16 from the ``fp16`` / ``bf16`` blocks; both enabled is DeepSpeed's own error."""
    fp16, bf16 = (config_bool(config_table(doc, k, LABEL), "enabled", f"{LABEL}: {k}") for k in ("fp16", "bf16"))
    if fp16 and bf16:
        raise SpecError(f"{LABEL}: fp16", "fp16 and bf16 are both enabled; DeepSpeed refuses that (enable one)")
    return "fp16" if fp16 else "bf16"


def _offloaded(z: dict, key: str) -> bool:
    """Whether ``zero_optimization.<key>`` offloads to a device (cpu or nvme)."""
    o = config_table(z, key, f"{LABEL}: zero_optimization")
    return o.get("device", "none") != "none"
