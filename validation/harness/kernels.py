"""Single-GPU measurement suite: copy, gemm, attention, elementwise ops, train_step.

    PYTHONUNBUFFERED=1 python3 validation/harness/kernels.py --out FILE --budget-s 330
Options: --sections copy,gemm,attention,elementwise,train (any subset, in that order);
--small for a tiny CPU dry run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import train_step  # noqa: E402
from common import fmt_rate, log, run_case, time_fn  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # pragma: no cover
    SDPBackend = sdpa_kernel = None

MiB = 1 << 20

# share of the global budget per section (cumulative deadlines; unused time rolls over)
FRACTIONS = {"copy": 0.04, "gemm": 0.36, "attention": 0.16, "elementwise": 0.12, "train": 0.32}


def set_tf32(on: bool):
    torch.backends.cuda.matmul.allow_tf32 = on


# --------------------------------------------------------------------------- copy

def copy_cases(small):
    if small:
        return [1 * MiB, 4 * MiB]
    return [MiB << i for i in range(0, 13)]  # 1 MiB .. 4 GiB


def bench_copy(nbytes, flush):
    dev = common.device()
    src = torch.randn(nbytes // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    st = time_fn(lambda: dst.copy_(src), flush=flush)
    rec = dict(kind="copy", bytes_moved=2 * nbytes, buffer_mb=nbytes / MiB, **st)
    log(f"  copy {nbytes / MiB:8.0f} MiB  {st['time_s'] * 1e6:9.1f} us  {fmt_rate(2 * nbytes / st['time_s'], 'B/s')}")
    return rec


# --------------------------------------------------------------------------- gemm

def gemm_cases(small):
    """Ordered by importance; list of (m, n, k, dtype_name, tag, group)."""
    if small:
        return [(64, 64, 64, "bfloat16", None, "square"), (128, 96, 64, "float32", "_tf32", "square"),
                (32, 64, 48, "float16", None, "square"), (64, 64, 64, "float8_e4m3fn", None, "square")]
    cases = []
    seen = set()

    def add(m, n, k, dt, group):
        tag = "_tf32" if dt == "float32" else None
        key = (m, n, k, dt)
        if key in seen:
            return
        seen.add(key)
        cases.append((m, n, k, dt, tag, group))

    squares = [256, 512, 1024, 2048, 4096, 8192, 16384]
    for s in squares:
        add(s, s, s, "bfloat16", "square")
    for s in squares:
        add(s, s, s, "float8_e4m3fn", "square")
    for s in squares:
        add(s, s, s, "float16", "square")
    for s in squares[:-1]:
        add(s, s, s, "float32", "square")

    def tshapes(h, t, tokens):
        return [(tokens, 3 * h // t, h, "qkv"), (tokens, h, h // t, "out"),
                (tokens, 4 * h // t, h, "mlp_up"), (tokens, h, 4 * h // t, "mlp_down")]

    for tokens in (4096, 16384):
        for h in (4096, 8192, 12288, 16384):
            for t in (1, 2, 4, 8):
                for m, n, k, _ in tshapes(h, t, tokens):
                    add(m, n, k, "bfloat16", "transformer")
    # skinny (decode-like)
    for nk in (4096, 8192):
        for m in (1, 8, 16, 64, 128):
            add(m, nk, nk, "bfloat16", "skinny")
    # awkward sizes: tile and wave quantisation
    awk = [(2047, 2047, 2047), (2049, 2049, 2049), (4095, 4095, 4095), (4097, 4097, 4097),
           (4160, 4160, 4160), (6000, 6000, 6000), (8200, 8200, 8200), (1536, 12288, 4096),
           (8192, 8192, 8320), (3000, 5000, 7000), (12288, 1000, 4096), (8192, 1152, 8192)]
    for m, n, k in awk:
        add(m, n, k, "bfloat16", "awkward")
    # fp8 transformer shapes (tokens 8192), skinny, awkward (multiples of 16 only)
    for h in (4096, 8192, 12288, 16384):
        for t in (1, 2, 4, 8):
            for m, n, k, _ in tshapes(h, t, 8192):
                add(m, n, k, "float8_e4m3fn", "transformer")
    for nk in (4096, 8192):
        for m in (16, 64, 128):
            add(m, nk, nk, "float8_e4m3fn", "skinny")
    for m, n, k in [(4160, 4160, 4160), (1536, 12288, 4096), (8192, 8192, 8320), (12288, 1008, 4096)]:
        add(m, n, k, "float8_e4m3fn", "awkward")
    # fp16 / tf32 transformer subset, skinny and awkward
    for dt in ("float16", "float32"):
        for h in (8192,):
            for t in (1, 8):
                for m, n, k, _ in tshapes(h, t, 8192):
                    add(m, n, k, dt, "transformer")
        for m in (1, 128):
            add(m, 4096, 4096, dt, "skinny")
        for m, n, k in [(4095, 4095, 4095), (4097, 4097, 4097), (1536, 12288, 4096)]:
            add(m, n, k, dt, "awkward")
    return cases


def bench_gemm(m, n, k, dtn, tag, group, flush):
    fn = common.make_gemm(m, n, k, dtn)
    set_tf32(dtn == "float32")
    try:
        st = time_fn(fn, flush=flush)
    finally:
        set_tf32(False)
    flops = 2.0 * m * n * k
    rec = dict(kind="gemm", m=m, n=n, k=k, dtype=dtn, flops=flops, **st)
    if tag:
        rec["tag"] = tag
    rec["group"] = group
    log(f"  gemm {dtn:14s} {m:6d}x{n:6d}x{k:6d} {st['time_s'] * 1e6:10.1f} us  {fmt_rate(flops / st['time_s'], 'FLOP/s')}")
    return rec


# --------------------------------------------------------------------------- attention

def attention_cases(small):
    """(backend, seq, batch, heads, kv_heads, head_dim, causal)."""
    if small:
        return [("flash", 128, 2, 4, 4, 64, True), ("math", 128, 2, 4, 4, 64, False),
                ("flash", 128, 1, 4, 2, 64, True)]
    cases = []
    tokens = 16384

    def add(backend, seq, hd, causal, heads=None, kv=None):
        heads = heads or (16 if hd == 128 else 32)
        kv = kv or heads
        batch = max(1, tokens // seq)
        cases.append((backend, seq, batch, heads, kv, hd, causal))

    for seq in (512, 1024, 2048, 4096, 8192, 16384, 32768):
        for hd in (128, 64):
            for causal in (True, False):
                add("flash", seq, hd, causal)
    for seq in (2048, 8192, 32768):  # GQA: 32 query heads, 8 kv heads
        add("flash", seq, 128, True, heads=32, kv=8)
    for seq in (512, 1024, 2048, 4096, 8192):
        for hd in (128, 64):
            for causal in (True, False):
                add("math", seq, hd, causal)
    for seq in (2048,):
        add("math", seq, 128, True, heads=32, kv=8)
    return cases


def bench_attention(case, flush, with_bwd):
    backend, seq, batch, heads, kv, hd, causal = case
    dev = common.device()
    dt = torch.bfloat16 if common.on_cuda() else torch.float32
    q = torch.randn(batch, heads, seq, hd, device=dev, dtype=dt, requires_grad=with_bwd)
    k = torch.randn(batch, kv, seq, hd, device=dev, dtype=dt, requires_grad=with_bwd)
    v = torch.randn(batch, kv, seq, hd, device=dev, dtype=dt, requires_grad=with_bwd)
    g = torch.randn(batch, heads, seq, hd, device=dev, dtype=dt) if with_bwd else None
    be = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}[backend]
    kw = dict(is_causal=causal)
    if kv != heads:
        kw["enable_gqa"] = True

    def fwd():
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(q, k, v, **kw)

    fn, setup = common.attention_pass(fwd, g, (q, k, v), with_bwd)
    st = time_fn(fn, flush=flush, setup=setup)
    fwd_flops = 4.0 * batch * heads * seq * seq * hd * (0.5 if causal else 1.0)
    flops = fwd_flops * (3.0 if with_bwd else 1.0)  # fwd + bwd = 3x fwd (no recompute counted)
    kind = "attention_fwd_bwd" if with_bwd else "attention_fwd"
    rec = dict(kind=kind, batch=batch, heads=heads, seq=seq, head_dim=hd, causal=causal,
               backend=backend, dtype="bfloat16", flops=flops, **st)
    if kv != heads:
        rec["kv_heads"] = kv
    log(f"  {kind:17s} {backend:5s} b{batch:<3d} h{heads}/{kv} s{seq:<6d} d{hd} causal={int(causal)} "
        f"{st['time_s'] * 1e3:9.3f} ms  {fmt_rate(flops / st['time_s'], 'FLOP/s')}")
    return rec


# --------------------------------------------------------------------------- elementwise / norms

ELEM_OPS = ["layernorm", "rmsnorm", "gelu", "softmax", "silu_mul", "add"]


def elem_cases(small):
    if small:
        return [(op, 256, 128) for op in ELEM_OPS]
    out = []
    for op in ELEM_OPS:
        for tokens in (1024, 4096, 16384, 32768):
            for hidden in (1024, 2048, 4096, 8192, 12288, 16384):
                out.append((op, tokens, hidden))
    return out


def bench_elem(op, tokens, hidden, flush, dtype="bfloat16"):
    """Time one memory-bound op on a [tokens, hidden] N(0, 1) tensor of ``dtype`` (a torch dtype name)."""
    dev = common.device()
    dt = getattr(torch, dtype)
    x = torch.randn(tokens, hidden, device=dev, dtype=dt)
    tensor_bytes = tokens * hidden * x.element_size()
    if op == "layernorm":
        w = torch.randn(hidden, device=dev, dtype=dt)
        b = torch.randn(hidden, device=dev, dtype=dt)
        fn = lambda: F.layer_norm(x, (hidden,), w, b)  # noqa: E731
        nbytes = 2 * tensor_bytes
    elif op == "rmsnorm":
        w = torch.randn(hidden, device=dev, dtype=dt)
        fn = lambda: F.rms_norm(x, (hidden,), w)  # noqa: E731
        nbytes = 2 * tensor_bytes
    elif op == "gelu":
        fn = lambda: F.gelu(x, approximate="tanh")  # noqa: E731
        nbytes = 2 * tensor_bytes
    elif op == "softmax":
        fn = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        nbytes = 2 * tensor_bytes
    elif op == "silu_mul":
        y = torch.randn(tokens, hidden, device=dev, dtype=dt)
        fn = lambda: F.silu(x) * y  # noqa: E731
        nbytes = 3 * tensor_bytes
    elif op == "add":
        y = torch.randn(tokens, hidden, device=dev, dtype=dt)
        fn = lambda: x + y  # noqa: E731
        nbytes = 3 * tensor_bytes
    else:
        raise ValueError(op)
    st = time_fn(fn, flush=flush)
    rec = dict(kind=op, tokens=tokens, hidden=hidden, dtype=dtype, bytes_min=nbytes, **st)
    log(f"  {op:9s} {tokens:6d}x{hidden:<6d} {st['time_s'] * 1e6:9.1f} us  {fmt_rate(nbytes / st['time_s'], 'B/s')}")
    return rec


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=330)
    ap.add_argument("--sections", default="copy,gemm,attention,elementwise,train")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()

    sections = args.sections.split(",")
    fr = {s: FRACTIONS[s] for s in sections}
    tot = sum(fr.values())
    fr = {s: v / tot for s, v in fr.items()}
    dl = common.Deadline(args.budget_s, fr)
    if common.on_cuda():
        torch.cuda.init()
    info = common.device_info(suite="kernels", sections=sections)
    log("info:", info)
    rec = common.Recorder(args.out, info)
    flush = common.Flusher()
    torch.manual_seed(0)
    t_start = time.time()

    def loop(name, cases, bench):
        dl.start_section(name)
        n_done = 0
        for c in cases:
            if not dl.ok(reserve_s=2):
                log(f"  budget reached in section {name}: {len(cases) - n_done} cases not run")
                rec.error(f"section {name}: budget reached, {len(cases) - n_done} cases not run")
                break
            run_case(rec, f"{name} {c}", lambda: bench(c))
            n_done += 1

    for sec in sections:
        if sec == "copy":
            loop("copy", copy_cases(args.small), lambda c: bench_copy(c, flush))
        elif sec == "gemm":
            loop("gemm", gemm_cases(args.small), lambda c: bench_gemm(*c, flush))
        elif sec == "attention":
            cases = attention_cases(args.small)
            both = [(c, bwd) for c in cases for bwd in (False, True)]
            loop("attention", both, lambda cb: bench_attention(cb[0], flush, cb[1]))
        elif sec == "elementwise":
            loop("elementwise", elem_cases(args.small), lambda c: bench_elem(*c, flush))
        elif sec == "train":
            dl.start_section("train")
            flush.buf = None
            common.free_memory()
            train_step.single_suite(rec, dl, small=args.small)
        else:
            raise SystemExit(f"unknown section {sec}")

    counts = {}
    for r in rec.records:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    log(f"done in {time.time() - t_start:.1f}s: {len(rec.records)} records {counts}; {len(rec.errors)} errors")
    for e in rec.errors:
        log("  error:", e)


if __name__ == "__main__":
    main()
