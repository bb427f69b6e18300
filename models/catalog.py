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
    """The model named ``name_or_path``: a catalog name, a YAML file, or a HF ``config.json``."""
    if name_or_path.endswith(".json"):
        from models.hf_import import load_hf_config
        if Path(name_or_path).is_file():
            read_text(name_or_path)     # binary or non-UTF-8 content: one error naming the file
        return load_hf_config(name_or_path)
    return load_entry(name_or_path, CATALOG_DIR, ModelSpec, "model")


def list_models() -> list[str]:
    """Names of the catalog models."""
    return catalog_names(CATALOG_DIR)
