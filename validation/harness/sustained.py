"""Clocks, power and GEMMs beyond the fitted shapes (issue #12).

Three suites, each writing a measurement file of format version 1 (records of kind ``gemm``):

* ``sustained``: a handful of large bf16 / fp8 GEMMs, each measured
  - ``regime: burst``: after ``--idle-s`` seconds of idle, timed exactly as kernels.py times a
    GEMM (L2 flush before each call, median of 5..50 calls), and
  - ``regime: sustained``: the same GEMM back to back (no flush, no gaps: as in training) for
    ``--sustain-s`` seconds, one record per timing window of ``--window-s`` seconds (``time_s``
    = window time / calls, ``t_start_s`` = seconds since the sustained run began), with the
    NVML samples a background thread took during the window (median SM clock, power, temperature;
    the union of throttle reasons), and
  - ``regime: after_sustained``: timed as the burst record, right after the sustained run
    (a hot GPU, L2 flushed).
  An ``info.idle_nvml`` sample is taken before anything runs.
* ``real`` / ``real_mbs2`` / ``real_mbs4`` / ``real_mbs3``: the random suite's timing over a registered set of real training
  GEMMs (gemm_cases.real_cases: the pool validation/real_gemms.py writes at micro-batch 1 / 2 / 4 / 3, every shape
  off the 64-grid and a seeded sample of the rest).
* ``random``: a held-out random set of GEMM shapes (seeded, ``--seed``), timed as kernels.py
  times GEMMs, each record with the NVML sample taken right after it. bf16: m, n, k log-uniform
  over 16..16384 (a third of them small-MN / large-K: m, n in 16..1024, k in 4096..65536), 30% of
  the dims left unrounded (misaligned), the rest multiples of 8; fp8: the same draws with k and n
  rounded to multiples of 16 (torch._scaled_mm requires it), a third small (all dims <= 1024).
* ``bmm_random``: the random suite's timing over the batched GEMMs of Megatron-Core's local attention
  at seeded random shapes (bmm_cases.py: QK^T's baddbmm, PV's bmm and the four backward bmms, operands
  laid out as Megatron and autograd pass them); records of kind ``gemm`` with ``batch`` (b*heads), the
  simulator's (m, n, k) and the torch call (``gemm``, ``op``, ``layout``, ``shapes``, ``strides``).

    PYTHONUNBUFFERED=1 python3 sustained.py --suite random --out r.json --budget-s 90
    PYTHONUNBUFFERED=1 python3 sustained.py --suite bmm_random --seed 78 --passes 2 --out b.json --budget-s 200
    python3 sustained.py --suite bmm_random --seed 78 --list     # the cases, nothing timed
    PYTHONUNBUFFERED=1 python3 sustained.py --suite sustained --out s.json --budget-s 220
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bmm_cases  # noqa: E402
import common  # noqa: E402
from gemm_cases import SUITES, label as gemm_label, suite_cases  # noqa: E402
from common import fmt_rate, log, run_case, time_fn  # noqa: E402
from nvml import Nvml, Sampler, summarize_samples  # noqa: E402

# NVML readings and the sampling child: nvml.py


# --------------------------------------------------------------------------- GEMM setup

def make_gemm(m, n, k, dtn):
    """fn() running one GEMM as kernels.py does (common.make_gemm)."""
    return common.make_gemm(m, n, k, dtn)


def base_record(m, n, k, dtn, st, group):
    return dict(kind="gemm", m=m, n=n, k=k, dtype=dtn, flops=2.0 * m * n * k, **st, group=group)


# --------------------------------------------------------------------------- sustained suite

def sustained_cases(small):
    if small:
        return [(64, 64, 64, "bfloat16", True)]
    # (m, n, k, dtype, sustained?) ; the last two only burst (cheap context for the model)
    return [(8192, 8192, 8192, "bfloat16", True), (8192, 8192, 8192, "float8_e4m3fn", True),
            (16384, 8192, 4096, "bfloat16", True), (4096, 4096, 4096, "bfloat16", False),
            (16384, 16384, 16384, "float8_e4m3fn", False)]


class Work:
    """One unit of sustained work: ``fn()`` enqueues it, ``base`` is its record's shape fields
    (kind, dims, flops or bytes), ``label`` names it in the log."""

    def __init__(self, label: str, fn, base: dict):
        self.label, self.fn, self.base = label, fn, base


def gemm_work(m, n, k, dtn) -> Work:
    return Work(f"{dtn} {m}x{n}x{k}", make_gemm(m, n, k, dtn), base_record(m, n, k, dtn, {}, "clocks"))


def add_work(tokens, hidden) -> Work:
    """x + y into a preallocated output, three [tokens, hidden] bf16 tensors (the ``add`` kind)."""
    dev = common.device()
    dt = torch.bfloat16 if common.on_cuda() else torch.float32
    x, y, z = (torch.randn(tokens, hidden, device=dev, dtype=dt) for _ in range(3))

    def fn():
        torch.add(x, y, out=z)
    return Work(f"add {tokens}x{hidden}", fn, dict(kind="add", tokens=tokens, hidden=hidden, dtype="bfloat16",
                                                  bytes=3 * tokens * hidden * 2, group="clocks"))


def attention_work(batch, heads, seq, head_dim) -> Work:
    """Causal flash SDPA forward + backward (the ``attention_fwd_bwd`` kind, backend flash)."""
    import torch.nn.functional as F
    dev = common.device()
    dt = torch.bfloat16 if common.on_cuda() else torch.float32
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(batch, heads, seq, head_dim, device=dev, dtype=dt)

    def fwd():
        if common.on_cuda():
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    body, setup = common.attention_pass(fwd, g, (q, k, v), backward=True)

    def fn():
        setup()
        body()
    flops = 4.0 * batch * heads * seq * seq * head_dim * 0.5 * 3.5     # causal fwd (2 matmuls) + bwd (5)
    return Work(f"attention b{batch} h{heads} s{seq} d{head_dim}", fn,
                dict(kind="attention_fwd_bwd", batch=batch, heads=heads, seq=seq, head_dim=head_dim, causal=True,
                     backend="flash", dtype="bfloat16", flops=flops, group="clocks"))


def mix_work(gemm: tuple, adds: int, add_shape: tuple, idle_s: float = 0.0) -> Work:
    """One GEMM then ``adds`` add calls, then (``idle_s`` > 0) a device sync and ``idle_s`` seconds
    of host sleep: a fixed mix of tensor-core, memory-bound and idle time, recorded as kind
    ``power_mix`` with its parts (the power model's mixing law is checked on these)."""
    g = make_gemm(*gemm)
    a = add_work(*add_shape).fn if adds else None
    cuda = common.on_cuda()

    def fn():
        g()
        for _ in range(adds):
            a()
        if idle_s > 0:
            if cuda:
                torch.cuda.synchronize()
            time.sleep(idle_s)
    m, n, k, dtn = gemm
    parts = [dict(kind="gemm", m=m, n=n, k=k, dtype=dtn, calls=1)]
    if adds:
        parts.append(dict(kind="add", tokens=add_shape[0], hidden=add_shape[1], dtype="bfloat16", calls=adds))
    label = f"mix gemm {m}x{n}x{k} + {adds} add" + (f" + {idle_s * 1e3:.1f} ms idle" if idle_s else "")
    return Work(label, fn, dict(kind="power_mix", parts=parts, idle_s_per_call=idle_s, group="clocks"))


def power_cases(small) -> list:
    """Sustained runs beyond GEMMs, for the step power model: a memory-bound add, flash attention
    forward + backward, and GEMM/add/idle mixes (their clocks are predicted from the pure runs)."""
    if small:
        return [lambda: add_work(256, 256), lambda: mix_work((64, 64, 64, "bfloat16"), 1, (256, 256)),
                lambda: mix_work((64, 64, 64, "bfloat16"), 0, (256, 256), idle_s=0.001)]
    g = (8192, 8192, 8192, "bfloat16")
    add = (65536, 8192)                    # three 1 GiB bf16 tensors
    return [lambda: add_work(*add), lambda: attention_work(4, 32, 4096, 128),
            lambda: mix_work(g, 2, add), lambda: mix_work(g, 6, add),
            lambda: mix_work(g, 0, add, idle_s=0.0015)]


def burst(nvml, sampler, flush, work: Work, regime, idle_s):
    if idle_s > 0:
        if common.on_cuda():
            torch.cuda.synchronize()
        time.sleep(idle_s)
    pre = nvml.sample()
    t0 = time.monotonic()
    st = time_fn(work.fn, flush=flush)
    t1 = time.monotonic()
    r = {**work.base, **st, "regime": regime}
    r.update(summarize_samples(sampler.between(t0, t1), nvml.static().get("power_limit_w")))
    r["before"] = {k2: v for k2, v in pre.items() if k2 not in ("t", "gpu")} if pre else None
    if pre and pre.get("reasons") is not None:
        r["before"]["reasons"] = nvml.names(pre["reasons"])
    if idle_s > 0:   # the record check wants fields in seconds positive
        r["idle_before_s"] = idle_s
    log(f"  {regime:15s} {work.label} {st['time_s'] * 1e6:9.1f} us {_rate(r)} clock {r.get('sm_clock_mhz')} MHz "
        f"power {r.get('power_w')} W temp {r.get('temperature_c')} C")
    return r


def _rate(r: dict) -> str:
    if r.get("flops"):
        return fmt_rate(r["flops"] / r["time_s"], "FLOP/s")
    if r.get("bytes"):
        return fmt_rate(r["bytes"] / r["time_s"], "B/s")
    return ""


def sustained(nvml, sampler, rec, work: Work, sustain_s, window_s):
    """Back-to-back calls for sustain_s seconds, one record per window of window_s seconds."""
    fn = work.fn
    cuda = common.on_cuda()
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    # calls per window, from a short probe
    t = time.perf_counter()
    for _ in range(10):
        fn()
    if cuda:
        torch.cuda.synchronize()
    per = (time.perf_counter() - t) / 10
    calls = max(1, int(window_s / max(per, 1e-7)))
    limit_w = nvml.static().get("power_limit_w")
    t_start = time.monotonic()
    w = 0
    # keep the GPU busy across windows: the next window is enqueued before the last one is waited on
    pending = []

    def enqueue():
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(calls):
                fn()
            e.record()
            return (s, e)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (t0, time.perf_counter())

    t_host = time.monotonic()
    pending.append((enqueue(), t_host))
    while True:
        more = time.monotonic() - t_start < sustain_s - window_s
        if more:
            nxt = enqueue()
        (s, e), t_enq = pending.pop(0)
        if cuda:
            e.synchronize()
            dt = s.elapsed_time(e) / 1e3
        else:
            dt = e - s
        t_done = time.monotonic()
        # the window ran roughly between the previous window's end and its own end
        t_begin = max(t_enq, t_done - dt)
        r = {**work.base, "time_s": dt / calls, "reps": calls}
        r.update(regime="sustained", window=w, t_start_s=round(t_begin - t_start, 3), window_s=dt)
        r.update(summarize_samples(sampler.between(t_begin, t_done), limit_w))
        rec.add(r)
        log(f"  sustained w{w:02d} t={r['t_start_s']:6.1f}s {work.label} "
            f"{r['time_s'] * 1e6:9.1f} us {_rate(r)} "
            f"clock {r.get('sm_clock_mhz')} MHz power {r.get('power_w')} W temp {r.get('temperature_c')} C "
            f"{r.get('throttle_reasons')}")
        w += 1
        if not more:
            break
        pending.append((nxt, t_done))
    return None   # records were added as they came


def _sustained_triplet(args, rec, nvml, flush, dl, sampler, make, sustain_s):
    """A burst from idle, the sustained run, a burst right after it (hot) of one work."""
    if not dl.ok(reserve_s=sustain_s + args.idle_s + 5):
        rec.error("budget reached: a sustained case not run")
        return
    try:
        work = make()
    except Exception as exc:  # noqa: BLE001
        rec.error(f"building a sustained case: {common.short_exc(exc)}")
        return
    run_case(rec, f"idle-burst {work.label}", lambda: burst(nvml, sampler, flush, work, "burst", args.idle_s))
    run_case(rec, f"sustained {work.label}", lambda: sustained(nvml, sampler, rec, work, sustain_s, args.window_s))
    run_case(rec, f"after {work.label}", lambda: burst(nvml, sampler, flush, work, "after_sustained", 0.0))
    del work
    common.free_memory()


def suite_sustained(args, rec, nvml, flush, dl, sampler):
    cases = sustained_cases(args.small)
    # bursts of the burst-only shapes first, from idle; then per sustained shape: a burst from
    # idle, the sustained run, a burst right after it (hot)
    for m, n, k, dtn, sus in cases:
        if sus:
            continue
        if not dl.ok(reserve_s=5):
            rec.error("budget reached before burst cases")
            break
        run_case(rec, f"burst {m}x{n}x{k} {dtn}",
                 lambda: burst(nvml, sampler, flush, gemm_work(m, n, k, dtn), "burst", args.idle_s))
    for m, n, k, dtn, sus in cases:
        if sus:
            _sustained_triplet(args, rec, nvml, flush, dl, sampler, lambda: gemm_work(m, n, k, dtn), args.sustain_s)
    if args.power:
        for make in power_cases(args.small):
            _sustained_triplet(args, rec, nvml, flush, dl, sampler, make, args.power_sustain_s)


# --------------------------------------------------------------------------- random suite

def trace_kernels(fn, calls: int = 3) -> list[dict] | None:
    """The device kernels one call of fn() launches, from ``calls`` calls under torch.profiler (CUDA
    activity, chrome trace): per kernel name its launches per call, median device seconds, and the
    launch's grid, block, dynamic shared memory and registers per thread as the trace records them
    (cuBLAS's kernel names carry its tile, cluster and split-K / stream-K choice). None without CUDA
    or when the profiler yields no kernels."""
    import json
    import tempfile
    if not common.on_cuda():
        return None
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile("r", suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name)).get("traceEvents", [])
    kernels: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        k = kernels.setdefault(e["name"], dict(name=e["name"], grid=a.get("grid"), block=a.get("block"),
                                               shared_memory=a.get("shared memory"),
                                               registers=a.get("registers per thread"), durs=[]))
        k["durs"].append(float(e.get("dur", 0.0)) * 1e-6)
    out = []
    for k in kernels.values():
        durs = k.pop("durs")
        out.append(dict(k, launches_per_call=len(durs) / calls, device_s=statistics.median(durs)))
    return out or None


def add_clock_sample(r: dict, nvml, s: dict | None) -> None:
    """NVML sample ``s`` (taken right after a timing: SM clock MHz, power W, temperature C, throttle
    reasons) into record ``r``; nothing without one."""
    if s:
        r.update(sm_clock_mhz=s["sm_clock_mhz"], power_w=s["power_w"], temperature_c=s["temperature_c"],
                 throttle_reasons=nvml.names(s["reasons"]))


def bench_random(nvml, flush, m, n, k, dtn, group, pass_no=1, seed=12, suite="random"):
    fn = make_gemm(m, n, k, dtn)
    st = time_fn(fn, flush=flush)
    s = nvml.sample()
    r = base_record(m, n, k, dtn, st, group)
    r.update(set=suite, seed=seed, pass_no=pass_no, time_graph_s=common.time_graph(fn))
    add_clock_sample(r, nvml, s)
    log(f"  {suite} {dtn:14s} {m:6d}x{n:6d}x{k:6d} {group:24s} {st['time_s'] * 1e6:10.1f} us "
        f"{fmt_rate(r['flops'] / st['time_s'], 'FLOP/s')} {r.get('sm_clock_mhz')} MHz")
    return r


# --------------------------------------------------------------------------- bmm_random suite

def make_bmm(case: dict):
    """fn() running one bmm_cases case as Megatron-Core's local attention (dot_product_attention.py)
    or autograd calls it: q, k, v and dO as contiguous sbhd ``[s, bh, d]`` tensors seen through
    transposes, scores / probs / dS contiguous ``[bh, s, s]``; QK^T ``torch.baddbmm(empty buffer, ...,
    beta=0.0, alpha=1/sqrt(d))``, the others ``torch.bmm`` returning a new tensor (no ``out=``), as
    both callers do. bf16 (float32 without CUDA). Checks the operands' shapes and strides against the
    case's (bmm_cases.operands)."""
    dev = common.device()
    dt = torch.bfloat16 if common.on_cuda() else torch.float32
    bh, s, d, g = case["bh"], case["seq"], case["head_dim"], case["gemm"]

    def sbhd():
        return torch.randn(s, bh, d, device=dev, dtype=dt)

    def scores():
        return torch.randn(bh, s, s, device=dev, dtype=dt)
    if g == "qk_baddbmm":
        buf, alpha = torch.empty(bh, s, s, device=dev, dtype=dt), case["alpha"]
        a, b = sbhd().transpose(0, 1), sbhd().transpose(0, 1).transpose(1, 2)
        _check_operands(case, a, b)
        return lambda: torch.baddbmm(buf, a, b, beta=0.0, alpha=alpha)
    a, b = {"pv": lambda: (scores(), sbhd().transpose(0, 1)),                       # P x V
            "dp": lambda: (sbhd().transpose(0, 1), sbhd().transpose(0, 1).transpose(1, 2)),   # dO x V^T
            "dv": lambda: (scores().transpose(1, 2), sbhd().transpose(0, 1)),       # P^T x dO
            "dq": lambda: (scores(), sbhd().transpose(0, 1)),                       # dS x K
            "dk": lambda: (sbhd().transpose(0, 1).transpose(1, 2), scores())}[g]()  # Q^T x dS
    _check_operands(case, a, b)
    return lambda: torch.bmm(a, b)


def _check_operands(case: dict, a, b) -> None:
    """Raise when the built operands' shapes or strides (elements) differ from the case's."""
    got = ([list(a.shape), list(b.shape)], [list(a.stride()), list(b.stride())])
    if got != (case["shapes"], case["strides"]):
        raise AssertionError(f"{case['gemm']}: operands {got} != case {(case['shapes'], case['strides'])}")


def bench_bmm(nvml, flush, case: dict, pass_no: int = 1, seed: int = 78) -> dict:
    """One bmm_random record: the case timed as the random suite times a GEMM (common.time_fn: L2
    flushed before each call, CUDA events, median), the NVML sample after it, ``time_graph_s``."""
    fn = make_bmm(case)
    st = time_fn(fn, flush=flush)
    s = nvml.sample()
    r = {**bmm_cases.record_of(case, seed), **st, "pass_no": pass_no, "time_graph_s": common.time_graph(fn)}
    add_clock_sample(r, nvml, s)
    log(f"  {bmm_cases.label(case)} {st['time_s'] * 1e6:10.1f} us "
        f"{fmt_rate(r['flops'] / st['time_s'], 'FLOP/s')} {r.get('sm_clock_mhz')} MHz")
    return r


def draw(suite: str, seed: int, small: bool) -> list:
    """The cases of draw ``seed`` of a random-style suite: bmm_cases.cases for ``bmm_random``, else
    gemm_cases.suite_cases ((m, n, k, dtype, group) tuples)."""
    if suite == bmm_cases.SUITE:
        return bmm_cases.cases(seed, small=small)
    return suite_cases(suite, seed, small=small)


def case_label(suite: str, c) -> str:
    """The log's name of one case of ``suite``."""
    return bmm_cases.label(c) if suite == bmm_cases.SUITE else gemm_label(c)


def suite_random(args, rec, nvml, flush, dl, sampler=None):
    """Every seed of ``--seed`` (comma-separated) in a shuffled order, then, with ``--passes 2``,
    all of them again in another order (``pass_no`` 2): whether a shape's time reproduces within
    one run. Each record also carries ``time_graph_s`` (common.time_graph: back to back, warm) and,
    with ``--kernel-names``, the kernels cuBLAS launched for it (:func:`trace_kernels`), traced after
    every pass is timed: once torch.profiler has run, CUPTI's callbacks stay and lengthen later
    timings (session 22's trace run, which traced between timings: fp8 calls 1.5-2.3x, graph
    replays 7-21% slower; its times are not measurements)."""
    cases = [(c, seed) for seed in args.seeds for c in draw(args.suite, seed, args.small)]
    for pass_no in range(1, args.passes + 1):
        order = list(range(len(cases)))
        random.Random(args.seeds[0] + pass_no).shuffle(order)   # no drift confounded with the groups
        left = len(order)
        for i in order:
            if not dl.ok(reserve_s=2):
                rec.error(f"budget reached: pass {pass_no}: {left} random cases not run")
                return
            c, seed = cases[i]
            if args.suite == bmm_cases.SUITE:
                run_case(rec, f"{args.suite} {bmm_cases.label(c)}",
                         lambda: bench_bmm(nvml, flush, c, pass_no=pass_no, seed=seed))
            else:
                run_case(rec, f"{args.suite} {c}",
                         lambda: bench_random(nvml, flush, *c, pass_no=pass_no, seed=seed, suite=args.suite))
            left -= 1
    if args.kernel_names:
        attach_kernel_names(rec, dl)


def shape_key(r: dict) -> tuple:
    """What makes two records of a random-style suite the same call: (m, n, k, dtype), and for a
    bmm_random record its GEMM and attention shape (the simulator's (m, n, k) of PV, dV, dQ and dK
    coincide at sq = skv)."""
    if r.get("set") == bmm_cases.SUITE:
        return (r["gemm"], r["bh"], r["seq"], r["head_dim"])
    return (r["m"], r["n"], r["k"], r["dtype"])


def call_of(key: tuple):
    """fn() of the call :func:`shape_key` names."""
    if isinstance(key[0], str):
        return make_bmm(bmm_cases.make_case(*key))
    return make_gemm(*key)


def attach_kernel_names(rec, dl):
    """Each timed shape's kernels (:func:`trace_kernels`) onto its records, after all timing."""
    by_shape: dict[tuple, list] = {}
    for r in rec.records:
        by_shape.setdefault(shape_key(r), []).append(r)
    for key, recs in by_shape.items():
        if not dl.ok(reserve_s=1):
            rec.error(f"budget reached: {sum(1 for v in by_shape.values() if 'kernels' not in v[0])} shapes not traced")
            break
        try:
            kernels = trace_kernels(call_of(key))
        except Exception as exc:  # noqa: BLE001
            rec.error(f"trace {key}: {common.short_exc(exc)}")
            continue
        for r in recs:
            r["kernels"] = kernels
        common.free_memory()
    rec.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", choices=("sustained",) + SUITES + (bmm_cases.SUITE,))
    ap.add_argument("--out")
    ap.add_argument("--budget-s", type=float, default=200)
    ap.add_argument("--sustain-s", type=float, default=40)
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--seed", default="12", help="random / real suite: seed(s), comma-separated")
    ap.add_argument("--passes", type=int, default=1, help="random suite: passes over the cases")
    ap.add_argument("--kernel-names", action="store_true",
                    help="random suite: record each shape's device kernels (names, grid, block) under torch.profiler")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--list", action="store_true", help="random-style suites: print the cases of the seeds and exit")
    ap.add_argument("--power", action="store_true",
                    help="sustained suite: also the add, attention and mixed runs of the step power model")
    ap.add_argument("--power-sustain-s", type=float, default=20)
    args = ap.parse_args()
    args.seeds = [int(x) for x in str(args.seed).split(",")]
    if args.list and args.suite and args.suite != "sustained":
        for seed in args.seeds:
            for i, c in enumerate(draw(args.suite, seed, args.small)):
                print(f"seed {seed} {i:3d} {case_label(args.suite, c)}")
        return
    if not args.suite or not args.out:
        ap.error("--suite and --out are required")
    if args.small:
        args.sustain_s, args.window_s, args.idle_s = min(args.sustain_s, 1.0), min(args.window_s, 0.3), 0.0
        args.power_sustain_s = min(args.power_sustain_s, 1.0)
    if common.on_cuda():
        torch.cuda.init()
    nvml = Nvml(0)
    idle = nvml.sample()
    if idle:
        idle = {**{k: v for k, v in idle.items() if k != "t"}, "reasons": nvml.names(idle.get("reasons"))}
    info = common.device_info(suite=f"gemm_{args.suite}", nvml=nvml.static(), idle_nvml=idle or None,
                              seed=args.seeds if args.suite != "sustained" else None, passes=args.passes, kernel_names=args.kernel_names or None,
                              sustain_s=args.sustain_s if args.suite == "sustained" else None,
                              window_s=args.window_s if args.suite == "sustained" else None,
                              idle_s=args.idle_s if args.suite == "sustained" else None)
    log("info:", info)
    rec = common.Recorder(args.out, info)
    flush = common.Flusher()
    torch.manual_seed(0)
    dl = common.Deadline(args.budget_s)
    t0 = time.time()
    sampler = Sampler(args.out + ".nvml.jsonl", gpus=[0]) if args.suite == "sustained" else None
    try:
        (suite_sustained if args.suite == "sustained" else suite_random)(args, rec, nvml, flush, dl, sampler)
    finally:
        if sampler is not None:
            sampler.stop()
    log(f"done in {time.time() - t0:.1f}s: {len(rec.records)} records; {len(rec.errors)} errors")
    for e in rec.errors:
        log("  error:", e)


if __name__ == "__main__":
    main()
