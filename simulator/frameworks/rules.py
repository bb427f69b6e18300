"""The rules of each framework that its profile's data cannot say, and how it splits layers
over pipeline stages when they do not divide evenly.

Every rule returns ``(field, reason)`` naming the plan field and the framework's own rule, or
None; simulator.plan.resolve_plan raises it as a PlanError and the planner skips the plan, so
the plan space is exactly the framework's space (see docs/frameworks.md for each rule's source).
"""
from __future__ import annotations

from typing import Optional

from models.schema import ModelSpec
from simulator.frameworks.profile import FrameworkProfile

Violation = Optional[tuple[str, str]]


def framework_violation(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    """The first rule of ``fw`` that a plan (degrees resolved) breaks, as (field, reason)."""
    for check in (_zero_rule, _degree_rule, _schedule_rule, _precision_rule, _feature_rule, _kernel_rule,
                  _recompute_rule, _grad_sync_rule, _SPECIFIC.get(fw.name, _no_rule)):
        found = check(fw, model, plan)
        if found:
            return found
    return None


def _say(fw: FrameworkProfile, field: str, reason: str) -> tuple[str, str]:
    return field, f"{fw.name}: {reason} (--framework selects another; `meshcast catalog frameworks` lists them)"


def _no_rule(fw, model, plan) -> Violation:
    return None


def _zero_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    if plan.zero_stage not in fw.zero:
        offered = ", ".join(f"{z} ({fw.zero[z].means.split(':')[0]})" for z in fw.zero_stages)
        return _say(fw, "zero_stage", f"has no ZeRO-{plan.zero_stage}; it offers {offered}")
    if plan.recipe is not None and plan.recipe != fw.recipe(plan.zero_stage):
        return _say(fw, "recipe", f"ZeRO-{plan.zero_stage} keeps model states as {fw.recipe(plan.zero_stage)!r}, "
                                  f"not {plan.recipe!r} (leave recipe unset: the framework decides)")
    par = fw.parallelism
    if plan.pp > 1 and plan.zero_stage > par.max_zero_with_pp:
        return _say(fw, "zero_stage", f"pipeline parallelism supports ZeRO-{par.max_zero_with_pp} at most")
    if plan.pp > 1 and fw.grads_per_microbatch(plan.zero_stage) and not par.sharded_data_parallel_with_pp:
        return _say(fw, "zero_stage", f"ZeRO-{plan.zero_stage} ({fw.zero[plan.zero_stage].means.split(':')[0]}) "
                                      "with pipeline parallelism is not modelled by meshcast yet")
    return None


def _degree_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    par = fw.parallelism
    for name, degree, offered in (("tp", plan.tp, par.tp), ("pp", plan.pp, par.pp), ("cp", plan.cp, par.cp),
                                  ("ep", plan.ep, par.ep)):
        if degree > 1 and not offered:
            return _say(fw, name, f"has no {_DIMENSION[name]} ({name}={degree})")
    if plan.tp > 1 and par.sequence_parallel == "always" and not plan.sequence_parallel:
        return _say(fw, "sequence_parallel", "always shards norms over the sequence with tensor parallelism")
    if plan.tp > 1 and par.sequence_parallel == "never" and plan.sequence_parallel and par.tp:
        return _say(fw, "sequence_parallel", "has no sequence parallelism")
    return None


_DIMENSION = {"tp": "tensor parallelism", "pp": "pipeline parallelism", "cp": "context parallelism",
              "ep": "expert parallelism"}


def _schedule_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    if plan.pp > 1 and plan.pipeline_schedule not in fw.parallelism.schedules:
        return _say(fw, "schedule", f"has no {plan.pipeline_schedule} schedule "
                                    f"(offers {', '.join(fw.parallelism.schedules)})")
    return None


def _precision_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    if plan.precision not in fw.precision:
        return _say(fw, "precision", f"{plan.precision} is not modelled for it (offers {', '.join(fw.precision)})")
    return None


def _feature_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    for feature in ("tp_comm_overlap", "ep_comm_overlap", "offload_optimizer", "offload_params"):
        if getattr(plan, feature) and feature not in fw.features:
            return _say(fw, feature, "does not offer it")
    return None


def _kernel_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    if plan.attention is not None and plan.attention not in fw.kernels.attention:
        return _say(fw, "attention", f"runs {', '.join(fw.kernels.attention)} attention, not {plan.attention}")
    return None


def _grad_sync_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    """A deferred gradient sync (``fsdp_grad_sync`` last_microbatch) is FSDP2's
    ``set_requires_gradient_sync(False)``: meshcast models it for FSDP2 only (recipe torch_fsdp)."""
    if plan.fsdp_grad_sync == "every_microbatch" or fw.recipe(plan.zero_stage) == "torch_fsdp":
        return None
    return _say(fw, "fsdp_grad_sync", f"{plan.fsdp_grad_sync} is FSDP2's deferred gradient sync; "
                                      f"ZeRO-{plan.zero_stage} here is not FSDP2 (recipe "
                                      f"{fw.recipe(plan.zero_stage)!r}): leave it every_microbatch")


def grad_sync_expressible(fw: FrameworkProfile, policy: str, microbatches: Optional[int] = None) -> bool:
    """Whether ``fw``'s launch config can say the FSDP2 gradient sync ``policy`` of a plan with
    ``microbatches`` micro-batches (None: any count, as the planner searches). torchtitan's
    Trainer.train_step runs forward_backward_step for each micro-batch with no
    set_requires_gradient_sync call and its job config has no field for one (torchtitan/train.py,
    torchtitan/config/job_config.py), so its FSDP2 reduces after every micro-batch; a deferred sync
    over one micro-batch is that same step. Plain PyTorch (no export) can call it itself."""
    return fw.export != "torchtitan" or policy == "every_microbatch" or microbatches == 1


def _recompute_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    """Full recompute of N layers per stage exists only where the framework's option says exactly N."""
    n = plan.recompute_layers
    if plan.recompute != "full" or n is None:
        return None
    top = max(plan.layers_per_stage) if plan.layers_per_stage else model.num_layers // plan.pp
    if n >= top or recompute_expressible(fw, n, top, plan.vp):
        return None
    if fw.export == "megatron":
        return _say(fw, "recompute_layers", f"--recompute-method block recomputes --recompute-num-layers layers of "
                                            f"each of the vp={plan.vp} model chunks: {n} is not a multiple of vp")
    return _say(fw, "recompute_layers", f"layer SAC checkpoints every k-th of a stage's {top} layers "
                                        f"({top} // k layers): no k gives {n}")


def recompute_expressible(fw: FrameworkProfile, n: int, top: int, vp: int) -> bool:
    """Whether ``fw`` can recompute exactly ``n`` of a stage's ``top`` layers (n < top).

    Megatron-Core: --recompute-method block --recompute-num-layers k recomputes the first k layers
    of every model chunk (megatron/core/transformer/transformer_block.py _checkpointed_forward,
    "block"), so n = k * vp. torchtitan: activation_checkpoint mode "selective" with
    selective_ac_option "k" wraps every k-th block (torchtitan/distributed/activation_checkpoint.py
    _apply_layer_sac: ``_layer_sac_count % ac_freq == 0``), so n = top // k. DeepSpeed: the model
    code wraps whichever layers it wants in deepspeed.checkpointing.checkpoint."""
    if fw.export == "megatron":
        return n % vp == 0
    if fw.export == "torchtitan":
        return top // (top // n) == n
    return True


def recompute_at_least(fw: FrameworkProfile, n: int, top: int, vp: int) -> Optional[int]:
    """The least recompute count >= ``n`` that ``fw`` expresses exactly; None (every layer) if none below ``top``."""
    return next((m for m in range(n, top) if recompute_expressible(fw, m, top, vp)), None)


def _torchtitan_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    """torchtitan applies DDP (data_parallel_replicate without shard) only to a 1-D mesh
    (torchtitan/distributed/parallel_dims.py; parallelize.py apply_ddp); FSDP2 whenever cp > 1
    (parallelize.py: ``if parallel_dims.fsdp_enabled``); expert TP of 1 or tp only."""
    if plan.zero_stage == 0 and plan.dp > 1 and (plan.tp > 1 or plan.pp > 1 or plan.cp > 1 or plan.ep > 1):
        return _say(fw, "zero_stage", "runs DDP (data_parallel_replicate_degree) only without other parallelism; "
                                      "use ZeRO-3 (FSDP2, data_parallel_shard_degree)")
    if plan.ep > 1 and plan.zero_stage != 3:
        return _say(fw, "ep", "composes expert parallelism with FSDP2 only (ZeRO-3)")
    if plan.cp > 1 and plan.zero_stage != 3:
        return _say(fw, "zero_stage", "shards parameters with FSDP2 over the context-parallel mesh whenever cp > 1 "
                                      "(ParallelDims.fsdp_enabled is dp_shard or cp enabled): cp needs ZeRO-3")
    if plan.ep > 1 and plan.expert_tp not in (1, plan.tp):
        return _say(fw, "etp", f"supports expert tensor parallelism of 1 or tp={plan.tp} only "
                               "(ParallelDims._validate: ETP=TP or ETP=1)")
    return None


def _deepspeed_rule(fw: FrameworkProfile, model: ModelSpec, plan) -> Violation:
    """DeepSpeed's pipeline engine runs one model chunk per stage (no interleaving)."""
    if plan.vp > 1:
        return _say(fw, "vp", "its pipeline engine has no virtual stages")
    lps = plan.layers_per_stage
    if lps is not None and len(set(lps)) > 1 and tuple(lps) != default_split(fw, sum(lps), plan.pp, plan.vp)[0]:
        return _say(fw, "layers_per_stage", "PipelineModule partitions the layers itself (partition_method "
                                            "'uniform'); it takes no explicit split")
    return None


# Megatron-Core needs no rule of its own for uneven stages: --pipeline-model-parallel-layout
# (TransformerConfig.pipeline_model_parallel_layout) places any number of layers in each
# (virtual) stage; simple splits export as --decoder-first/last-pipeline-num-layers or the
# account-for-embedding/loss flags instead (simulator.frameworks.megatron_config).
_SPECIFIC = {"torchtitan": _torchtitan_rule, "deepspeed": _deepspeed_rule, "deepspeed-0.3": _deepspeed_rule}


# ---- layer splits ------------------------------------------------------------------------------
def default_split(fw: FrameworkProfile, num_layers: int, pp: int, vp: int) -> tuple[Optional[tuple[int, ...]], str]:
    """(layers per stage, how the framework got them) when ``pp * vp`` does not divide the layers;
    (None, reason) where the framework cannot split them without explicit hints."""
    L = num_layers
    if pp == 1 or L % (pp * vp) == 0:
        return None, ""
    if fw.export == "megatron":
        return _megatron_split(L, pp, vp)
    if fw.export == "torchtitan":
        return _weighted_split(L, pp, vp, "torchtitan counts the embedding and the output as one layer each "
                                          "(generate_llm_fqn_per_model_part, input/output weight 1)")
    if fw.export == "deepspeed":
        return _weighted_split(L, pp, vp, "DeepSpeed PipelineModule partitions the layers as evenly as it can")
    return None, f"{fw.name} has no pipeline parallelism"


def _megatron_split(L: int, pp: int, vp: int) -> tuple[Optional[tuple[int, ...]], str]:
    """Megatron-Core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
    the embedding and the loss each count as one layer of the first and last stage."""
    for extra, flags in ((2, "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"),
                         (1, "--account-for-embedding-in-pipeline-split")):
        if (L + extra) % pp == 0 and ((L + extra) // pp) % vp == 0 and (L + extra) // pp > 1:
            k = (L + extra) // pp
            split = [k] * pp
            split[0] -= 1
            if extra == 2:
                split[-1] -= 1
            return tuple(split), f"layers split as Megatron-Core does with {flags}: {_short(split)}"
    return None, (f"{L} layers do not split over pp*vp = {pp}*{vp}, even counting the embedding and loss as layers "
                  "(Megatron-Core's --account-for-embedding/loss-in-pipeline-split); give layers_per_stage "
                  "(--decoder-first/last-pipeline-num-layers)")


def _weighted_split(L: int, pp: int, vp: int, how: str) -> tuple[Optional[tuple[int, ...]], str]:
    """Embedding and output weighted as one layer each, the rest spread as evenly as possible
    (extra layers to the middle stages first), each stage a multiple of vp where possible."""
    total = L + 2
    base, extra = divmod(total, pp)
    split = [base + (1 if i < extra else 0) for i in range(pp)]
    split[0] -= 1
    split[-1] -= 1
    if min(split) < max(1, vp) or any(n % vp for n in split):
        return None, f"{L} layers do not split over pp={pp} with vp={vp}; give layers_per_stage"
    return tuple(split), f"layers split as {how}: {_short(split)}"


def _short(split) -> str:
    if len(split) > 4 and len(set(split[1:-1])) == 1:
        return f"[{split[0]}, {split[1]} x {len(split) - 2}, {split[-1]}]"
    return str(list(split))
