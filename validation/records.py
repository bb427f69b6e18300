"""Reading measurement files in the MEASUREMENTS.md format (version 1), from any source."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hardware_specs.errors import SpecError
from hardware_specs.fileio import read_json_object
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


COUNT_FIELDS = ("batch", "batch_ops", "bytes", "bytes_min", "bytes_moved", "head_dim", "heads", "hidden", "k",
                "kv_heads", "layers", "m", "micro_batch", "n", "params", "reps", "seq", "tokens", "vocab", "world")
BYTE_FIELDS = ("allocated_before_bytes", "peak_memory_bytes", "total_memory_bytes", "l2_bytes")
BOOL_FIELDS = ("causal", "oom", "unsupported", "ran", "linear_bias", "tied_embeddings", "sequence_parallel",
               "cp_load_balance", "skewed", "gate", "pp_return_outputs", "pp_scale_grads")
KNOWN_DTYPES = frozenset(TORCH_DTYPES) | frozenset(TORCH_DTYPES.values()) | {"tf32"}
"""A record's ``dtype``: torch's name (bfloat16, float8_e4m3fn, ...) or the catalog's (bf16, fp8, tf32)."""
_MEASURED_SUFFIXES = ("_s", "_GBps", "_mb")


def load_measurements(path: str | Path) -> MeasurementFile:
    """Parse a measurement JSON file; a malformed file, or a record whose counts are not
    positive integers or whose measured values are not positive finite numbers, raises
    :class:`SpecError` naming the file and the field."""
    p = Path(path)
    data = read_json_object(p)
    if not isinstance(data.get("records"), list):
        raise SpecError(f"{p}: records", "expected an object with a 'records' list")
    info = data.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("gpu"), str) or not info["gpu"]:
        raise SpecError(f"{p}: info.gpu", "missing: the device name the records were taken on")
    _check_fields(info, f"{p}: info")
    records = []
    for i, rec in enumerate(data["records"]):
        if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
            raise SpecError(f"{p}: records[{i}]", "each record needs a 'kind' (text)")
        _check_fields(rec, f"{p}: records[{i}]")
        records.append(rec)
    return MeasurementFile(str(p), info, records)


def _check_fields(rec: dict, where: str) -> None:
    """Counts are positive integers; flags true or false; byte sizes non-negative integers (or null); measured
    times, rates and sizes positive finite numbers (or null where nothing was measured)."""
    for key, v in rec.items():
        if key in COUNT_FIELDS:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise SpecError(f"{where}.{key}", f"must be a positive integer, got {v!r}")
        elif key in BYTE_FIELDS:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise SpecError(f"{where}.{key}", f"must be a non-negative integer of bytes, got {v!r}")
        elif key in BOOL_FIELDS:
            if v is not None and not isinstance(v, bool):     # "maybe" was read as True
                raise SpecError(f"{where}.{key}", f"must be true or false, got {v!r}")
        elif key == "dtype" and v is not None and v not in KNOWN_DTYPES:
            raise SpecError(f"{where}.dtype", f"unknown dtype {v!r}; known: {', '.join(sorted(KNOWN_DTYPES))}")
        elif key.endswith(_MEASURED_SUFFIXES) or key in ("flops", "tokens_per_s"):
            for x in (v if isinstance(v, list) else [v]):    # a list: every sample (e.g. step_times_s)
                if x is not None and not _positive_finite(x):
                    raise SpecError(f"{where}.{key}", f"must be a positive finite number, got {x!r}")


def _positive_finite(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def record_dtype(rec: dict) -> str:
    """Catalog dtype name of a record: float32 tagged _tf32 is tf32; default bfloat16."""
    dtype = rec.get("dtype") or "bfloat16"
    if dtype == "float32" and "_tf32" in str(rec.get("tag", "")):
        return "tf32"
    return TORCH_DTYPES.get(dtype, dtype)
