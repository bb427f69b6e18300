"""Row kernels at row lengths the kernel suite never measured: softmax forward, RMSNorm, LayerNorm.

    PYTHONUNBUFFERED=1 python3 validation/harness/row_kernels.py --out FILE --budget-s 150
    python3 validation/harness/row_kernels.py --dry-run      # list the cases; no torch, no GPU

kernels.py times softmax and the norms at row lengths 1024-16384 in powers of two and 12288; the
softmax model (simulator.compute.torch_softmax_kernel) says which of PyTorch's kernels a row length
takes (warp per row up to 2048 elements; a 1024-thread block per row with the row in registers
while ceil(row / 1024) < 10, in shared memory while it fits 48 KiB, else in global memory), and its
rates were fitted on those rows. This suite measures rows between and beyond them (1536 ... 32768,
bf16 and fp32: every register count 2..9, the shared-memory and global-memory kernels), so the
kernel-class model is checked on rows no fit has seen. The norms are measured at hidden sizes of
real models the suite never had (3072, 5120, 6144, 7168, 10240, 14336).

Record kinds are the kernel suite's (docs/measurements.md): ``softmax``, ``rmsnorm``, ``layernorm``
with ``tokens`` (rows), ``hidden`` (row length), ``dtype``, ``bytes_min`` (read + write, 2 passes),
the flushed-event timing of common.time_fn, and ``suite: row_kernels`` in the file's info.
"""
from __future__ import annotations

import os
import sys

SOFTMAX_ROWS = {"bfloat16": (1536, 2560, 3072, 5120, 6144, 7168, 9216, 10240, 14336, 20480, 24576, 32768),
                "float32": (1536, 3072, 5120, 6144, 7168, 9216, 10240, 12288, 16384)}
NORM_ROWS = (1536, 3072, 5120, 6144, 7168, 10240, 14336)
ELEMENTS = (1 << 23, 1 << 25, 1 << 27)        # elements per case: 8 M, 33 M, 134 M


def cases(small: bool = False) -> list[dict]:
    """Every case as a dict (kind, tokens, hidden, dtype), plain Python."""
    if small:
        return [dict(kind=k, tokens=64, hidden=h, dtype="float32") for k in ("softmax", "rmsnorm", "layernorm")
                for h in (96, 160)]
    out = []
    for dt, rows in SOFTMAX_ROWS.items():
        out += [dict(kind="softmax", tokens=n // r, hidden=r, dtype=dt) for r in rows for n in ELEMENTS]
    for kind in ("rmsnorm", "layernorm"):
        out += [dict(kind=kind, tokens=n // r, hidden=r, dtype="bfloat16") for r in NORM_ROWS for n in ELEMENTS]
    return out


def bytes_min(c: dict) -> int:
    """Bytes read + written: the input once, the output once."""
    return 2 * c["tokens"] * c["hidden"] * (4 if c["dtype"] == "float32" else 2)


def label(c: dict) -> str:
    return f"{c['kind']:9s} {c['tokens']:7d}x{c['hidden']:<6d} {c['dtype']}"


def make_call(c: dict):
    """fn() running the case's kernel on a fresh N(0, 1) input."""
    import torch
    import torch.nn.functional as F
    import common
    dt = getattr(torch, c["dtype"]) if common.on_cuda() else torch.float32
    dev = common.device()
    h = c["hidden"]
    x = torch.randn(c["tokens"], h, device=dev, dtype=dt)
    if c["kind"] == "softmax":
        return lambda: torch.softmax(x, -1)
    w = torch.randn(h, device=dev, dtype=dt)
    if c["kind"] == "rmsnorm":
        return lambda: F.rms_norm(x, (h,), w)
    b = torch.randn(h, device=dev, dtype=dt)
    return lambda: F.layer_norm(x, (h,), w, b)


def run_case(c: dict, flush, rec) -> None:
    import common
    fn = make_call(c)
    st = common.time_fn(fn, flush=flush)
    fn = None
    common.free_memory()
    r = dict(c, bytes_min=bytes_min(c), **st)
    rec.add(r)
    common.log(f"  {label(c)}  {st['time_s'] * 1e6:10.1f} us  {common.fmt_rate(r['bytes_min'] / st['time_s'], 'B/s')}")


def run_row_suite(doc: str, suite: str, cases_of) -> None:
    """The whole run of a row-kernel suite (this file's, norm_kernels.py's): suite_cli.run_bytes_suite
    with this file's timing and records."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import run_bytes_suite
    run_bytes_suite(doc, 150.0, suite, "common.time_fn (L2 flushed, events)", cases_of, label, bytes_min, run_case)


if __name__ == "__main__":
    run_row_suite(__doc__, "row_kernels", cases)
