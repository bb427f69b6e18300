"""The parallel plan: degrees, schedule, ZeRO stage, recompute, batch and precision, and the
checks that reject plans which cannot run on a given model and cluster.

Rank order follows Megatron-LM: tensor-parallel ranks are adjacent (innermost), then context,
then data, then pipeline (outermost). Expert parallelism folds onto the tp x cp x dp ranks
(MoE Parallel Folding, Liu et al. 2025): an expert group is ``etp x ep`` adjacent ranks.
"""
from __future__ import annotations

import copy
import operator
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Optional, get_type_hints

from hardware_specs.errors import PlanError, SpecError
from hardware_specs.yamlio import read_yaml_mapping
from models.schema import ModelSpec
from simulator.frameworks import default_split, framework_violation, get_framework
from simulator.frameworks.profile import ATTENTION_BACKENDS   # every attention kernel meshcast costs

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
# Megatron-Core's selective-recompute modules (TransformerConfig.recompute_modules) the lowering
# costs (lowering.recomputed): the attention core (the default when none is named), the norms a
# Transformer Engine layer keeps as separate modules, the MoE experts' activation and the MLA
# up-projections with their RoPE
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj")
RECIPES = ("megatron", "zero", "torch_amp", "torch_fsdp")
PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4")
# FSDP2's gradient reduce-scatter: after every micro-batch (torchtitan's train_step) or only after
# the last, the others accumulating unsharded gradients (FSDPModule.set_requires_gradient_sync)
FSDP_GRAD_SYNC = ("every_microbatch", "last_microbatch")
MOE_DISPATCHERS = ("alltoall", "hybridep", "none")   # simulator/moe_dispatch.py
# Transformer Engine FP8 recipes by Megatron-Core's names (TransformerConfig.fp8_recipe, default
# "delayed"): DelayedScaling, Float8CurrentScaling ("tensorwise"), MXFP8BlockScaling, Float8BlockScaling
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
# the tensor-core dtype a plan precision runs its quantized GEMMs in (hardware_specs DTYPES)
PRECISION_GEMM_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "nvfp4": "fp4"}


def precision_peak_dtype(precision: str) -> str:
    """The datasheet peak ``mfu_precision_peak`` and reports divide by: the quantized GEMM dtype
    (fp8, fp4) for fp8 and nvfp4 plans, else bf16 (fp16 shares it)."""
    return {"fp8": "fp8", "nvfp4": "fp4"}.get(precision, "bf16")
ATTENTIONS = ATTENTION_BACKENDS   # the name the plan-file schema uses


@dataclass(frozen=True)
class ParallelPlan:
    """One way to run a training step. Sizes are counts; ``seq`` in tokens.

    dp                 data-parallel degree (None: derived as gpus / (tp*pp*cp))
    tp                 tensor-parallel degree; ``sequence_parallel`` shards norms/dropout too
    pp, vp             pipeline stages and virtual stages (model chunks) per device
    cp                 context-parallel degree (ring attention over the sequence)
    ep, etp            expert-parallel degree and expert tensor-parallel degree (default tp)
    zero_stage         0 none, 1 optimizer states (Megatron distributed optimizer), 2 +grads, 3 +params
                       (None: the framework's default, e.g. 1 for Megatron-Core, 3 for torchtitan)
    recompute          none | selective (attention core) | full; ``recompute_layers`` limits
                       full recompute to that many layers per stage
    recompute_modules  under selective recompute, the Megatron-Core modules recomputed
                       (RECOMPUTE_MODULES; --recompute-modules); None: the attention core only
    mbs, gbs           micro-batch and global batch, in sequences
    seq                sequence length (None: the model's)
    precision          bf16 | fp16 | fp8 (fp8 GEMMs, bf16 elsewhere, as Transformer Engine) | nvfp4
                       (Transformer Engine's NVFP4BlockScaling recipe: the transformer layers' linear
                       GEMMs (fprop, dgrad, wgrad) in NVFP4 at the fp4 tensor-core peak, attention,
                       router and output head in bf16; needs an accelerator with fp4 tensor cores)
    schedule           gpipe | 1f1b | interleaved (None: interleaved when vp > 1, else 1f1b)
    tp_comm_overlap    hide TP collectives under the adjacent GEMMs (Megatron --tp-comm-overlap)
    ep_comm_overlap    hide the MoE all-to-alls under expert compute (DualPipe-style chunk overlap)
    offload_optimizer  optimizer states and step on the host (ZeRO-Offload, Ren et al. 2021)
    offload_params     parameters on the host too, fetched per layer (ZeRO-Infinity; needs
                       zero_stage 3 and offload_optimizer)
    fsdp_grad_sync     FSDP2 (recipe torch_fsdp) only: ``every_microbatch`` (torchtitan's loop: a
                       reduce-scatter after each micro-batch's backward) or ``last_microbatch``
                       (``set_requires_gradient_sync(False)`` on all but the last: no reduce-scatter
                       there, fp32 unsharded gradients accumulated instead; simulator.memory
                       fsdp_deferred_peak, simulator.engine fsdp_deferred_sync_seconds)
    framework          the framework that runs the plan (simulator/frameworks/*.yaml): it decides
                       which plans exist, what each ZeRO stage keeps in memory and which kernels run
    recipe             derived from the framework and ZeRO stage (None until resolved): megatron
                       (bf16 weights, fp32 main grads + Adam), zero (DeepSpeed: bf16 grads, the ZeRO
                       paper's 2+2+12 bytes/param), torch_amp (fp32 params under autocast, PyTorch DDP
                       when dp > 1), torch_fsdp (FSDP2 full shard: fp32 sharded params, bf16 compute,
                       fp32 gradient reduction)
    attention          attention kernel (None: the framework's default backend)
    bf16_layers        (first, last): decoder layers kept in bf16 at the start and the end of the
                       model under an fp8 or nvfp4 precision (Megatron-Core --first-last-layers-bf16
                       with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16: fp8_utils and
                       fp4_utils get_fp*_context run layer_no < first or >= num_layers - last outside
                       the quantized autocast); None: every layer quantized
    gemm_precision     per-GEMM precision overrides, ((op name, precision), ...) with the forward
                       GEMM's lowering name (attention.qkv, mamba.out_proj, ...): Megatron-Core's
                       --te-precision-config-file matchers (extensions/TransformerEngineMixedPrecision.md);
                       applied only in quantized layers, as Megatron-Core skips an override where the
                       layer itself runs unquantized
    moe_dispatcher     MoE token dispatcher (simulator/moe_dispatch.py): alltoall (Megatron-Core's
                       MoEAlltoAllTokenDispatcher: permute, all-to-all, sort by local expert) | hybridep
                       (MoEFlexTokenDispatcher with the HybridEP backend: permutation fused into the
                       communication kernels) | none (no routing work beyond the router GEMM and the
                       all-to-alls); None: the framework's (Kernels.moe_dispatcher)
    moe_permute_fusion Transformer Engine's fused permute / unpermute / sort-chunks kernels
                       (--moe-permute-fusion); None: the framework's
    moe_router_fusion  Transformer Engine's fused top-k and aux-loss score kernels (--moe-router-fusion);
                       None: the framework's
    fp8_recipe         Transformer Engine's FP8 recipe under an fp8 precision, by Megatron-Core's names
                       (--fp8-recipe): delayed | tensorwise | mxfp8 | blockwise; None: Megatron-Core's
                       default, delayed. Costed: only the delayed recipe quantizes a grouped layer's
                       per-expert inputs in one fused kernel (lowering._gemm); the tensor-core peak is
                       the fp8 one for all four
    moe_host_sync      whether the dispatcher synchronises the host each MoE forward to read the
                       token counts; None: as the dispatcher does (every dropless forward; never with
                       token drop and padding); False where a static budget avoids it
                       (--moe-expert-rank-capacity-factor with HybridEP, as full-iteration CUDA graphs need)
    stage_clusters     heterogeneous pipelines: the catalog cluster of each stage (None: every stage
                       on the simulated hardware); each stage is costed on its cluster's accelerator,
                       calibration, fabric and HBM, and sends between stages on different clusters
                       cross the inter-cluster link (simulator.engine)
    """

    tp: int = 1
    pp: int = 1
    dp: Optional[int] = None
    vp: int = 1
    cp: int = 1
    ep: int = 1
    etp: Optional[int] = None
    sequence_parallel: bool = True
    zero_stage: Optional[int] = None
    recompute: str = "none"
    recompute_layers: Optional[int] = None
    recompute_modules: Optional[tuple[str, ...]] = None
    mbs: int = 1
    gbs: Optional[int] = None
    seq: Optional[int] = None
    precision: str = "bf16"
    schedule: Optional[str] = None
    recipe: Optional[str] = None
    attention: Optional[str] = None
    dropout: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    overlap_p2p: Optional[bool] = None
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp_grad_sync: str = "every_microbatch"
    layers_per_stage: Optional[tuple[int, ...]] = None
    num_gpus: Optional[int] = None
    framework: str = "megatron-core"
    stage_clusters: Optional[tuple[str, ...]] = None
    bf16_layers: Optional[tuple[int, int]] = None
    gemm_precision: Optional[tuple[tuple[str, str], ...]] = None
    moe_dispatcher: Optional[str] = None
    moe_permute_fusion: Optional[bool] = None
    moe_router_fusion: Optional[bool] = None
    moe_host_sync: Optional[bool] = None
    fp8_recipe: Optional[str] = None

    # ---- derived -------------------------------------------------------------------------
    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def pipeline_schedule(self) -> str:
        return self.schedule or ("interleaved" if self.vp > 1 else "1f1b")

    @property
    def recomputes_core_attn(self) -> bool:
        """Selective recompute re-runs the attention core (Megatron-Core's default module, or named
        in ``recompute_modules``)."""
        return self.recompute == "selective" and "core_attn" in (self.recompute_modules or ("core_attn",))

    @property
    def sp(self) -> bool:
        return self.sequence_parallel and self.tp > 1

    def microbatches(self) -> int:
        """Micro-batches per step per pipeline: gbs / (dp x mbs)."""
        return self.gbs // (self.dp * self.mbs)

    @property
    def fsdp_defers_sync(self) -> bool:
        """FSDP2 (recipe torch_fsdp) with its gradient reduce-scatter deferred to the last
        micro-batch (``fsdp_grad_sync`` last_microbatch); with one micro-batch that is every one."""
        return self.fsdp_grad_sync == "last_microbatch" and self.recipe == "torch_fsdp"

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["layers_per_stage"] is not None:
            d["layers_per_stage"] = list(d["layers_per_stage"])
        if d["stage_clusters"] is not None:
            d["stage_clusters"] = list(d["stage_clusters"])
        if d["bf16_layers"] is not None:
            d["bf16_layers"] = list(d["bf16_layers"])
        if d["recompute_modules"] is not None:
            d["recompute_modules"] = list(d["recompute_modules"])
        if d["gemm_precision"] is not None:
            d["gemm_precision"] = dict(d["gemm_precision"])
        return d


PLAN_FIELDS = {f.name for f in fields(ParallelPlan)}
_POSITIVE = {"tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "gbs", "seq", "recompute_layers", "num_gpus"}


@lru_cache(maxsize=1)
def _plan_schema() -> type:
    """A strict pydantic model of a plan mapping, built from :class:`ParallelPlan`'s fields:
    counts are positive integers (not floats, not text), switches are booleans (not "false"),
    ``layers_per_stage`` a list of positive integers. ParallelPlan itself stays a plain
    dataclass (the simulator's hot path); only the boundary pays for validation."""
    import pydantic

    hints = get_type_hints(ParallelPlan)
    spec = {}
    for f in fields(ParallelPlan):
        typ = hints[f.name]
        if f.name == "layers_per_stage":
            typ = Optional[list[Annotated[int, pydantic.Field(gt=0)]]]
        if f.name in _POSITIVE:
            typ = Optional[Annotated[int, pydantic.Field(gt=0)]] if f.default is None else Annotated[
                int, pydantic.Field(gt=0)]
        if f.name == "zero_stage":
            typ = Optional[Annotated[int, pydantic.Field(ge=0, le=3)]]
        if f.name in ("stage_clusters", "recompute_modules"):
            typ = Optional[list[str]]
        if f.name == "bf16_layers":
            typ = Optional[Annotated[list[Annotated[int, pydantic.Field(ge=0)]],
                                     pydantic.Field(min_length=2, max_length=2)]]
        if f.name == "gemm_precision":
            typ = Optional[dict[str, str]]
        spec[f.name] = (typ, f.default)
    config = pydantic.ConfigDict(strict=True, extra="forbid")
    return pydantic.create_model("PlanMapping", __config__=config, **spec)


def plan_from_dict(data: dict, origin: str = "plan") -> ParallelPlan:
    """Build a plan from a mapping (a plan YAML or CLI options); an unknown key or a value of the
    wrong type or out of range raises :class:`SpecError` naming ``origin: field``."""
    import pydantic

    if not isinstance(data, dict):
        raise SpecError(origin or "plan", f"expected a mapping of plan fields, got {type(data).__name__}")
    unknown = set(data) - PLAN_FIELDS
    if unknown:
        name = sorted(map(str, unknown))[0]
        raise SpecError(f"{origin}: {name}" if origin else name, "unknown plan field")
    data = {k: (list(v) if k in ("layers_per_stage", "bf16_layers", "recompute_modules") and isinstance(v, tuple) else
                dict(v) if k == "gemm_precision" and isinstance(v, tuple) else v) for k, v in data.items()}
    try:
        checked = _plan_schema().model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        field = f"{origin}: {loc}" if origin else loc
        raise SpecError(field, f"{err['msg'][0].lower()}{err['msg'][1:]}, got {err.get('input')!r}") from None
    values = {k: getattr(checked, k) for k in data}
    for name, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE), ("recipe", RECIPES),
                          ("precision", PRECISIONS), ("attention", ATTENTIONS),
                          ("fsdp_grad_sync", FSDP_GRAD_SYNC), ("moe_dispatcher", MOE_DISPATCHERS)):
        if values.get(name) is not None and values[name] not in allowed:
            field = f"{origin}: {name}" if origin else name
            raise SpecError(field, f"must be one of {', '.join(allowed)}; got {values[name]!r}")
    for name in ("layers_per_stage", "stage_clusters", "bf16_layers", "recompute_modules"):
        if values.get(name) is not None:
            values[name] = tuple(values[name])
    if values.get("gemm_precision") is not None:
        values["gemm_precision"] = tuple(sorted(values["gemm_precision"].items()))
    for name, want in (values.get("gemm_precision") or ()):
        if want not in PRECISIONS:
            field = f"{origin}: gemm_precision.{name}" if origin else f"gemm_precision.{name}"
            raise SpecError(field, f"must be one of {', '.join(PRECISIONS)}; got {want!r}")
    return ParallelPlan(**values)


def load_plan(path: str | Path) -> ParallelPlan:
    """Read a plan YAML (fields of :class:`ParallelPlan`; nested under ``plan:`` or at top level)."""
    data = read_yaml_mapping(Path(path))
    body = data.get("plan", data)
    if not body:
        raise SpecError(str(path), "empty plan: expected plan fields (tp, pp, dp, mbs, gbs, ...)")
    return plan_from_dict(body, str(path))


_COUNT_FIELDS = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "gbs", "seq", "recompute_layers")
_COUNTS = operator.attrgetter(*_COUNT_FIELDS)


def _positive(name: str, value) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise PlanError(name, f"must be a positive integer, got {value!r}")


def resolve_plan(model: ModelSpec, plan: ParallelPlan, num_gpus: int) -> ParallelPlan:
    """Fill derived fields (dp, gbs, seq, num_gpus) and check that the plan can run.

    Raises :class:`PlanError` naming the first offending field."""
    for name, value in zip(_COUNT_FIELDS, _COUNTS(plan)):
        if value is not None and (value.__class__ is not int or value <= 0):
            _positive(name, value)
    _choice("schedule", plan.schedule, SCHEDULES, allow_none=True)
    _choice("recompute", plan.recompute, RECOMPUTE)
    _check_recompute_modules(plan)
    _choice("recipe", plan.recipe, RECIPES, allow_none=True)
    _choice("precision", plan.precision, PRECISIONS)
    _choice("attention", plan.attention, ATTENTION_BACKENDS, allow_none=True)
    _choice("fsdp_grad_sync", plan.fsdp_grad_sync, FSDP_GRAD_SYNC)
    _check_mixed_precision(plan)
    fw = get_framework(plan.framework)
    if plan.zero_stage is None:
        plan = _with_derived(plan, zero_stage=fw.default_zero)
    if plan.zero_stage not in (0, 1, 2, 3) or plan.zero_stage.__class__ is not int:
        raise PlanError("zero_stage", f"must be 0, 1, 2 or 3, got {plan.zero_stage!r}")
    if plan.num_gpus is not None and plan.num_gpus != num_gpus:
        raise PlanError("num_gpus", f"the plan is for {plan.num_gpus} GPUs but {num_gpus} are in use "
                                    "(drop num_gpus from the plan or use --gpus to match)")
    gpus = num_gpus
    model_par = plan.tp * plan.pp * plan.cp
    dp = plan.dp
    if dp is None:
        if gpus % model_par:
            raise PlanError("tp*pp*cp", f"tp*pp*cp = {model_par} does not divide the {gpus} GPUs")
        dp = gpus // model_par
    if dp * model_par != gpus:
        raise PlanError("dp", f"dp*tp*pp*cp = {dp}*{plan.tp}*{plan.pp}*{plan.cp} = {dp * model_par} "
                              f"is not the GPU count {gpus}")
    split = plan.layers_per_stage
    if split is None and plan.pp > 1 and model.num_layers % (plan.pp * plan.vp):
        split, why = default_split(fw, model.num_layers, plan.pp, plan.vp)
        if split is None:
            raise PlanError("pp", why)
    plan = _with_derived(plan, dp=dp, seq=plan.seq or model.seq_len, gbs=plan.gbs or dp * plan.mbs, num_gpus=gpus,
                         layers_per_stage=split)
    _check_model_fit(model, plan, edge_chunks=fw.export == "megatron")
    broken = framework_violation(fw, model, plan)
    if broken:
        raise PlanError(*broken)
    return _with_derived(plan, recipe=fw.recipe(plan.zero_stage), attention=plan.attention or fw.default_attention)


def split_note(model: ModelSpec, plan: ParallelPlan) -> str:
    """How a resolved plan's uneven layer split came about, when its framework chose it ('' otherwise)."""
    if plan.layers_per_stage is None or plan.pp == 1 or model.num_layers % (plan.pp * plan.vp) == 0:
        return ""
    split, how = default_split(get_framework(plan.framework), model.num_layers, plan.pp, plan.vp)
    return how if split == tuple(plan.layers_per_stage) else ""


def check_precision(precision: str, accelerator) -> None:
    """Raise :class:`PlanError` on ``precision`` when ``accelerator``'s datasheet has no dense
    peak for its GEMM dtype (fp8 GEMMs on an A100, nvfp4 on an H100, say): there is no kernel to
    cost."""
    dtype = PRECISION_GEMM_DTYPE.get(precision, precision)
    if getattr(accelerator.peak_flops_dense, dtype, None) is None:
        have = [d for d in PRECISIONS if getattr(accelerator.peak_flops_dense, PRECISION_GEMM_DTYPE[d], None)]
        what = "fp4 (NVFP4)" if dtype == "fp4" else dtype
        raise PlanError("precision", f"{accelerator.name} has no {what} tensor-core peak; "
                                     f"it supports {', '.join(have) or 'none of ' + ', '.join(PRECISIONS)}")


def _with_derived(plan: ParallelPlan, **values) -> ParallelPlan:
    """A copy of ``plan`` with derived fields set (dataclasses.replace re-validates every field
    and is the slowest step of a simulation; these values were checked above)."""
    out = copy.copy(plan)
    for k, v in values.items():
        object.__setattr__(out, k, v)
    return out


def _check_recompute_modules(plan: ParallelPlan) -> None:
    """``recompute_modules`` names modules of RECOMPUTE_MODULES, at least one, and goes with
    selective recompute (Megatron-Core reads --recompute-modules only at granularity selective)."""
    mods = plan.recompute_modules
    if mods is None:
        return
    if not isinstance(mods, tuple) or not mods or any(m not in RECOMPUTE_MODULES for m in mods):
        raise PlanError("recompute_modules", f"must be one or more of {', '.join(RECOMPUTE_MODULES)}, got {mods!r}")
    if plan.recompute != "selective":
        raise PlanError("recompute_modules", f"names the modules of selective recompute (the plan has recompute "
                                             f"{plan.recompute})")


def _check_mixed_precision(plan: ParallelPlan) -> None:
    """``bf16_layers`` is two counts of layers (>= 0); each ``gemm_precision`` override names a
    plan precision (:data:`PRECISIONS`)."""
    if plan.bf16_layers is not None:
        if len(plan.bf16_layers) != 2 or any(n.__class__ is not int or n < 0 for n in plan.bf16_layers):
            raise PlanError("bf16_layers", f"must be (first, last) counts >= 0, got {plan.bf16_layers!r}")
    for name, want in plan.gemm_precision or ():
        _choice(f"gemm_precision.{name}", want, PRECISIONS)
    _choice("fp8_recipe", plan.fp8_recipe, FP8_RECIPES, allow_none=True)


def gemm_precision_override(plan: ParallelPlan, name: str) -> Optional[str]:
    """The GEMM dtype ``plan.gemm_precision`` sets for the forward GEMM ``name`` (None: the
    plan's), only where the plan itself quantizes (fp8, nvfp4): Megatron-Core applies its
    --te-precision-config-file overrides to quantized layers only (TransformerEngineMixedPrecision.md)."""
    if not plan.gemm_precision or plan.precision not in ("fp8", "nvfp4"):
        return None
    want = dict(plan.gemm_precision).get(name)
    return PRECISION_GEMM_DTYPE[want] if want else None


def _choice(name: str, value, allowed, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value not in allowed:
        raise PlanError(name, f"must be one of {', '.join(allowed)}; got {value!r}")


def _too_few_layers_for_vp(split: tuple[int, ...], vp: int, edge_chunks: bool) -> bool:
    """Whether a stage holds fewer decoder layers than its ``vp`` virtual chunks need. With
    ``edge_chunks`` (Megatron-Core's --account-for-embedding/loss-in-pipeline-split) the embedding
    and the loss count as one layer of the first and last stage, so one of their chunks may hold
    only the embedding or only the loss: those two stages need vp - 1 decoder layers."""
    last = len(split) - 1
    return any(n < vp - (1 if edge_chunks and i in (0, last) else 0) for i, n in enumerate(split))


def _check_model_fit(model: ModelSpec, plan: ParallelPlan, edge_chunks: bool = False) -> None:
    tp, pp, cp = plan.tp, plan.pp, plan.cp
    if model.num_heads % tp:
        raise PlanError("tp", f"tp={tp} does not divide the {model.num_heads} attention heads")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise PlanError("tp", f"tp={tp} and the {model.kv_heads} KV heads: neither divides the other")
    if plan.gbs % (plan.dp * plan.mbs):
        raise PlanError("gbs", f"global batch {plan.gbs} is not divisible by dp*mbs = {plan.dp}*{plan.mbs}")
    if plan.seq % (2 * cp if cp > 1 else 1):
        raise PlanError("cp", f"sequence {plan.seq} is not divisible by 2*cp = {2 * cp} (load-balanced causal CP)")
    if plan.sp and (plan.seq // cp) % tp:
        # Megatron-Core splits the [s, b, h] activations along s over the tp ranks and asserts the split
        # is even (tensor_parallel/mappings.py _split_along_first_dim: "First dimension of the tensor
        # should be divisible by tensor parallel size")
        raise PlanError("seq", f"sequence parallelism splits each rank's {plan.seq // cp} tokens over tp={tp}: "
                               f"not divisible (a multiple of {tp * cp} tokens, or --no-sp)")
    if plan.layers_per_stage is not None:
        if len(plan.layers_per_stage) != pp:
            raise PlanError("layers_per_stage", f"has {len(plan.layers_per_stage)} entries for pp={pp}")
        if sum(plan.layers_per_stage) != model.num_layers or min(plan.layers_per_stage) < 1:
            raise PlanError("layers_per_stage", f"must be positive and sum to {model.num_layers} layers")
        if plan.vp > 1 and _too_few_layers_for_vp(tuple(plan.layers_per_stage), plan.vp, edge_chunks):
            raise PlanError("vp", f"vp={plan.vp} exceeds the layers of the smallest stage")
    elif model.num_layers % (pp * plan.vp):
        raise PlanError("pp", f"pp*vp = {pp}*{plan.vp} does not divide the {model.num_layers} layers "
                              "(give layers_per_stage for an uneven split)")
    if plan.stage_clusters is not None and len(plan.stage_clusters) != pp:
        raise PlanError("stage_clusters", f"has {len(plan.stage_clusters)} entries for pp={pp}")
    if plan.vp > 1 and pp == 1:
        raise PlanError("vp", "virtual stages need pp > 1")
    if plan.pipeline_schedule == "interleaved" and plan.microbatches() % pp:
        raise PlanError("gbs", f"interleaved 1F1B needs the {plan.microbatches()} micro-batches "
                               f"to be a multiple of pp={pp}")
    if plan.zero_stage == 3 and pp > 1:
        raise PlanError("zero_stage", "ZeRO-3 with pipeline parallelism (pp > 1) is not modelled by meshcast yet")
    if model.moe is None:
        if plan.ep > 1:
            raise PlanError("ep", f"ep={plan.ep} but {model.name} has no experts")
    else:
        if model.moe.num_experts % plan.ep:
            raise PlanError("ep", f"ep={plan.ep} does not divide the {model.moe.num_experts} experts")
        if (tp * cp * plan.dp) % (plan.ep * plan.expert_tp):
            raise PlanError("ep", f"ep*etp = {plan.ep}*{plan.expert_tp} does not divide tp*cp*dp = {tp * cp * plan.dp}")
    if plan.recompute_layers is not None and plan.recompute != "full":
        raise PlanError("recompute_layers", f"fully recomputes that many layers per stage: needs recompute full "
                                            f"(the plan has recompute {plan.recompute})")
    if plan.offload_params and not (plan.zero_stage == 3 and plan.offload_optimizer):
        raise PlanError("offload_params", "parameter offload (ZeRO-Infinity) needs zero_stage 3 and offload_optimizer")
