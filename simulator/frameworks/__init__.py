"""Framework profiles: the framework a plan runs on decides which plans exist, what each
sharding option keeps in memory, which kernels run and what launch config it exports.

    get_framework("megatron-core")            -> FrameworkProfile (from megatron-core.yaml)
    FRAMEWORKS                                -> the known names
    framework_violation(fw, model, plan)      -> (field, reason) of the first rule broken, or None
    default_split(fw, layers, pp, vp)         -> the framework's own uneven layer split

Profiles are YAML files beside this module (schema: profile.py), read once per process.
"""
from __future__ import annotations

from pathlib import Path

from hardware_specs.errors import UnknownNameError
from simulator.frameworks.profile import FrameworkProfile
from simulator.frameworks.rules import default_split, framework_violation

DEFAULT_FRAMEWORK = "megatron-core"
_DIR = Path(__file__).parent
FRAMEWORKS = tuple(sorted(p.stem for p in _DIR.glob("*.yaml")))
_LOADED: dict[str, FrameworkProfile] = {}


def get_framework(name: str) -> FrameworkProfile:
    """The profile of framework ``name``; UnknownNameError (listing the known ones) otherwise."""
    fw = _LOADED.get(name)
    if fw is None:
        if name not in FRAMEWORKS:
            raise UnknownNameError("framework", str(name), FRAMEWORKS)
        from hardware_specs.yamlio import read_yaml_mapping, validate_mapping
        fw = validate_mapping(read_yaml_mapping(_DIR / f"{name}.yaml"), FrameworkProfile, f"{name}.yaml")
        _LOADED[name] = fw
    return fw


__all__ = ["DEFAULT_FRAMEWORK", "FRAMEWORKS", "FrameworkProfile", "default_split", "framework_violation",
           "get_framework"]
