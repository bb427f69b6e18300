"""Build a :class:`ModelSpec` from a local Hugging Face ``config.json``.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
deepseek_v2, deepseek_v3, nemotron, nemotron_h (Nemotron-H, Nemotron Nano 2, Nemotron 3: hybrid
Mamba-2 / attention / MoE stacks), gpt2, gpt_neox, phi3, olmo2, granite, gemma2 and gpt_oss.
Only the fields that change the cost of training are read; rope scaling (``rope_scaling`` or the newer ``rope_parameters``), dropout,
token ids and the like are accepted and ignored. Both old and new spellings of the size fields
are accepted (``num_hidden_layers``/``n_layer``, ``hidden_size``/``n_embd``, ...).

``seq_len`` is ``max_position_embeddings`` capped at :data:`DEFAULT_SEQ_CAP` (8192): a model's
maximum context (128K and more today) is rarely its training sequence length; callers override
the sequence length for the run they simulate anyway. The cap is written into ``notes``.

Features a :class:`ModelSpec` cannot express but that change the cost only marginally are
imported and written into ``notes`` (QK-norm, sandwich norms, logit soft-capping, attention
sinks, router biases, scalar multipliers); sliding-window attention is costed as full causal
attention, with a note saying by how much that can overstate attention time.

:func:`resolve_hf_model` finds a config in a folder, in a Hugging Face hub-cache entry
(``models--ORG--NAME``) or, by ``ORG/NAME``, in the local hub cache; nothing is downloaded.

Every problem (missing file, malformed JSON, unknown ``model_type``, a missing or invalid field)
raises :class:`SpecError` naming the file and the field.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pydantic

from hardware_specs.errors import SpecError
from models.schema import ModelSpec

DEFAULT_SEQ_CAP = 8192
"""Largest ``seq_len`` taken from ``max_position_embeddings``."""

_MISSING = object()

# HF key spellings, new first; the first one present wins.
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HEADS = ("num_attention_heads", "n_head")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads")
_VOCAB = ("vocab_size",)
_MAX_POS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")

# Families whose MLP is gated (gate, up, down) in the HF implementation.
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
          "deepseek_v2", "deepseek_v3", "phi3", "olmo2", "granite", "gemma2", "gpt_oss"}
# model_type -> (family, norm, default tie_word_embeddings, position)
_FAMILY = {
    "llama": ("llama", "rmsnorm", False, "rope"),
    "mistral": ("mistral", "rmsnorm", False, "rope"),
    "mixtral": ("mixtral", "rmsnorm", False, "rope"),
    "qwen2": ("qwen2", "rmsnorm", False, "rope"),
    "qwen2_moe": ("qwen2-moe", "rmsnorm", False, "rope"),
    "qwen3": ("qwen3", "rmsnorm", False, "rope"),
    "qwen3_moe": ("qwen3-moe", "rmsnorm", False, "rope"),
    "deepseek_v2": ("deepseek", "rmsnorm", False, "rope"),
    "deepseek_v3": ("deepseek", "rmsnorm", False, "rope"),
    "nemotron": ("nemotron", "layernorm", False, "rope"),
    "nemotron_h": ("nemotron-h", "rmsnorm", False, "none"),   # no position embedding (Megatron: none)
    "gpt2": ("gpt", "layernorm", True, "learned"),
    "gpt_neox": ("gpt-neox", "layernorm", False, "rope"),
    "phi3": ("phi3", "rmsnorm", False, "rope"),
    "olmo2": ("olmo2", "rmsnorm", False, "rope"),
    "granite": ("granite", "rmsnorm", False, "rope"),
    "gemma2": ("gemma2", "rmsnorm", True, "rope"),
    "gpt_oss": ("gpt-oss", "rmsnorm", False, "rope"),
}
# Per family: what the HF implementation has that ModelSpec does not count, and why it is marginal.
_UNMODELLED = {
    "olmo2": "QK-norm (RMSNorm over q and k: hidden + kv_heads*head_dim params per layer) not modelled; "
             "post-norm placement costs the same as pre-norm",
    "granite": "embedding/residual/attention multipliers and logits_scaling are scalars (no cost)",
    "gemma2": "sandwich norms (4 RMSNorms per layer, 2 counted), embedding scaling, attention-logit and "
              "final-logit soft-capping (elementwise tanh) not modelled",
    "gpt_oss": "attention sinks (num_heads params per layer), router bias and the clamped SwiGLU "
               "(elementwise) not modelled",
    "phi3": "fused qkv_proj/gate_up_proj are the same GEMM FLOPs as separate projections",
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILY))

# ModelSpec field -> its usual HF key, to name HF keys in validation errors when the key read
# was not recorded in _Config.used.
_SPEC_TO_HF_DEFAULT = {"num_layers": "num_hidden_layers", "hidden": "hidden_size",
                       "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
                       "vocab": "vocab_size", "ffn_hidden": "intermediate_size",
                       "head_dim": "head_dim", "activation": "hidden_act"}


class _Config:
    """The parsed JSON with lookups that raise :class:`SpecError` naming the file and the key."""

    def __init__(self, data: dict, origin: str):
        self.data = data
        self.origin = origin
        self.used: dict[str, str] = {}   # ModelSpec field -> HF key actually read

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(f"{self.origin}: {key}", reason)

    def get(self, keys: tuple[str, ...] | str, default: Any = _MISSING, spec_field: str | None = None):
        """The value of the first of ``keys`` present (and not null), else ``default``."""
        keys = (keys,) if isinstance(keys, str) else keys
        for key in keys:
            if self.data.get(key) is not None:
                if spec_field:
                    self.used[spec_field] = key
                return self.data[key]
        if default is _MISSING:
            also = f" (also accepted: {', '.join(keys[1:])})" if len(keys) > 1 else ""
            raise self.error(keys[0], f"missing required field{also}")
        return default

    def integer(self, keys: tuple[str, ...] | str, default: Any = _MISSING, spec_field: str | None = None):
        """Like :meth:`get`, and the value read must be an integer."""
        keys = (keys,) if isinstance(keys, str) else keys
        value = self.get(keys, default, spec_field)
        key = next((k for k in keys if self.data.get(k) is not None), None)
        if key is None:   # absent: the default
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value


def _rope_base(cfg: _Config):
    """RoPE base ``rope_theta`` (or ``rope_parameters.rope_theta`` in newer configs); None if absent."""
    theta = cfg.get("rope_theta", None, spec_field="rope_base")
    params = cfg.data.get("rope_parameters")
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    if theta is None:
        return None
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise cfg.error("rope_theta", f"expected a positive number, got {theta!r}")
    return float(theta)


def _activation(cfg: _Config, model_type: str) -> str:
    """ModelSpec activation from ``hidden_act`` (``activation_function`` for GPT-2)."""
    key = {"gpt2": "activation_function", "gemma2": "hidden_activation",
           "nemotron_h": "mlp_hidden_act"}.get(model_type, "hidden_act")
    if model_type == "gemma2" and cfg.data.get(key) is None:
        key = "hidden_act"
    default = {"gpt2": "gelu_new", "nemotron": "relu2", "nemotron_h": "relu2", "gpt_neox": "gelu",
               "gemma2": "gelu_pytorch_tanh"}.get(model_type, "silu")
    act = cfg.get(key, default, spec_field="activation")
    if not isinstance(act, str):
        raise cfg.error(key, f"expected an activation name, got {act!r}")
    name = act.lower()
    if model_type in _GATED:   # gate * act(up): SwiGLU or GeGLU
        if name in ("silu", "swish"):
            return "swiglu"
        if name.startswith("gelu"):
            return "geglu"
        raise cfg.error(key, f"gated MLP with activation {act!r} is not supported (silu or gelu)")
    if name in ("relu2", "squared_relu", "relu_squared"):
        return "squared_relu"
    if name.startswith("gelu"):
        return "gelu"
    if name == "relu":
        return "relu"
    raise cfg.error(key, f"activation {act!r} is not supported (relu2, gelu or relu)")


def _moe(cfg: _Config, model_type: str, num_layers: int, notes: list[str]) -> dict | None:
    """The ModelSpec ``moe`` mapping, or None for a dense model."""
    cfg.used["moe.top_k"] = "num_experts_per_tok"
    if model_type in ("mixtral", "gpt_oss"):
        cfg.used["moe.num_experts"] = "num_local_experts"
        cfg.used["moe.expert_ffn_hidden"] = "intermediate_size"
        return {"num_experts": cfg.integer("num_local_experts"),
                "top_k": cfg.integer(("num_experts_per_tok", "experts_per_token")),
                "expert_ffn_hidden": cfg.integer("intermediate_size")}
    if model_type in ("qwen2_moe", "qwen3_moe"):
        experts = cfg.integer("num_experts", 0)
        cfg.used.update({"moe.num_experts": "num_experts",
                         "moe.expert_ffn_hidden": "moe_intermediate_size",
                         "moe.shared_expert_ffn_hidden": "shared_expert_intermediate_size",
                         "moe.first_dense_layers": "decoder_sparse_step"})
        if not experts:
            return None
        moe: dict[str, Any] = {"num_experts": experts, "top_k": cfg.integer("num_experts_per_tok"),
                               "expert_ffn_hidden": cfg.integer("moe_intermediate_size")}
        shared = cfg.integer("shared_expert_intermediate_size", 0)
        if shared:
            moe.update(shared_experts=1, shared_expert_ffn_hidden=shared)
            notes.append("shared-expert sigmoid gate (hidden params per layer) not modelled")
        # HF: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers.
        step = cfg.integer("decoder_sparse_step", 1)
        if step < 1:
            raise cfg.error("decoder_sparse_step", f"must be at least 1, got {step}")
        if cfg.get("mlp_only_layers", []):
            raise cfg.error("mlp_only_layers", "a list of dense layers cannot be expressed as "
                            "first_dense_layers + layer_frequency; not supported")
        moe.update(first_dense_layers=min(step - 1, num_layers), layer_frequency=step)
        return moe
    if model_type == "nemotron_h":
        experts = cfg.integer("n_routed_experts", 0)
        cfg.used.update({"moe.num_experts": "n_routed_experts", "moe.expert_ffn_hidden": "moe_intermediate_size",
                         "moe.shared_experts": "n_shared_experts", "moe.latent_size": "moe_latent_size"})
        if not experts:
            return None
        moe = {"num_experts": experts, "top_k": cfg.integer("num_experts_per_tok"),
               "expert_ffn_hidden": cfg.integer("moe_intermediate_size"),
               "shared_experts": cfg.integer("n_shared_experts", 0)}
        shared = cfg.integer("moe_shared_expert_intermediate_size", None)
        if shared and moe["shared_experts"]:
            moe["shared_expert_ffn_hidden"] = shared // moe["shared_experts"]
        latent = cfg.integer("moe_latent_size", None)
        if latent:
            moe["latent_size"] = latent
        return moe
    if model_type in ("deepseek_v2", "deepseek_v3"):
        experts = cfg.integer("n_routed_experts", 0)
        cfg.used.update({"moe.num_experts": "n_routed_experts",
                         "moe.expert_ffn_hidden": "moe_intermediate_size",
                         "moe.shared_experts": "n_shared_experts",
                         "moe.first_dense_layers": "first_k_dense_replace"})
        if not experts:
            return None
        # HF: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
        first_k = cfg.integer("first_k_dense_replace", 0)
        freq = cfg.integer("moe_layer_freq", 1)
        if freq < 1:
            raise cfg.error("moe_layer_freq", f"must be at least 1, got {freq}")
        first_moe = -(-first_k // freq) * freq   # first index >= first_k that is a multiple of freq
        return {"num_experts": experts, "top_k": cfg.integer("num_experts_per_tok"),
                "expert_ffn_hidden": cfg.integer("moe_intermediate_size"),
                "shared_experts": cfg.integer("n_shared_experts", 0),
                "first_dense_layers": min(first_moe, num_layers), "layer_frequency": freq}
    return None


# HF NemotronH block names (layers_block_type, the newer spelling of hybrid_override_pattern)
_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _pattern(cfg: _Config, pattern_key: str, list_key: str) -> str | None:
    """A hybrid pattern from its string (``hybrid_override_pattern``) or its block list
    (``layers_block_type``); None when neither is present."""
    text = cfg.get(pattern_key, None)
    if text is not None:
        if not isinstance(text, str):
            raise cfg.error(pattern_key, f"expected a string of M, *, - and E, got {text!r}")
        return text
    blocks = cfg.get(list_key, None)
    if blocks is None:
        return None
    if not isinstance(blocks, list) or any(b not in _BLOCK_SYMBOLS for b in blocks):
        raise cfg.error(list_key, f"expected a list of {', '.join(_BLOCK_SYMBOLS)}, got {blocks!r}")
    return "".join(_BLOCK_SYMBOLS[b] for b in blocks)


def _hybrid(cfg: _Config, spec: dict, num_layers: int, notes: list[str]) -> None:
    """The hybrid fields of a NemotronH config: the layer pattern, the Mamba-2 mixer, LatentMoE
    and the MTP module's pattern (HF configuration_nemotron_h.py field names)."""
    pattern = _pattern(cfg, "hybrid_override_pattern", "layers_block_type")
    if pattern is None:
        raise cfg.error("hybrid_override_pattern", "missing required field (also accepted: layers_block_type)")
    cfg.used.update({"hybrid_pattern": "hybrid_override_pattern", "mamba.num_heads": "mamba_num_heads",
                     "mamba.head_dim": "mamba_head_dim", "mamba.n_groups": "n_groups"})
    spec["hybrid_pattern"] = pattern
    if "M" in pattern:
        spec["mamba"] = {"num_heads": cfg.integer("mamba_num_heads"), "head_dim": cfg.integer("mamba_head_dim", 64),
                         "state_size": cfg.integer("ssm_state_size", 128), "n_groups": cfg.integer("n_groups", 8),
                         "conv_kernel": cfg.integer("conv_kernel", 4), "chunk_size": cfg.integer("chunk_size", 128)}
        if cfg.flag("mamba_proj_bias", False):
            notes.append("Mamba in_proj/out_proj biases (mamba_proj_bias) not counted")
    mtp = cfg.integer("num_nextn_predict_layers", 0)
    if mtp:
        spec["mtp_layers"] = mtp
        mtp_pattern = _pattern(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
        if mtp_pattern:
            spec["mtp_pattern"] = mtp_pattern
    if spec.get("moe"):
        notes.append("router score-correction bias (n_routed_experts per MoE layer) not modelled")
    if num_layers != len(pattern):
        cfg.used["hybrid_pattern"] = "num_hidden_layers"


_WINDOWED = {"mistral", "mixtral", "phi3", "gemma2", "gpt_oss", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
_LAYER_TYPES = ("sliding_attention", "full_attention")


def _sliding_window_note(cfg: _Config, model_type: str, num_layers: int, notes: list[str]) -> None:
    """A note on sliding-window layers, which are costed as full causal attention.

    Windowed layers: those ``layer_types`` marks ``sliding_attention``; every other layer for
    Gemma-2; every layer for Mistral/Mixtral/Phi-3 (and Qwen with ``use_sliding_window``).
    """
    window = cfg.integer("sliding_window", None) if model_type in _WINDOWED else None
    if model_type.startswith("qwen") and not cfg.flag("use_sliding_window", False):
        window = None
    if not window:
        return
    types = cfg.get("layer_types", None)
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers or any(t not in _LAYER_TYPES for t in types):
            raise cfg.error("layer_types", f"expected {num_layers} entries, each one of {', '.join(_LAYER_TYPES)}")
        windowed = types.count("sliding_attention")
    else:
        windowed = (num_layers + 1) // 2 if model_type == "gemma2" else num_layers
    if windowed:
        notes.append(f"sliding-window attention ({window} tokens) on {windowed} of {num_layers} layers is costed "
                     f"as full causal attention: their attention time is overstated for sequences over {window} tokens")


def _mla(cfg: _Config) -> dict:
    keys = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    return {"q_lora_rank": cfg.integer("q_lora_rank", None), **{k: cfg.integer(k) for k in keys}}


def _biases(cfg: _Config, model_type: str, notes: list[str]) -> dict:
    """``linear_bias`` and ``qkv_bias`` from the family's HF bias switches."""
    if model_type == "gpt2":
        return {"linear_bias": True}
    if model_type in ("qwen2", "qwen2_moe"):   # QKV bias is hard-wired in the HF implementation
        return {"linear_bias": False, "qkv_bias": True}
    if model_type == "gpt_neox":
        return {"linear_bias": cfg.flag("attention_bias", True)}
    if model_type == "gpt_oss":   # attention_bias for q/k/v/o; expert MLPs always carry biases
        return {"linear_bias": True} if cfg.flag("attention_bias", True) else {"linear_bias": False}
    attn = cfg.flag("attention_bias", False)
    mlp = cfg.flag("mlp_bias", False)
    if attn and mlp:
        return {"linear_bias": True}
    if mlp:
        notes.append("mlp_bias without attention_bias: MLP biases not modelled")
    if attn:
        notes.append("attention_bias: QKV bias modelled, output-projection bias (hidden per layer) not")
        return {"linear_bias": False, "qkv_bias": True}
    return {"linear_bias": False}


def _model_name(path: Path, data: dict) -> str:
    """The folder of a ``config.json`` (the repo of an HF cache snapshot), else ``_name_or_path``,
    else the file stem."""
    if path.name == "config.json":
        parent = path.resolve().parent
        if re.fullmatch(r"[0-9a-f]{40}", parent.name) and parent.parent.name == "snapshots":
            repo = parent.parent.parent.name          # models--org--name
            if repo.startswith("models--"):
                return repo.split("--")[-1]
        if parent.name:
            return parent.name
    name_or_path = data.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        return name_or_path.rstrip("/").split("/")[-1]
    return path.stem


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(str(path), f"cannot read file ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise SpecError(str(path), f"malformed JSON at {where}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "expected a JSON object of config fields at the top level")
    return data


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of the Hugging Face ``config.json`` at ``path`` (a file or its folder).

    ``name`` overrides the model name, which is otherwise the file's folder (for a file named
    ``config.json``), the config's ``_name_or_path`` or the file stem.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    data = _read_json(path)
    cfg = _Config(data, str(path))

    model_type = cfg.get("model_type")
    if model_type not in _FAMILY:
        raise cfg.error("model_type", f"unknown model_type {model_type!r} "
                        f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    family, norm, tie_default, position = _FAMILY[model_type]
    notes: list[str] = []

    if model_type == "nemotron_h" and cfg.get(_LAYERS, None) is None:   # newer configs: the block list alone
        num_layers = len(_pattern(cfg, "hybrid_override_pattern", "layers_block_type") or "")
    else:
        num_layers = cfg.integer(_LAYERS, spec_field="num_layers")
    hidden = cfg.integer(_HIDDEN, spec_field="hidden")
    num_heads = cfg.integer(_HEADS, spec_field="num_heads")
    if model_type == "gpt2":
        ffn = cfg.integer("n_inner", 4 * hidden, spec_field="ffn_hidden")
    else:
        ffn = cfg.integer("intermediate_size", spec_field="ffn_hidden")

    max_pos = cfg.integer(_MAX_POS, None)
    if max_pos is None:
        seq_len = DEFAULT_SEQ_CAP
        notes.append(f"no max_position_embeddings: seq_len defaults to {DEFAULT_SEQ_CAP}")
    else:
        seq_len = min(max_pos, DEFAULT_SEQ_CAP)
        if max_pos > DEFAULT_SEQ_CAP:
            notes.append(f"seq_len = min(max_position_embeddings {max_pos}, {DEFAULT_SEQ_CAP})")

    spec: dict[str, Any] = {
        "name": name or _model_name(path, data),
        "family": family,
        "num_layers": num_layers,
        "hidden": hidden,
        "ffn_hidden": ffn,
        "num_heads": num_heads,
        "vocab": cfg.integer(_VOCAB, spec_field="vocab"),
        "seq_len": seq_len,
        "activation": _activation(cfg, model_type),
        "norm": norm,
        "tied_embeddings": cfg.flag("tie_word_embeddings", tie_default),
        "position": position,
        **_biases(cfg, model_type, notes),
    }
    if model_type in ("deepseek_v2", "deepseek_v3"):
        spec["mla"] = _mla(cfg)
        mtp = cfg.integer("num_nextn_predict_layers", 0)
        if mtp:
            spec["mtp_layers"] = mtp
    else:
        kv = cfg.integer(_KV_HEADS, None, spec_field="num_kv_heads")
        if kv is not None:
            spec["num_kv_heads"] = kv
        head_dim = cfg.integer("head_dim", None, spec_field="head_dim")
        if head_dim is not None and head_dim * num_heads != hidden:
            spec["head_dim"] = head_dim
    moe = _moe(cfg, model_type, num_layers, notes)
    if moe is not None:
        spec["moe"] = moe
    if model_type == "nemotron_h":
        _hybrid(cfg, spec, num_layers, notes)
    theta = _rope_base(cfg)
    if theta is not None:
        spec["rope_base"] = theta
    if model_type in ("qwen3", "qwen3_moe"):
        notes.append("per-head QK RMSNorm (2 x head_dim params per layer) not modelled")
    if model_type in _UNMODELLED:
        notes.append(_UNMODELLED[model_type])
    _sliding_window_note(cfg, model_type, num_layers, notes)

    origin = data.get("_name_or_path")
    spec["source"] = f"Hugging Face config.json: {path}" + (f" ({origin})" if origin else "")
    spec["notes"] = "; ".join(notes)
    return _validate(spec, cfg)


# ModelSpec names that the model-level validators put in their messages, and the HF keys behind them.
_MESSAGE_FIELDS = (("top_k", "moe.top_k"), ("num_kv_heads", "num_kv_heads"),
                   ("first_dense_layers", "moe.first_dense_layers"),
                   ("not divisible by num_heads", "num_heads"))


def _validate(spec: dict, cfg: _Config) -> ModelSpec:
    """Validate against :class:`ModelSpec`; the first error names the HF key it came from."""
    try:
        return ModelSpec.model_validate(spec)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        loc = ".".join(str(p) for p in err["loc"])
        if loc in ("", "moe", "mla"):   # a model validator: find the field its message names
            loc = next((f for word, f in _MESSAGE_FIELDS if word in msg), loc)
        field = cfg.used.get(loc) or _SPEC_TO_HF_DEFAULT.get(loc) or loc or "(config)"
        raise cfg.error(field, msg) from None


def hub_cache_dirs() -> list[Path]:
    """Local Hugging Face hub caches, in the order huggingface_hub looks: ``HF_HUB_CACHE``,
    ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``, then ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    dirs = [os.environ.get("HF_HUB_CACHE"), os.environ.get("HUGGINGFACE_HUB_CACHE")]
    if os.environ.get("HF_HOME"):
        dirs.append(str(Path(os.environ["HF_HOME"]) / "hub"))
    dirs.append(str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"))
    return [Path(d) for d in dict.fromkeys(d for d in dirs if d)]


def _snapshot_config(repo: Path) -> Path:
    """``config.json`` of a hub-cache entry ``models--ORG--NAME``: the revision ``refs/main``
    names, else the newest snapshot holding one."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        cfg = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if cfg.is_file():
            return cfg
    found = sorted((p for p in (repo / "snapshots").glob("*/config.json") if p.is_file()),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        raise SpecError(str(repo), "no snapshots/<revision>/config.json in this Hugging Face cache entry")
    return found[-1]


_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def resolve_hf_model(name: str) -> Path | None:
    """The ``config.json`` that ``name`` points at, or None when it is not a Hugging Face model.

    ``name`` may be a ``.json`` file, a folder holding ``config.json``, a hub-cache entry
    (``.../models--ORG--NAME``) or a repo id ``ORG/NAME`` present in a local hub cache
    (:func:`hub_cache_dirs`). Nothing is ever downloaded.
    """
    path = Path(name).expanduser()
    if name.endswith(".json"):
        return path
    if path.is_dir():
        if (path / "config.json").is_file():
            return path / "config.json"
        if (path / "snapshots").is_dir():
            return _snapshot_config(path)
        raise SpecError(str(path), "folder has no config.json (nor snapshots/, as a Hugging Face cache entry)")
    if path.exists() or not _REPO_ID.fullmatch(name):
        return None
    org, repo = name.split("/")
    for cache in hub_cache_dirs():
        entry = cache / f"models--{org}--{repo}"
        if entry.is_dir():
            return _snapshot_config(entry)
    caches = ", ".join(str(d) for d in hub_cache_dirs())
    raise SpecError("model", f"{name!r} is not a catalog model, a file, or in the local Hugging Face cache "
                             f"({caches}); meshcast never downloads: fetch its config.json first "
                             f"(huggingface-cli download {name} config.json)")
