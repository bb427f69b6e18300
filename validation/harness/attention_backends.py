"""Attention backends, one kernel each: torch SDPA's FLASH_ATTENTION, CUDNN_ATTENTION,
EFFICIENT_ATTENTION and MATH, and Megatron-Core's local unfused pattern (``unfused_torch``),
forward and forward+backward, bf16, causal and not, GQA, head_dim 64/128, seq 512..16384.

    PYTHONUNBUFFERED=1 python3 validation/harness/attention_backends.py --out FILE --budget-s 200
    python3 validation/harness/attention_backends.py --dry-run      # list the cases; no torch, no GPU

Two sets of shapes (field ``set``): ``sweep`` (a grid chosen by hand) and ``random`` (a held-out
draw, seed RANDOM_SEED, never fitted). Every backend runs every shape. A backend that refuses a
shape (torch raises "No available kernel") is recorded with ``unsupported: true``, ``time_s: null``
and the ``reason`` torch gave; one that runs out of memory with ``oom: true``. Timing is
common.time_fn (L2 flushed before each call, two warm-ups, median of 5..50 calls); after each
case one NVML sample of the SM clock and temperature is kept (``sm_clock_mhz``, ``temperature_c``).

The case list, the shape rule and the time estimate are plain Python (no torch import), so
``--dry-run`` and the tests run on a machine without CUDA.
"""
from __future__ import annotations

import math
import os
import random
import sys
import time

RANDOM_SEED = 12
BUDGET_S = 240.0           # the most the section may take on one H200 (issue #12)
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64)
# SDPA backends in meshcast's names; unfused_torch is Megatron-Core's local DotProductAttention
# pattern (baddbmm, fp32 mask + softmax as separate kernels, bmm), not an SDPA backend
SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")
BACKENDS = SDPA_BACKENDS + ("unfused_torch",)
SLOW = ("math", "unfused_torch")          # materialise the score matrix: time ~ score elements
# score elements b*h*s^2 per case, by head_dim: sized so that flash forward takes ~1 ms and the
# math forward+backward <~100 ms on an H200 (h200_kernels.json: flash fwd ~300 TFLOP/s, math
# ~25 ps per score element forward, ~55 ps forward+backward)
SCORES = {128: 1.5e9, 64: 2.0e9}

# conservative rates for the time estimate (H200, from h200_kernels.json, rounded down)
EST_FLOPS = {"flash": 2.0e14, "cudnn": 2.0e14, "efficient": 1.0e14}   # forward FLOP/s incl. causal waste
EST_SCORE_S = {"math": 30e-12, "unfused_torch": 30e-12}                 # forward s per score element
EST_BWD_FACTOR = {"flash": 4.0, "cudnn": 4.0, "efficient": 4.5, "math": 2.4, "unfused_torch": 2.4}
EST_CASE_OVERHEAD_S = 0.12     # allocation, gc + empty_cache, probe call, NVML sample, host loop


def shape(seq: int, head_dim: int, group: int = 1, scores: float | None = None):
    """(batch, heads, kv_heads) for ``seq``: b*h*s^2 close to SCORES[head_dim] (or ``scores``);
    heads 16 (head_dim 128) or 32 (64) while the batch is >= 1, fewer at long sequences (at
    least ``group``, a multiple of it); ``group`` query heads share one KV head (GQA)."""
    bh = max(1, round((scores or SCORES[head_dim]) / seq ** 2))
    heads = 16 if head_dim == 128 else 32
    if bh < heads:
        heads = bh
    heads = max(group, heads // group * group)
    batch = max(1, round(bh / heads))
    return batch, heads, heads // group


def sweep_shapes():
    """The chosen grid: every seq x head_dim x causal, MHA; GQA (group 4, head_dim 128, causal)
    at 1024, 4096 and 16384."""
    out = []
    for seq in SEQS:
        for hd in HEAD_DIMS:
            for causal in (True, False):
                b, h, kv = shape(seq, hd)
                out.append(dict(set="sweep", seq=seq, head_dim=hd, causal=causal, batch=b, heads=h, kv_heads=kv))
    for seq in (1024, 4096, 16384):
        b, h, kv = shape(seq, 128, group=4)
        out.append(dict(set="sweep", seq=seq, head_dim=128, causal=True, batch=b, heads=h, kv_heads=kv))
    return out


def random_shapes(n: int = 14, seed: int = RANDOM_SEED, mqa: bool = False):
    """The held-out draw: seq log-uniform in 512..16384 (half multiples of 128, half of 8),
    head_dim 64 or 128, causal or not, GQA group 1/4/8 (1 half the time), score elements
    log-uniform in 0.5..1.2 x SCORES. ``mqa``: the same draw (the same random numbers) with one
    KV head for all the query heads of each shape (multi-query attention, Shazeer 2019)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seq = int(math.exp(rng.uniform(math.log(512), math.log(16384))))
        seq = max(512, seq // 128 * 128 if rng.random() < 0.5 else seq // 8 * 8)
        hd = rng.choice(HEAD_DIMS)
        causal = rng.random() < 0.5
        group = rng.choice((1, 1, 4, 8))
        scores = SCORES[hd] * math.exp(rng.uniform(math.log(0.5), math.log(1.2)))
        b, h, kv = shape(seq, hd, group=group, scores=scores)
        out.append(dict(set="random", seq=seq, head_dim=hd, causal=causal, batch=b, heads=h, kv_heads=1 if mqa else kv))
    return out


def small_shapes():
    return [dict(set="sweep", seq=128, head_dim=128, causal=True, batch=2, heads=4, kv_heads=4),
            dict(set="sweep", seq=128, head_dim=64, causal=False, batch=1, heads=4, kv_heads=2),
            dict(set="random", seq=96, head_dim=128, causal=False, batch=1, heads=2, kv_heads=2)]


def fresh_cases(seed: int, n: int = 28, mqa: bool = False):
    """A fresh-run protocol (issue #12: a separate, later run of never-seen shapes): ``n`` random
    shapes of draw ``seed`` on every backend, forward and forward+backward; Megatron's local
    pattern at head_dim 128 only (as in the sweep). Records keep ``set: random`` and carry the seed."""
    out = []
    for shp in random_shapes(n, seed, mqa):
        shp = dict(shp, seed=seed)
        for be in BACKENDS:
            if be == "unfused_torch" and shp["head_dim"] != 128:
                continue
            layout = "sbhd" if be == "unfused_torch" else "bshd"
            out += [dict(shp, backend=be, direction=d, layout=layout) for d in ("fwd", "fwd_bwd")]
    return out


# sequence lengths of the mask probe: multiples of 128 and lengths just past them (issue #12 session 41: the
# FlashAttention-2 forward, causal, at lengths no multiple of its key block, runs far slower than its tiles say)
MASK_PROBE_SEQS = (512, 520, 576, 640, 1024, 1032, 1088, 1152, 2048, 2056, 2112, 4096, 4104, 8192, 8200)


def mask_probe_cases(backends=("flash",)):
    """The mask probe (``set: mask_probe``): forward only, causal and not, head_dim 64 and 128, at
    MASK_PROBE_SEQS with b*h sized as the sweep (``shape``) at the multiple of 128 at or below each
    length, so lengths that differ by a few rows run the same grid of heads; one case per (backend, shape)."""
    out = []
    for d in HEAD_DIMS:
        for s in MASK_PROBE_SEQS:
            b, h, kv = shape(s - s % 128, d)          # the same heads as the multiple below it
            for causal in (True, False):
                for be in backends:
                    out.append(dict(batch=b, heads=h, kv_heads=kv, seq=s, head_dim=d, causal=causal,
                                    set="mask_probe", backend=be, direction="fwd", layout="bshd"))
    return out


def cases(small: bool = False):
    """Every (shape, backend, direction) as a dict; run order: the sweep on the fused backends,
    then the random set on the four SDPA backends, then flash and cuDNN on the head_dim-128 MHA
    sweep in the contiguous [b, h, s, d] layout (``layout: bhsd``; every other case ``bshd``: the
    [b, s, h, d] tensor a projection writes, transposed, as frameworks call SDPA), then the sweep on
    the slow (score-materialising)
    ones (unfused_torch at head_dim 128 only),
    so a run cut short by its budget loses the cheapest-to-lose cases."""
    shapes = small_shapes() if small else sweep_shapes() + random_shapes()

    def expand(shp, backends, layout="bshd"):
        return [dict(shp, backend=be, direction=d, layout=layout) for be in backends for d in ("fwd", "fwd_bwd")]

    sweep = [s for s in shapes if s["set"] == "sweep"]
    rand = [s for s in shapes if s["set"] == "random"]
    fast = [b for b in BACKENDS if b not in SLOW]
    out = []
    for s in sweep:
        out += expand(s, fast)
    for s in rand:
        out += expand(s, SDPA_BACKENDS)
    for s in sweep:                     # the contiguous layout kernels.py used, head_dim 128 MHA
        if s["head_dim"] == 128 and s["kv_heads"] == s["heads"]:
            out += expand(s, ("flash", "cudnn"), layout="bhsd")
    for s in sweep:
        out += expand(s, ("math",))
        if s["head_dim"] == 128:        # Megatron's local pattern: head_dim 128 sweep only (budget)
            out += expand(s, ("unfused_torch",), layout="sbhd")
    return out


def fwd_flops(c) -> float:
    """4*b*h*s^2*d, halved when causal (the informative ``flops`` of a forward)."""
    return 4.0 * c["batch"] * c["heads"] * c["seq"] ** 2 * c["head_dim"] * (0.5 if c["causal"] else 1.0)


def estimate_call_s(c) -> float:
    """Estimated seconds of one timed call on an H200 (conservative rates above)."""
    be = c["backend"]
    if be in EST_SCORE_S:
        t = c["batch"] * c["heads"] * c["seq"] ** 2 * EST_SCORE_S[be]
    else:
        t = fwd_flops(c) / EST_FLOPS[be] + 20e-6
    return t * (EST_BWD_FACTOR[be] if c["direction"] == "fwd_bwd" else 1.0)


def estimate_case_s(c, target_s: float = 0.03, warmup: int = 2, min_reps: int = 5, max_reps: int = 50) -> float:
    """Wall seconds of one case as common.time_fn runs it: a probe call, the warm-ups, the
    timed reps (sized to ~target_s of work), an L2 flush before each, plus fixed overhead."""
    t = estimate_call_s(c)
    reps = min(max_reps, max(min_reps, math.ceil(target_s / t)))
    flush_s = 0.3e-3       # 4x L2 (240 MiB) written at ~1 TB/s, plus its launch
    return EST_CASE_OVERHEAD_S + (1 + warmup + reps) * (t + flush_s)


def estimate_total_s(cs=None) -> float:
    return sum(estimate_case_s(c) for c in (cases() if cs is None else cs))


def label(c) -> str:
    return (f"{c['set']:6s} {c.get('layout', 'bshd')} {c['backend']:13s} {c['direction']:7s} b{c['batch']:<4d} h{c['heads']}/{c['kv_heads']:<3d}"
            f" s{c['seq']:<6d} d{c['head_dim']} causal={int(c['causal'])}")


# --------------------------------------------------------------------------- GPU part (torch)

def _sdpa_backend(name):
    from torch.nn.attention import SDPBackend
    attr = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "math": "MATH"}[name]
    return getattr(SDPBackend, attr, None)


def build_forward(c, q, k, v):
    """The forward call of case ``c`` on q [b, h, s, d], k and v [b, kv, s, d]: SDPA restricted
    to the case's backend, or Megatron-Core's local pattern for ``unfused_torch``."""
    import torch
    import torch.nn.functional as F
    b, h, kv, s, d = c["batch"], c["heads"], c["kv_heads"], c["seq"], c["head_dim"]
    dev, dt = q.device, q.dtype
    if c["backend"] == "unfused_torch":
        # Megatron-Core DotProductAttention (megatron/core/transformer/dot_product_attention.py) with
        # FusedScaleMaskSoftmax's torch fallback: inputs [s, b, heads, d] (layout sbhd; here the
        # views q/k/v [b, heads, s, d] of such storage), GQA keys/values repeat_interleave'd to every
        # head, scores = baddbmm(empty, q, k^T, beta=0, alpha=1/sqrt(d)) over [b*heads, s, s],
        # .float(), causal masked_fill_(-10000) in place, fp32 softmax, back to bf16, bmm with v, and the
        # context made contiguous as [s, b, heads*d]
        scale = 1.0 / math.sqrt(d)
        mask = torch.triu(torch.ones(s, s, device=dev, dtype=torch.bool), 1) if c["causal"] else None

        def fwd():
            qs, ks, vs = (t.permute(2, 0, 1, 3) for t in (q, k, v))       # [s, b, heads, d] views
            if kv != h:
                ks = ks.repeat_interleave(h // kv, dim=2)
                vs = vs.repeat_interleave(h // kv, dim=2)
            qf = qs.reshape(s, b * h, d).transpose(0, 1)                    # [b*h, s, d], no copy
            kf = ks.reshape(s, b * h, d).transpose(0, 1)
            vf = vs.reshape(s, b * h, d).transpose(0, 1)
            buf = torch.empty(b * h, s, s, device=dev, dtype=dt)
            scores = torch.baddbmm(buf, qf, kf.transpose(1, 2), beta=0.0, alpha=scale).float()
            if mask is not None:
                scores.masked_fill_(mask, -10000.0)          # in place, as attention_mask_func
            p = torch.softmax(scores, dim=-1).to(dt)
            ctx = torch.bmm(p, vf).view(b, h, s, d)
            return ctx.permute(2, 0, 1, 3).contiguous()                     # [s, b, heads, d]
    else:
        from torch.nn.attention import sdpa_kernel
        be = _sdpa_backend(c["backend"])
        if be is None:
            raise Unsupported(f"torch {torch.__version__} has no SDPBackend for {c['backend']}")
        kw = dict(is_causal=c["causal"])
        if kv != h:
            kw["enable_gqa"] = True

        def fwd():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, **kw)
    return fwd


def make_call(c, dev, dt):
    """(fn, setup) for one case; fn runs the forward (under no_grad) or forward+backward."""
    import torch
    b, h, kv, s, d = c["batch"], c["heads"], c["kv_heads"], c["seq"], c["head_dim"]
    bwd = c["direction"] == "fwd_bwd"
    layout = c.get("layout", "bshd")
    perm = {"bshd": (b, s, None, d), "sbhd": (s, b, None, d), "bhsd": (b, None, s, d)}[layout]

    def mk(heads):
        """[b, heads, s, d] view of storage in ``layout``: bshd is the [b, s, heads, d] output of a
        projection transposed, as frameworks call SDPA; sbhd Megatron's [s, b, heads, d]; bhsd the
        contiguous tensor kernels.py's attention section used."""
        size = tuple(heads if x is None else x for x in perm)
        t = torch.randn(*size, device=dev, dtype=dt)
        if layout == "bshd":
            t = t.transpose(1, 2)
        elif layout == "sbhd":
            t = t.permute(1, 2, 0, 3)
        return t.requires_grad_(bwd)

    q, k, v = mk(h), mk(kv), mk(kv)
    g = None
    if bwd:
        g = mk(h).detach()
        if c["backend"] == "unfused_torch":                                 # its output is [s, b, h, d]
            g = g.permute(2, 0, 1, 3)
    import common
    return common.attention_pass(build_forward(c, q, k, v), g, (q, k, v), bwd)


class Unsupported(Exception):
    pass


def probe(fn, setup):
    """One untimed call. Any error other than out-of-memory here means the backend cannot run
    the shape: it becomes Unsupported with torch's reasons (the warnings SDPA emits for each
    failed check, e.g. "Flash attention kernel not used because ...", then the error: on CUDA
    "No available kernel. Aborting execution.", on CPU "No viable backend ...", or a cuDNN
    frontend error such as "No execution plans support the graph")."""
    import warnings
    import common
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if setup is not None:
                setup()
            fn()
        except Exception as exc:  # noqa: BLE001
            if common.is_oom(exc):
                raise
            why = []
            for w in caught:
                m = " ".join(str(w.message).split())
                if m not in why and not issubclass(w.category, (DeprecationWarning, FutureWarning)):
                    why.append(m)
            raise Unsupported("; ".join(why + [f"{type(exc).__name__}: {' '.join(str(exc).split())}"])) from None


def run_case(c, flush, nvml, rec, profile: bool = False):
    import torch
    import common
    dev = common.device()
    dt = torch.bfloat16 if common.on_cuda() else torch.float32
    base = dict(kind="attention_fwd_bwd" if c["direction"] == "fwd_bwd" else "attention_fwd",
                batch=c["batch"], heads=c["heads"], seq=c["seq"], head_dim=c["head_dim"], causal=c["causal"],
                backend=c["backend"], dtype="bfloat16" if dt == torch.bfloat16 else "float32", set=c["set"],
                layout=c.get("layout", "bshd"))
    if c["kv_heads"] != c["heads"]:
        base["kv_heads"] = c["kv_heads"]
    if c["backend"] == "unfused_torch":
        base["mask_inplace"] = True        # since session 12 (before: out of place, an extra clone)
    flops = fwd_flops(c) * (3.0 if c["direction"] == "fwd_bwd" else 1.0)
    try:
        fn, setup = make_call(c, dev, dt)
        probe(fn, setup)
        st = common.time_fn(fn, flush=flush, setup=setup)
        if profile and common.on_cuda():
            st.update(common.kernel_times(fn, flush=flush, setup=setup))
    except Unsupported as exc:
        r = dict(base, time_s=None, unsupported=True, reason=common.short_exc(exc, 600).replace("Unsupported: ", ""))
        common.log(f"  {label(c)}  unsupported: {r['reason'][:160]}")
        rec.add(r)
        return
    except Exception as exc:  # noqa: BLE001
        if common.is_oom(exc):
            r = dict(base, time_s=None, oom=True, error=common.short_exc(exc))
            common.log(f"  {label(c)}  OOM")
            rec.add(r)
            return
        raise
    finally:
        fn = setup = None
        common.free_memory()
    r = dict(base, flops=flops, **st)
    common.add_nvml_sample(r, nvml)
    rec.add(r)
    common.log(f"  {label(c)}  {st['time_s'] * 1e3:9.3f} ms  {common.fmt_rate(flops / st['time_s'], 'FLOP/s')}")


def default_choices():
    """The backend SDPA picks by itself (no sdpa_kernel) on this GPU and torch for a few bf16 shapes,
    in meshcast's names (torch._fused_sdp_choice; SDPBackend values)."""
    import torch
    import common
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
    out = {}
    if not common.on_cuda():
        return out
    for hd in HEAD_DIMS:
        for causal in (True, False):
            for bwd in (False, True):
                try:
                    q = torch.randn(2, 2048, 16, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                    q.requires_grad_(bwd)
                    choice = int(torch._fused_sdp_choice(q, q, q, is_causal=causal))
                    out[f"d{hd}_causal{int(causal)}_{'train' if bwd else 'inference'}"] = names.get(choice, choice)
                except Exception as exc:  # noqa: BLE001
                    out[f"d{hd}_causal{int(causal)}"] = common.short_exc(exc, 120)
    return out


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import suite_parser
    ap = suite_parser(__doc__, 200.0, "three tiny shapes (CPU code-path check)",
                      "list the cases and the time estimate; no torch")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated subset of " + ",".join(BACKENDS) + " (e.g. cuDNN in its own process)")
    ap.add_argument("--fresh-seed", type=int, default=None,
                    help="fresh-run protocol: only a random draw of this seed, on every backend (fresh_cases)")
    ap.add_argument("--fresh-n", type=int, default=28,
                    help="shapes in the --fresh-seed draw (default 28)")
    ap.add_argument("--mqa", action="store_true",
                    help="with --fresh-seed: every shape with one KV head (multi-query attention)")
    ap.add_argument("--mask-probe", action="store_true",
                    help="only the mask probe (mask_probe_cases): forward, causal and not, at sequence lengths "
                         "just past multiples of 128, on the chosen backends")
    ap.add_argument("--profile", action="store_true",
                    help="also profile each timed case (torch.profiler, 3 more calls): every kernel's device "
                         "seconds per call (diagnosis of a composite such as unfused_torch, kernel by kernel)")
    args = ap.parse_args()
    chosen = args.backends.split(",")
    bad = [b for b in chosen if b not in BACKENDS]
    if bad:
        raise SystemExit(f"unknown backend(s) {bad}; choose from {BACKENDS}")
    if args.fresh_n < 1:
        raise SystemExit(f"--fresh-n must be at least 1, got {args.fresh_n}")
    if args.mqa and args.fresh_seed is None:
        raise SystemExit("--mqa needs --fresh-seed")
    if args.mask_probe and (args.fresh_seed is not None or args.small):
        raise SystemExit("--mask-probe runs its own case list: leave out --fresh-seed and --small")
    if args.mask_probe:
        every = mask_probe_cases(tuple(b for b in chosen if b in SDPA_BACKENDS))
    elif args.fresh_seed is not None:
        every = fresh_cases(args.fresh_seed, args.fresh_n, args.mqa)
    else:
        every = cases(args.small)
    cs = [c for c in every if c["backend"] in chosen]
    if args.dry_run:
        for c in cs:
            print(f"{label(c)}  est {estimate_case_s(c):6.3f} s")
        n_sets = {s: sum(1 for c in cs if c["set"] == s) for s in dict.fromkeys(c["set"] for c in cs)}
        print(f"{len(cs)} cases {n_sets}; estimated {estimate_total_s(cs):.0f} s on one H200 (limit {BUDGET_S:.0f} s)")
        return
    if not args.out:
        raise SystemExit("--out FILE is required (or --dry-run)")

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import common
    nvml = None
    try:
        from nvml import Nvml
        nvml = Nvml(0) if common.on_cuda() else None
        if nvml is not None and nvml.h is None:
            nvml = None
    except Exception as exc:  # noqa: BLE001
        common.log("  NVML sampling off:", common.short_exc(exc))
    if common.on_cuda():
        torch.cuda.init()
    import torch.backends.cudnn as cudnn
    from torch.nn.attention import SDPBackend
    info = common.device_info(suite="attention_backends",
                              random_seed=RANDOM_SEED if args.fresh_seed is None else args.fresh_seed, backends=chosen,
                              fresh_n=args.fresh_n if args.fresh_seed is not None else None, mqa=args.mqa,
                              profiled=args.profile,
                              cudnn=cudnn.version() if cudnn.is_available() else None,
                              sdpa_backends=sorted(SDPBackend.__members__),
                              timing="common.time_fn: L2 flush before each call, 2 warm-ups, median of 5..50 calls",
                              estimated_s=round(estimate_total_s(cs), 1))
    info["sdpa_default"] = default_choices()
    if nvml is not None:
        info["nvml"] = nvml.static()
    common.log("info:", info)
    rec, flush, dl = common.start_seeded_run(args.out, info, args.budget_s, "attention_backends")
    t0 = time.time()
    common.run_within_budget(cs, dl, rec, lambda c: run_case(c, flush, nvml, rec, args.profile), label)
    counts = {}
    for r in rec.records:
        key = (r["backend"], "unsupported" if r.get("unsupported") else "oom" if r.get("oom") else "timed")
        counts[key] = counts.get(key, 0) + 1
    common.log(f"done in {time.time() - t0:.1f} s: {len(rec.records)} records; {len(rec.errors)} errors")
    for k in sorted(counts):
        common.log(f"  {k[0]:13s} {k[1]:11s} {counts[k]}")
    for e in rec.errors:
        common.log("  error:", e)


if __name__ == "__main__":
    main()
