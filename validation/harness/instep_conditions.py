"""One kernel alone and as a training step runs it: data, neighbours, heat and memory (issue #12).

    PYTHONUNBUFFERED=1 python3 validation/harness/instep_conditions.py --out FILE --budget-s 240
    python3 validation/harness/instep_conditions.py --dry-run      # list the cases; no torch, no GPU

The profiled Megatron-Core local-attention steps (profiles/h200_plan_gemmtrace.json) ran some of
the attention's memory-bound kernels slower than the torch_paths suite measured the same kernel at
the same shape alone: the fp32 softmax forward ~20%, ``masked_fill_`` and ``.float()`` 4-8%, while
the softmax backward matched. A step differs from the suite in four ways, and this suite varies
each on its own, at the steps' shapes (batch x heads x s x s fp32 scores):

  ``data``       ``randn`` (what torch_paths feeds: N(0, 1) values) or ``causal_scores`` (what a
                 step feeds: bf16 QK^T / sqrt(d) of N(0, 1) Q and K, upcast, the upper triangle set
                 to -10000 by Megatron's attention_mask_func; softmax backward: the output of that
                 softmax, zeros above the diagonal)
  ``condition``  ``isolated`` (common.time_fn: L2 flushed, CUDA events, a cool GPU),
                 ``after_gemm`` (each timed call right after ~15 ms of bf16 8192^3 GEMMs: the clock
                 and power of a step's GEMM phases), ``chain`` (the whole local-attention forward and
                 backward of Megatron-Core -- baddbmm, .float(), masked_fill_, softmax, .bfloat16(),
                 bmm and autograd's backward -- under torch.profiler, each kernel's CUPTI duration:
                 the neighbours and the L2 contents of a step), ``chain_hot`` (the chain after 5 s of
                 back-to-back GEMMs), ``ballast`` (``isolated`` with most of the free memory
                 allocated first: a step's 100+ GiB of live tensors)

Isolated and ballast cases also time ``masked_fill_`` in Megatron's 4-d layout (``layout: 4d``:
[1, bh, s, s] scores, [1, 1, s, s] mask; the suite's own is 3-d) and the softmax forward at two
more row lengths (SOFTMAX_ONLY_SHAPES).

Record kinds are torch_paths' (``softmax``, ``softmax_bwd`` with tokens/hidden/dtype;
``masked_fill_broadcast`` with bh/seq; ``cast_to_fp32`` with elements) plus ``data``,
``condition`` and the NVML medians of the case's window (``sm_clock_mhz``, ``power_w``,
``temperature_c``). The chain's kernels are ``chain_kernel`` records: ``family`` (the kernel
family, CHAIN_KERNELS), ``bh``, ``seq``, ``head_dim``, ``time_s`` = the family's seconds per op
(all its kernels: an op on a tensor over 2^31 bytes runs as several), ``kernels_per_op``,
``kernel_median_s`` and ``kernels`` (names).
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time

SHAPES = ((64, 2048), (40, 4096))          # (batch x heads, seq): gpt-1.3b mbs 4 and llama-2b mbs 2 steps
SOFTMAX_ONLY_SHAPES = ((128, 1024), (8, 8192))   # the softmax forward's data effect at other row lengths
HEAD_DIM = 128
KINDS = ("softmax", "masked_fill_broadcast", "cast_to_fp32", "softmax_bwd")
DATA = ("randn", "causal_scores")
BURST_GEMMS = 10                           # bf16 8192^3 GEMMs before each ``after_gemm`` call (~15 ms on H200)
CHAIN_ITERS = 5                            # profiled forward+backward passes of the chain
HOT_S = 5.0                                # seconds of GEMMs before ``chain_hot``
BALLAST_FRACTION = 0.6                     # of the free memory, allocated before ``ballast``

# profiled kernel name -> record kind, first match wins (forward chain and autograd backward)
CHAIN_KERNELS = (
    ("softmax", r"softmax_warp_forward|SoftMaxForward"),
    ("softmax_bwd", r"softmax_warp_backward|SoftMaxBackward"),
    ("softmax_bwd_mul", r"vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float"),
    ("masked_fill_broadcast", r"masked_fill|::masked"),
    ("cast_to_fp32", r"unrolled_elementwise_kernel<at::native::direct_copy_kernel"),
    ("cast_to_bf16", r"bfloat16_copy_kernel"),
    ("clone", r"^Memcpy DtoD"),
    ("gemm", r"nvjet|gemm|cutlass|xmma"),
)


def cases(small: bool = False) -> list[dict]:
    """Every case (kind, shape, data, condition) as plain dicts; ``chain*`` cases are one per shape."""
    shapes = ((2, 128),) if small else SHAPES
    out = []
    for bh, s in shapes:
        for cond in ("isolated", "after_gemm"):
            for kind in KINDS:
                for data in DATA:
                    out.append(dict(kind=kind, bh=bh, seq=s, data=data, condition=cond))
        out.append(dict(kind="masked_fill_broadcast", bh=bh, seq=s, data="randn", condition="isolated", layout="4d"))
        out += [dict(kind="chain", bh=bh, seq=s, data="causal_scores", condition=c) for c in ("chain", "chain_hot")]
    for bh, s in (() if small else SOFTMAX_ONLY_SHAPES):
        out += [dict(kind="softmax", bh=bh, seq=s, data=d, condition="isolated") for d in DATA]
    for bh, s in shapes:
        for kind in ("softmax", "masked_fill_broadcast"):
            out += [dict(kind=kind, bh=bh, seq=s, data=d, condition="ballast") for d in DATA]
    return out


def label(c: dict) -> str:
    return f"{c['condition']:10s} {c['kind']:22s} bh={c['bh']} s={c['seq']} {c['data']} {c.get('layout', '')}"


def shape_fields(c: dict, kind: str | None = None) -> dict:
    """The torch_paths shape fields of a case's kernel kind (rows x row for the softmax kinds)."""
    kind = kind or c["kind"]
    bh, s = c["bh"], c["seq"]
    if kind in ("softmax", "softmax_bwd"):
        return dict(kind=kind, tokens=bh * s, hidden=s, dtype="float32")
    if kind == "masked_fill_broadcast":
        return dict(kind=kind, bh=bh, seq=s, dtype="float32", **({"layout": c["layout"]} if "layout" in c else {}))
    return dict(kind=kind, elements=bh * s * s, dtype="float32")


def causal_scores(bh: int, s: int):
    """bf16 [bh, s, s] scores QK^T / sqrt(d) of N(0, 1) Q, K (head_dim 128), as a step's baddbmm makes them."""
    import torch
    import common
    q = torch.randn(bh, s, HEAD_DIM, device=common.device(), dtype=torch.bfloat16)
    k = torch.randn(bh, s, HEAD_DIM, device=common.device(), dtype=torch.bfloat16)
    return torch.baddbmm(torch.empty(bh, s, s, device=q.device, dtype=q.dtype), q, k.transpose(1, 2),
                         beta=0.0, alpha=HEAD_DIM ** -0.5)


def make_call(c: dict):
    """fn() running the case's one kernel on its data."""
    import torch
    import common
    bh, s, kind = c["bh"], c["seq"], c["kind"]
    dev = common.device()
    mask = torch.triu(torch.ones(s, s, device=dev, dtype=torch.bool), diagonal=1)
    if c["data"] == "randn":
        x16 = torch.randn(bh, s, s, device=dev, dtype=torch.bfloat16)
    else:
        x16 = causal_scores(bh, s)
    if kind == "cast_to_fp32":
        return lambda: x16.float()
    x = x16.float()
    del x16
    if kind == "masked_fill_broadcast" and c.get("layout") == "4d":      # Megatron's [b, np, sq, sk] and [1, 1, sq, sk]
        x4, mask4 = x.view(1, bh, s, s), mask.view(1, 1, s, s)
        return lambda: x4.masked_fill_(mask4, -10000.0)
    if kind == "masked_fill_broadcast":
        return lambda: x.masked_fill_(mask, -10000.0)
    if c["data"] == "causal_scores":
        x.masked_fill_(mask, -10000.0)
    if kind == "softmax":
        return lambda: torch.softmax(x, -1)
    y = torch.softmax(x, -1)
    del x
    g = torch.randn_like(y)
    return lambda: torch._softmax_backward_data(g, y, -1, y.dtype)


class Burst:
    """``n`` back-to-back bf16 8192^3 GEMMs queued on the stream (a step's GEMM phase)."""

    def __init__(self, n: int, size: int = 8192):
        import torch
        import common
        self.n = n
        self.a = torch.randn(size, size, device=common.device(), dtype=torch.bfloat16)
        self.c = torch.empty_like(self.a)

    def __call__(self):
        import torch
        for _ in range(self.n):
            torch.mm(self.a, self.a, out=self.c)

    def hold(self, seconds: float):
        import torch
        t = time.perf_counter()
        while time.perf_counter() - t < seconds:
            self()
            if torch.cuda.is_available():
                torch.cuda.synchronize()


def chain(c: dict):
    """fn() running Megatron-Core's local attention forward and backward once ([1, bh, s, s] scores,
    a broadcast [1, 1, s, s] causal mask, fp32 softmax), as plain torch ops."""
    import torch
    import common
    bh, s, dev = c["bh"], c["seq"], common.device()
    q, k, v = (torch.randn(bh, s, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.triu(torch.ones(1, 1, s, s, device=dev, dtype=torch.bool), diagonal=1)
    grad = torch.randn(bh, s, HEAD_DIM, device=dev, dtype=torch.bfloat16)
    empty = torch.empty(bh, s, s, device=dev, dtype=torch.bfloat16)

    def fn():
        scores = torch.baddbmm(empty, q, k.transpose(1, 2), beta=0.0, alpha=HEAD_DIM ** -0.5)
        x = scores.view(1, bh, s, s).float()
        x.masked_fill_(mask, -10000.0)
        p = torch.softmax(x, -1).bfloat16().view(bh, s, s)
        out = torch.bmm(p, v)
        out.backward(grad)
        q.grad = k.grad = v.grad = None
    return fn


def profile_kernels(fn, iters: int = 5) -> dict[str, list[float]]:
    """{kernel name: [CUPTI seconds of each call]} of ``iters`` calls of fn under torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(iters):
            fn()
        sync()
    out: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e.device_type, "name", "") == ("CUDA" if cuda else "CPU"):
            out.setdefault(e.name, []).append((e.time_range.end - e.time_range.start) * 1e-6)
    return out


# how many times one forward + backward of the chain runs each family's op (a tensor over 2^31 bytes
# runs one op as several kernels: TensorIterator splits it for 32-bit indexing)
CHAIN_OPS = {"softmax": 1, "softmax_bwd": 1, "softmax_bwd_mul": 1, "masked_fill_broadcast": 2, "cast_to_fp32": 2,
             "cast_to_bf16": 2, "clone": 1, "gemm": 6}


def chain_records(c: dict, per_kernel: dict[str, list[float]], iters: int) -> list[dict]:
    """One ``chain_kernel`` record per kernel family of the chain: ``time_s`` the family's summed
    CUPTI seconds per op (over ``iters`` forward+backward passes and CHAIN_OPS ops each),
    ``kernels_per_op``, the median single-kernel seconds and the kernel names."""
    fams: dict[str, tuple[list[float], list[str]]] = {}
    for name, times in per_kernel.items():
        fam = next((k for k, pat in CHAIN_KERNELS if re.search(pat, name)), None)
        if fam is not None:
            fams.setdefault(fam, ([], []))[0].extend(times)
            fams[fam][1].append(name[:160])
    recs = []
    for fam, (times, names) in fams.items():
        ops = iters * CHAIN_OPS[fam]
        recs.append(dict(kind="chain_kernel", family=fam, bh=c["bh"], seq=c["seq"], head_dim=HEAD_DIM,
                         data=c["data"], condition=c["condition"], time_s=sum(times) / ops,
                         kernels_per_op=len(times) / ops, kernel_median_s=float(statistics.median(times)),
                         kernels=names))
    return recs


def nvml_fields(sampler, t0: float, t1: float) -> dict:
    """NVML medians over [t0, t1] (monotonic): SM clock, power, temperature; empty without NVML."""
    import nvml
    if sampler is None:
        return {}
    s = nvml.summarize_samples(sampler.between(t0, t1), None)
    return {k: s.get(k) for k in ("sm_clock_mhz", "power_w", "temperature_c") if s.get(k) is not None}


def run_case(c: dict, ctx: dict, rec) -> None:
    import common
    t0 = time.monotonic()
    if c["kind"] == "chain":
        fn = chain(c)
        if c["condition"] == "chain_hot":
            ctx["burst"].hold(HOT_S)
            t0 = time.monotonic()
        recs = chain_records(c, profile_kernels(fn, CHAIN_ITERS), CHAIN_ITERS)
    else:
        fn = make_call(c)
        setup = ctx["burst"] if c["condition"] == "after_gemm" else None
        st = common.time_fn(fn, flush=ctx["flush"], setup=setup)
        recs = [dict(shape_fields(c), data=c["data"], condition=c["condition"], **st)]
    fn = None
    common.free_memory()
    env = nvml_fields(ctx["sampler"], t0, time.monotonic())
    for r in recs:
        r.update(env)
        rec.add(r)
        common.log(f"  {label(c)}  {r.get('family', r['kind']):22s} {r['time_s'] * 1e6:10.1f} us  {env.get('sm_clock_mhz')} MHz")


def allocate_ballast():
    """Hold BALLAST_FRACTION of the free device memory in 1 GiB tensors; returns them."""
    import torch
    free, _ = torch.cuda.mem_get_info()
    return [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(int(BALLAST_FRACTION * free) >> 30)]


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import open_suite
    opened = open_suite(__doc__, 240.0, cases, label, "instep_conditions",
                        "common.time_fn (L2 flushed, events); chain: CUPTI")
    if opened is None:
        return
    args, cs, rec, flush, dl = opened
    import common
    import nvml
    on_gpu = common.on_cuda()
    sampler = nvml.Sampler(args.out + ".nvml.jsonl", period_s=0.02) if on_gpu else None
    ctx = {"flush": flush, "sampler": sampler, "burst": Burst(BURST_GEMMS, 8192 if on_gpu else 64)}
    ballast = None
    try:
        for i, c in enumerate(cs):
            if not dl.ok(reserve_s=1):
                rec.error(f"budget reached: {len(cs) - i} of {len(cs)} cases not run")
                break
            if c["condition"] == "ballast" and ballast is None and on_gpu:
                ballast = allocate_ballast()
                common.log(f"-- ballast: {len(ballast)} GiB held")
            common.run_case(rec, label(c), lambda c=c: run_case(c, ctx, rec))
    finally:
        if sampler is not None:
            sampler.stop()
    common.log(f"done: {len(rec.records)} records; {len(rec.errors)} errors")


if __name__ == "__main__":
    main()
