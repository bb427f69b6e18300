"""One GEMM shape under each operand layout a training step hands cuBLAS (issue #12, session 44).

A linear layer y = x Wᵀ issues three GEMMs per step, each with its own operand layout in torch's
row-major terms: the forward x[m,k] @ W[n,k]ᵀ (``NT``: B is a transposed view), the input gradient
dy[m,n] @ W[n,k] (``NN``) and the weight gradient dyᵀ @ x (``TN``: A is a transposed view). The random
GEMM draws (sustained.py ``--suite random``) time ``NN`` only. Here every shape of a seeded draw is timed
in all three layouts back to back, in a shuffled order, twice (``pass_no``), so that a layout's effect is
seen on the same (m, n, k) rather than through the different shapes each layout gets in a step.

Shapes (bf16, every dim a multiple of 8 as a training step's are): two thirds log-uniform over
256..16384 per dim, a third with one dim (m, n or k) drawn from 16384..65536 tokens-like and the
other two from 512..8192 (a weight gradient's k, a forward's m). The same timing as the random suite
(common.time_fn: L2 flushed before each call, CUDA events, median of the calls) and an NVML sample
after each; with ``--kernel-names`` the kernels cuBLAS launched for each (shape, layout), traced after
all timings (torch.profiler's callbacks would slow later timings).

    python3 gemm_layouts.py --seed 90 --out F.json --budget-s 200 [--kernel-names] [--list]
"""
from __future__ import annotations

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_cases import _logu as logu  # noqa: E402

LAYOUTS = ("NN", "NT", "TN")
N_SHAPES = 60


def _logu(rng: random.Random, lo: float, hi: float) -> int:
    """gemm_cases' log-uniform draw over [lo, hi], rounded to a multiple of 8."""
    return max(8, 8 * round(logu(rng, lo, hi) / 8))


def cases(seed: int, n: int = N_SHAPES) -> list[tuple[int, int, int]]:
    """(m, n, k) of draw ``seed``: see the module docstring."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 3 == 2:
            dims = [_logu(rng, 512, 8192), _logu(rng, 512, 8192)]
            dims.insert(rng.randrange(3), _logu(rng, 16384, 65536))
        else:
            dims = [_logu(rng, 256, 16384) for _ in range(3)]
        out.append(tuple(dims))
    return out


def operands(m: int, n: int, k: int, layout: str):
    """(A, B, C) bf16 CUDA tensors for C[m,n] = A @ B with A (``layout[0]``) and B (``layout[1]``)
    contiguous (N) or a transposed view of a contiguous tensor (T)."""
    import torch
    dt, dev = torch.bfloat16, "cuda"
    a = torch.randn(m, k, device=dev, dtype=dt) if layout[0] == "N" else torch.randn(k, m, device=dev, dtype=dt).t()
    b = torch.randn(k, n, device=dev, dtype=dt) if layout[1] == "N" else torch.randn(n, k, device=dev, dtype=dt).t()
    return a, b, torch.empty(m, n, device=dev, dtype=dt)


def make_call(m: int, n: int, k: int, layout: str):
    """fn() running torch.mm on the layout's operands into a preallocated C."""
    import torch
    a, b, c = operands(m, n, k, layout)
    return lambda: torch.mm(a, b, out=c)


def bench(nvml, flush, shape, layout: str, seed: int, pass_no: int) -> dict:
    """One record: kind ``gemm`` with ``layout``, ``set`` ``layouts``, the random suite's timing fields."""
    import common
    from sustained import add_clock_sample, base_record
    m, n, k = shape
    fn = make_call(m, n, k, layout)
    st = common.time_fn(fn, flush=flush)
    s = nvml.sample()
    r = base_record(m, n, k, "bfloat16", st, "layouts")
    r.update(layout=layout, set="layouts", seed=seed, pass_no=pass_no, time_graph_s=common.time_graph(fn))
    add_clock_sample(r, nvml, s)
    common.log(f"  {layout} {m:6d}x{n:6d}x{k:6d} {st['time_s'] * 1e6:10.1f} us {r.get('sm_clock_mhz')} MHz")
    return r


def attach_kernels(rec, dl) -> None:
    """Each (shape, layout)'s kernel names (sustained.trace_kernels) on every record of it."""
    from sustained import trace_kernels
    names = {}
    for r in rec.records:
        key = (r["m"], r["n"], r["k"], r["layout"])
        if key not in names and dl.ok(reserve_s=2):
            names[key] = trace_kernels(make_call(*key))
        if names.get(key):
            r["kernels"] = names[key]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=90)
    ap.add_argument("--n", type=int, default=N_SHAPES)
    ap.add_argument("--out")
    ap.add_argument("--budget-s", type=float, default=200)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--kernel-names", action="store_true")
    ap.add_argument("--list", action="store_true", help="print the shapes and exit (no torch needed)")
    args = ap.parse_args()
    shapes = cases(args.seed, args.n)
    if args.list:
        for s in shapes:
            print("%6d x %6d x %6d" % s)
        return 0
    import common
    import torch
    from nvml import Nvml
    torch.cuda.init()
    nvml = Nvml(0)
    info = common.device_info(suite="gemm_layouts", nvml=nvml.static(), seed=args.seed, passes=args.passes,
                              layouts=list(LAYOUTS), kernel_names=args.kernel_names or None)
    rec = common.Recorder(args.out, info)
    dl = common.Deadline(args.budget_s)
    flush = common.Flusher()
    torch.manual_seed(0)
    work = [(s, lay) for s in shapes for lay in LAYOUTS]
    for pass_no in range(1, args.passes + 1):
        order = list(range(len(work)))
        random.Random(args.seed * 10 + pass_no).shuffle(order)
        for i in order:
            if not dl.ok(reserve_s=2):
                rec.error(f"budget reached in pass {pass_no}")
                break
            shape, lay = work[i]
            common.run_case(rec, f"{lay} {shape}", lambda: bench(nvml, flush, shape, lay, args.seed, pass_no))
    if args.kernel_names:
        attach_kernels(rec, dl)
        rec.flush()
    common.log(f"done: {len(rec.records)} records; {len(rec.errors)} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
