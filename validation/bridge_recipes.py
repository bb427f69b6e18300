"""The Megatron-Bridge performance recipe each published Megatron-Bridge row ran, and the settings
meshcast reads from it (issue #12: fill what a row leaves out the way its source's framework does).

validation/published/bridge_recipes.csv holds, per (release, model, GPU, precision) of
docs/performance-summary*.md, the recipe config that states the row's parallel layout, read from
github:NVIDIA-NeMo/Megatron-Bridge at the tag the NeMo container of that release ships (RELEASE_TAGS):
scripts/performance/configs/<family>/*workload_base_configs.py (v0.2.0 to v0.5.1; applied by
scripts/performance/utils/overrides.py set_workload_base_configs) or
src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py (v0.6.0). A row whose layout no config of its
tag states (or whose tag's recipes were not read: 25.09, r0.1.0's YAML matrix) has no entry and says so.
"""
from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path

from simulator.plan import RECOMPUTE_MODULES

RECIPES_CSV = Path(__file__).resolve().parent / "published" / "bridge_recipes.csv"
REPO = "NVIDIA-NeMo/Megatron-Bridge"
# NeMo container release -> the Megatron-Bridge release tag it ships (the r0.x branch of its month)
RELEASE_TAGS = {"25.09": "r0.1.0", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
                "26.04.01": "v0.4.1", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
# Recomputed modules meshcast's ``selective`` recompute costs (simulator.plan.RECOMPUTE_MODULES: the
# attention core, Megatron-Core's default, and the modules the recipes name: layernorm, moe_act,
# mla_up_proj; simulator.lowering.recomputed)
MODELLED_MODULES = set(RECOMPUTE_MODULES)


def precision_label(dtype: str) -> str:
    """The recipe precision of a row's dtype: NVFP4, MXFP8, FP8 (current scaling) or BF16."""
    d = dtype.upper()
    return "NVFP4" if "NVFP4" in d else "MXFP8" if "MX" in d else "FP8" if "FP8" in d else "BF16"


@lru_cache(maxsize=1)
def load_recipes() -> dict[tuple, dict]:
    """bridge_recipes.csv keyed by (release, model as printed, GPU, precision label)."""
    with open(RECIPES_CSV, newline="") as f:
        return {(r["release"], r["model"], r["gpu"], r["precision"]): r for r in csv.DictReader(f)}


def row_recipe(row: dict) -> tuple[str, dict | None]:
    """(release, recipe settings) of a Megatron-Bridge row; settings None where none was matched."""
    m = re.search(r"release ([\d.]+) NeMo container", row.get("notes") or "")
    release = m.group(1) if m else ""
    key = (release, row["model"], (row.get("gpu") or "").split(" ")[0], precision_label(row.get("dtype") or ""))
    return release, load_recipes().get(key)


def recipe_label(rec: dict) -> str:
    """Where a recipe's settings were read: ``Megatron-Bridge v0.5.0 <file> <config>``."""
    return f"Megatron-Bridge {rec['tag']} {rec['recipe_file']} {rec['config']}"


def tp_overlap(model_name: str, precision: str, tp: int) -> bool:
    """TP communication overlap as the recipes set it: the Llama 3 / 3.1 base recipes
    (src/megatron/bridge/recipes/llama/llama3.py: CommOverlapConfig(tp_comm_overlap=True)) keep it
    except under NVFP4 (scripts/performance/configs/llama/llama3*_llm_pretrain.py); the Qwen3 perf
    scripts set it (qwen3_llm_pretrain.py); the others leave it off. Only with tp > 1."""
    name = model_name.lower()
    return tp > 1 and ("llama" in name and precision != "nvfp4" or "qwen3" in name)


def unmodelled(rec: dict) -> list[str]:
    """The recipe's settings that change the step but meshcast does not cost."""
    out = []
    mods = [m for m in rec["recompute_modules"].split() if m not in MODELLED_MODULES]
    if mods:
        out.append(f"selective recompute of {', '.join(mods)} (a module meshcast does not cost: neither its extra "
                   "forward nor its memory saving)")
    if rec["cuda_graphs"]:
        out.append(f"CUDA graphs {rec['cuda_graphs']} (launch overhead not reduced in the model)")
    if rec["fp8_attention"] == "True":
        out.append("FP8 dot-product attention (attention costed in bf16)")
    if rec["fused_grouped_mlp"] == "True":
        out.append("CuteDSL fused grouped MLP (costed as separate grouped GEMMs and activation)")
    if rec["dispatcher"]:
        out.append(f"flex token dispatcher {rec['dispatcher']} (its all-to-all at the collective model's "
                   "all-to-all cost; permutation fused into it, preprocessing and host sync costed)")
    if rec["cpu_offload_layers"]:
        out.append(f"activation offload of {rec['cpu_offload_layers']} layers to the CPU")
    return out


def moe_routing(rec: dict, model_name: str) -> dict:
    """The MoE routing a recipe runs (simulator/moe_dispatch.py): the dispatcher its
    ``moe_flex_dispatcher_backend`` names (apply_flex_dispatcher_backend: the flex dispatcher with
    HybridEP), else the model provider's ``moe_token_dispatcher_type`` "alltoall"; the host
    synchronisation off under full-iteration CUDA graphs, which the performance scripts pair with
    ``moe_expert_rank_capacity_factor`` (a static HybridEP budget: no host sync; e.g.
    scripts/performance/configs/qwen/qwen3_llm_pretrain.py, deepseek_llm_pretrain.py,
    gpt_oss_llm_pretrain.py at v0.5.0, perf_recipes/deepseek/common.py at v0.6.0); the router fusion the
    scripts set (cfg.model.moe_router_fusion = True in the DeepSeek, GPT-OSS and Qwen3 scripts from v0.2.0
    on, the Nemotron-H perf recipes from v0.6.0). Permute fusion: the providers' True (the profile's)."""
    name = model_name.lower()
    fused_router = any(k in name for k in ("deepseek", "gpt oss", "qwen3")) or (
        "nemotron" in name and rec["tag"] >= "v0.6.0")
    out = {"moe_dispatcher": "hybridep" if rec["dispatcher"] == "hybridep" else "alltoall",
           "moe_router_fusion": fused_router}
    if rec["cuda_graphs"] == "full_iteration":
        out["moe_host_sync"] = False
    return out


def recipe_fp8_recipe(config: str) -> str | None:
    """The FP8 recipe a workload config's name states, by Megatron-Core's names: ``*_FP8_CS_*``
    (scripts/performance/utils/precision.py ``fp8_cs``: bf16_with_fp8_current_scaling_mixed) tensorwise,
    ``*_FP8_MX_*`` / ``*_fp8mx_*`` (``fp8_mx``: bf16_with_mxfp8_mixed) mxfp8, ``*_FP8_SC_*`` (``fp8_sc``:
    bf16_with_fp8_subchannel_scaling_mixed) blockwise; None where the name states none."""
    name = config.upper()
    for key, recipe in (("FP8_CS", "tensorwise"), ("FP8_MX", "mxfp8"), ("FP8MX", "mxfp8"), ("FP8_SC", "blockwise")):
        if key in name:
            return recipe
    return None


def recipe_fields(row: dict, model_name: str, tp: int, ep: int, precision: str, fills: list[str],
                  moe: bool = False) -> dict:
    """The plan fields a Megatron-Bridge row's recipe sets (vp, mbs, zero_stage, recompute and its
    modules, tp_comm_overlap, ep_comm_overlap), each named in ``fills`` with the recipe it came from; what the
    recipe runs that meshcast does not model is listed there too. Empty where no recipe matched."""
    release, rec = row_recipe(row)
    if rec is None:
        tag = RELEASE_TAGS.get(release, "?")
        fills.append(f"no Megatron-Bridge performance recipe read for this row (release {release}, tag {tag}: "
                     "none states its layout, or that release's recipes were not read): recipe settings not filled")
        return {}
    src = recipe_label(rec)
    out = {"vp": int(rec["vp"]) if rec["vp"] else None, "mbs": int(rec["mbs"]) if rec["mbs"] else None,
           "tp_comm_overlap": tp_overlap(model_name, precision, tp),
           "ep_comm_overlap": rec["moe_a2a_overlap"] == "True" and ep > 1}
    if rec["megatron_fsdp"] == "True":
        out["zero_stage"] = 3
    if precision == "fp8":
        recipe = recipe_fp8_recipe(rec["config"])
        if recipe:
            out["fp8_recipe"] = recipe
    if moe:
        out.update(moe_routing(rec, model_name))
    mods = [m for m in rec["recompute_modules"].split() if m in MODELLED_MODULES]
    out["recompute"] = "full" if rec["recompute_num_layers"] else "selective" if mods else "none"
    if rec["recompute_num_layers"]:
        out["recompute_layers"] = int(rec["recompute_num_layers"])
    elif mods:   # Megatron-Core's --recompute-modules, as the recipe lists them
        out["recompute_modules"] = tuple(mods)
    read = [f"{k}={' '.join(v) if isinstance(v, tuple) else v}" for k, v in out.items()
            if v not in (None, False, "none") or k == "moe_host_sync"]
    fills.append(f"recipe {src}: " + (", ".join(read) if read else "no recompute, no TP or EP comm overlap"))
    missing = unmodelled(rec)
    if out.get("recompute_modules"):
        missing.append(f"the activation memory recomputing {' '.join(out['recompute_modules'])} saves (its re-run "
                       "forward is costed; under fp8/fp4 the re-quantization of the recomputed input is not)")
    if missing:
        fills.append("recipe settings not modelled: " + "; ".join(missing))
    return out
