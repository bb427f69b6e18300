"""Memory-bound kernels at seeded random shapes: a held-out draw of every kind the kernel suite fits.

    PYTHONUNBUFFERED=1 python3 validation/harness/membound_random.py --out FILE --budget-s 150
    python3 validation/harness/membound_random.py --dry-run      # list the cases; no torch, no GPU

kernels.py times its memory-bound kinds (copy, add, gelu, silu_mul, softmax, layernorm, rmsnorm) on a
grid of powers of two and 12288, and the profiles' memory-bound parameters were fitted on that grid.
This suite draws 24 shapes per kind from a seeded generator (``SEED``): rows log-uniform in
256..65536, row lengths log-uniform in 512..32768 rounded to a multiple of 8 (vectorised loads stay
legal, but most lengths are no power of two), at most 2^28 elements; copies log-uniform in
256 KiB..2 GiB (multiples of 4 KiB). Each case is timed exactly as kernels.py times it (its
``bench_elem`` / ``bench_copy``: bf16 N(0, 1) input, L2 flushed before each call, CUDA events), so the
records are kernels.py's kinds plus ``seed``, and ``suite: membound_random`` in the file's info.
Predictions are committed before a run (``python -m validation.prereg --kernels membound_random
--like FILE [--seed N]``). A later draw: ``--seed N`` here and there, registered again.

From seed 68 on (:data:`FP32_SOFTMAX_FROM_SEED`, issue #12 session 36) a draw also times 24 fp32 softmax
rows (:func:`fp32_softmax_cases`, from a generator of their own so the bf16 cases of every seed stay what
they were): the softmax Megatron-Core's local attention runs is fp32, and the bf16 draws alone never
tested the rates the fp32 rows share with them.

From seed 72 on (:data:`CAUSAL_SOFTMAX_FROM_SEED`, session 36) a draw also times 16 causally masked fp32
softmax grids (:func:`causal_softmax_cases`): ``bh`` blocks of s x s scores QK^T / sqrt(128) upcast to fp32
with the upper triangle set to -10000, as Megatron-Core's local attention feeds its softmax
(instep_conditions.py ``make_call``, ``data: causal_scores``); s log-uniform in 512..8192, bh log-uniform in
1..64 within MAX_ELEMENTS scores. They test the mask's cost (``softmax_masked_cost``) off the shapes it was
fitted on. From seed 74 (:data:`GRID_TWINS_FROM_SEED`) each causal grid has a twin of the same shape holding
N(0, 1) fp32 scores (``data: randn``, timed right after it): the pair isolates what the mask costs in each
kernel, as instep_conditions.py does at four shapes. From seed 78 (:data:`LONG_FP32_FROM_SEED`, session 39) a draw
also times 12 long fp32 softmax rows (:func:`long_fp32_softmax_cases`, ``group: fp32_long``): the shared- and
global-memory kernels' fp32 rates, which a draw's 24 fp32 rows reach only a few times.
"""
from __future__ import annotations

import math
import os
import random
import sys

SEED = 40
KINDS = ("add", "gelu", "silu_mul", "softmax", "layernorm", "rmsnorm")
PER_KIND = 24
MAX_ELEMENTS = 1 << 28
FP32_SOFTMAX_FROM_SEED = 68
CAUSAL_SOFTMAX_FROM_SEED = 72
CAUSAL_PER_DRAW = 16
GRID_TWINS_FROM_SEED = 74
LONG_FP32_FROM_SEED = 78
LONG_FP32_PER_DRAW = 12
ELEMENT_BYTES = {"bfloat16": 2, "float32": 4}


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _row_case(rng: random.Random, kind: str, dtype: str = "bfloat16") -> dict:
    while True:
        tokens = int(round(_log_uniform(rng, 256, 65536)))
        hidden = max(8, int(round(_log_uniform(rng, 512, 32768) / 8)) * 8)
        if tokens * hidden <= MAX_ELEMENTS:
            return dict(kind=kind, tokens=tokens, hidden=hidden, dtype=dtype)


def fp32_softmax_cases(seed: int) -> list[dict]:
    """The draw's fp32 softmax rows (none before :data:`FP32_SOFTMAX_FROM_SEED`): the bf16 rows' shape law,
    from a generator seeded apart from the bf16 cases'."""
    if seed < FP32_SOFTMAX_FROM_SEED:
        return []
    rng = random.Random(f"membound_random fp32 softmax {seed}")
    return [_row_case(rng, "softmax", "float32") for _ in range(PER_KIND)]


def causal_softmax_cases(seed: int) -> list[dict]:
    """The draw's causally masked fp32 softmax grids (none before :data:`CAUSAL_SOFTMAX_FROM_SEED`): rows of s
    scores, ``tokens`` = bh x s of them, from a generator of their own."""
    if seed < CAUSAL_SOFTMAX_FROM_SEED:
        return []
    rng = random.Random(f"membound_random causal softmax {seed}")
    out = []
    for _ in range(CAUSAL_PER_DRAW):
        s = max(8, int(round(_log_uniform(rng, 512, 8192) / 8)) * 8)
        bh = max(1, min(int(_log_uniform(rng, 1, 64)), MAX_ELEMENTS // (s * s)))
        grid = dict(kind="softmax", tokens=bh * s, hidden=s, dtype="float32")
        out.append(dict(grid, data="causal_scores"))
        if seed >= GRID_TWINS_FROM_SEED:
            out.append(dict(grid, data="randn"))
    return out


def long_fp32_softmax_cases(seed: int) -> list[dict]:
    """The draw's long fp32 softmax rows (none before :data:`LONG_FP32_FROM_SEED`, issue #12 session 39): rows of
    12288..32768 elements (log-uniform, multiples of 8: PyTorch's shared- and global-memory kernels), 2^24..2^28
    elements in all (log-uniform), ``group: fp32_long``; from a generator of their own. The 24 fp32 rows of a
    draw hold only ~3-6 such rows, too few to judge the global-memory kernel's re-reads."""
    if seed < LONG_FP32_FROM_SEED:
        return []
    rng = random.Random(f"membound_random long fp32 softmax {seed}")
    return [_long_row_case(rng) for _ in range(LONG_FP32_PER_DRAW)]


def _long_row_case(rng: random.Random) -> dict:
    row = max(8, int(round(_log_uniform(rng, 12288, 32768) / 8)) * 8)
    tokens = max(1, int(_log_uniform(rng, 1 << 24, MAX_ELEMENTS)) // row)
    return dict(kind="softmax", tokens=tokens, hidden=row, dtype="float32", group="fp32_long")


def cases(small: bool = False, seed: int = SEED) -> list[dict]:
    """Every case of the draw ``seed`` as a plain dict, in the order the run times them."""
    if small:
        return [dict(kind="copy", nbytes=1 << 20)] + [dict(kind=k, tokens=64, hidden=136, dtype="bfloat16")
                                                      for k in KINDS]
    rng = random.Random(seed)
    out = [dict(kind="copy", nbytes=int(_log_uniform(rng, 1 << 18, 1 << 31)) // 4096 * 4096) for _ in range(PER_KIND)]
    for kind in KINDS:
        out += [_row_case(rng, kind) for _ in range(PER_KIND)]
    return [dict(c, seed=seed) for c in out + fp32_softmax_cases(seed) + causal_softmax_cases(seed)
            + long_fp32_softmax_cases(seed)]


def label(c: dict) -> str:
    """The case as the prereg log and the console name it."""
    if c["kind"] == "copy":
        return f"copy      {c['nbytes']:12d} B"
    data = {"causal_scores": " causal", "randn": " grid"}.get(c.get("data"), "") + (" long" if c.get("group") else "")
    return f"{c['kind']:9s} {c['tokens']:7d}x{c['hidden']:<6d} {c['dtype']}{data}"


def bytes_min(c: dict) -> int:
    """Bytes read + written at least: a copy reads and writes its buffer; add and silu_mul read two
    inputs; the rest read one (kernels.py's ``bytes_min``)."""
    if c["kind"] == "copy":
        return 2 * c["nbytes"]
    return (3 if c["kind"] in ("add", "silu_mul") else 2) * c["tokens"] * c["hidden"] * ELEMENT_BYTES[c["dtype"]]


def run_case(c: dict, flush, rec) -> None:
    """Time case ``c`` with kernels.py's own benchmark and record it with the draw's seed."""
    import common
    import kernels
    if c["kind"] == "copy":
        r = kernels.bench_copy(c["nbytes"], flush)
    elif c.get("data"):
        import instep_conditions
        fn = instep_conditions.make_call(dict(kind="softmax", bh=c["tokens"] // c["hidden"], seq=c["hidden"],
                                              data=c["data"]))
        r = dict(record_of(c), **common.time_fn(fn, flush=flush))
    else:
        r = kernels.bench_elem(c["kind"], c["tokens"], c["hidden"], flush, c["dtype"])
    rec.add(dict(r, seed=c.get("seed", SEED), suite="membound_random", **({"group": c["group"]} if "group" in c else {})))
    common.free_memory()


def record_of(c: dict) -> dict:
    """The record case ``c`` becomes, without its timing (what validation.prereg predicts from)."""
    if c["kind"] == "copy":
        return dict(kind="copy", bytes_moved=2 * c["nbytes"], buffer_mb=c["nbytes"] / (1 << 20))
    return dict({k: v for k, v in c.items() if k != "seed"}, bytes_min=bytes_min(c))


def main() -> None:
    """The run: ``--seed N`` picks the draw (default SEED); every other option is the suite CLI's."""
    import argparse
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import run_bytes_suite
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--seed", type=int, default=SEED)
    known, sys.argv[1:] = ap.parse_known_args()
    run_bytes_suite(__doc__, 150.0, "membound_random", "common.time_fn (L2 flushed, events), kernels.py's benches",
                    lambda small: cases(small, seed=known.seed), label, bytes_min, run_case)


if __name__ == "__main__":
    main()
