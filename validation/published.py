"""Simulate published training runs (../shared/validation/published_runs.csv) and compare
predicted with published per-GPU throughput under each source's own definition.

Comparison, most direct first: the published iteration time; tokens/s per GPU; else TFLOP/s per
GPU, converted with the source's own FLOP formula (e.g. Narayanan et al. 2021 count
96·B·s·l·h²(1 + s/6h + V/16lh) per iteration, recompute included), so the ratio
predicted/published is a ratio of step times whatever the formula.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import MeshcastError, SpecError
from hardware_specs.fileio import finite_number, read_csv_rows
from models.schema import ModelSpec, MoEConfig
from simulator.calibration import calibration_for
from simulator.engine import simulate
from simulator.flops import step_model_flops
from simulator.plan import ParallelPlan
from simulator.regimes import model_tags
from validation.bridge_recipes import recipe_fields

ROOT = Path(__file__).resolve().parent.parent
RUN_FILES = ("published_runs.csv", "published_runs_more.csv")


def published_csvs() -> list[Path]:
    """The published-run CSVs: ../shared/validation/ beside the checkout when it is there (the
    reference), else the verbatim copies committed in validation/published/ (a clean clone, CI)."""
    shared = ROOT.parent / "shared" / "validation"
    base = shared if all((shared / f).exists() for f in RUN_FILES) else ROOT / "validation" / "published"
    return [base / f for f in RUN_FILES]


# GPU description (as the CSVs print it) -> catalog cluster; first match wins, so GB300 precedes B300
# and GB200 precedes B200 (``B300 (DGX-B300)``, ``GB300 (NVL72)``)
GPU_CLUSTERS = (("GB300", "gb300-nvl72"), ("B300", "dgx-b300"), ("GB200", "gb200-nvl72"), ("B200", "dgx-b200"),
                ("A100-80GB", "dgx-a100-superpod"), ("A100-40GB", "dgx-a100-40gb-superpod"), ("H100", "dgx-h100"),
                ("H200", "dgx-h200"))
NOT_IN_CATALOG: tuple[str, ...] = ()   # published GPUs hardware_specs/catalog has no datasheet entry for

# A row's model name (lower case, letters and digits only, parenthesised remarks dropped) -> catalog model
CATALOG_MODELS = {
    "llama38b": "llama3-8b", "llama318b": "llama3-8b", "llama370b": "llama3-70b", "llama3170b": "llama3-70b",
    "llama31405b": "llama3-405b", "deepseekv3": "deepseek-v3", "qwen330ba3b": "qwen3-30b-a3b",
    "qwen3235ba22b": "qwen3-235b-a22b", "gptoss120b": "gpt-oss-120b", "grok1314b": "grok-1",
    "nemotron415b": "nemotron-4-15b", "nemotron4340b": "nemotron-4-340b", "gpt3175b": "gpt3-175b",
    "nemotron3nano": "nemotron-3-nano-30b-a3b", "nemotron3super": "nemotron-3-super-120b-a12b",
    "nemotron3ultra": "nemotron-3-ultra-550b-a55b",
    # NeMo 24.07's performance summary (and Megatron-LM's Llama table) name models the catalog holds with
    # the configurations those pages ran (models/catalog/*.yaml cite them): read from the catalog, not
    # rebuilt from the columns, whose blank vocab would otherwise fall back to 51,200 (Nemotron-8B/22B
    # use the 256,000-token Nemotron SentencePiece vocabulary)
    "nemotron8b": "nemotron-8b", "nemotron22b": "nemotron-22b", "nemotron340b": "nemotron-4-340b",
    "gpt35b": "gpt3-5b", "gpt320b": "gpt3-20b", "llama27b": "llama2-7b", "llama213b": "llama2-13b",
    "llama270b": "llama2-70b", "llama3405b": "llama3-405b",
}
# Megatron-Bridge (commit 067f987df0) perf_recipes/nemotronh/gb300/nemotronh.py
# _nemotron_3_ultra_gb300_fp8mx_config: Megatron-FSDP as HSDP (parameters, gradients and optimizer
# sharded inside each 64-GPU NVLink domain, replicated across domains), selective recompute of the
# expert activation with its input offloaded to the CPU (fine-grained activation offload)
ULTRA_RECIPE = ("Megatron-Bridge's Nemotron 3 Ultra GB300 recipe runs Megatron-FSDP as HSDP (sharded within each "
                "64-GPU NVLink domain) with the expert activation recomputed and its input offloaded to the CPU "
                "(perf_recipes/nemotronh/gb300/nemotronh.py); HSDP's two-level sharding and activation offload are "
                "not modelled")
TOKEN_DROP_CAPACITY = 1.0   # Megatron-Core's token-drop MoE recipes: moe_expert_capacity_factor 1.0
# Megatron-Bridge (commit 067f987df0) recipes/nemotronh/h100/nemotron_3_super.py, the base of every
# Nemotron 3 Super performance recipe (perf_recipes/nemotronh/*/nemotronh.py): mtp_num_layers = 2 with
# mtp_use_repeated_layer = True (the HF checkpoint's one MTP module applied at two depths) and
# keep_mtp_spec_in_bf16 = True (the MTP module's GEMMs in bf16 under the FP8 and NVFP4 recipes).
# DeepSeek-V3's recipes keep the HF config's one depth (deepseek_v3_bridge.py num_nextn_predict_layers).
BRIDGE_MTP = {"nemotron-3-super-120b-a12b": {"mtp_depths": 2, "mtp_bf16": True}}
BRIDGE_MTP_SOURCE = "Megatron-Bridge recipes/nemotronh/h100/nemotron_3_super.py"


@dataclass
class RunComparison:
    """One published run: the metric compared, published and predicted values, relative error;
    ``note`` says which calibration was used and every value filled in for the row."""
    row: int
    source: str
    model: str
    num_gpus: int
    metric: str                  # iteration_time_s, tokens_per_s_per_gpu or tflops_per_gpu
    published: float
    predicted: float
    error: float                 # predicted throughput / published throughput - 1
    plan: dict
    fits: bool
    note: str = ""
    gpu: str = ""
    dtype: str = ""
    file: str = ""
    moe: bool = False            # the model routes tokens to experts
    accelerator: str = ""        # catalog accelerator the row ran on (gb300, h100-sxm, ...)
    family: str = ""             # its microarchitecture family (nvidia-blackwell, ...)
    model_tags: tuple = ()       # simulator.regimes.model_tags of the row's model (mamba, ...)


@dataclass
class Skipped:
    """A published row that could not be modelled, with the reason."""
    row: int
    source: str
    model: str
    reason: str
    gpu: str = ""
    dtype: str = ""
    file: str = ""


RUN_COLUMNS = ("source", "model", "gpu", "num_gpus", "tp", "pp", "global_batch", "micro_batch")
RUN_NUMBERS = ("params_b", "layers", "hidden", "heads", "kv_heads", "vocab", "seq_len", "moe_experts",
               "moe_topk", "num_gpus", "tp", "pp", "vp", "cp", "ep", "dp", "global_batch", "micro_batch",
               "measured_tflops_per_gpu", "measured_mfu", "tokens_per_sec_per_gpu", "iteration_time_s")
LAYER_COLUMNS = ("gpu", "num_gpus", "implementation", "seq_len", "num_heads", "batch_size", "hidden", "metric",
                 "value")
LAYER_NUMBERS = ("num_gpus", "seq_len", "head_dim", "num_heads", "batch_size", "hidden", "value")
# counts: a whole number (a 2.5 in 'layers' was read as 2 without a word)
WHOLE_NUMBERS = frozenset(("layers", "hidden", "heads", "kv_heads", "vocab", "seq_len", "moe_experts", "moe_topk",
                           "num_gpus", "tp", "pp", "vp", "cp", "ep", "dp", "global_batch", "micro_batch",
                           "head_dim", "num_heads", "batch_size"))


def _check_numbers(rows: list[dict], path, columns) -> None:
    """Every non-empty cell of ``columns`` is a positive finite number (a trailing % allowed):
    a published count, time or rate cannot be zero, negative, NaN or infinite. ``ffn_hidden``
    may also read ``<dense> dense / <expert> expert`` (MoE rows)."""
    for i, row in enumerate(rows):
        for col in columns:
            text = (row.get(col) or "").strip()
            if text:
                x = finite_number(text.rstrip("%"), f"{path}: line {i + 2}: {col}", positive=True)
                if col in WHOLE_NUMBERS and not x.is_integer():
                    raise SpecError(f"{path}: line {i + 2}: {col}", f"must be a whole number, got {text!r}")
        ffn = (row.get("ffn_hidden") or "").strip()
        if ffn:
            parse_ffn(ffn, f"{path}: line {i + 2}: ffn_hidden")


def parse_ffn(text: str, field: str = "ffn_hidden") -> tuple[int | None, int | None]:
    """(dense, expert) FFN sizes of an ``ffn_hidden`` cell: ``28672``, ``12288 dense / 1536 expert``
    or ``2880 expert``; raises SpecError on anything else."""
    dense = expert = None
    for part in (p.strip() for p in text.split("/")):
        m = re.fullmatch(r"(\d+)\s*(dense|expert)?", part)
        if not m or int(m.group(1)) <= 0:
            raise SpecError(field, f"expected a size, or '<n> dense / <n> expert', got {text!r}")
        if m.group(2) == "expert":
            expert = int(m.group(1))
        else:
            dense = int(m.group(1))
    return dense, expert


def _num(row: dict, key: str) -> float | None:
    v = (row.get(key) or "").strip().rstrip("%")
    try:
        return float(v)
    except ValueError:
        return None


def _int(row: dict, key: str) -> int | None:
    v = _num(row, key)
    return int(v) if v is not None else None


def source_family(source: str) -> str:
    """A short name for the source of a row (narayanan2021, korthikanti2022, nemo, ...)."""
    s = source.lower()
    for key, name in (("narayanan", "narayanan2021"), ("korthikanti", "korthikanti2022"),
                      ("examples/llama", "megatron-llama"), ("megatron-lm readme", "megatron-readme"),
                      ("megatron-bridge", "megatron-bridge"), ("dgxc-benchmarking", "dgxc-benchmarking"),
                      ("llm-foundry", "llm-foundry"), ("nemo", "nemo"), ("flashattention", "flashattention2")):
        if key in s:
            return name
    return s.split(" ")[0]


def catalog_name(model: str) -> str | None:
    """The catalog model a row's model name stands for (``LLAMA3.1_405B`` -> llama3-405b), or None."""
    key = re.sub(r"[^a-z0-9]", "", re.sub(r"\(.*?\)", "", model.lower()))
    return CATALOG_MODELS.get(key)


def model_from_row(row: dict, fills: list[str] | None = None) -> ModelSpec:
    """The row's model: the catalog model its name names (the row's layers and seq_len kept: proxy
    configurations shorten the model), else one built from the row's columns."""
    fills = fills if fills is not None else []
    name = row["model"]
    low = name.lower()
    if re.search(r"nemotron[ _-]?3[ _-]?ultra", low):
        raise MeshcastError("zero_stage", ULTRA_RECIPE)
    cat = catalog_name(name)
    if cat is None and source_family(row["source"]) == "flashattention2":
        return _flashattention_gpt(row, fills)
    if cat is None and source_family(row["source"]) == "llm-foundry":
        return llm_foundry_mpt(row, fills)
    if cat is None:
        return _model_from_columns(row)
    from models.catalog import load_model
    base = load_model(cat)
    upd: dict = {"name": name}
    for col, field in (("layers", "num_layers"), ("seq_len", "seq_len")):
        v = _int(row, col)
        if v and v != getattr(base, field):
            upd[field] = v
    if "w/o mtp" in low and base.mtp_layers:
        upd["mtp_layers"] = 0
    elif cat in BRIDGE_MTP and source_family(row["source"]) in RECIPE_FAMILIES and base.mtp_layers:
        upd.update(BRIDGE_MTP[cat])
        fills.append(f"MTP: {upd['mtp_depths']} depths of the one module (mtp_use_repeated_layer), in bf16 "
                     f"(keep_mtp_spec_in_bf16): {BRIDGE_MTP_SOURCE}")
    if "tokendrop" in low and base.moe:
        upd["moe"] = base.moe.model_copy(update={"capacity_factor": TOKEN_DROP_CAPACITY})
        fills.append(f"token drop: capacity factor {TOKEN_DROP_CAPACITY:g} (Megatron-Core token-drop default)")
    if upd.get("num_layers") and base.moe and base.moe.first_dense_layers >= upd["num_layers"]:
        raise MeshcastError("layers", f"{upd['num_layers']} layers leave no MoE layer of {cat}")
    fills.append(f"model: catalog {cat}" + (f" with {upd['num_layers']} layers (proxy)" if "num_layers" in upd else ""))
    return base.model_copy(update=upd)


def _model_from_columns(row: dict) -> ModelSpec:
    """A ModelSpec from the row's columns (GPT layout unless the name says Llama/Nemotron/MPT;
    MoE from moe_experts / moe_topk with the expert size of ``ffn_hidden``)."""
    name = row["model"]
    h, layers, heads = _int(row, "hidden"), _int(row, "layers"), _int(row, "heads")
    if not (h and layers and heads):
        raise MeshcastError("model", "layers, hidden or heads not stated, and the name is not a catalog model")
    low = name.lower()
    llama, nemotron, mpt = "llama" in low, "nemotron" in low, "mpt" in low
    dense, expert = parse_ffn(row["ffn_hidden"]) if (row.get("ffn_hidden") or "").strip() else (None, None)
    ffn = dense or expert or 4 * h
    moe = None
    if _int(row, "moe_experts"):
        if not (_int(row, "moe_topk") and expert):
            raise MeshcastError("moe_topk", "an MoE row needs moe_topk and an expert FFN size")
        moe = MoEConfig(num_experts=_int(row, "moe_experts"), top_k=_int(row, "moe_topk"), expert_ffn_hidden=expert)
    rope = llama or nemotron
    return ModelSpec(
        name=name, family="llama" if llama else "mpt" if mpt else "gpt", num_layers=layers, hidden=h,
        ffn_hidden=ffn, num_heads=heads, num_kv_heads=_int(row, "kv_heads"), vocab=_int(row, "vocab") or 51200,
        seq_len=_int(row, "seq_len") or 2048,
        activation="swiglu" if llama else ("squared_relu" if nemotron else "gelu"),
        norm="rmsnorm" if llama else "layernorm", linear_bias=not (llama or nemotron or mpt),
        position="rope" if rope else "alibi" if mpt else "learned", tied_embeddings=not rope, moe=moe)


# MosaicML llm-foundry's benchmark MPTs (scripts/train/yamls/pretrain/mpt-*.yaml at v0.3.0, commit
# 54cbb8bd1, the release submit_benchmarks.py installs; the older A100 rows ran the same yamls at
# 1ef7b4d21) set only d_model, n_heads, n_layers, expansion_ratio, max_seq_len, vocab_size and attn_impl,
# so MPTConfig's defaults hold (llmfoundry/models/mpt/configuration_mpt.py): learned_pos_emb True
# (modeling_mpt.py: wpe = Embedding(max_seq_len, d_model)), no_bias False (every Linear and LayerNorm has
# a bias), attn_config alibi False. The README's NumParams column counts exactly that: for MPT-1b it
# grows by 2048 per token of sequence (1,315,950,592 at 2048, 1,378,865,152 at 32768: the wpe table) and
# exceeds the bias-free count by 18,432 per layer (the Wqkv, out_proj, up and down biases). The released
# MPT-7B checkpoint (ALiBi, no_bias True) is a different configuration.
LLM_FOUNDRY_MPT = ("model: llm-foundry v0.3.0 MPTConfig defaults (the benchmark yamls leave them): learned "
                   "positions (wpe, max_seq_len x d_model), linear biases, no ALiBi; the README's NumParams "
                   "counts both")


def llm_foundry_mpt(row: dict, fills: list[str]) -> ModelSpec:
    """An llm-foundry benchmark MPT from the row's columns, with the layout its benchmark yamls
    ran (LLM_FOUNDRY_MPT): learned absolute positions and biased linears, not ALiBi."""
    fills.append(LLM_FOUNDRY_MPT)
    return _model_from_columns(row).model_copy(update={"position": "learned", "linear_bias": True})


# Dao 2023 (FlashAttention-2) section 4.2 trains "GPT-style models with either 1.3B or 2.7B parameters, on
# 8xA100 80GB SXM" with the FlashAttention repository's training code (training/README.md, commit
# 0b037c2d96): GPT3-1.3B = experiment pile/gpt3xl-flash (n_embd 2048, n_head 16, n_layer 24; datamodule
# batch_size 8 at 80 GB), GPT3-2.7B = pile/gpt3-2.7B-flash-hdim128 ("we set head dimension to 128 (instead
# of 80)": n_embd 2560, n_head 20, n_layer 32; batch_size 4 at 80 GB, 4 for every 8k config); batch 1M
# tokens for both; GPT-2 tokenizer (50,257) padded to a multiple of 8; bf16 by default; DDP with the
# optimizer state sharded (DDPStrategyZero1); no activation checkpointing.
FA_REPO = "FlashAttention repo training configs (pile/gpt3xl-flash, gpt3-2.7B-flash-hdim128; training/README.md)"
FA_HEADS = {2048: 16, 2560: 20}           # hidden -> heads of the repo's GPT3-1.3B / GPT3-2.7B configs
FA_VOCAB = 50264                          # 50,257 padded to a multiple of 8 (pad_vocab_size_multiple=8)
FA_BATCH_TOKENS = 1 << 20                 # "the 1.3B and 2.7B models have batch size 1M tokens"


def _flashattention_gpt(row: dict, fills: list[str]) -> ModelSpec:
    """The GPT of a FlashAttention-2 Table 1 row: layers and hidden from the row (GPT-3 paper sizes),
    heads and vocabulary from the FlashAttention repo's configs of that model (FA_REPO)."""
    h, layers = _int(row, "hidden"), _int(row, "layers")
    heads = _int(row, "heads") or FA_HEADS.get(h or 0)
    if not (h and layers and heads):
        raise MeshcastError("model", "layers or hidden not stated, and no FlashAttention repo config of that size")
    fills.append(f"heads {heads} (head dim {h // heads}), vocab {FA_VOCAB}: {FA_REPO}")
    return ModelSpec(name=row["model"], family="gpt", num_layers=layers, hidden=h, ffn_hidden=4 * h,
                     num_heads=heads, vocab=FA_VOCAB, seq_len=_int(row, "seq_len") or 2048, activation="gelu",
                     norm="layernorm", linear_bias=True, position="learned", tied_embeddings=True)


def flashattention_plan_fields(row: dict, model: ModelSpec, fills: list[str]) -> dict:
    """tp, pp, micro- and global batch and attention backend of a FlashAttention-2 Table 1 row, as the
    repo's training configs run it (FA_REPO): 8-GPU DDP, micro-batch 8 for GPT3-1.3B at 2k else 4,
    1M-token batches. Skipped: the baseline without FlashAttention (its attention code, micro-batch
    and checkpointing are not stated) and FlashAttention-1 (no kernel model)."""
    label = row["model"].lower()
    if "no flashattention" in label:
        raise MeshcastError("attention", "the baseline without FlashAttention: its attention code, micro-batch "
                                         "and checkpointing are not stated (the repo's configs are the FlashAttention "
                                         "runs)")
    if "flashattention-2" not in label:
        raise MeshcastError("attention", "FlashAttention-1's kernel is not modelled (meshcast's flash backend is "
                                         "FlashAttention-2, the kernel PyTorch's SDPA runs)")
    attention = "flash"
    mbs = 8 if model.hidden == 2048 and model.seq_len <= 2048 else 4
    gbs = FA_BATCH_TOKENS // model.seq_len
    fills.append(f"tp=pp=1, mbs {mbs}, gbs {gbs} (1M tokens), bf16 DDP, attention {attention}: {FA_REPO}; "
                 "its ZeRO-1 optimizer sharding costed as DDP (the pytorch profile has no ZeRO-1)")
    return {"tp": 1, "pp": 1, "mbs": mbs, "gbs": gbs, "attention": attention}


# the precision a plan runs for a row's dtype, and what the row's note says about the mapping
PRECISION_WORDS = (("nvfp4", "nvfp4"), ("mxfp8", "fp8"), ("fp8-mx", "fp8"), ("fp8", "fp8"), ("bf16", "bf16"),
                   ("fp16", "fp16"), ("16-bit", "bf16"))


def row_precision(row: dict, fills: list[str]) -> str:
    """The plan precision of a row's ``dtype``: BF16/FP16/FP8 as printed ("16-bit" as bf16: the same
    peak); MXFP8 costed as FP8 (the same
    tensor-core peak; TE's quantize pass writes its row-wise and column-wise copies with their E8M0 scales:
    lowering.MXFP8_QUANTIZE_BYTES); NVFP4 as the nvfp4 plan precision
    (Megatron-Bridge's bf16_with_nvfp4_mixed: every transformer layer's linear GEMMs in NVFP4)."""
    text = (row.get("dtype") or "").lower()
    if not text:
        fills.append("dtype not stated: bf16")
        return "bf16"
    for word, precision in PRECISION_WORDS:
        if word in text:
            if word == "nvfp4":
                fills.append("NVFP4 as Megatron-Bridge's bf16_with_nvfp4_mixed recipe (--fp4-format e2m1, "
                             "--fp4-recipe nvfp4, --fp4-param-gather): every transformer layer's linear GEMMs "
                             "(fprop, dgrad, wgrad) in NVFP4 at the fp4 peak with the profile's fp4 GEMM fraction "
                             "(never measured), input and gradient quantization with the Hadamard transform as "
                             "memory-bound passes; attention, router and output head bf16; no layers kept in "
                             "bf16 (the generic recipe's default; a recipe that keeps some says so below); fp4 "
                             "parameter gather not modelled (bf16 bytes)")
            if word in ("mxfp8", "fp8-mx"):
                fills.append("MXFP8 costed as FP8 (same tensor-core peak) with fp8_recipe mxfp8 (per-expert "
                             "quantize kernels of TE's GroupedLinear), each quantization writing the row-wise and the column-wise "
                             "copy with their E8M0 scales; the scales' bytes in the GEMM's own reads not modelled")
            if word == "16-bit":
                fills.append("16-bit mixed precision costed as bf16 (fp16 and bf16 share the tensor-core peak)")
            return precision
    raise MeshcastError("dtype", f"unknown precision {row.get('dtype')!r}")


def row_fp8_recipe(row: dict, precision: str) -> str | None:
    """The Transformer Engine FP8 recipe a row's ``dtype`` names, by Megatron-Core's names
    (plan.FP8_RECIPES): MXFP8 / FP8-MX is Megatron-Bridge's ``bf16_with_mxfp8_mixed`` (mxfp8), FP8-CS
    its ``bf16_with_fp8_current_scaling_mixed`` (tensorwise; "FP8-CS (FP8-MX)" gives the CS figure
    first); a plain FP8 names none and keeps Megatron-Core's default (None: delayed)."""
    if precision != "fp8":
        return None
    text = (row.get("dtype") or "").lower()
    if text.startswith("fp8-cs"):
        return "tensorwise"
    if "mxfp8" in text or "fp8-mx" in text:
        return "mxfp8"
    return None


def row_zero_stage(row: dict, family: str, fills: list[str]) -> int:
    """The ZeRO stage of a row: a number, or text starting with one (``3 (FSDP FULL_SHARD)``);
    unstated: 0 for the 2021-22 Megatron papers and the FlashAttention repo's DDP, else 1
    (Megatron-Core's distributed optimizer, the NeMo / Megatron-Bridge recipes' default)."""
    text = (row.get("zero_stage") or "").strip()
    m = re.match(r"(\d)\b", text)
    if m:
        return int(m.group(1))
    if text:
        raise MeshcastError("zero_stage", f"{text!r}: no ZeRO stage meshcast can read (a framework without a "
                                          "profile in simulator/frameworks, e.g. MaxText's FSDP + DP)")
    if family in ("narayanan2021", "korthikanti2022", "flashattention2"):
        return 0
    fills.append("zero_stage not stated: 1 (Megatron-Core distributed optimizer)")
    return 1


def _degree(row: dict, col: str, fills: list[str], label: str) -> int:
    """A parallel degree of the row; unstated -> 1, said in the note."""
    v = _int(row, col)
    if v is None:
        fills.append(f"{label} not stated: 1")
        return 1
    return v


# Narayanan et al. 2021 Sec. 5.2 (Table 2, Figure 10): "We integrated ZeRO into our codebase using the
# DeepSpeed Python library"; that integration is not among the paper's published scripts (Megatron-LM
# examples/academic_paper_scripts/sc21 at commit 6985e58938: Table 1 and Figures 11-18 only).
NARAYANAN_ZERO3 = (
    "Narayanan et al. 2021 Sec. 5.2 ran ZeRO-3 through DeepSpeed integrated into their Megatron-LM code, which "
    "is not published (examples/academic_paper_scripts/sc21 covers Table 1 and Figures 11-18, not Table 2 or "
    "Figure 10); the DeepSpeed release, its ZeRO-3 settings (overlap_comm, prefetch bucket, max live parameters, "
    "reuse distance, persistence threshold, contiguous gradients) and the activation checkpointing are not stated. "
    "Read with the deepspeed-0.3 profile: ZeRO-3 as released then (DeepSpeed v0.3.13-v0.5, 2021: stage3.py gathers "
    "each parameter in its own all_gather after torch.cuda.synchronize(), prefetching one bucket only with nothing "
    "in flight, gradients all-reduced in reduce_bucket_size buckets) replayed module by module with that "
    "release's default settings (simulator/zero3_2021.py); other settings would cost differently")

# Rows whose figure the source itself marks as a regression (a footnote of its table): the step the
# simulator costs is the recipe's, not the bug's. Keyed by (model, release) as the row notes print them.
SOURCE_REGRESSIONS = {
    ("GPT OSS 120B", "26.06.01"): (
        "Megatron-Bridge docs/performance-summary-archive.md (commit 067f987df0), 26.06.01 table, footnote "
        "[^gpt-oss-note]: 'Performance regression in GPT-OSS 120B pre-training is a known issue' "
        "(NVIDIA/cudnn-frontend#256: grouped_gemm_dglu_wrapper_sm100, the MoE grouped GEMM's dGLU backward, "
        "10x slower from cudnn-frontend 1.24); the figure measures that bug, which the step model does not cost"),
}


def row_release(row: dict) -> str:
    """The NeMo container release a Megatron-Bridge row's notes name (``release 26.04.01 NeMo
    container``), or ''."""
    m = re.search(r"release ([\d.]+) NeMo container", row.get("notes") or "")
    return m.group(1) if m else ""


def check_readable(row: dict, family: str, fills: list[str]) -> None:
    """Raise MeshcastError where a row measures something the source itself marks as a regression
    (SOURCE_REGRESSIONS). Narayanan et al.'s DeepSpeed ZeRO-3 rows stay in, with NARAYANAN_ZERO3
    appended to ``fills``: a known mismatch is reported, not removed from the figures."""
    if family == "narayanan2021" and (row.get("zero_stage") or "").strip().startswith("3"):
        fills.append(NARAYANAN_ZERO3)
    why = SOURCE_REGRESSIONS.get((row["model"], row_release(row))) if family == "megatron-bridge" else None
    if why:
        raise MeshcastError("measured", why)


def plan_from_row(row: dict, model: ModelSpec, fills: list[str] | None = None) -> ParallelPlan:
    """The row's parallel plan; raises MeshcastError naming what the row does not state and what
    cannot be filled, or that the source marks the figure as a regression (check_readable). Every
    value filled in is appended to ``fills``."""
    fills = fills if fills is not None else []
    fam = source_family(row["source"])
    check_readable(row, fam, fills)
    gpus = _int(row, "num_gpus")
    tp, pp, gbs, mbs = _int(row, "tp"), _int(row, "pp"), _int(row, "global_batch"), _int(row, "micro_batch")
    fa = flashattention_plan_fields(row, model, fills) if fam == "flashattention2" else {}
    if fa:
        tp, pp, gbs, mbs = fa["tp"], fa["pp"], fa["gbs"], fa["mbs"]
    if mbs is None and fam in RECIPE_FAMILIES:
        mbs = 1
        fills.append("micro_batch not stated: 1 (the NeMo / Megatron-Bridge recipes' default)")
    if "maxtext" in (row["model"] + row["source"]).lower():
        raise MeshcastError("framework", "MaxText (JAX/XLA) has no framework profile in simulator/frameworks")
    for name, value in (("num_gpus", gpus), ("tp", tp), ("pp", pp), ("global_batch", gbs), ("micro_batch", mbs)):
        if value is None:
            raise MeshcastError(name, "not stated in the source")
    rec = (row.get("recompute") or "").lower()
    recompute = "full" if rec.startswith("full") else "selective" if "selective" in rec else "none"
    bridge = (recipe_fields(row, model.name or "", tp, _int(row, "ep") or 1, row_precision(row, []), fills,
                           moe=model.moe is not None) if fam == "megatron-bridge" else {})
    zero = bridge["zero_stage"] if "zero_stage" in bridge and not (row.get("zero_stage") or "").strip() \
        else row_zero_stage(row, fam, fills)
    if not rec and bridge:
        recompute = bridge["recompute"]
    vp = (bridge["vp"] if pp > 1 and _int(row, "vp") is None and bridge.get("vp")
          else _degree(row, "vp", fills, "vp") if pp > 1 else (_int(row, "vp") or 1))
    cp = _degree(row, "cp", fills, "cp") if fam in RECIPE_FAMILIES else (_int(row, "cp") or 1)
    ep = _degree(row, "ep", fills, "ep") if model.moe else (_int(row, "ep") or 1)
    framework = source_framework(row, fam)
    split = recipe_pipeline_split(model, fam, pp, vp, fills)
    etp = recipe_expert_tp(row, model, fam, tp, fills)
    sp = ("sequence parallel" in rec and "no sequence" not in rec
          or fam not in ("narayanan2021", "korthikanti2022") and framework.startswith("megatron") and tp > 1)
    precision = row_precision(row, fills)
    if framework == "deepspeed-0.3" and precision == "bf16":   # DeepSpeed had no bf16 before v0.5.x
        precision = "fp16"
        fills.append("costed as fp16: DeepSpeed v0.3.13-v0.5.0 has no bf16 config (runtime/constants.py)")
    mixed = recipe_mixed_precision(model, fam, precision, fills)
    fp8_recipe = bridge.get("fp8_recipe") or row_fp8_recipe(row, precision)
    return ParallelPlan(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, mbs=mbs, gbs=gbs, seq=model.seq_len,
                        zero_stage=zero, recompute=recompute, sequence_parallel=sp, layers_per_stage=split, etp=etp,
                        precision=precision, dropout=fam in ("narayanan2021", "korthikanti2022"),
                        num_gpus=gpus, overlap_grad_reduce="no grad-allreduce overlap" not in row.get("notes", ""),
                        framework=framework, attention=row_attention(fam, fa, fills),
                        tp_comm_overlap=bridge.get("tp_comm_overlap", False),
                        ep_comm_overlap=bridge.get("ep_comm_overlap", False),
                        recompute_layers=bridge.get("recompute_layers"),
                        recompute_modules=bridge.get("recompute_modules") if recompute == "selective" else None,
                        **{k: bridge[k] for k in ("moe_dispatcher", "moe_router_fusion", "moe_host_sync") if k in bridge},
                        fp8_recipe=fp8_recipe, **mixed)


# MosaicML llm-foundry's benchmark tables (scripts/train/benchmarking/README.md: the H100 tables and the
# refreshed A100 rows added at commit b2a43a147, Oct 2023) were run by submit_benchmarks.py: git_branch
# v0.3.0, pip install -e .[gpu], --attn_impl default 'triton' (sweep.sh never passes it; H100 image
# mosaicml/pytorch:2.1.0_cu121); A100 rows kept from the earlier table (commit message: "added back old
# numbers that I didn't reproduce") ran mosaicml/examples v0.0.4 on pytorch:1.13.1_cu117 (the earlier
# sweep.sh, 92bd673c6), attn_impl likewise defaulting to triton. In v0.3.0 attn_impl triton is
# llmfoundry/models/layers/flash_attn_triton.py, "copied from" flash-attention commit eff9fe6b8 (v1.0.5,
# May 2023): Tri Dao's experimental Triton FlashAttention, whose docstring says "Overall Triton forward +
# backward is slightly slower than CUDA forward + backward" -- the CUDA kernel there being FlashAttention
# v1 -- and "has only been tested on A100". It ran causal with no bias: ALiBi is off in these MPTs
# (LLM_FOUNDRY_MPT), so attn_bias_shape() returns None. triton-pre-mlir (setup.py: branch
# triton_pre_mlir_sm90) is Triton's pre-MLIR backend, which emits sm80 mma.sync code on A100 and H100
# alike. Since session 26 the kernel is a backend of its own (``triton_fa``), measured on an H100 with
# today's Triton held to mma.sync (DISABLE_MMA_V3=1; validation/harness/triton_attention.py) and fitted
# there (validation/triton_fa_fit.py); on A100, whose datasheet peak is the mma.sync rate itself, the
# Hopper fit does not transfer and the kernel is costed as FlashAttention-2 (simulator.compute
# HOPPER_DESIGNS; docs/validation.md, "llm-foundry").
LLM_FOUNDRY_ATTENTION = ("attention: llm-foundry attn_impl triton (flash_attn_triton.py from flash-attention v1.0.5: "
                         "Triton FlashAttention, causal, no bias; triton-pre-mlir, sm80 mma.sync code on A100 and "
                         "H100 alike) costed as backend triton_fa: on Hopper the kernel as measured on an H100 "
                         "under today's Triton held to mma.sync (2.4-3x slower than FlashAttention-2 there), on "
                         "other GPUs as FlashAttention-2 (flash; the Hopper measurement does not transfer)")


def row_attention(family: str, fa: dict, fills: list[str]) -> str | None:
    """The attention backend a row is costed with: unfused for the 2021-22 Megatron papers
    (Megatron-LM's local layers), FlashAttention-2 (``flash``) for Dao 2023, llm-foundry's Triton
    FlashAttention (``triton_fa``: LLM_FOUNDRY_ATTENTION, said in the note) for llm-foundry, else the
    framework's default (None)."""
    if family in ("narayanan2021", "korthikanti2022"):
        return "unfused"
    if family == "llm-foundry":
        fills.append(LLM_FOUNDRY_ATTENTION)
        return "triton_fa"
    return fa.get("attention")


# Megatron-Bridge's Nemotron 3 Super NVFP4 performance runs (every release with Super rows, 26.04 to
# 26.08: v0.4.0 to v0.6.0 and commit 067f987df0): mixed precision nemotron_3_super_bf16_with_nvfp4_mixed
# (training/mixed_precision.py: first_last_layers_bf16 True, num_layers_at_end_in_bf16 14, start left at
# MixedPrecisionConfig's 0, copied onto the model config by update_config_with_precision_overrides) and
# quant_recipe te_quant.cfg (scripts/performance/configs/nemotronh/te_quant.cfg, later
# perf_recipes/nemotronh/te_quant.cfg, identical in every release): linear_qkv, linear_proj,
# fc1/fc2_latent_proj and mtp.* in bf16, the Mamba mixer's out_proj in MXFP8. Megatron-Core's hybrid stack
# runs layer_no >= num_layers - 14 outside the fp4 autocast (ssm/mamba_block.py, models/hybrid/
# hybrid_block.py get_fp4_context(config, layer.layer_number - 1)) and applies the matchers only in
# quantized layers (extensions/TransformerEngineMixedPrecision.md).
SUPER_NVFP4 = {"bf16_layers": (0, 14),
               "gemm_precision": (("attention.out", "bf16"), ("attention.qkv", "bf16"), ("mamba.out_proj", "fp8"),
                                  ("moe.latent_down", "bf16"), ("moe.latent_up", "bf16"))}
SUPER_NVFP4_SOURCE = ("Nemotron 3 Super NVFP4 as Megatron-Bridge runs it (nemotron_3_super_bf16_with_nvfp4_mixed + "
                      "te_quant.cfg): the last 14 of the 88 hybrid layers in bf16; in the others linear_qkv, "
                      "linear_proj and the LatentMoE fc1/fc2_latent_proj in bf16, the Mamba out_proj in MXFP8 "
                      "(costed as FP8), the rest NVFP4")


def recipe_mixed_precision(model: ModelSpec, family: str, precision: str, fills: list[str]) -> dict:
    """The plan's ``bf16_layers`` and ``gemm_precision`` where a recipe keeps layers or modules out
    of its quantized precision: Megatron-Bridge's Nemotron 3 Super NVFP4 runs (SUPER_NVFP4); else
    none (the other NVFP4 recipes, bf16_with_nvfp4_mixed, quantize every transformer layer)."""
    if family == "megatron-bridge" and precision == "nvfp4" and model.name and catalog_name(model.name) == \
            "nemotron-3-super-120b-a12b":
        fills.append(SUPER_NVFP4_SOURCE)
        return dict(SUPER_NVFP4)
    return {}


# sources whose runs are NeMo / Megatron-Bridge recipes (their defaults fill what a row leaves out)
RECIPE_FAMILIES = ("megatron-bridge", "dgxc-benchmarking", "nemo")

# Megatron-Bridge (commit 067f987df0) src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py,
# _get_deepseek_v3_pipeline_layout: (4,1) E+16|16|16|13+MTP+loss; (8,1) = (4,2) E+8|8 x6|5+MTP+loss;
# (16,1) = (8,2) = (4,4) E+4|4 x14|1+MTP+loss; perf_recipes/deepseek/gb300/deepseek_v3.py: pp=2 vp=8
# 'Et*4|(t*4|)*14tmL'. Chunk c of pp*vp runs on pipeline rank c mod pp (Megatron-Core's layout).
DSV3_LAYOUT_SOURCE = "Megatron-Bridge DeepSeek-V3 recipe pipeline layout (recipes/deepseek/h100/deepseek_v3.py)"
DSV3_LAYOUTS = {(4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)}   # (pp, vp) the recipes state


def deepseek_v3_split(num_layers: int, pp: int, vp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline rank under Megatron-Bridge's DeepSeek-V3 layouts: pp*vp chunks,
    every chunk but the last holding ceil(layers / chunks) decoder layers, the last the rest (with
    the MTP layer and the loss; the embedding rides in the first); chunk c runs on rank c mod pp.
    This rule reproduces every layout the recipes list (DSV3_LAYOUTS)."""
    chunks = pp * vp
    per = -(-num_layers // chunks)
    sizes = [per] * (chunks - 1) + [num_layers - per * (chunks - 1)]
    if sizes[-1] < 1:
        raise MeshcastError("pp", f"{num_layers} layers leave the last of pp*vp = {pp}*{vp} chunks empty")
    return tuple(sum(sizes[r::pp]) for r in range(pp))


def recipe_pipeline_split(model: ModelSpec, family: str, pp: int, vp: int, fills: list[str]):
    """Layers per stage where a recipe run's framework states an explicit pipeline layout and
    Megatron-Core's even split does not exist (DeepSeek-V3's 61 layers); else None (the
    framework's own split, simulator/frameworks/rules.py default_split)."""
    if (family not in RECIPE_FAMILIES or pp == 1 or not model.mla or model.num_layers % (pp * vp) == 0
            or model.num_layers != 61):
        return None
    split = deepseek_v3_split(model.num_layers, pp, vp)
    stated = "" if (pp, vp) in DSV3_LAYOUTS else f" (pp={pp} vp={vp} is not in the recipe's table: its rule applied)"
    fills.append(f"pipeline layout: {DSV3_LAYOUT_SOURCE}, {pp * vp} chunks, layers per rank "
                 f"{list(split)}{stated}")
    return split


def recipe_expert_tp(row: dict, model: ModelSpec, family: str, tp: int, fills: list[str]) -> int | None:
    """The expert tensor-parallel degree: Megatron-Bridge's Qwen3-MoE and DeepSeek-V3 recipes set
    expert_tensor_parallel_size = 1 (recipes/qwen/*/qwen3_moe.py, perf_recipes/deepseek/common.py);
    elsewhere None (Megatron-Core's default: etp = tp)."""
    if family != "megatron-bridge" or not model.moe or tp == 1:
        return None
    fills.append("etp not stated: 1 (Megatron-Bridge MoE recipes' expert_tensor_parallel_size)")
    return 1


def source_framework(row: dict, family: str) -> str:
    """The framework a published run used: DeepSpeed where the notes say so (``deepspeed-0.3``, the
    2021 releases' ZeRO-3, for Narayanan et al. 2021's runs, made before v0.6.0); plain PyTorch for
    MosaicML llm-foundry (Composer wraps torch FSDP FULL_SHARD around each block, eager, no
    tensor or pipeline parallelism: the ``pytorch`` profile's ZeRO-3, not torchtitan's TP/PP
    composition); Megatron-LM's 2021-22 code (unfused attention: the local layer spec) for the
    Megatron papers; else Megatron-Core + Transformer Engine."""
    if "deepspeed" in (row.get("notes") or "").lower():
        return "deepspeed-0.3" if family == "narayanan2021" else "deepspeed"
    if family in ("llm-foundry", "flashattention2"):
        return "pytorch"
    return "megatron-core-local" if family in ("narayanan2021", "korthikanti2022") else "megatron-core"


def source_flops(row: dict, model: ModelSpec, plan: ParallelPlan) -> float:
    """FLOPs of one iteration under the source's own definition."""
    B, s, l, h, V = plan.gbs, model.seq_len, model.num_layers, model.hidden, model.vocab
    if source_family(row["source"]) == "narayanan2021":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if source_family(row["source"]) == "flashattention2":   # Dao 2023 section 4.2, per sequence
        from models.params import total_params
        return B * (6 * s * total_params(model) + 12 * l * h * s * s)
    return step_model_flops(model, s, B)


def cluster_for(gpu: str) -> str:
    """The catalog cluster for a row's GPU description (A100-80GB -> dgx-a100-superpod, ...)."""
    for key in NOT_IN_CATALOG:
        if key.lower() in gpu.lower():
            raise MeshcastError("gpu", f"{key} is not in the catalog (hardware_specs/catalog/accelerators)")
    for key, cluster in GPU_CLUSTERS:
        if key.lower() in gpu.lower():
            return cluster
    raise MeshcastError("gpu", f"no catalog cluster for {gpu!r}")


def harness_placement(hw, family: str, fills: list[str]):
    """Say how a Megatron-Bridge performance run sits on a rack-scale (NVL72) system: its harness
    (scripts/performance/utils/executors.py, commit 067f987df0) submits jobs on 4-GPU trays with
    Slurm ``--segment``, which is how meshcast places every job on such systems
    (simulator.comm.job_domain_gpus); the row's note names the NVLink domain that gives."""
    from simulator.comm import job_domain_gpus

    node = hw.node
    domain = node.intra_node.domain_gpus
    if family != "megatron-bridge" or not domain or domain <= node.gpus_per_node:
        return hw
    span = job_domain_gpus(domain, node.gpus_per_node, hw.num_gpus)
    if span != domain:
        fills.append(f"NVLink domain {span} GPUs: Megatron-Bridge's harness places {span // node.gpus_per_node}-tray "
                     f"Slurm segments in one rack (executors.py --segment), as meshcast places every job")
    return hw


def compare_row(i: int, row: dict, calibration: str | None) -> RunComparison:
    """Simulate one published row's plan and compare with its published throughput or time."""
    fills: list[str] = []
    cluster = cluster_for(row["gpu"])
    model = model_from_row(row, fills)
    plan = plan_from_row(row, model, fills)
    hw = harness_placement(load_hardware(cluster, plan.num_gpus), source_family(row["source"]), fills)
    cal, note = calibration_for(hw.accelerator, calibration)
    r = simulate(model, hw, plan, cal)
    t_pred = r.step_time_s
    tokens = plan.gbs * model.seq_len
    if _num(row, "iteration_time_s"):
        published, metric = _num(row, "iteration_time_s"), "iteration_time_s"
        predicted, error = t_pred, published / t_pred - 1
    elif _num(row, "tokens_per_sec_per_gpu"):
        published, metric = _num(row, "tokens_per_sec_per_gpu"), "tokens_per_s_per_gpu"
        predicted = tokens / t_pred / plan.num_gpus
        error = predicted / published - 1
    elif _num(row, "measured_tflops_per_gpu"):
        published, metric = _num(row, "measured_tflops_per_gpu"), "tflops_per_gpu"
        predicted = source_flops(row, model, plan) / t_pred / plan.num_gpus / 1e12
        error = predicted / published - 1
    else:
        raise MeshcastError("measured", "no iteration time, tokens/s or TFLOP/s to compare")
    note = "; ".join([note] + fills)
    return RunComparison(i, row["source"], row["model"], plan.num_gpus, metric, published, predicted, error,
                         r.plan.to_dict(), r.fits, note, row.get("gpu", ""), row.get("dtype", ""),
                         moe=model.moe is not None, accelerator=hw.accelerator.name, family=hw.accelerator.family,
                         model_tags=tuple(model_tags(model)))


def compare_published(paths, calibration: str | None = None) -> tuple[list[RunComparison], list[Skipped]]:
    """Every row of one CSV or several: compared where its configuration is complete (values the
    source's framework defaults are filled and named in the note), else skipped with the reason."""
    done, skipped = [], []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        rows = read_csv_rows(path, RUN_COLUMNS)
        _check_numbers(rows, path, RUN_NUMBERS)
        name = Path(path).name
        for i, row in enumerate(rows):
            try:
                c = compare_row(i, row, calibration)
                c.file = name
                done.append(c)
            except MeshcastError as exc:
                skipped.append(Skipped(i, row.get("source", ""), row.get("model", ""), f"{exc.field}: {exc.reason}",
                                       row.get("gpu", ""), row.get("dtype", ""), name))
    return done, skipped


def _stats(errors: list[float]) -> dict:
    """Count, MAPE, signed median and worst absolute error of a list of signed errors."""
    return {"count": len(errors), "mape": sum(map(abs, errors)) / len(errors),
            "median_error": statistics.median(errors), "worst": max(map(abs, errors))}


def per_source(done: list[RunComparison]) -> dict[str, dict]:
    """MAPE, signed median error, count and worst of the comparisons of each source family."""
    return group_stats(done, lambda c: source_family(c.source))


def group_stats(done: list[RunComparison], key) -> dict[str, dict]:
    """The figures of :func:`_stats` per group of comparisons (``key(c)`` names the group)."""
    out: dict[str, list[float]] = {}
    for c in done:
        out.setdefault(key(c), []).append(c.error)
    return {k: _stats(v) for k, v in sorted(out.items())}


def per_regime(done: list[RunComparison]) -> dict[str, dict]:
    """The figures of :func:`_stats` on the regimes the issue's targets name: MoE rows, dense rows,
    Blackwell rows (B200, GB200, B300, GB300) and the rest; a regime with no row is left out."""
    groups = {"moe": [c for c in done if c.moe], "dense": [c for c in done if not c.moe],
              "blackwell": [c for c in done if c.family == "nvidia-blackwell"],
              "not blackwell": [c for c in done if c.family != "nvidia-blackwell"]}
    return {k: _stats([c.error for c in v]) for k, v in groups.items() if v}


def coverage(done: list[RunComparison], skipped: list[Skipped]) -> dict[str, dict]:
    """Per source family: rows evaluated, rows skipped, and the skip reasons with their counts."""
    out: dict[str, dict] = {}
    for c in done:
        out.setdefault(source_family(c.source), {"evaluated": 0, "skipped": 0, "reasons": {}})["evaluated"] += 1
    for s in skipped:
        d = out.setdefault(source_family(s.source), {"evaluated": 0, "skipped": 0, "reasons": {}})
        d["skipped"] += 1
        d["reasons"][s.reason] = d["reasons"].get(s.reason, 0) + 1
    return dict(sorted(out.items()))


def gpu_label(gpu: str) -> str:
    """A short GPU name for grouping (``A100-80GB (1600Gbps RoCE)`` -> A100-80GB)."""
    return gpu.split(" (")[0].replace(" SXM", "").strip()


def dtype_label(dtype: str) -> str:
    """A short precision name for grouping (``amp_bf16`` -> BF16, ``FP8-CS (FP8-MX)`` -> FP8)."""
    d = dtype.lower()
    for word, label in (("nvfp4", "NVFP4"), ("mxfp8", "MXFP8"), ("fp8-mx", "MXFP8"), ("fp8", "FP8"),
                        ("bf16", "BF16"), ("fp16", "FP16"), ("16-bit", "16-bit")):
        if word in d:
            return label
    return "not stated"


@dataclass
class LayerComparison:
    """One published per-layer time (ms) against the predicted one."""
    implementation: str
    metric: str                  # forward_time, backward_time or combined_time
    published_ms: float
    predicted_ms: float
    error: float


LAYER_IMPLEMENTATIONS = {   # Korthikanti et al. 2022 Table 4 rows -> (sequence parallel, recompute)
    "baseline no recompute": (False, "none"), "sequence parallelism": (True, "none"),
    "baseline with recompute": (False, "full"), "selective recompute": (False, "selective"),
    "selective + sequence": (True, "selective"),
}


def compare_layer_times(path: str | Path, calibration: str | None = None) -> list[LayerComparison]:
    """One transformer layer's forward and backward times (Korthikanti et al. 2022, Table 4:
    GPT-22B layer, TP=8 on 8 A100s) against the layer ops simulate() costs."""
    from simulator.engine import _fabric, device_model, summarize_ops
    from simulator.lowering import Context, layer_ops
    from simulator.plan import resolve_plan

    out = []
    rows = read_csv_rows(path, LAYER_COLUMNS)
    _check_numbers(rows, path, LAYER_NUMBERS)
    for i, row in enumerate(rows):
        if row["metric"] not in ("forward_time", "backward_time", "combined_time"):
            raise SpecError(f"{path}: line {i + 2}: metric", "must be forward_time, backward_time or combined_time, "
                                                            f"got {row['metric']!r}")
    for row in rows:
        impl = row["implementation"].split(":", 1)[-1].strip().lower()
        if impl not in LAYER_IMPLEMENTATIONS:
            continue
        sp, recompute = LAYER_IMPLEMENTATIONS[impl]
        h, heads, s, b = int(row["hidden"]), int(row["num_heads"]), int(row["seq_len"]), int(row["batch_size"])
        model = ModelSpec(name="gpt-22b-layer", num_layers=1, hidden=h, ffn_hidden=4 * h, num_heads=heads,
                          vocab=51200, seq_len=s, activation="gelu", norm="layernorm", linear_bias=True,
                          position="learned", tied_embeddings=True)
        gpus = int(row["num_gpus"])
        hw = load_hardware(cluster_for(row["gpu"]), gpus)
        cal, _ = calibration_for(hw.accelerator, calibration)
        plan = resolve_plan(model, ParallelPlan(tp=gpus, mbs=b, gbs=b, seq=s, sequence_parallel=sp,
                                                recompute=recompute, framework="megatron-core-local", dropout=True,
                                                zero_stage=0), gpus)
        ctx = Context(model, plan, device_model(hw.accelerator, cal), _fabric(hw, cal))
        layer = summarize_ops(layer_ops(ctx, moe=False))   # summed as a pipeline stage sums it
        fwd, bwd = layer.forward_s, layer.backward_s
        pred = {"forward_time": fwd, "backward_time": bwd, "combined_time": fwd + bwd}[row["metric"]] * 1e3
        pub = float(row["value"])
        out.append(LayerComparison(impl, row["metric"], pub, pred, pred / pub - 1))
    return out
