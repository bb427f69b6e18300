"""Model catalog access: load a :class:`ModelSpec` by catalog name, YAML path or HF config.json."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from hardware_specs.fileio import read_text
from hardware_specs.yamlio import catalog_names, load_entry
from models.schema import ModelSpec

CATALOG_DIR = Path(__file__).parent / "catalog"


@lru_cache(maxsize=None)
def load_model(name_or_path: str) -> ModelSpec:
    """The model named ``name_or_path``: a catalog name, a YAML file, or a Hugging Face model
    (a ``config.json``, its folder, a hub-cache entry or an ``ORG/NAME`` in the local hub cache)."""
    if not name_or_path.endswith((".yaml", ".yml")) and not (CATALOG_DIR / f"{name_or_path}.yaml").exists():
        from models.hf_import import load_hf_config, resolve_hf_model
        config = resolve_hf_model(name_or_path)
        if config is not None:
            if Path(config).is_file():
                read_text(config)     # binary or non-UTF-8 content: one error naming the file
            return load_hf_config(config)
    return load_entry(name_or_path, CATALOG_DIR, ModelSpec, "model")


def list_models() -> list[str]:
    """Names of the catalog models."""
    return catalog_names(CATALOG_DIR)
