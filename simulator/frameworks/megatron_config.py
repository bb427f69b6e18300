"""Megatron-LM launch config: a ``torchrun ... pretrain_gpt.py`` script, and back.

Argument names follow Megatron-LM main (megatron/training/arguments.py, commit d98e8a64,
2026-08); docs/frameworks.md maps every field. ``write_config(model, plan)`` takes a plan
resolved by simulator.plan.resolve_plan; ``read_config(text, model)`` reads a script or a bare
argument list (unknown flags are noted and ignored).
"""
from __future__ import annotations

import ast
import re
import shlex
from typing import Optional

from hardware_specs.errors import MeshcastError, SpecError
from models.schema import ModelSpec
from simulator.frameworks.launch import ALLOC_CONF, ALLOC_WHY, ImportedConfig, LaunchConfig
from simulator.plan import RECOMPUTE_MODULES, ParallelPlan

# Training arguments meshcast does not model but Megatron needs to start; stated defaults.
TRAINING_DEFAULTS = (("--train-iters", 100), ("--lr", 3e-4), ("--min-lr", 3e-5), ("--lr-decay-style", "cosine"),
                     ("--lr-warmup-iters", 10), ("--weight-decay", 0.1), ("--adam-beta1", 0.9),
                     ("--adam-beta2", 0.95), ("--clip-grad", 1.0), ("--init-method-std", 0.02),
                     ("--log-interval", 1), ("--eval-iters", 0), ("--mock-data", None),
                     ("--tokenizer-type", "NullTokenizer"), ("--split", "99,1,0"))
_ACT = {"swiglu": "--swiglu", "squared_relu": "--squared-relu"}


# ---- writer ------------------------------------------------------------------------------------
def write_config(model: ModelSpec, plan: ParallelPlan) -> LaunchConfig:
    """The runnable launch script of a resolved plan (torchrun + pretrain_gpt.py arguments)."""
    args, notes = megatron_arguments(model, plan)
    return LaunchConfig("megatron", launch_script(args, plan), "launch_megatron.sh", tuple(notes))


def megatron_arguments(model: ModelSpec, plan: ParallelPlan) -> tuple[list[str], list[str]]:
    """(arguments, notes) for pretrain_gpt.py: model, parallelism, batch, precision, training."""
    args: list[str] = []
    notes: list[str] = []
    for part in (_model_args, _parallel_args, _pipeline_args, _zero_args, _recompute_args, _precision_args,
                 _training_args):
        part(model, plan, args, notes)
    return args, notes


def _add(args: list[str], flag: str, value=None) -> None:
    args.append(flag)
    if value is not None:
        args.append(str(value))


def _model_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    """Model dimensions, attention variant, MoE and MLA, as ModelSpec states them."""
    for flag, v in (("--num-layers", m.num_layers), ("--hidden-size", m.hidden), ("--ffn-hidden-size", m.ffn_hidden),
                    ("--num-attention-heads", m.num_heads), ("--seq-length", p.seq),
                    ("--max-position-embeddings", max(p.seq, m.seq_len))):
        _add(a, flag, v)
    if m.mla is None:
        if m.kv_heads != m.num_heads:
            _add(a, "--group-query-attention")
            _add(a, "--num-query-groups", m.kv_heads)
        _add(a, "--kv-channels", m.dim_head)
    position = {"rope": "rope", "learned": "learned_absolute", "none": "none"}.get(m.position)
    if position is None:
        notes.append(f"{m.position} positions have no Megatron-LM option; exported as rope")
        position = "rope"
    _add(a, "--position-embedding-type", position)
    if position == "rope":
        _add(a, "--rotary-base", f"{m.rope_base:g}" if m.rope_base else 10000)
        if not m.rope_base:
            notes.append("--rotary-base 10000 assumed (the model names no RoPE base; it does not change the step time)")
    _add(a, "--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm")
    if m.activation in _ACT:
        _add(a, _ACT[m.activation])
    elif m.activation != "gelu":
        notes.append(f"{m.activation} has no Megatron-LM flag; exported as gelu (same FLOPs for relu; geglu has "
                     "a third matrix)")
    if not m.tied_embeddings:
        _add(a, "--untie-embeddings-and-output-weights")
    if not m.linear_bias:
        _add(a, "--disable-bias-linear")
    if m.qkv_bias and not m.linear_bias:
        _add(a, "--add-qkv-bias")
    _add(a, "--vocab-size", m.vocab)
    if m.vocab % 128:
        _add(a, "--make-vocab-size-divisible-by", 1)   # keep the model's vocabulary (padded to tp only)
        if m.vocab % p.tp:
            notes.append(f"Megatron pads the {m.vocab}-entry vocabulary to a multiple of tp={p.tp}")
    if not p.dropout:
        _add(a, "--attention-dropout", 0.0)
        _add(a, "--hidden-dropout", 0.0)
    if m.moe is not None:
        _moe_args(m, p, a, notes)
    if m.mla is not None:
        _mla_args(m, a)
    if m.mtp_layers:
        _add(a, "--mtp-num-layers", m.mtp_layers)


def _moe_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    moe = m.moe
    _add(a, "--num-experts", moe.num_experts)
    _add(a, "--moe-router-topk", moe.top_k)
    _add(a, "--moe-ffn-hidden-size", moe.expert_ffn_hidden)
    if moe.shared_experts:
        _add(a, "--moe-shared-expert-intermediate-size", shared_total(m))
    if moe.first_dense_layers or moe.layer_frequency > 1:
        _add(a, "--moe-layer-freq", moe_layer_pattern(m))
    if moe.capacity_factor is not None:
        _add(a, "--moe-expert-capacity-factor", moe.capacity_factor)
    _add(a, "--moe-token-dispatcher-type", "alltoall")
    _add(a, "--moe-router-load-balancing-type", "aux_loss")
    if p.framework != "megatron-core-local":
        _add(a, "--moe-grouped-gemm")


def _mla_args(m: ModelSpec, a: list) -> None:
    mla = m.mla
    _add(a, "--multi-latent-attention")
    if mla.q_lora_rank is not None:
        _add(a, "--q-lora-rank", mla.q_lora_rank)
    for flag, v in (("--kv-lora-rank", mla.kv_lora_rank), ("--qk-head-dim", mla.qk_nope_head_dim),
                    ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim)):
        _add(a, flag, v)


def shared_total(m: ModelSpec) -> int:
    """All shared experts' intermediate size together (Megatron's one shared-expert MLP)."""
    moe = m.moe
    return moe.shared_experts * (moe.shared_expert_ffn_hidden or moe.expert_ffn_hidden)


def moe_layer_pattern(m: ModelSpec) -> str:
    """--moe-layer-freq as Megatron's Python list expression, e.g. ``([0]*3+[1]*58)``."""
    flags = [int(m.is_moe_layer(i)) for i in range(m.num_layers)]
    runs: list[list[int]] = []
    for f in flags:
        if runs and runs[-1][0] == f:
            runs[-1][1] += 1
        else:
            runs.append([f, 1])
    return "(" + "+".join(f"[{f}]*{n}" for f, n in runs) + ")"


def _parallel_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    _add(a, "--tensor-model-parallel-size", p.tp)
    if p.sp:
        _add(a, "--sequence-parallel")
    if p.cp > 1:
        _add(a, "--context-parallel-size", p.cp)
    if m.moe is not None:
        _add(a, "--expert-model-parallel-size", p.ep)
        _add(a, "--expert-tensor-parallel-size", p.expert_tp)
    _add(a, "--micro-batch-size", p.mbs)
    _add(a, "--global-batch-size", p.gbs)
    if p.framework == "megatron-core-local":
        _add(a, "--transformer-impl", "local")
    else:
        # cudnn: TE's own choice on Hopper+ (auto); fa3 and flash: TE's FlashAttention (FA3 when installed)
        _add(a, "--attention-backend", {"unfused": "unfused", "fa3": "flash", "flash": "flash"}.get(p.attention, "auto"))
    if p.tp_comm_overlap:
        _add(a, "--tp-comm-overlap")
    if p.ep_comm_overlap:
        _add(a, "--overlap-moe-expert-parallel-comm")


def _pipeline_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    """Pipeline degree, virtual stages and the layer split (even, automatic, first/last or layout:
    Megatron takes at most one of --num-virtual-stages-per-pipeline-rank and the layout)."""
    _add(a, "--pipeline-model-parallel-size", p.pp)
    if p.pp == 1:
        return
    if p.overlap_p2p is False and p.vp > 1:
        _add(a, "--no-overlap-p2p-communication")
    if p.schedule == "1f1b" and p.vp > 1:
        notes.append("Megatron-LM interleaves whenever vp > 1; the plan's 1f1b schedule runs interleaved")
    split = _split_flags(m, p)
    if p.vp > 1 and split[:1] != ["--pipeline-model-parallel-layout"]:
        _add(a, "--num-virtual-stages-per-pipeline-rank", p.vp)
    a.extend(split)


def _split_flags(m: ModelSpec, p: ParallelPlan) -> list[str]:
    """The flags of the layer split: none when even, the account-for flags where they give the
    plan's split, first/last when the middle stages are equal (and divisible by vp), else a layout."""
    from simulator.frameworks import default_split, get_framework
    lps, L = p.layers_per_stage, m.num_layers
    if m.mtp_layers and p.pp > 1:
        return ["--pipeline-model-parallel-layout", pipeline_layout(lps or (L // p.pp,) * p.pp, p.vp, m.mtp_layers)]
    if lps is None or len(set(lps)) == 1:
        return []
    if lps == default_split(get_framework(p.framework), L, p.pp, p.vp)[0]:
        loss = (L + 2) % p.pp == 0 and _accounted(L, p.pp, True, True) == lps
        return ["--account-for-embedding-in-pipeline-split"] + (["--account-for-loss-in-pipeline-split"] if loss else [])
    if p.pp > 2 and len(set(lps[1:-1])) == 1 and all(n % p.vp == 0 for n in (lps[0], lps[1], lps[-1])):
        return ["--decoder-first-pipeline-num-layers", str(lps[0]), "--decoder-last-pipeline-num-layers", str(lps[-1])]
    return ["--pipeline-model-parallel-layout", pipeline_layout(lps, p.vp)]


def pipeline_layout(lps, vp: int, mtp: int = 0) -> str:
    """Megatron's PipelineParallelLayerLayout string: the pp*vp virtual stages in model order
    (chunk v of rank r is stage v*pp + r); each rank's layers spread evenly over its chunks."""
    pp = len(lps)
    chunks = [[n // vp + (1 if c < n % vp else 0) for c in range(vp)] for n in lps]
    stages = []
    for v in range(vp):
        for r in range(pp):
            n = chunks[r][v]
            s = ("E" if v == 0 and r == 0 else "") + (f"t*{n}" if n > 1 else "t" * n)
            if v == vp - 1 and r == pp - 1:
                s += "m" * mtp + "L"
            stages.append(s)
    return "|".join(stages)


def _zero_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    """ZeRO stage as Megatron's own options (megatron-core.yaml says what each stage means)."""
    if p.zero_stage >= 1:
        _add(a, "--use-distributed-optimizer")
    if p.zero_stage >= 2:
        _add(a, "--use-megatron-fsdp")
        _add(a, "--data-parallel-sharding-strategy", "optim_grads" if p.zero_stage == 2 else "optim_grads_params")
        _add(a, "--ckpt-format", "fsdp_dtensor")
    if p.overlap_grad_reduce:
        _add(a, "--overlap-grad-reduce")
    if p.overlap_param_gather and p.overlap_grad_reduce and p.zero_stage >= 1:
        _add(a, "--overlap-param-gather")
    elif p.overlap_param_gather and p.zero_stage >= 1:
        notes.append("Megatron-LM overlaps the parameter gather only together with --overlap-grad-reduce; "
                     "exported without either overlap")
    if p.offload_optimizer:
        _add(a, "--optimizer-cpu-offload")
        _add(a, "--optimizer-offload-fraction", 1.0)
        _add(a, "--use-precision-aware-optimizer")   # Megatron's hybrid device optimizer requires it


def _recompute_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    """selective / full (uniform, every layer) / full block N (per model chunk with vp)."""
    if p.recompute == "selective":
        _add(a, "--recompute-granularity", "selective")
        if p.recompute_modules:   # nargs='*': one flag, the module names after it
            a += ["--recompute-modules", *p.recompute_modules]
    elif p.recompute == "full":
        _add(a, "--recompute-granularity", "full")
        if p.recompute_layers is None:
            _add(a, "--recompute-method", "uniform")
            _add(a, "--recompute-num-layers", 1)
        else:
            n = p.recompute_layers
            if n % p.vp:
                notes.append(f"recompute_layers={n} is not a multiple of vp={p.vp}; Megatron-LM's block method "
                             f"counts per model chunk, rounded up to {-(-n // p.vp)}")
            _add(a, "--recompute-method", "block")
            _add(a, "--recompute-num-layers", -(-n // p.vp))


def _precision_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    _add(a, "--fp16" if p.precision == "fp16" else "--bf16")
    if p.precision == "fp8":
        _add(a, "--fp8-format", "hybrid")
        if p.fp8_recipe:
            _add(a, "--fp8-recipe", p.fp8_recipe)
    if p.precision == "nvfp4":
        # Megatron-LM transformer_config.py: fp4 (--fp4-format, 'e2m1'), fp4_recipe (--fp4-recipe,
        # 'nvfp4': TE's NVFP4BlockScaling), fp4_param (--fp4-param-gather); arguments.py
        # validate_args requires TE >= 2.7.0.dev0. Megatron-Bridge's bf16_with_nvfp4_mixed
        # (training/mixed_precision.py) sets the same three.
        _add(a, "--fp4-format", "e2m1")
        _add(a, "--fp4-recipe", "nvfp4")
        _add(a, "--fp4-param-gather")
        notes.append("nvfp4: the transformer layers' linear GEMMs in NVFP4 (Megatron-Bridge's bf16_with_nvfp4_mixed)"
                     + ("" if p.bf16_layers else "; the plan's bf16_layers keeps layers in bf16"))
    if p.bf16_layers and p.precision in ("fp8", "nvfp4"):
        # Megatron-LM arguments.py: --first-last-layers-bf16, --num-layers-at-start-in-bf16 and
        # --num-layers-at-end-in-bf16 (both default 1); fp8_utils / fp4_utils get_fp*_context
        _add(a, "--first-last-layers-bf16")
        _add(a, "--num-layers-at-start-in-bf16", p.bf16_layers[0])
        _add(a, "--num-layers-at-end-in-bf16", p.bf16_layers[1])
    if p.gemm_precision and p.precision in ("fp8", "nvfp4"):
        notes.append("gemm_precision " + ", ".join(f"{k}={v}" for k, v in p.gemm_precision) + ": give Megatron-LM a "
                     "--te-precision-config-file with these matchers (extensions/TransformerEngineMixedPrecision.md); "
                     "not written here")


def _training_args(m: ModelSpec, p: ParallelPlan, a: list, notes: list) -> None:
    for flag, value in TRAINING_DEFAULTS:
        _add(a, flag, value)


def launch_script(args: list[str], plan: ParallelPlan) -> str:
    """A bash script: the environment Megatron requires, then torchrun over the nodes."""
    gpus = plan.num_gpus or plan.dp * plan.tp * plan.pp * plan.cp
    per_node = min(8, gpus)
    fsdp = plan.zero_stage >= 2
    env = ["# Megatron FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1" if fsdp else
           "export CUDA_DEVICE_MAX_CONNECTIONS=1   # Megatron requires it with tp/cp > 1 (before Blackwell)",
           f"export PYTORCH_CUDA_ALLOC_CONF={ALLOC_CONF}   # {ALLOC_WHY}"]
    lines = ["#!/bin/bash", "# written by meshcast: a Megatron-LM pretrain_gpt.py launch (run from Megatron-LM's root",
             "# on every node; set NODE_RANK and MASTER_ADDR per node)", "set -euo pipefail", *env,
             f"GPUS_PER_NODE=${{GPUS_PER_NODE:-{per_node}}}", f"NNODES=${{NNODES:-{max(1, gpus // per_node)}}}",
             "", "torchrun --nproc-per-node $GPUS_PER_NODE --nnodes $NNODES --node-rank ${NODE_RANK:-0} \\",
             "  --master-addr ${MASTER_ADDR:-localhost} --master-port ${MASTER_PORT:-6000} \\",
             "  pretrain_gpt.py \\"]
    return "\n".join(lines) + "\n" + format_args(args, indent="  ") + "\n"


def format_args(args: list[str], indent: str = "") -> str:
    """One line per flag (with its value), continued with backslashes."""
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{indent}{args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(f"{indent}{args[i]}")
            i += 1
    return " \\\n".join(lines)


# ---- reader ------------------------------------------------------------------------------------
def read_config(text: str, model: Optional[ModelSpec] = None, num_gpus: Optional[int] = None) -> ImportedConfig:
    """The plan (framework megatron-core or -local), the model dimensions stated and notes, from a
    launch script or argument list; flags meshcast does not read are listed in the notes."""
    vals, notes = parse_flags(text)
    if not vals:
        raise SpecError("megatron args", "no --flag found: expected a Megatron-LM command line (a launch script "
                                         "running pretrain_gpt.py) or its argument list")
    try:
        dims = _dims(vals)
        L = dims.get("num_layers") or (model.num_layers if model is not None else None)
        plan, more = _plan(vals, L, model)
    except MeshcastError:
        raise
    except (ValueError, ArithmeticError, SyntaxError, TypeError, RecursionError) as exc:
        raise SpecError("megatron args", f"cannot read the arguments: {exc}") from None
    world = script_world_size(text)
    if world is not None and num_gpus and world != num_gpus:
        more.append(f"the script launches {world} processes but {num_gpus} GPUs were given; data parallelism "
                    f"follows the {num_gpus} GPUs")
    unknown = sorted(set(vals) - _KNOWN)
    if unknown:
        more.append(f"ignored {len(unknown)} argument(s) meshcast does not model: {' '.join(unknown)}")
    return ImportedConfig(plan, dims, tuple(notes + more))


def script_world_size(text: str) -> Optional[int]:
    """GPUS_PER_NODE x NNODES as a launch script sets them (literal or ``${VAR:-N}`` defaults), else None."""
    found = {}
    for var in ("GPUS_PER_NODE", "NNODES"):
        m = re.search(rf"^\s*(?:export\s+)?{var}=(?:\$\{{{var}:-)?(\d+)", text, re.M)
        if m:
            found[var] = int(m.group(1))
    return found["GPUS_PER_NODE"] * found["NNODES"] if len(found) == 2 else None


def parse_flags(text: str) -> tuple[dict[str, Optional[str]], list[str]]:
    """{--flag: value or None} from a script (everything after the first ``*.py``) or a bare
    argument list; comments and shell lines before torchrun are skipped."""
    body = "\n".join(line.split("#", 1)[0] if line.lstrip().startswith("#") else line for line in text.splitlines())
    try:
        tokens = shlex.split(body.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise SpecError("megatron args", f"cannot split the command line: {exc}") from None
    py = [i for i, t in enumerate(tokens) if t.endswith(".py")]
    if py:
        tokens = tokens[py[0] + 1:]
    vals: dict[str, Optional[str]] = {}
    notes: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            notes.append(f"ignored stray token {tok!r}")
            i += 1
            continue
        if "=" in tok:
            k, v = tok.split("=", 1)
            vals[k] = v
            i += 1
        elif tok in LIST_FLAGS:   # nargs='*': every following token up to the next flag, space-joined
            j = i + 1
            while j < len(tokens) and not tokens[j].startswith("--"):
                j += 1
            vals[tok] = " ".join(tokens[i + 1:j]) or None
            i = j
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            vals[tok] = tokens[i + 1]
            i += 2
        else:
            vals[tok] = None
            i += 1
    return vals, notes


LIST_FLAGS = frozenset(("--recompute-modules",))   # flags Megatron-LM's argparse reads with nargs='*'

_DIM_FLAGS = {"--num-layers": "num_layers", "--hidden-size": "hidden", "--ffn-hidden-size": "ffn_hidden",
              "--num-attention-heads": "num_heads", "--vocab-size": "vocab", "--kv-channels": "dim_head",
              "--num-experts": "moe.num_experts", "--moe-router-topk": "moe.top_k",
              "--moe-ffn-hidden-size": "moe.expert_ffn_hidden", "--q-lora-rank": "mla.q_lora_rank",
              "--kv-lora-rank": "mla.kv_lora_rank", "--qk-head-dim": "mla.qk_nope_head_dim",
              "--qk-pos-emb-head-dim": "mla.qk_rope_head_dim", "--v-head-dim": "mla.v_head_dim",
              "--mtp-num-layers": "mtp_layers", "--moe-shared-expert-intermediate-size": "shared_expert_total"}
_PLAN_FLAGS = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
               "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--sequence-parallel",
               "--micro-batch-size", "--global-batch-size", "--seq-length", "--num-virtual-stages-per-pipeline-rank",
               "--num-layers-per-virtual-pipeline-stage", "--decoder-first-pipeline-num-layers",
               "--decoder-last-pipeline-num-layers", "--pipeline-model-parallel-layout",
               "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
               "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
               "--use-torch-fsdp2", "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
               "--overlap-moe-expert-parallel-comm", "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer",
               "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
               "--bf16", "--fp16",
               "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--fp4-param-gather", "--first-last-layers-bf16",
               "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16", "--transformer-impl", "--attention-backend", "--attention-dropout", "--hidden-dropout",
               "--no-overlap-p2p-communication", "--group-query-attention", "--num-query-groups",
               "--position-embedding-type", "--normalization", "--swiglu", "--squared-relu",
               "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
               "--multi-latent-attention", "--moe-layer-freq", "--moe-expert-capacity-factor",
               "--max-position-embeddings", "--rotary-base", "--make-vocab-size-divisible-by",
               "--moe-token-dispatcher-type", "--moe-router-load-balancing-type", "--moe-grouped-gemm",
               "--ckpt-format"}
_KNOWN = set(_DIM_FLAGS) | _PLAN_FLAGS | {f for f, _ in TRAINING_DEFAULTS}


def _int(vals: dict, flag: str, default=None, minimum: int | None = None):
    """The integer value of ``flag`` (``default`` when absent); SpecError naming the flag when it is
    given without a value (Megatron-LM's argparse refuses that), is not an integer or is below ``minimum``."""
    v = _value(vals, flag)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise SpecError(f"megatron args: {flag}", f"expected an integer, got {v!r}") from None
    if minimum is not None and n < minimum:
        raise SpecError(f"megatron args: {flag}", f"must be at least {minimum}, got {n}")
    return n


def _float(vals: dict, flag: str, default: float) -> float:
    """The number value of ``flag`` (``default`` when absent); SpecError naming the flag otherwise."""
    v = _value(vals, flag)
    if v is None:
        return default
    try:
        return float(v)
    except ValueError:
        raise SpecError(f"megatron args: {flag}", f"expected a number, got {v!r}") from None


def _value(vals: dict, flag: str):
    """The text after ``flag`` (None when absent); a flag present without its value is an error."""
    if flag in vals and vals[flag] is None:
        raise SpecError(f"megatron args: {flag}", "given without a value (the next token is another flag or "
                                                  "the end of the command)")
    return vals.get(flag)


def _dims(vals: dict) -> dict:
    """The ModelSpec values the arguments state (a full model config also states Megatron's defaults
    for norm, activation, embeddings and biases)."""
    dims = {name: _int(vals, flag) for flag, name in _DIM_FLAGS.items() if flag in vals}
    if "--num-query-groups" in vals and "--group-query-attention" in vals:
        dims["kv_heads"] = _int(vals, "--num-query-groups")
    if "--hidden-size" in vals:     # a full model definition: Megatron's defaults hold where a flag is absent
        dims["norm"] = "rmsnorm" if vals.get("--normalization") == "RMSNorm" else "layernorm"
        dims["activation"] = "swiglu" if "--swiglu" in vals else "squared_relu" if "--squared-relu" in vals else "gelu"
        dims["tied_embeddings"] = "--untie-embeddings-and-output-weights" not in vals
        dims["linear_bias"] = "--disable-bias-linear" not in vals
        pos = vals.get("--position-embedding-type", "learned_absolute")
        dims["position"] = {"learned_absolute": "learned"}.get(pos, pos)
        if "--group-query-attention" not in vals and "--multi-latent-attention" not in vals:
            dims["kv_heads"] = dims.get("num_heads")
        dims["has_moe"] = "--num-experts" in vals
        dims["has_mla"] = "--multi-latent-attention" in vals
    if vals.get("--moe-layer-freq") is not None:
        dims["moe_layer_flags"] = _moe_freq(vals["--moe-layer-freq"], dims.get("num_layers"))
    return {k: v for k, v in dims.items() if v is not None}


def _moe_freq(text: str, L: Optional[int]):
    """Megatron's --moe-layer-freq (an int N or a list expression) as a tuple of 0/1 per layer."""
    text = text.strip()
    if "[" not in text:
        n = _int({"--moe-layer-freq": text}, "--moe-layer-freq", minimum=1)
        return None if L is None else tuple(int(i % n == 0) for i in range(L))
    return tuple(_eval_list(ast.parse(text, mode="eval").body))


def _eval_list(node) -> list:
    """Evaluate a list expression of int lists with + and * (nothing else)."""
    if isinstance(node, ast.List):
        return [int(_eval_const(e)) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _eval_list(node.left) + _eval_list(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        base, times = _eval_list(node.left), int(_eval_const(node.right))
        if len(base) * times > 100_000:
            raise SpecError("megatron args: --moe-layer-freq", "pattern longer than 100000 layers")
        return base * times
    raise SpecError("megatron args: --moe-layer-freq", "expected a list expression like ([0]*3+[1]*58)")


def _eval_const(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise SpecError("megatron args: --moe-layer-freq", "expected integers")


def _bf16_layers(vals: dict) -> Optional[tuple[int, int]]:
    """(first, last) layers kept in bf16 where --first-last-layers-bf16 is given (Megatron-LM's
    --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 default to 1), else None."""
    if "--first-last-layers-bf16" not in vals:
        return None
    return _int(vals, "--num-layers-at-start-in-bf16", 1), _int(vals, "--num-layers-at-end-in-bf16", 1)


def _fp4_precision(vals: dict) -> Optional[str]:
    """'nvfp4' where the arguments ask for FP4 (--fp4-format e2m1 with the default or 'nvfp4'
    --fp4-recipe); a custom recipe has no cost model."""
    if "--fp4-format" not in vals:
        return None
    recipe = vals.get("--fp4-recipe") or "nvfp4"
    if recipe != "nvfp4":
        raise SpecError("megatron args: --fp4-recipe", f"{recipe!r}: only the nvfp4 recipe (TE NVFP4BlockScaling) "
                                                         "is modelled")
    return "nvfp4"


def _plan(vals: dict, L: Optional[int], model: Optional[ModelSpec]) -> tuple[ParallelPlan, list[str]]:
    """The ParallelPlan the parallelism, batch, precision and recompute flags describe."""
    notes: list[str] = []
    tp = _int(vals, "--tensor-model-parallel-size", 1)
    pp = _int(vals, "--pipeline-model-parallel-size", 1)
    lps, vp = _split(vals, pp, L)
    zero = _zero(vals)
    gran = vals.get("--recompute-granularity")
    recompute, rec_layers = ("none", None) if gran is None else (gran, None)
    if gran == "full" and vals.get("--recompute-method") == "block":
        rec_layers = _int(vals, "--recompute-num-layers", 1) * vp
    rec_mods = tuple((vals.get("--recompute-modules") or "").split()) or None if gran == "selective" else None
    if rec_mods and any(m not in RECOMPUTE_MODULES for m in rec_mods):
        notes.append(f"--recompute-modules {' '.join(rec_mods)}: meshcast costs {', '.join(RECOMPUTE_MODULES)} only; "
                     "the others are read as not recomputed")
        rec_mods = tuple(m for m in rec_mods if m in RECOMPUTE_MODULES) or None
        if rec_mods is None:
            recompute = "none"
    local = vals.get("--transformer-impl") == "local"
    backend = vals.get("--attention-backend", "auto")
    etp = _int(vals, "--expert-tensor-parallel-size")
    dropout = any(_float(vals, f, 0.1) > 0 for f in ("--attention-dropout", "--hidden-dropout"))
    if "--fp16" in vals and "--bf16" in vals:
        raise SpecError("megatron args: --fp16", "--fp16 and --bf16 are both given; Megatron-LM refuses that "
                                                 "(give one)")
    plan = ParallelPlan(
        tp=tp, pp=pp, vp=vp, cp=_int(vals, "--context-parallel-size", 1), ep=_int(vals, "--expert-model-parallel-size", 1),
        etp=None if etp in (None, tp) else etp, sequence_parallel="--sequence-parallel" in vals, zero_stage=zero,
        recompute=recompute, recompute_layers=rec_layers, recompute_modules=rec_mods,
        mbs=_int(vals, "--micro-batch-size", 1),
        gbs=_int(vals, "--global-batch-size"), seq=_int(vals, "--seq-length"),
        precision="fp16" if "--fp16" in vals else "fp8" if "--fp8-format" in vals else _fp4_precision(vals) or "bf16",
        attention=None if local else {"unfused": "unfused", "local": "unfused", "fused": "cudnn", "flash": "flash"}.get(backend),
        dropout=dropout, overlap_grad_reduce="--overlap-grad-reduce" in vals,
        overlap_param_gather="--overlap-param-gather" in vals or zero == 0,
        tp_comm_overlap="--tp-comm-overlap" in vals, ep_comm_overlap="--overlap-moe-expert-parallel-comm" in vals,
        overlap_p2p=False if "--no-overlap-p2p-communication" in vals else None,
        offload_optimizer="--optimizer-cpu-offload" in vals, layers_per_stage=lps, bf16_layers=_bf16_layers(vals),
        fp8_recipe=vals.get("--fp8-recipe") if "--fp8-format" in vals else None,
        framework="megatron-core-local" if local else "megatron-core")
    if "--use-torch-fsdp2" in vals:
        notes.append("--use-torch-fsdp2 read as ZeRO-3 (parameters, gradients and optimizer states sharded)")
    return plan, notes


def _zero(vals: dict) -> int:
    if "--use-megatron-fsdp" in vals:
        strategy = vals.get("--data-parallel-sharding-strategy", "no_shard")
        return {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}.get(strategy, 3)
    if "--use-torch-fsdp2" in vals:
        return 3
    return 1 if "--use-distributed-optimizer" in vals else 0


def _split(vals: dict, pp: int, L: Optional[int]) -> tuple[Optional[tuple[int, ...]], int]:
    """(layers per pipeline rank or None for even, vp) from the pipeline flags."""
    layout = vals.get("--pipeline-model-parallel-layout")
    if layout:
        return _layout_split(layout, pp)
    vp = _int(vals, "--num-virtual-stages-per-pipeline-rank", 1)
    first, last = _int(vals, "--decoder-first-pipeline-num-layers"), _int(vals, "--decoder-last-pipeline-num-layers")
    per_chunk = _int(vals, "--num-layers-per-virtual-pipeline-stage", minimum=1)
    if pp == 1 or L is None:
        return None, vp
    if first is not None or last is not None:
        return _first_last(L, pp, first, last), vp
    if per_chunk is not None:
        vp = (L // pp) // per_chunk
    if "--account-for-embedding-in-pipeline-split" in vals or "--account-for-loss-in-pipeline-split" in vals:
        return _accounted(L, pp, "--account-for-embedding-in-pipeline-split" in vals,
                          "--account-for-loss-in-pipeline-split" in vals), vp
    return None, vp


def _first_last(L: int, pp: int, first, last) -> tuple[int, ...]:
    """Megatron's --decoder-first/last-pipeline-num-layers: the middle ranks share the rest evenly."""
    middle = pp - (first is not None) - (last is not None)
    rest = L - (first or 0) - (last or 0)
    if middle <= 0 or rest % middle:
        raise SpecError("megatron args: --decoder-first-pipeline-num-layers",
                        f"{rest} layers do not split evenly over the {middle} other stages")
    k = rest // middle
    return (first if first is not None else k,) + (k,) * (pp - 2) + (last if last is not None else k,)


def _accounted(L: int, pp: int, emb: bool, loss: bool) -> tuple[int, ...]:
    """The split Megatron makes counting the embedding and/or the loss as one layer each."""
    total = L + emb + loss
    if total % pp:
        raise SpecError("megatron args: --account-for-embedding-in-pipeline-split",
                        f"{L} layers + embedding/loss do not divide over pp={pp}")
    k = total // pp
    return tuple(k - (emb and r == 0) - (loss and r == pp - 1) for r in range(pp))


def _layout_split(layout: str, pp: int) -> tuple[tuple[int, ...], int]:
    """(decoder layers per rank, vp) from a --pipeline-model-parallel-layout string."""
    s = layout.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), s)
    stages = s.split("|")
    if len(stages) % pp:
        raise SpecError("megatron args: --pipeline-model-parallel-layout",
                        f"{len(stages)} stages is not a multiple of pp={pp}")
    vp = len(stages) // pp
    per_rank = [0] * pp
    for i, st in enumerate(stages):
        per_rank[i % pp] += st.count("t")
    return (None if len(set(per_rank)) == 1 else tuple(per_rank)), vp
