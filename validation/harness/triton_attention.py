"""llm-foundry's Triton FlashAttention (MPT's ``attn_impl: triton``) beside SDPA's FlashAttention-2,
and the tensor-core rate a Triton kernel reaches with and without Hopper's WGMMA (issue #12).

    sh validation/harness/stage_llmfoundry_triton_fa.sh /work/.mirror/mosaicml+llm-foundry/repo .devrun/llmf_triton
    TRITON_CACHE_DIR=.devrun/tc_v2 DISABLE_MMA_V3=1 python3 validation/harness/triton_attention.py \
        --llmf-src .devrun/llmf_triton --mma v2 --budget-s 200 --out t.json
    python3 validation/harness/triton_attention.py --dry-run        # the cases; no torch, no GPU

Why: llm-foundry's MPT benchmarks (validation/published, section "H100 80GB BF16") ran attention with
``flash_attn_triton.py`` compiled by the triton-pre-mlir fork, whose code generator knows only the
sm80 ``mma.sync`` instructions, so on a Hopper GPU the kernel never uses WGMMA. Today's Triton
compiles the same source to WGMMA on Hopper unless ``DISABLE_MMA_V3=1`` (Triton's switch back to
``mma.sync``); ``--mma v2`` records runs with it set (the file's ``info.triton_mma``), and the PTX
in the Triton cache is searched for ``wgmma`` after the run (``info.triton_wgmma``: kernel name ->
whether its PTX holds a WGMMA) so the file says what actually ran.

Cases (causal, MHA, bf16, q/k/v ``[b, s, h, d]`` as MPT passes them):

* ``mpt``: the per-GPU attention shapes of the llm-foundry H100 rows (micro-batch, heads, sequence,
  head_dim 128 / 64), and ``sweep``: seq 512..65536 at head_dim 64 and 128 with b*h*s^2 ~ 1.5e9;
  each shape on ``triton_fa`` (the staged kernel, ``flash_attn_func``) and ``flash`` (SDPA
  FLASH_ATTENTION on the same tensors transposed to [b, h, s, d] views), forward and forward+backward;
* ``random`` (``--fresh-seed SEED``, instead of the two above): a fresh draw of shapes no fit has seen
  (random_shapes), registered before it runs (validation/prereg_attention.py --harness triton_attention);
* ``mma_peak``: an 8192^3 bf16 matmul by a plain Triton kernel (this file's, several tile configs)
  and by cuBLAS (torch.matmul): kind ``mma_peak`` with ``config``, ``time_s`` and ``flops``; the best
  Triton config under ``--mma v2`` bounds the sm80 ``mma.sync`` rate of the GPU from below.

Timing: common.time_fn (L2 flushed before each call, two warm-ups, median of 5..50 calls); the
backward kernel's autotuning (two configs: with and without sequence parallelism) happens in the probe
call, outside the timing.
"""
from __future__ import annotations

import glob
import math
import os
import sys
import time

# (model, micro_batch, heads, seq, head_dim): llm-foundry H100 BF16 rows (validation/published/
# published_runs_more.csv) and MPTConfig n_heads / d_model of each size (llm-foundry yamls)
MPT_SHAPES = (
    ("mpt-1b", 1, 16, 32768, 128), ("mpt-1b", 2, 16, 16384, 128), ("mpt-1b", 7, 16, 4096, 128),
    ("mpt-1b", 18, 16, 1024, 128), ("mpt-1b", 56, 16, 512, 128),
    ("mpt-3b", 1, 20, 16384, 128), ("mpt-3b", 3, 20, 8192, 128), ("mpt-3b", 5, 20, 4096, 128),
    ("mpt-3b", 20, 20, 1024, 128), ("mpt-760m", 3, 12, 16384, 128), ("mpt-760m", 24, 12, 2048, 128),
    ("mpt-7b", 1, 32, 65536, 128), ("mpt-7b", 2, 32, 32768, 128), ("mpt-7b", 64, 32, 1024, 128),
    ("mpt-13b", 1, 40, 32768, 128), ("mpt-13b", 10, 40, 4096, 128), ("mpt-30b", 1, 56, 4096, 128),
    ("mpt-30b", 6, 56, 1024, 128), ("mpt-350m", 8, 16, 4096, 64), ("mpt-125m", 16, 12, 4096, 64),
)
SWEEP_SEQS = (512, 2048, 8192, 32768)
SWEEP_SCORES = 1.5e9
BACKENDS = ("triton_fa", "flash")
MATMUL_CONFIGS = ((128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
                  (128, 128, 32, 4, 4))          # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
PEAK_MNK = 8192
EST_FWD_FLOPS = 1.5e14      # conservative forward rate for the estimate, FLOP/s (causal FLOPs)
EST_BWD_FACTOR = 4.0
RANDOM_SCORES = (2e8, 3e9)  # batch x heads x seq^2 of a random shape, log-uniform between these


def attention_shapes():
    """Every attention shape as a dict (set ``mpt`` then ``sweep``)."""
    out = [dict(set="mpt", model=m, batch=b, heads=h, seq=s, head_dim=d) for m, b, h, s, d in MPT_SHAPES]
    for d in (128, 64):
        for s in SWEEP_SEQS:
            bh = max(1, round(SWEEP_SCORES / s ** 2))
            heads = min(bh, 16)
            out.append(dict(set="sweep", batch=max(1, round(bh / heads)), heads=heads, seq=s, head_dim=d))
    return out


def cases():
    """(shape, backend, direction) dicts, MPT shapes first (the budget cuts the sweep first)."""
    return [dict(shp, backend=be, direction=dr, causal=True, kv_heads=shp["heads"], layout="bshd")
            for shp in attention_shapes() for be in BACKENDS for dr in ("fwd", "fwd_bwd")]


def random_shapes(n: int, seed: int) -> list[dict]:
    """A fresh draw (issue #12: shapes no fit has seen): seq log-uniform in 512..32768 in multiples
    of 128 (MPT trains at such lengths; the kernel's unmasked EVEN_M / EVEN_N path), head_dim 64 or
    128 (the kernel's two compiled sizes that MPT uses), heads log-uniform in 1..64, and batch
    so that batch x heads x seq^2 is log-uniform in RANDOM_SCORES; causal MHA only, as MPT calls it."""
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seq = max(512, int(math.exp(rng.uniform(math.log(512), math.log(32768)))) // 128 * 128)
        hd = rng.choice((64, 128))
        heads = max(1, int(math.exp(rng.uniform(0.0, math.log(64)))))
        scores = math.exp(rng.uniform(*(math.log(x) for x in RANDOM_SCORES)))
        batch = max(1, round(scores / (heads * seq * seq)))
        out.append(dict(set="random", batch=batch, heads=heads, seq=seq, head_dim=hd))
    return out


def fresh_cases(seed: int, n: int = 40) -> list[dict]:
    """The cases of fresh draw ``seed``: ``n`` random shapes (random_shapes) on both backends,
    forward and forward+backward; records keep ``set: random`` and the seed (validation.prereg_attention
    registers them before the run)."""
    return [dict(shp, seed=seed, backend=be, direction=dr, causal=True, kv_heads=shp["heads"], layout="bshd")
            for shp in random_shapes(n, seed) for be in BACKENDS for dr in ("fwd", "fwd_bwd")]


def fwd_flops(c) -> float:
    """Causal forward FLOPs: 4*b*h*s^2*d / 2."""
    return 2.0 * c["batch"] * c["heads"] * c["seq"] ** 2 * c["head_dim"]


def estimate_case_s(c) -> float:
    t = fwd_flops(c) / EST_FWD_FLOPS * (EST_BWD_FACTOR if c["direction"] == "fwd_bwd" else 1.0) + 30e-6
    reps = min(50, max(5, math.ceil(0.03 / t)))
    return 0.3 + (4 + reps) * t


def label(c) -> str:
    return (f"{c['set']:5s} {c['backend']:9s} {c['direction']:7s} b{c['batch']:<3d} h{c['heads']:<3d} s{c['seq']:<6d}"
            f" d{c['head_dim']}")


# --------------------------------------------------------------------------- GPU part

def load_kernel(src: str):
    """The staged, ported flash_attn_triton module (stage_llmfoundry_triton_fa.sh)."""
    import importlib.util
    path = os.path.join(src, "flash_attn_triton.py")
    spec = importlib.util.spec_from_file_location("llmf_flash_attn_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_call(c, fa):
    """(fn, setup) of one case: q, k, v [b, s, h, d] contiguous (as MPT's attention passes them)."""
    import torch
    import common
    b, h, s, d = c["batch"], c["heads"], c["seq"], c["head_dim"]
    bwd = c["direction"] == "fwd_bwd"
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).requires_grad_(bwd) for _ in range(3))
    g = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) if bwd else None
    if c["backend"] == "triton_fa":
        def fwd():
            return fa.flash_attn_func(q, k, v, None, True, None)
    else:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def fwd():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=True)
            return o.transpose(1, 2)
    return common.attention_pass(fwd, g, (q, k, v), bwd)


def run_attention(c, fa, flush, nvml, rec, mma):
    import common
    fn, setup = make_call(c, fa)
    if setup is not None:
        setup()
    fn()                      # probe: compiles and autotunes (the backward's two configs) untimed
    st = common.time_fn(fn, flush=flush, setup=setup)
    flops = fwd_flops(c) * (3.0 if c["direction"] == "fwd_bwd" else 1.0)
    r = dict(kind="attention_fwd_bwd" if c["direction"] == "fwd_bwd" else "attention_fwd", batch=c["batch"],
             heads=c["heads"], seq=c["seq"], head_dim=c["head_dim"], causal=True, backend=c["backend"],
             dtype="bfloat16", set=c["set"], layout="bshd", flops=flops, **st)
    if c["backend"] == "triton_fa":
        r["triton_mma"] = mma
        if c["direction"] == "fwd_bwd":     # the backward's autotuned config (with / without sequence parallelism)
            best = getattr(fa._bwd_kernel, "best_config", None)
            r["bwd_config"] = str(best.kwargs if best is not None else None)
    if c.get("seed") is not None:
        r["seed"] = c["seed"]
    if c.get("model"):
        r["model"] = c["model"]
    common.add_nvml_sample(r, nvml, ("sm_clock_mhz", "temperature_c", "power_w"))
    rec.add(r)
    fn = setup = None
    common.free_memory()
    common.log(f"  {label(c)}  {st['time_s'] * 1e3:9.3f} ms  {common.fmt_rate(flops / st['time_s'], 'FLOP/s')}")


def matmul_kernel():
    """A plain tiled Triton matmul (C = A @ B, bf16 in, fp32 accumulate, bf16 out), grouped
    launch order for L2 reuse; its tl.dot compiles to WGMMA on Hopper unless DISABLE_MMA_V3=1."""
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP: tl.constexpr):
        pid = tl.program_id(0)
        n_m, n_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        group = pid // (GROUP * n_n)
        first_m = group * GROUP
        size = min(n_m - first_m, GROUP)
        pm = first_m + (pid % (GROUP * n_n)) % size
        pn = (pid % (GROUP * n_n)) // size
        rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * K + rk[None, :]
        b = b_ptr + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K, BLOCK_K):
            acc += tl.dot(tl.load(a), tl.load(b))
            a += BLOCK_K
            b += BLOCK_K * N
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))
    return mm


def run_mma_peak(flush, nvml, rec, mma, dl):
    import torch
    import triton
    import common
    n = PEAK_MNK
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    mm = matmul_kernel()
    runs = [("cublas", lambda: torch.matmul(a, b, out=c))]
    for bm, bn, bk, w, stg in MATMUL_CONFIGS:
        grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
        runs.append((f"triton_{bm}x{bn}x{bk}_w{w}_s{stg}",
                     lambda bm=bm, bn=bn, bk=bk, w=w, stg=stg, grid=grid:
                     mm[grid](a, b, c, n, n, n, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP=8, num_warps=w,
                              num_stages=stg)))
    for name, fn in runs:
        if not dl.ok(reserve_s=1):
            break
        try:
            fn()
            torch.cuda.synchronize()
            st = common.time_fn(fn, flush=flush)
        except Exception as exc:  # noqa: BLE001
            common.log(f"  mma_peak {name}: {common.short_exc(exc)}")
            continue
        flops = 2.0 * n ** 3
        r = dict(kind="mma_peak", m=n, n=n, k=n, dtype="bfloat16", config=name, flops=flops, **st)
        if name != "cublas":
            r["triton_mma"] = mma
        common.add_nvml_sample(r, nvml, ("sm_clock_mhz", "power_w"))
        rec.add(r)
        common.log(f"  mma_peak {name:28s} {st['time_s'] * 1e3:8.3f} ms  {common.fmt_rate(flops / st['time_s'], 'FLOP/s')}")


def wgmma_in_cache(cache_dir: str) -> dict:
    """Kernel name -> whether any PTX of that name in the Triton cache holds a ``wgmma`` instruction."""
    out = {}
    for path in glob.glob(os.path.join(cache_dir, "**", "*.ptx"), recursive=True):
        name = os.path.basename(path)[:-4]
        text = open(path).read()
        out[name] = out.get(name, False) or ("wgmma" in text)
    return out


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import suite_parser
    ap = suite_parser(__doc__, 200.0, "not available (GPU and Triton only)", "list the cases; no torch")
    ap.add_argument("--llmf-src", help="folder staged by stage_llmfoundry_triton_fa.sh")
    ap.add_argument("--mma", choices=("default", "v2"), default="default",
                    help="v2: the run has DISABLE_MMA_V3=1 set (checked), recorded as triton_mma")
    ap.add_argument("--skip-peak", action="store_true", help="no mma_peak matmuls")
    ap.add_argument("--fresh-seed", type=int, help="time the fresh random draw of this seed instead of the "
                    "MPT shapes and sweep (validation.prereg_attention --harness triton_attention registers it)")
    ap.add_argument("--fresh-n", type=int, default=40, help="shapes in the fresh draw")
    args = ap.parse_args()
    cs = cases() if args.fresh_seed is None else fresh_cases(args.fresh_seed, args.fresh_n)
    if args.dry_run:
        for c in cs:
            print(f"{label(c)}  est {estimate_case_s(c):6.2f} s")
        print(f"{len(cs)} attention cases; estimated {sum(map(estimate_case_s, cs)):.0f} s")
        return
    if not (args.out and args.llmf_src):
        raise SystemExit("--out FILE and --llmf-src DIR are required (or --dry-run)")
    if (args.mma == "v2") != (os.environ.get("DISABLE_MMA_V3") == "1"):
        raise SystemExit("--mma v2 needs DISABLE_MMA_V3=1 in the environment (and default needs it unset)")
    cache = os.environ.get("TRITON_CACHE_DIR")
    if not cache:
        raise SystemExit("set TRITON_CACHE_DIR to a folder of its own per --mma mode (the PTX check reads it)")
    import torch
    import triton
    import common
    nvml = None
    try:
        from nvml import Nvml
        nvml = Nvml(0)
        if nvml.h is None:
            nvml = None
    except Exception as exc:  # noqa: BLE001
        common.log("  NVML sampling off:", common.short_exc(exc))
    torch.cuda.init()
    fa = load_kernel(args.llmf_src)
    commit = open(os.path.join(args.llmf_src, "LLMF_COMMIT")).read().strip()
    info = common.device_info(suite="triton_attention", triton=triton.__version__, triton_mma=args.mma,
                              llmfoundry_commit=commit,
                              timing="common.time_fn: L2 flush before each call, 2 warm-ups, median of 5..50 calls")
    if nvml is not None:
        info["nvml"] = nvml.static()
    common.log("info:", info)
    rec, flush, dl = common.start_seeded_run(args.out, info, args.budget_s, "triton_attention")
    t0 = time.time()
    if not args.skip_peak:
        run_mma_peak(flush, nvml, rec, args.mma, dl)
    common.run_within_budget(cs, dl, rec, lambda c: run_attention(c, fa, flush, nvml, rec, args.mma), label)
    rec.info["triton_wgmma"] = wgmma_in_cache(cache)
    rec.flush()
    common.log(f"done in {time.time() - t0:.1f} s: {len(rec.records)} records; wgmma {rec.info['triton_wgmma']}")


if __name__ == "__main__":
    main()
