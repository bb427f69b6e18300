"""Grouped GEMMs of MoE experts (issue #12 item 2): one measurement file of records of kind
``grouped_gemm``.

Each case is one expert layer's projection: ``groups`` experts, expert g multiplying its
``group_tokens[g]`` routed tokens ``[tokens[g], k]`` by its weight ``[k, n]`` (bf16). The same case
is timed three ways, one record each (``impl``):

* ``grouped_mm``: ``torch._grouped_mm`` (one launch over every expert: what torchtitan's MoE and
  Megatron-Core's TE-less grouped GEMM path run on Hopper), operands ``[sum(tokens), k]`` and
  ``[groups, k, n]`` (the weight stored ``[groups, n, k]`` and transposed, as an nn.Linear keeps it),
  group offsets int32;
* ``bmm``: ``torch.bmm`` over ``[groups, max(tokens), k]`` (the padded, batched form; only for
  balanced cases, where it is exact);
* ``loop``: one ``torch.mm`` per expert in a Python loop (Megatron-Core's SequentialMLP).

Token counts are ``balanced`` (equal) or ``skewed`` (a seeded Dirichlet-like draw of routing
shares, as an imperfectly balanced router gives; empty experts allowed), seeded (``--seed``).
Timed as kernels.py times a GEMM (L2 flush before each call, CUDA events, median of 5..50), and
back to back in a CUDA graph (``time_graph_s``).

    PYTHONUNBUFFERED=1 python3 grouped_gemm.py --out g.json --budget-s 120 [--small]
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, run_case, time_fn  # noqa: E402

ALIGN = 16     # torch._grouped_mm wants 16-byte aligned strides: k and n multiples of 8 bf16


def _shares(rng: random.Random, groups: int, alpha: float) -> list[float]:
    """Routing shares of ``groups`` experts: a Dirichlet(alpha) draw (gamma variates, normalised)."""
    g = [rng.gammavariate(alpha, 1.0) for _ in range(groups)]
    total = sum(g)
    return [x / total for x in g]


def token_counts(rng: random.Random, groups: int, mean: int, skewed: bool) -> list[int]:
    """Tokens per expert summing to groups * mean: equal, or split by Dirichlet(1) shares
    (rounded so the total is exact)."""
    total = groups * mean
    if not skewed:
        return [mean] * groups
    shares = _shares(rng, groups, 1.0)
    counts = [int(math.floor(s * total)) for s in shares]
    for i in range(total - sum(counts)):
        counts[i % groups] += 1
    return counts


def cases(seed: int, n_cases: int, small: bool) -> list[dict]:
    """Seeded random expert layers: groups in {2..64}, hidden (k or n) in 1024..8192 and expert
    width in 256..4096 (multiples of 128), mean tokens per expert 16..4096 (log-uniform), half
    of them skewed; both the up (k = hidden) and the down (n = hidden) projection."""
    if small:
        return [dict(groups=4, tokens=[64, 64, 64, 64], k=256, n=512, skewed=False),
                dict(groups=4, tokens=[10, 100, 0, 146], k=256, n=512, skewed=True)]
    rng = random.Random(seed)
    out = []
    for i in range(n_cases):
        groups = rng.choice((2, 4, 8, 8, 16, 16, 32, 64))
        hidden = 128 * round(math.exp(rng.uniform(math.log(1024), math.log(8192))) / 128)
        width = 128 * max(2, round(math.exp(rng.uniform(math.log(256), math.log(4096))) / 128))
        mean = max(16, 8 * round(math.exp(rng.uniform(math.log(16), math.log(4096))) / 8))
        skewed = i % 2 == 1
        k, n = (hidden, width) if rng.random() < 0.5 else (width, hidden)
        out.append(dict(groups=groups, tokens=token_counts(rng, groups, mean, skewed), k=k, n=n, skewed=skewed))
    return out


def make_fns(c: dict) -> dict:
    """{impl: fn} for the case (``bmm`` only when balanced)."""
    dev, bf = common.device(), torch.bfloat16
    counts, k, n, g = c["tokens"], c["k"], c["n"], c["groups"]
    total = sum(counts)
    a = torch.randn(total, k, device=dev, dtype=bf)
    w = torch.randn(g, n, k, device=dev, dtype=bf)
    offs = torch.tensor(list(_cumsum(counts)), device=dev, dtype=torch.int32)
    wt = w.transpose(-2, -1)
    fns = {"grouped_mm": lambda: torch._grouped_mm(a, wt, offs=offs, out_dtype=bf)}
    outs = [torch.empty(m, n, device=dev, dtype=bf) for m in counts]
    views = list(torch.split(a, counts))
    mats = [wt[i] for i in range(g)]

    def loop():
        for i in range(g):
            torch.mm(views[i], mats[i], out=outs[i])
    fns["loop"] = loop
    if len(set(counts)) == 1:
        a3 = a.view(g, counts[0], k)
        c3 = torch.empty(g, counts[0], n, device=dev, dtype=bf)
        fns["bmm"] = lambda: torch.bmm(a3, wt, out=c3)
    return fns


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def bench(c: dict, flush) -> list[dict]:
    """One record per implementation of the case."""
    out = []
    for impl, fn in make_fns(c).items():
        st = time_fn(fn, flush=flush)
        flops = 2.0 * sum(c["tokens"]) * c["k"] * c["n"]
        rec = dict(kind="grouped_gemm", impl=impl, groups=c["groups"], group_tokens=c["tokens"], k=c["k"], n=c["n"],
                   dtype="bfloat16", skewed=c["skewed"], flops=flops, **st, time_graph_s=common.time_graph(fn))
        log(f"  {impl:10s} g{c['groups']:3d} tokens {sum(c['tokens']):7d} k{c['k']:5d} n{c['n']:5d} "
            f"{'skew' if c['skewed'] else 'bal '} {st['time_s'] * 1e6:9.1f} us "
            f"graph {1e6 * (rec['time_graph_s'] or float('nan')):9.1f} us")
        out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=120)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if not hasattr(torch, "_grouped_mm"):
        raise SystemExit("this torch has no torch._grouped_mm")
    info = common.device_info(suite="grouped_gemm", seed=args.seed)
    rec = common.Recorder(args.out, info)
    flush = common.Flusher()
    dl = common.Deadline(args.budget_s)
    t0 = time.time()
    todo = cases(args.seed, args.cases, args.small)
    for i, c in enumerate(todo):
        if not dl.ok(reserve_s=2):
            rec.error(f"budget reached: {len(todo) - i} grouped cases not run")
            break
        run_case(rec, f"grouped {c['groups']}x{c['k']}x{c['n']}", lambda: bench(c, flush))
    log(f"done in {time.time() - t0:.1f}s: {len(rec.records)} records; {len(rec.errors)} errors")


if __name__ == "__main__":
    main()
