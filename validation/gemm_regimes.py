"""Regimes of GEMM shapes for reporting accuracy on the held-out random set (issue #12).

Decided from the shape alone, in this order: ``small_mn_large_k`` (m·n ≤ 1024², k ≥ 4096 and
k ≥ 4·max(m, n): split-K / stream-K territory), ``fp8_small`` (fp8, every dimension ≤ 1024),
``misaligned`` (a leading dimension not 16-byte aligned), ``large`` (≥ 2 GFLOP), ``other``."""
from __future__ import annotations

from collections import defaultdict

from simulator.compute import TORCH_DTYPES, gemm_aligned

REGIMES = ("small_mn_large_k", "fp8_small", "misaligned", "large", "other")


def gemm_regime(rec: dict) -> str:
    m, n, k = int(rec["m"]), int(rec["n"]), int(rec["k"])
    dtype = TORCH_DTYPES.get(rec.get("dtype") or "bfloat16", "bf16")
    if m * n <= 1024 * 1024 and k >= 4096 and k >= 4 * max(m, n):
        return "small_mn_large_k"
    if dtype == "fp8" and max(m, n, k) <= 1024:
        return "fp8_small"
    if not gemm_aligned(m, n, k, dtype):
        return "misaligned"
    if 2.0 * m * n * k >= 2.0 * 1024 ** 3:
        return "large"
    return "other"


def mape_by_regime(pairs) -> dict:
    """{regime: (count, MAPE)} and ``all`` from (record, predicted seconds) pairs."""
    errs = defaultdict(list)
    for rec, pred in pairs:
        e = abs(pred / rec["time_s"] - 1.0)
        errs[gemm_regime(rec)].append(e)
        errs["all"].append(e)
    return {k: (len(v), sum(v) / len(v)) for k, v in errs.items()}
