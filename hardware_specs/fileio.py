"""The one way meshcast reads and writes files.

Reading: :func:`read_text` (UTF-8; a missing, unreadable or binary file is one
:class:`SpecError` naming the file), :func:`read_yaml_mapping`, :func:`read_json_object` and
:func:`read_csv_rows` (parse errors name the file, line and, for CSV, the column).

Writing: :func:`check_output` (before long work starts: the folder exists and is writable, the
target is not a folder and not one of the command's inputs) and :func:`write_text_atomic`
(a temporary file in the same folder, then ``os.replace``: a reader never sees half a file and a
failure leaves the previous file as it was).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import yaml

from hardware_specs.errors import MeshcastError, SpecError


def read_text(path: str | Path) -> str:
    """The text of ``path`` decoded as UTF-8, or :class:`SpecError` naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise SpecError(str(p), "is a folder, not a file") from None
    except OSError as exc:
        raise SpecError(str(p), f"cannot read file ({exc.strerror or exc})") from None
    if b"\x00" in raw:
        raise SpecError(str(p), "not a text file (binary content)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(str(p), f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the last
    silently, so ``tp: 8`` then ``tp: 4`` in a plan ran tp=4 without a word."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:            # an unhashable key: SafeLoader's own error names it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (given twice in one "
                                                        "mapping; which one is meant?)", key_node.start_mark)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path):
    """Parse ``path`` as YAML and return whatever it holds, or :class:`SpecError` (a key given
    twice in one mapping included)."""
    text = read_text(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(str(path), f"malformed YAML{where}: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:   # e.g. timestamps out of range
        raise SpecError(str(path), f"malformed YAML: {exc}") from None


def read_yaml_mapping(path: str | Path) -> dict:
    """Parse ``path`` as YAML and return its top-level mapping, or raise :class:`SpecError`."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(str(path), "expected a mapping of fields at the top level")
    if not all(isinstance(k, str) for k in data):
        bad = next(k for k in data if not isinstance(k, str))
        raise SpecError(str(path), f"field names must be text, got {bad!r}")
    return data


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_json_object(path: str | Path) -> dict:
    """Parse ``path`` as a JSON object (NaN and Infinity rejected), or :class:`SpecError`."""
    text = read_text(path)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(str(path), f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise SpecError(str(path), f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "expected a JSON object at the top level")
    return data


def read_csv_rows(path: str | Path, required: Iterable[str] = ()) -> list[dict]:
    """The rows of a CSV file with a header, as dicts; missing ``required`` columns, ragged rows
    or no rows at all raise :class:`SpecError` naming the file (and the column)."""
    text = read_text(path)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        header = reader.fieldnames or []
        rows = list(reader)
    except csv.Error as exc:
        raise SpecError(str(path), f"malformed CSV: {exc}") from None
    twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if twice is not None:     # csv.DictReader keeps the last of the two silently
        raise SpecError(f"{path}: {twice}", "column given twice in the header")
    missing = [c for c in required if c not in header]
    if missing:
        raise SpecError(f"{path}: {missing[0]}", f"missing column (the header has: {', '.join(header) or 'nothing'})")
    for i, row in enumerate(rows):
        if None in row or any(v is None for v in row.values()):
            raise SpecError(f"{path}: line {i + 2}", f"expected {len(header)} columns")
    if not rows:
        raise SpecError(str(path), "no data rows below the header")
    return rows


def finite_number(value, field: str, positive: bool = False) -> float:
    """``value`` (a number or numeric text) as a finite float, else :class:`SpecError` on ``field``."""
    if isinstance(value, bool):
        raise SpecError(field, f"expected a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SpecError(field, f"expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise SpecError(field, f"must be finite, got {value!r}")
    if positive and x <= 0:
        raise SpecError(field, f"must be positive, got {value!r}")
    return x


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (b.exists() and a.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_output(path: str | Path | None, field: str, inputs: Iterable[str | Path | None] = ()) -> None:
    """Fail now, before any long work, if ``path`` cannot be written: its folder is missing or
    read-only, it is a folder, or it is one of ``inputs`` (never overwrite what was read)."""
    if path is None:
        return
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise MeshcastError(field, f"not a file name: {str(path)!r}")
    if p.is_dir():
        raise MeshcastError(field, f"{path} is a folder; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise MeshcastError(field, f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MeshcastError(field, f"folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise MeshcastError(field, f"{path} exists and is not writable")
    for src in inputs:
        if src is not None and _same_file(p, Path(src)):
            raise MeshcastError(field, f"{path} is also an input of this command; write somewhere else")


def check_output_dir(path: str | Path | None, field: str) -> None:
    """Fail now if folder ``path`` cannot hold output files (it may be created if its parent exists)."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise MeshcastError(field, f"{path} exists and is not a folder")
    target = p if p.exists() else p.parent if str(p.parent) else Path(".")
    if not target.is_dir():
        raise MeshcastError(field, f"folder {target} does not exist")
    if not os.access(target, os.W_OK | os.X_OK):
        raise MeshcastError(field, f"folder {target} is not writable")


def write_text_atomic(path: str | Path, text: str, field: str = "output") -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then os.replace)."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    except OSError as exc:
        raise MeshcastError(field, f"cannot write {path} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except OSError as exc:
        _remove_quietly(tmp)
        raise MeshcastError(field, f"cannot write {path} ({exc.strerror or exc})") from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
