"""Reading YAML catalog entries into pydantic schemas with one-line, field-naming errors."""
from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import pydantic

from hardware_specs.errors import SpecError, UnknownNameError
from hardware_specs.fileio import read_yaml_mapping  # noqa: F401  (re-exported: the one YAML reader)

T = TypeVar("T", bound=pydantic.BaseModel)


def validate_mapping(data: dict, schema: type[T], origin: str) -> T:
    """Validate ``data`` against ``schema``; the first error becomes a :class:`SpecError`."""
    try:
        return schema.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        raise SpecError(f"{origin}: {loc}", msg) from None


def load_entry(name_or_path: str, catalog_dir: Path, schema: type[T], kind: str) -> T:
    """Load a catalog entry by name (``<catalog_dir>/<name>.yaml``) or by file path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return validate_mapping(read_yaml_mapping(candidate), schema, str(candidate))
    path = catalog_dir / f"{name_or_path}.yaml"
    if not path.exists():
        raise UnknownNameError(kind, name_or_path, catalog_names(catalog_dir))
    return validate_mapping(read_yaml_mapping(path), schema, path.name)


def catalog_names(catalog_dir: Path) -> list[str]:
    """Names (file stems) of the YAML entries in ``catalog_dir``."""
    return sorted(p.stem for p in catalog_dir.glob("*.yaml"))
