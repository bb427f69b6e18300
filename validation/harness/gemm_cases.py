"""The held-out random GEMM draws of sustained.py ``--suite random`` (issue #12), without torch:
validation.prereg predicts a draw from these cases before it runs.

bf16: m, n, k log-uniform over 16..16384, a third of them small-MN / large-K (m, n in 16..1024, k
in 4096..65536); 30% of the draws leave their dims unrounded (misaligned), the rest round to
multiples of 8. fp8: a third small (every dim <= 1024), a third small-MN / large-K, a third
general; k and n rounded to multiples of 16 (torch._scaled_mm requires it), m to 8 in 80%."""
from __future__ import annotations

import math
import random


def _logu(rng, lo, hi):
    """A log-uniform draw over [lo, hi]."""
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def random_cases(seed=12, n_bf16=100, n_fp8=56, small=False):
    """(m, n, k, dtype, group) of the held-out random set. Groups (informative; validation
    re-derives its own regimes from the shape): small_mn_large_k, small, misaligned, general."""
    if small:
        return [(16, 24, 4096, "bfloat16", "small_mn_large_k"), (33, 64, 40, "bfloat16", "misaligned"),
                (32, 32, 64, "float8_e4m3fn", "small")]
    rng = random.Random(seed)
    out = []
    for i in range(n_bf16):
        if i % 3 == 0:                                    # small-MN, large-K
            m, n, k = _logu(rng, 16, 1024), _logu(rng, 16, 1024), _logu(rng, 4096, 65536)
            group = "small_mn_large_k"
        else:
            m, n, k = (_logu(rng, 16, 16384) for _ in range(3))
            group = "general"
        dims = []
        misaligned = rng.random() < 0.3
        for x in (m, n, k):
            x = max(16, int(round(x)))
            dims.append(x if misaligned else max(8, 8 * round(x / 8)))
        if misaligned and all(d % 8 == 0 for d in dims):
            dims[2] += 1
        if misaligned:
            group = "misaligned" if group == "general" else group + "_misaligned"
        out.append((*dims, "bfloat16", group))
    for i in range(n_fp8):
        if i % 3 == 0:
            m, n, k = (_logu(rng, 16, 1024) for _ in range(3))
            group = "small"
        elif i % 3 == 1:
            m, n, k = _logu(rng, 16, 1024), _logu(rng, 16, 1024), _logu(rng, 4096, 65536)
            group = "small_mn_large_k"
        else:
            m, n, k = (_logu(rng, 16, 16384) for _ in range(3))
            group = "general"
        m = max(16, 8 * round(m / 8)) if rng.random() < 0.8 else max(16, int(round(m)))
        n = max(16, 16 * round(n / 16))
        k = max(16, 16 * round(k / 16))
        out.append((m, n, k, "float8_e4m3fn", group))
    return out


def label(case) -> str:
    """The log's name of one case: dtype, m x n x k and the draw's group."""
    m, n, k, dtn, group = case
    return f"{dtn:14s} {m:6d}x{n:6d}x{k:6d} {group}"


# the pools of real training GEMMs, written by python -m validation.real_gemms, by suite: ``real`` at
# micro-batch 1 (session 32, seed 60), ``real_mbs2`` at micro-batch 2 (session 33: the same models' GEMMs
# with twice the tokens, none of them a shape of the first pool), ``real_mbs4`` at micro-batch 4 (session 34:
# none of them a shape of either earlier pool), ``real_mbs3`` at micro-batch 3 (session 43: none of them a
# shape of the three earlier pools)
REAL_POOLS = {"real": "real_gemm_pool.json", "real_mbs2": "real_gemm_pool_mbs2.json",
              "real_mbs4": "real_gemm_pool_mbs4.json", "real_mbs3": "real_gemm_pool_mbs3.json"}
REAL_POOL = REAL_POOLS["real"]
SUITES = ("random",) + tuple(REAL_POOLS)


def real_cases(seed=60, n_round=63, small=False, pool=REAL_POOL):
    """(m, n, k, dtype, group) of a registered set of real training GEMMs: every entry of the pool file
    ``pool`` (validation/real_gemms.py: the unbatched GEMMs the simulator costs for the catalog's models
    under tp 1-8) whose n or k is off the 64-grid (group ``offgrid <model> tp<N>``), then ``n_round`` of
    the rest drawn with ``seed`` (group ``round <model> tp<N>``)."""
    import json
    import os
    if small:
        return [(2048, 288, 2304, "bfloat16", "offgrid small"), (2048, 2304, 2048, "bfloat16", "round small")]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), pool)
    entries = json.load(open(path))["entries"]
    off = [e for e in entries if not e["round"]]
    rest = [e for e in entries if e["round"]]
    picked = random.Random(seed).sample(rest, min(n_round, len(rest)))
    return ([(e["m"], e["n"], e["k"], e["dtype"], "offgrid " + e["source"].replace(" ", "_")) for e in off]
            + [(e["m"], e["n"], e["k"], e["dtype"], "round " + e["source"].replace(" ", "_")) for e in picked])


def suite_cases(suite, seed, small=False):
    """The cases of the GEMM draw ``suite`` (``random``: :func:`random_cases`; ``real`` and ``real_mbs2``:
    :func:`real_cases` over that suite's pool of :data:`REAL_POOLS`)."""
    if suite in REAL_POOLS:
        return real_cases(seed, small=small, pool=REAL_POOLS[suite])
    return random_cases(seed, small=small)
