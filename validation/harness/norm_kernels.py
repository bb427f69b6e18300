"""LayerNorm and RMSNorm forward at hidden sizes and row counts no fit has seen, bf16 and fp32.

    PYTHONUNBUFFERED=1 python3 validation/harness/norm_kernels.py --out FILE --budget-s 150
    python3 validation/harness/norm_kernels.py --dry-run      # list the cases; no torch, no GPU

The norm model (simulator.compute.norm_forward_time: PyTorch's vectorized_layer_norm_kernel, one
128-thread block per row; bandwidth-bound with the row's second read from HBM past a row size,
latency-bound with few rows) was fitted on kernels.py (hidden 1024-16384 in powers of two and 12288,
rows 1024-32768) and row_kernels.py (hidden 1536-14336, 8-134 M elements), all bf16. This suite
measures hidden sizes of real models neither had (2560 ... 18432), row counts that leave the GPU
partly empty or fill it many times over, and fp32 rows (the norms of torch autocast training), so the
model is checked on shapes its fit never saw. Its predictions are committed before it runs
(``python -m validation.prereg --kernels norm_kernels --like FILE``).

Record kinds are the kernel suite's (docs/measurements.md): ``rmsnorm``, ``layernorm`` with
``tokens`` (rows), ``hidden`` (row length), ``dtype``, ``bytes_min`` (read + write, 2 passes), the
flushed-event timing of common.time_fn, and ``suite: norm_kernels`` in the file's info.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from row_kernels import label, run_row_suite  # noqa: E402,F401  (one timing and record path for row kernels;
#                                                  validation.prereg reads a suite's label)

BF16_HIDDEN = (2560, 3584, 4608, 5632, 8960, 11008, 13824, 18432)
BF16_ROWS = (600, 2500, 9000, 30000)
FP32_HIDDEN = (2048, 4096, 5120, 8192)
FP32_ROWS = (2000, 8000, 24000)


def norm_cases(bf16_hidden, bf16_rows, fp32_hidden, fp32_rows, small: bool = False) -> list[dict]:
    """Every (kind, rows, hidden, dtype) case of a norm suite as dicts, plain Python: both kinds at each
    bf16 hidden size x row count and each fp32 one; ``small``: tiny fp32 shapes for a CPU check."""
    if small:
        return [dict(kind=k, tokens=48, hidden=h, dtype="float32") for k in ("rmsnorm", "layernorm") for h in (80, 144)]
    out = []
    for kind in ("rmsnorm", "layernorm"):
        out += [dict(kind=kind, tokens=r, hidden=h, dtype="bfloat16") for h in bf16_hidden for r in bf16_rows]
        out += [dict(kind=kind, tokens=r, hidden=h, dtype="float32") for h in fp32_hidden for r in fp32_rows]
    return out


def cases(small: bool = False) -> list[dict]:
    """Every case of this suite."""
    return norm_cases(BF16_HIDDEN, BF16_ROWS, FP32_HIDDEN, FP32_ROWS, small)


if __name__ == "__main__":
    run_row_suite(__doc__, "norm_kernels", cases)
