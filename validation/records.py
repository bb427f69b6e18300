"""Reading measurement files in the MEASUREMENTS.md format (version 1), from any source."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hardware_specs.errors import SpecError
from simulator.compute import TORCH_DTYPES


@dataclass(frozen=True)
class MeasurementFile:
    """One measurement file: ``info`` (gpu, world, ...) and its records, unknown fields kept."""

    path: str
    info: dict
    records: list

    @property
    def gpu(self) -> str:
        return self.info.get("gpu", "")

    @property
    def world(self) -> int:
        return int(self.info.get("world", 1))


def load_measurements(path: str | Path) -> MeasurementFile:
    """Parse a measurement JSON file; malformed files raise :class:`SpecError` naming the problem."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise SpecError(str(p), f"cannot read file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise SpecError(str(p), f"malformed JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise SpecError(f"{p}: records", "expected an object with a 'records' list")
    info = data.get("info") or {}
    if not isinstance(info, dict) or not info.get("gpu"):
        raise SpecError(f"{p}: info.gpu", "missing: the device name the records were taken on")
    records = []
    for i, rec in enumerate(data["records"]):
        if not isinstance(rec, dict) or "kind" not in rec:
            raise SpecError(f"{p}: records[{i}]", "each record needs a 'kind'")
        records.append(rec)
    return MeasurementFile(str(p), info, records)


def record_dtype(rec: dict) -> str:
    """Catalog dtype name of a record: float32 tagged _tf32 is tf32; default bfloat16."""
    dtype = rec.get("dtype") or "bfloat16"
    if dtype == "float32" and "_tf32" in str(rec.get("tag", "")):
        return "tf32"
    return TORCH_DTYPES.get(dtype, dtype)
