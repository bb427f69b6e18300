"""torchtitan launch config: the TOML job config (``--job.config_file``), and back.

Field names follow torchtitan 0.2.2's torchtitan/config/job_config.py, the last release whose
ConfigManager reads TOML; torchtitan 0.3 configures in Python (Trainer.Config), with the same
sections and field names and the same ``--section.field`` command-line overrides.
docs/frameworks.md maps every field.
"""
from __future__ import annotations

import json
import tomllib
from typing import Optional

from hardware_specs.errors import PlanError, SpecError
from models.schema import ModelSpec
from simulator.frameworks import get_framework
from simulator.frameworks.launch import (ALLOC_CONF, ALLOC_WHY, ImportedConfig, LaunchConfig, config_int, config_table,
                                        read_guarded)
from simulator.frameworks.rules import grad_sync_expressible
from simulator.plan import ParallelPlan

LABEL = "torchtitan config"

SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
_SCHEDULE_BACK = {v.lower(): k for k, v in SCHEDULES.items()} | {"loopedbfs": "interleaved",
                                                                  "interleavedzerobubble": "interleaved"}


# ---- writer ------------------------------------------------------------------------------------
def write_config(model: ModelSpec, plan: ParallelPlan) -> LaunchConfig:
    """The TOML job config of a resolved torchtitan plan, with notes; PlanError on
    ``fsdp_grad_sync`` where the plan defers FSDP2's gradient sync over several micro-batches,
    which torchtitan cannot say (simulator.frameworks.rules.grad_sync_expressible)."""
    if not grad_sync_expressible(get_framework(plan.framework), plan.fsdp_grad_sync, plan.microbatches()):
        raise PlanError("fsdp_grad_sync", f"torchtitan reduces FSDP2's gradients after every micro-batch "
                                          f"(train_step has no set_requires_gradient_sync, its config no field "
                                          f"for it): {plan.fsdp_grad_sync} over {plan.microbatches()} micro-batches "
                                          f"cannot be exported; simulate every_microbatch to export")
    notes: list[str] = []
    sections = [("job", {"description": f"meshcast plan for {model.name}"}),
                ("model", _model(model, notes)), ("training", _training(plan)),
                ("parallelism", _parallelism(model, plan, notes)),
                ("activation_checkpoint", _checkpoint(model, plan, notes)),
                ("compile", {"enable": False})]
    if plan.dropout:
        notes.append("torchtitan's models have no dropout; the plan simulated dropout masks")
    if not plan.overlap_grad_reduce or not plan.overlap_param_gather:
        notes.append("FSDP2 always prefetches and overlaps its collectives; the plan turned an overlap off")
    notes.append(f"launch with PYTORCH_CUDA_ALLOC_CONF={ALLOC_CONF}: {ALLOC_WHY}")
    gpus = plan.num_gpus or plan.dp * plan.tp * plan.pp * plan.cp
    head = ["# written by meshcast: torchtitan job config (torchtitan 0.2.x ConfigManager)",
            f"# launch: NGPU={min(8, gpus)} CONFIG_FILE=./{model.name}.toml ./run_train.sh  "
            f"(torchrun over {gpus} GPUs in all)"]
    text = "\n".join(head) + "\n" + "".join(_section(name, body) for name, body in sections)
    return LaunchConfig("torchtitan", text, f"{model.name}.toml", tuple(notes))


def _section(name: str, body: dict) -> str:
    lines = [f"\n[{name}]"] + [f"{k} = {_toml(v)}" for k, v in body.items() if v is not None]
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    """A TOML value (bool, int, float, string or nested list of strings)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    return "[" + ", ".join(_toml(x) for x in v) + "]"


def _model(m: ModelSpec, notes: list) -> dict:
    name = "deepseek_v3" if m.mla is not None else "qwen3" if m.moe is not None else "llama3"
    notes.append(f"[model] {name} flavor {m.name!r} must be registered in torchtitan with {m.name}'s dimensions "
                 f"({m.num_layers} layers, hidden {m.hidden}); torchtitan's TOML names a flavor, not the shapes")
    return {"name": name, "flavor": m.name, "hf_assets_path": f"./assets/hf/{m.name}"}


def _training(p: ParallelPlan) -> dict:
    """local_batch_size is one data-parallel rank's batch per optimizer step (all micro-batches with
    pp; one micro-batch otherwise, the rest by gradient accumulation)."""
    local = p.gbs // p.dp if p.pp > 1 else p.mbs
    return {"local_batch_size": local, "global_batch_size": p.gbs, "seq_len": p.seq, "steps": 100,
            "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32", "dataset": "c4_test"}


def _parallelism(m: ModelSpec, p: ParallelPlan, notes: list) -> dict:
    out = {"data_parallel_replicate_degree": p.dp if p.zero_stage == 0 else 1,
           "data_parallel_shard_degree": p.dp if p.zero_stage != 0 else 1,
           "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
           "context_parallel_degree": p.cp, "expert_parallel_degree": p.ep,
           "expert_tensor_parallel_degree": p.expert_tp if m.moe is not None else None}
    if p.zero_stage == 3 and p.dp == 1 and p.cp == 1:
        notes.append("torchtitan applies FSDP2 only over data_parallel_shard_degree > 1 (or cp > 1); "
                     "with one data-parallel rank it runs unsharded")
    if p.pp > 1:
        out["pipeline_parallel_schedule"] = SCHEDULES[p.pipeline_schedule]
        out["pipeline_parallel_microbatch_size"] = p.mbs
        out["module_fqns_per_model_part"] = model_parts(m, p)
    return out


def stage_layers(m: ModelSpec, p: ParallelPlan) -> list[list[int]]:
    """Layers of each rank's chunks: the plan's per-rank split, each spread evenly over vp chunks."""
    lps = p.layers_per_stage or (m.num_layers // p.pp,) * p.pp
    return [[n // p.vp + (1 if c < n % p.vp else 0) for c in range(p.vp)] for n in lps]


def model_parts(m: ModelSpec, p: ParallelPlan) -> list[list[str]]:
    """module_fqns_per_model_part: the pp*vp model parts in model order (torchtitan puts part i on
    rank i % pp for looped schedules), embedding first and norm + output last."""
    chunks = stage_layers(m, p)
    parts, layer = [], 0
    for v in range(p.vp):
        for r in range(p.pp):
            n = chunks[r][v]
            part = [f"layers.{i}" for i in range(layer, layer + n)]
            layer += n
            if v == 0 and r == 0:
                part.insert(0, "tok_embeddings")
            if v == p.vp - 1 and r == p.pp - 1:
                part += ["norm", "output"]
            parts.append(part)
    return parts


def _checkpoint(m: ModelSpec, p: ParallelPlan, notes: list) -> dict:
    """none / selective ("op": save matmuls) / full; N layers of K as layer SAC every K/N-th layer."""
    if p.recompute == "none":
        return {"mode": "none"}
    if p.recompute == "selective":
        notes.append("selective recompute exported as torchtitan's per-op SAC (selective_ac_option = \"op\")")
        return {"mode": "selective", "selective_ac_option": "op"}
    k = _stage_size(m, p)
    n = p.recompute_layers
    if n is None or n >= k:
        return {"mode": "full"}
    every = k // n     # exact where recompute_expressible (the planner proposes only those)
    if k // every != n:
        notes.append(f"{n} of {k} layers per stage recomputed is exported as every {every}-th layer "
                     f"({k // every} layers); torchtitan checkpoints every N-th layer")
    return {"mode": "selective", "selective_ac_option": str(every)}


def _stage_size(m: ModelSpec, p: ParallelPlan) -> int:
    return max(p.layers_per_stage) if p.layers_per_stage else m.num_layers // p.pp


# ---- reader ------------------------------------------------------------------------------------
def read_config(text: str, model: Optional[ModelSpec] = None, num_gpus: Optional[int] = None) -> ImportedConfig:
    """The plan (framework torchtitan) a TOML job config describes; the model shapes live in
    torchtitan's flavor registry, so no dimensions come back (the flavor is noted)."""
    return read_guarded("torchtitan config", _read, text, model, num_gpus)


def _read(text: str, model: Optional[ModelSpec], num_gpus: Optional[int]) -> ImportedConfig:
    """read_config without the conversion of stray value errors into SpecError."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("torchtitan config", f"not TOML: {exc}") from None
    par, tr, ac = (config_table(doc, k, LABEL) for k in ("parallelism", "training", "activation_checkpoint"))
    mdl = config_table(doc, "model", LABEL)
    notes = [f"[model] {mdl.get('name')} flavor {mdl.get('flavor')!r}: "
             "torchtitan's flavor registry holds the shapes; --model names them"]
    plabel = f"{LABEL}: parallelism"
    tp, pp, cp = (config_int(par, k, plabel, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                          "context_parallel_degree"))
    replicate = config_int(par, "data_parallel_replicate_degree", plabel, 1)
    shard = config_int(par, "data_parallel_shard_degree", plabel, -1, minimum=-1)
    if shard == 0:
        raise SpecError(f"{plabel}: data_parallel_shard_degree", "must be -1 (the rest of the GPUs) or at least 1, got 0")
    if shard < 0 and num_gpus:
        shard = num_gpus // (replicate * tp * pp * cp)
    if replicate > 1 and shard > 1:
        raise SpecError("torchtitan config: data_parallel_replicate_degree", "HSDP (replicate and shard both > 1) "
                                                                            "is not modelled by meshcast")
    dp = replicate if replicate > 1 else (shard if shard > 0 else None)
    zero = 0 if replicate > 1 or (shard == 1 and cp == 1) else 3   # FSDP2 needs a shard (or cp) mesh
    lps, vp = _parts(par, pp, model)
    tlabel = f"{LABEL}: training"
    local = config_int(tr, "local_batch_size", tlabel, 8)
    mbs = config_int(par, "pipeline_parallel_microbatch_size", plabel, 1) if pp > 1 else local
    gbs = config_int(tr, "global_batch_size", tlabel, -1, minimum=None)
    if gbs <= 0:
        gbs = local * dp if dp else None
    recompute, rec_layers = _recompute(ac, model, pp, lps)
    etp = config_int(par, "expert_tensor_parallel_degree", plabel)
    schedule = _SCHEDULE_BACK.get(str(par.get("pipeline_parallel_schedule", "1F1B")).lower()) if pp > 1 else None
    if pp > 1 and schedule is None:
        notes.append(f"schedule {par.get('pipeline_parallel_schedule')!r} read as 1f1b")
        schedule = "1f1b"
    if config_table(doc, "compile", LABEL).get("enable"):
        notes.append("torch.compile is on; meshcast models eager torchtitan (compiled fusion not modelled)")
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, vp=vp, cp=cp, ep=config_int(par, "expert_parallel_degree", plabel, 1),
                        etp=None if etp is None or etp == tp else etp, sequence_parallel=True,
                        zero_stage=zero, recompute=recompute, recompute_layers=rec_layers, mbs=mbs, gbs=gbs,
                        seq=config_int(tr, "seq_len", tlabel), schedule=schedule,
                        layers_per_stage=lps, framework="torchtitan")
    return ImportedConfig(plan, {}, tuple(notes))


def _parts(par: dict, pp: int, model: Optional[ModelSpec]) -> tuple[Optional[tuple[int, ...]], int]:
    """(layers per rank or None when even, vp) from module_fqns_per_model_part or layers_per_stage."""
    parts = par.get("module_fqns_per_model_part")
    if pp == 1:
        return None, 1
    if parts:
        if not isinstance(parts, list) or not all(isinstance(p, list) and all(isinstance(f, str) for f in p)
                                                  for p in parts):
            raise SpecError(f"{LABEL}: parallelism: module_fqns_per_model_part",
                            f"expected a list of lists of module names, got {parts!r}")
        if len(parts) % pp:
            raise SpecError("torchtitan config: module_fqns_per_model_part", f"{len(parts)} parts for pp={pp}")
        per_rank = [0] * pp
        for i, part in enumerate(parts):
            per_rank[i % pp] += sum(1 for fqn in part if fqn.startswith("layers."))
        return (None if len(set(per_rank)) == 1 else tuple(per_rank)), len(parts) // pp
    plabel = f"{LABEL}: parallelism"
    per = config_int(par, "pipeline_parallel_layers_per_stage", plabel)
    if per is not None and model is not None:
        first = config_int(par, "pipeline_parallel_first_stage_less_layers", plabel, 1, minimum=0)
        last = config_int(par, "pipeline_parallel_last_stage_less_layers", plabel, 1, minimum=0)
        stages = (model.num_layers + first + last) // per
        if stages % pp:
            raise SpecError("torchtitan config: pipeline_parallel_layers_per_stage",
                            f"{stages} stages is not a multiple of pp={pp}")
        return _even_parts(model.num_layers, pp, stages // pp, first, last), stages // pp
    return None, 1


def _even_parts(L: int, pp: int, vp: int, first: int, last: int) -> Optional[tuple[int, ...]]:
    """torchtitan's own split with the embedding and output weighted as layers, summed per rank."""
    stages = pp * vp
    total = L + first + last
    base, extra = divmod(total, stages)
    sizes = [base + (1 if i < extra else 0) for i in range(stages)]
    sizes[0] -= first
    sizes[-1] -= last
    per_rank = [sum(sizes[i] for i in range(r, stages, pp)) for r in range(pp)]
    return None if len(set(per_rank)) == 1 else tuple(per_rank)


def _recompute(ac: dict, model: Optional[ModelSpec], pp: int, lps) -> tuple[str, Optional[int]]:
    mode = ac.get("mode", "selective")
    if mode in ("none", "full"):
        return mode, None
    option = str(ac.get("selective_ac_option", "2"))
    if mode != "selective" or option == "op" or not option.isdigit() or model is None:
        return "selective", None
    k = max(lps) if lps else model.num_layers // pp
    every = int(option)
    return ("full", None) if every == 1 else ("full", k // every)
