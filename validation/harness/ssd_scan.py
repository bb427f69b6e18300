"""The Mamba-2 SSD chunked scan as Megatron-Core runs it: mamba_ssm's ``mamba_chunk_scan_combined``
(Triton kernels of mamba_ssm/ops/triton/ssd_*.py), forward and forward+backward, bf16, at the
Nemotron 3 Nano / Super / Ultra mixer shapes under tp 1/2/4/8 and on a seeded random held-out set.

    sh validation/harness/stage_mamba_ssd.sh MAMBA_GIT_DIR .devrun/mamba_src     # once, on any machine
    PYTHONUNBUFFERED=1 python3 validation/harness/ssd_scan.py --mamba-src .devrun/mamba_src --out FILE --budget-s 200
    python3 validation/harness/ssd_scan.py --dry-run      # list the cases and the time estimate; no torch, no GPU

mamba_ssm is not installed: ``--mamba-src DIR`` names a directory holding a minimal ``mamba_ssm``
package tree with only the files ssd_combined.py imports (stage_mamba_ssd.sh writes it from a git
mirror, with the commit in DIR/MAMBA_COMMIT); its SSD ops are pure Python + Triton + einops.

The call (Megatron-Core ``MambaMixer``, megatron/core/ssm/mamba_mixer.py): x ``[b, s, h, p]``, dt
``[b, s, h]`` and B, C ``[b, s, g, n]`` bf16 and contiguous, A = -exp(A_log) fp32 ``[h]``, D fp32
``[h]``, dt_bias fp32 ``[h]``, ``dt_softplus=True``, the model's chunk size; states in the
activation dtype (``state_dtype`` left unset, as Megatron's ``mamba_training_ssm_states_dtype``
default). ``gate: true`` passes z ``[b, s, h, p]`` too: what the scan runs inside Megatron-Core's
default training path (``use_mamba_mem_eff_path``: mamba_split_conv1d_scan_combined, which needs
the causal-conv1d CUDA extension and so is not timed whole); ``gate: false`` is the
``mamba_chunk_scan_combined`` call of the non-fused path (z applied by the RMSNorm after).
Forward+backward: the output's backward with a random gradient; gradients of x, dt, A, B, C, D,
dt_bias (and z) are computed, as for Megatron's parameters and activations.

Sets (field ``set``): ``sweep`` (chosen by hand: every model x tp's local heads and groups, at
(seq, batch) in SWEEP_SEQ_BATCH) and ``random`` (RANDOM_N shapes drawn with ``seed``: local heads,
groups, seq and batch; held out, never fitted). P, N and Q stay Nemotron 3's (64, 128, 128) in both
sets: every other value triggers a fresh Triton autotune of every kernel (~200 configs to compile).
Timing is common.time_fn (L2 flushed before each call, two warm-ups, median of 5..50 calls). Before
the timed cases, one untimed call per (gate, direction) runs Triton's autotuning and compilation;
its wall time is kept in ``info.autotune_seconds``. A case that runs out of memory is recorded with
``oom: true`` and ``time_s: null``; any other failure with ``ran: false`` and the ``error``.

The case list, the estimate and ``--dry-run`` are plain Python (no torch import).
"""
from __future__ import annotations

import math
import os
import random
import sys
import time

BUDGET_S = 200.0            # the most the run may take on one H200
RANDOM_SEED = 41
RANDOM_N = 20
# Nemotron 3 mixers (models/catalog/nemotron-3-*.yaml, mamba:): heads, groups; P, N, Q shared
MODELS = {"nano": (64, 8), "super": (128, 8), "ultra": (256, 8)}
HEAD_DIM, STATE, CHUNK = 64, 128, 128
TPS = (1, 2, 4, 8)
SWEEP_SEQ_BATCH = ((1024, 1), (1024, 8), (4096, 1), (4096, 2), (8192, 1), (16384, 1))
DIRECTIONS = ("fwd", "fwd_bwd")

# conservative rates for the time estimate (H200): the scan at 1/4 of the bf16 GEMM rate and half
# of HBM's; 15 us per kernel; backward ~2.5x the forward
EST_FLOPS, EST_BPS, EST_KERNEL_S, EST_BWD_FACTOR = 1.5e14, 2.4e12, 15e-6, 2.5
EST_CASE_OVERHEAD_S = 0.12    # allocation, gc + empty_cache, host loop
EST_AUTOTUNE_S = 90.0         # Triton autotune + compile of the forward and backward kernels, cold cache


def local_dims(model: str, tp: int) -> tuple[int, int]:
    """(heads, groups) of one tensor-parallel rank of ``model``'s mixer (Megatron-Core shards both)."""
    h, g = MODELS[model]
    return h // tp, g // tp


def _case(set_, batch, seq, heads, groups, gate=True, **extra):
    return dict(set=set_, batch=batch, seq=seq, heads=heads, head_dim=HEAD_DIM, groups=groups, state=STATE,
                chunk=CHUNK, gate=gate, **extra)


def sweep_shapes() -> list[dict]:
    """Every model x tp at every (seq, batch) of SWEEP_SEQ_BATCH, gated; and the ungated call of
    Super at each tp at 4096 x 1."""
    out = []
    for model in MODELS:
        for tp in TPS:
            h, g = local_dims(model, tp)
            for seq, b in SWEEP_SEQ_BATCH:
                out.append(_case("sweep", b, seq, h, g, model=model, tp=tp))
    for tp in TPS:
        h, g = local_dims("super", tp)
        out.append(_case("sweep", 1, 4096, h, g, gate=False, model="super", tp=tp))
    return out


def random_shapes(n: int = RANDOM_N, seed: int = RANDOM_SEED) -> list[dict]:
    """The held-out draw: local heads a multiple of 8 in 8..256 (log-uniform), groups 1/2/4/8
    dividing the heads, seq log-uniform in 1024..16384 (half multiples of 8 only, so the last
    chunk is partial), batch 1/2/4 with at most 32768 tokens; gated, as Megatron's default path."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        heads = 8 * max(1, round(math.exp(rng.uniform(math.log(8), math.log(256))) / 8))
        groups = rng.choice([g for g in (1, 2, 4, 8) if heads % g == 0])
        seq = int(math.exp(rng.uniform(math.log(1024), math.log(16384))))
        seq = max(1024, seq // 128 * 128 if rng.random() < 0.5 else seq // 8 * 8)
        batch = rng.choice([b for b in (1, 2, 4) if b * seq <= 32768] or [1])
        out.append(_case("random", batch, seq, heads, groups, seed=seed))
    return out


def small_shapes() -> list[dict]:
    return [_case("sweep", 1, 256, 8, 1), _case("sweep", 2, 256, 8, 2, gate=False),
            _case("random", 1, 200, 8, 1, seed=RANDOM_SEED)]


def cases(small: bool = False, seed: int = RANDOM_SEED, random_only: bool = False, random_n: int = RANDOM_N) -> list[dict]:
    """Every (shape, direction): the sweep, then the random set of ``random_n`` shapes (the
    random set alone with ``random_only``: a fresh held-out draw), each shape forward then
    forward+backward."""
    draw = random_shapes(random_n, seed)
    shapes = small_shapes() if small else draw if random_only else sweep_shapes() + draw
    return [dict(s, direction=d) for s in shapes for d in DIRECTIONS]


def estimate_call_s(c) -> float:
    """Estimated seconds of one call on an H200: a roofline at the conservative rates above over the
    dominant FLOPs (2QNG + 2QPH + 4NPH per token) and bytes (x, B, C, y, z, the fp32/bf16 chunk states)."""
    b, s, h, p, g, n, q = c["batch"], c["seq"], c["heads"], c["head_dim"], c["groups"], c["state"], c["chunk"]
    tokens, chunks = b * s, b * -(-s // q)
    flops = tokens * (2 * q * n * g + 2 * q * p * h + 4 * n * p * h)
    nbytes = tokens * (2 * h * p * (4 if c["gate"] else 3) + 8 * g * n + 8 * q * g) + 12 * chunks * h * n * p
    t = max(flops / EST_FLOPS, nbytes / EST_BPS) + 5 * EST_KERNEL_S
    return t * (1 + EST_BWD_FACTOR) if c["direction"] == "fwd_bwd" else t


def estimate_case_s(c, target_s: float = 0.03, warmup: int = 2, min_reps: int = 5, max_reps: int = 50) -> float:
    t = estimate_call_s(c)
    reps = min(max_reps, max(min_reps, math.ceil(target_s / t)))
    flush_s = 0.3e-3
    return EST_CASE_OVERHEAD_S + (warmup + reps) * (t + flush_s)


def estimate_total_s(cs=None) -> float:
    """Estimated wall seconds of a run: the autotune allowance plus every case."""
    cs = cases() if cs is None else cs
    return EST_AUTOTUNE_S + sum(estimate_case_s(c) for c in cs)


def label(c) -> str:
    return (f"{c['set']:6s} {c['direction']:7s} b{c['batch']:<2d} s{c['seq']:<6d} h{c['heads']:<4d} p{c['head_dim']}"
            f" g{c['groups']} n{c['state']} q{c['chunk']} gate={int(c['gate'])}"
            + (f" ({c['model']} tp{c['tp']})" if "model" in c else ""))


# --------------------------------------------------------------------------- GPU part (torch)

def import_mamba(src: str):
    """mamba_chunk_scan_combined from the staged tree ``src`` (stage_mamba_ssd.sh) and its commit."""
    pkg = os.path.join(src, "mamba_ssm", "ops", "triton", "ssd_combined.py")
    if not os.path.exists(pkg):
        raise SystemExit(f"{src} holds no mamba_ssm/ops/triton/ssd_combined.py: stage it with "
                         f"validation/harness/stage_mamba_ssd.sh")
    sys.path.insert(0, os.path.abspath(src))
    _ensure_packaging()
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    commit = None
    path = os.path.join(src, "MAMBA_COMMIT")
    if os.path.exists(path):
        with open(path) as f:
            commit = f.read().strip()
    return mamba_chunk_scan_combined, commit


def _ensure_packaging():
    """mamba_ssm compares Triton versions with ``packaging.version``; where the machine lacks the
    package, a stand-in module with ``parse`` (numeric release tuples) is registered instead."""
    try:
        import packaging.version  # noqa: F401
        return
    except ImportError:
        pass
    import re
    import types

    def parse(v):
        return tuple(int(x) for x in re.findall(r"\d+", str(v).split("+")[0])[:3])
    mod = types.ModuleType("packaging.version")
    mod.parse = parse
    pkg = types.ModuleType("packaging")
    pkg.version = mod
    sys.modules["packaging"], sys.modules["packaging.version"] = pkg, mod


def make_call(c, scan):
    """(fn, setup) for one case: the forward under no_grad, or forward + backward."""
    import torch
    import common
    dev, bf = common.device(), torch.bfloat16
    b, s, h, p, g, n = c["batch"], c["seq"], c["heads"], c["head_dim"], c["groups"], c["state"]
    bwd = c["direction"] == "fwd_bwd"

    def t(*shape, dtype=bf, scale=1.0):
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dtype).requires_grad_(bwd)

    x, dt = t(b, s, h, p), t(b, s, h, scale=0.5)
    B, C = t(b, s, g, n), t(b, s, g, n)
    z = t(b, s, h, p) if c["gate"] else None
    A = (-torch.empty(h, device=dev).uniform_(1.0, 16.0)).requires_grad_(bwd)
    D = torch.ones(h, device=dev).requires_grad_(bwd)
    dt_bias = torch.empty(h, device=dev).uniform_(-6.0, -2.0).requires_grad_(bwd)
    inputs = [x, dt, A, B, C, D, dt_bias] + ([z] if z is not None else [])

    def fwd():
        return scan(x, dt, A, B, C, c["chunk"], D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    grad = torch.randn(b, s, h, p, device=dev, dtype=bf) if bwd else None
    return common.attention_pass(fwd, grad, inputs, bwd)


def record_of(c) -> dict:
    """The record fields of case ``c`` before it is timed (validation.prereg predicts these)."""
    return dict(c, kind="ssd_scan", dtype="bfloat16", state_dtype="bfloat16", layout="contiguous")


def run_case(c, scan, flush, rec):
    import common
    base = record_of(c)
    try:
        fn, setup = make_call(c, scan)
        st = common.time_fn(fn, flush=flush, setup=setup)
    except Exception as exc:  # noqa: BLE001
        oom = common.is_oom(exc)
        r = dict(base, time_s=None, ran=False, error=common.short_exc(exc))
        if oom:
            r["oom"] = True
        common.log(f"  {label(c)}  {'OOM' if oom else 'FAILED: ' + r['error'][:160]}")
        rec.add(r)
        return
    finally:
        fn = setup = None
        common.free_memory()
    rec.add(dict(base, ran=True, **st))
    common.log(f"  {label(c)}  {st['time_s'] * 1e3:9.3f} ms  (est {estimate_call_s(c) * 1e3:8.3f})")


def autotune(scan, cs, flush) -> dict:
    """One untimed call per (gate, direction) at the smallest case of each, so Triton's autotuning
    and compilation happen outside the timed calls; wall seconds of each."""
    import torch
    import common
    out = {}
    for gate in (True, False):
        for d in DIRECTIONS:
            sub = [c for c in cs if c["gate"] == gate and c["direction"] == d]
            if not sub:
                continue
            c = min(sub, key=lambda c: c["batch"] * c["seq"] * c["heads"])
            t0 = time.time()
            try:
                fn, setup = make_call(c, scan)
                if setup:
                    setup()
                fn()
                torch.cuda.synchronize() if common.on_cuda() else None
            except Exception as exc:  # noqa: BLE001
                common.log(f"  autotune {label(c)} failed: {common.short_exc(exc)}")
            fn = setup = None
            common.free_memory()
            out[f"gate{int(gate)}_{d}"] = round(time.time() - t0, 2)
            common.log(f"  autotune gate={int(gate)} {d}: {out[f'gate{int(gate)}_{d}']} s")
    return out


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import suite_parser
    ap = suite_parser(__doc__, BUDGET_S, "three tiny shapes (code-path check)", "list the cases and the time estimate; no torch")
    ap.add_argument("--mamba-src", help="directory with the staged mamba_ssm tree (stage_mamba_ssd.sh)")
    ap.add_argument("--seed", type=int, default=RANDOM_SEED, help="seed of the random held-out draw")
    ap.add_argument("--random-n", type=int, default=RANDOM_N, help="shapes in the random draw")
    ap.add_argument("--random-only", action="store_true", help="time the random draw only, not the sweep")
    args = ap.parse_args()
    cs = cases(args.small, args.seed, args.random_only, args.random_n)
    if args.dry_run:
        for c in cs:
            print(f"{label(c)}  est {estimate_case_s(c):6.3f} s")
        n_sets = {s: sum(1 for c in cs if c["set"] == s) for s in ("sweep", "random")}
        print(f"{len(cs)} cases {n_sets}; estimated {estimate_total_s(cs):.0f} s on one H200 "
              f"(incl. {EST_AUTOTUNE_S:.0f} s autotune; limit {BUDGET_S:.0f} s)")
        return
    if not args.out or not args.mamba_src:
        raise SystemExit("--out FILE and --mamba-src DIR are required (or --dry-run)")

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import common
    if not common.on_cuda():
        raise SystemExit("the SSD scan's Triton kernels need a CUDA GPU")
    scan, commit = import_mamba(args.mamba_src)
    import triton
    import einops
    info = common.device_info(suite="ssd_scan", random_seed=args.seed, random_n=args.random_n,
                              random_only=args.random_only, mamba_commit=commit,
                              triton=triton.__version__, einops=einops.__version__,
                              call="mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined",
                              timing="common.time_fn: L2 flush before each call, 2 warm-ups, median of 5..50 calls",
                              estimated_s=round(estimate_total_s(cs), 1))
    rec, flush, dl = common.start_seeded_run(args.out, info, args.budget_s, "ssd_scan")
    t0 = time.time()
    info["autotune_seconds"] = autotune(scan, cs, flush)
    rec.flush()
    common.run_within_budget(cs, dl, rec, lambda c: run_case(c, scan, flush, rec), label)
    ran = sum(1 for r in rec.records if r.get("ran"))
    oom = sum(1 for r in rec.records if r.get("oom"))
    common.log(f"done in {time.time() - t0:.1f} s: {len(rec.records)} records ({ran} timed, {oom} OOM); "
               f"{len(rec.errors)} errors")
    for e in rec.errors:
        common.log("  error:", e)


if __name__ == "__main__":
    main()
