"""Launch configs: what the writers return and the readers give back, and the dispatch by format.

    export_config(model, plan)                  -> LaunchConfig (the plan's framework decides the format)
    import_config(fmt, text, model, num_gpus)   -> ImportedConfig (a plan with its framework set)
    check_dims(model, dims, origin)             -> raise SpecError naming the first dimension that differs

One module per format sits beside this one (megatron_config, torchtitan_config, deepspeed_config);
docs/frameworks.md maps every field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from hardware_specs.errors import PlanError, SpecError
from models.schema import ModelSpec

FORMATS = ("megatron", "torchtitan", "deepspeed")

# meshcast's fit verdict counts live tensors plus a 5% fragmentation allowance: measured plans whose
# multi-GiB transient tensors made PyTorch's default caching allocator fragment ran out of memory
# with 56-79% of the GPU allocated, and ran with expandable segments (docs/measurements.md)
ALLOC_CONF = "expandable_segments:True"
ALLOC_WHY = "the fit verdict assumes it (without it large transients fragment the allocator)"


@dataclass(frozen=True)
class LaunchConfig:
    """A config a team can launch: its text, a file name to save it under, and notes where the
    framework cannot say exactly what meshcast simulated."""

    format: str
    text: str
    filename: str
    notes: tuple[str, ...] = ()

    def with_notes(self) -> str:
        """The text followed by the notes as comments (``#`` for scripts and TOML; JSON has none)."""
        if not self.notes or self.format == "deepspeed":
            return self.text
        return self.text.rstrip("\n") + "\n" + "".join(f"# note: {n}\n" for n in self.notes)


@dataclass(frozen=True)
class ImportedConfig:
    """What a launch config says: the plan (framework set), the model dimensions it states (ModelSpec
    field -> value; compare with check_dims) and notes (unknown or ignored settings)."""

    plan: object
    dims: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def export_config(model: ModelSpec, plan) -> LaunchConfig:
    """The launch config of a resolved plan, in its framework's own format."""
    from simulator.frameworks import get_framework
    fmt = get_framework(plan.framework).export
    if fmt == "none":
        raise PlanError("framework", f"{plan.framework} has no launch-config format; export needs "
                                     f"one of the frameworks writing {', '.join(FORMATS)}")
    _require_exportable_model(model)
    return _module(fmt).write_config(model, plan)


def _require_exportable_model(model) -> None:
    """PlanError for a model no launch config meshcast writes can express: a launch config that
    dropped a hybrid model's layer pattern and Mamba-2 dimensions would train another model."""
    if model is not None and getattr(model, "hybrid_pattern", None):
        raise PlanError("export", f"{model.name} is a hybrid Mamba-2 model: meshcast does not write "
                                  "Megatron's hybrid-model flags (--hybrid-override-pattern, the Mamba "
                                  "dimensions) yet; simulate and validate cost it, export does not")


def require_format(plan, fmt: str, model=None) -> None:
    """PlanError unless the plan's framework exports ``fmt`` (a torchtitan plan is no Megatron config)
    and the model is one a launch config can express."""
    from simulator.frameworks import get_framework
    _require_exportable_model(model)
    if fmt not in FORMATS:
        raise PlanError("export", f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    have = get_framework(plan.framework).export
    if have != fmt:
        raise PlanError("export", f"the plan runs on {plan.framework}, which exports {have!r}, not {fmt!r} "
                                  f"(--framework selects the framework)")


def read_guarded(label: str, read, *args) -> ImportedConfig:
    """``read(*args)``, with a stray value error from a malformed config turned into one SpecError
    naming ``label`` (a reader's own MeshcastErrors pass through unchanged)."""
    from hardware_specs.errors import MeshcastError
    try:
        return read(*args)
    except MeshcastError:
        raise
    except (ValueError, ArithmeticError, TypeError, AttributeError, KeyError) as exc:
        raise SpecError(label, f"cannot read it: {type(exc).__name__}: {exc}") from None


def config_table(doc: dict, key: str, label: str) -> dict:
    """The section ``key`` of a parsed launch config ({} when absent); SpecError naming
    ``label: key`` when it is not a table (a TOML ``parallelism = [1, 2]``, a JSON ``"zero_optimization": "yes"``)."""
    v = doc.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SpecError(f"{label}: {key}", f"expected a table of settings, got {v!r}")
    return v


def config_int(table: dict, key: str, label: str, default=None, minimum: int | None = 1):
    """The integer setting ``key`` of a launch-config section (``default`` when absent); SpecError
    naming ``label: key`` for text, a bool, a fraction, NaN or infinity, or a value below ``minimum``.
    A whole float (``256.0``) is read as the integer it is, as the frameworks' own parsers do."""
    v = table.get(key, default)
    if v is None:
        return None
    whole = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    if isinstance(v, bool) or not whole:
        raise SpecError(f"{label}: {key}", f"expected an integer, got {v!r}{_auto_hint(v)}")
    if minimum is not None and v < minimum:
        raise SpecError(f"{label}: {key}", f"must be at least {minimum}, got {v!r}")
    return int(v)


def config_bool(table: dict, key: str, label: str, default: bool = False) -> bool:
    """The true/false setting ``key`` of a launch-config section; SpecError naming ``label: key``
    for anything else (``"yes"`` is not a bool)."""
    v = table.get(key, default)
    if not isinstance(v, bool):
        raise SpecError(f"{label}: {key}", f"expected true or false, got {v!r}{_auto_hint(v)}")
    return v


def _auto_hint(v) -> str:
    """Why a config may say ``"auto"``, and what to do about it."""
    return (" ('auto' is filled in by the Hugging Face Trainer's DeepSpeed integration; give the value it "
            "would fill)" if v == "auto" else "")


def import_config(fmt: str, text: str, model: ModelSpec, num_gpus: int | None = None) -> ImportedConfig:
    """Read a launch config of format ``fmt``; the plan comes back unresolved (resolve_plan checks it)."""
    if fmt not in FORMATS:
        raise SpecError("format", f"unknown launch-config format {fmt!r}; known: {', '.join(FORMATS)}")
    return _module(fmt).read_config(text, model, num_gpus)


def check_dims(model: ModelSpec, dims: dict, origin: str) -> None:
    """SpecError naming the first dimension the config states differently from the model."""
    for name, value in dims.items():
        have = _model_value(model, name)
        if have != value:
            raise SpecError(f"{origin}: {name}", f"the config says {value!r} but {model.name} has {have!r}")


_DERIVED = {
    "has_moe": lambda m: m.moe is not None,
    "has_mla": lambda m: m.mla is not None,
    "shared_expert_total": lambda m: (m.moe.shared_experts * (m.moe.shared_expert_ffn_hidden or m.moe.expert_ffn_hidden)
                                      if m.moe is not None else None),
    "moe_layer_flags": lambda m: tuple(int(m.is_moe_layer(i)) for i in range(m.num_layers)),
}


def _model_value(model: ModelSpec, name: str):
    """A ModelSpec field by dotted name (moe.top_k, mla.kv_lora_rank) or a derived property."""
    if name in _DERIVED:
        return _DERIVED[name](model)
    obj = model
    for part in name.split("."):
        obj = getattr(obj, part) if obj is not None else None
    return obj


def _module(fmt: str):
    from simulator.frameworks import deepspeed_config, megatron_config, torchtitan_config
    return {"megatron": megatron_config, "torchtitan": torchtitan_config, "deepspeed": deepspeed_config}[fmt]
