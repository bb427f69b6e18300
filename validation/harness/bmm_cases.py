"""The batched GEMMs of Megatron-Core's local (unfused) attention at seeded random shapes: the cases of
sustained.py ``--suite bmm_random`` (issue #12), without torch, so validation.prereg predicts a draw
before it runs and the tests check it on a machine with no GPU.

Megatron-Core's DotProductAttention (megatron/core/transformer/dot_product_attention.py, local spec)
holds q, k, v as ``[s, b*np, hn]`` (sbhd) and runs QK^T as ``torch.baddbmm(buffer, q.transpose(0, 1),
k.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=1/sqrt(hn))`` and PV as ``torch.bmm(probs,
v.transpose(0, 1))``; autograd (PyTorch's derivatives.yaml for bmm / baddbmm) runs the backward as four
bmms: dP = dO V^T and dV = P^T dO (PV's), dQ = dS K and dK^T = Q^T dS (QK^T's, each then scaled by
alpha in a separate multiply, not part of a case). dO arrives as the transpose of an sbhd tensor, as q
does. The operands' shapes and strides below are those a dispatch trace of a Megatron step recorded
(validation/measurements/profiles/h200_plan_gemmtrace.json, ``gemm_calls``).

Each case carries the (m, n, k, batch) simulator.compute.unfused_torch_attention_parts costs it with
(``gemm_time(dev, m, n, k, "bf16", b*heads)``; tests/test_bmm_random.py checks the mapping against that
function) and the torch call: ``op`` (baddbmm / bmm), operand shapes and strides, and ``layout``, one
letter per operand as cuBLAS sees it (``N`` row-major: unit stride on the last dim; ``T`` transposed:
unit stride on the second-to-last)."""
from __future__ import annotations

import math
import random

SUITE = "bmm_random"
GEMMS = ("qk_baddbmm", "pv", "dv", "dp", "dq", "dk")
HEAD_DIMS = {64: 0.2, 80: 0.1, 96: 0.1, 128: 0.45, 256: 0.15}   # draw weights, toward 128
SCORE_BYTES_MAX = 1 << 30          # bh * sq * skv * 2 bytes (the bf16 score matrix) at most
N_CASES = 48


def sim_call(gemm: str, sq: int, skv: int, d: int) -> tuple[int, int, int]:
    """(m, n, k) of the simulator's gemm_time call for ``gemm`` (unfused_torch_attention_parts: fwd
    ``qk`` (sq, skv, d), ``pv`` (sq, d, skv); bwd dP (sq, skv, d), dV (skv, d, sq), dQ (sq, d, skv),
    dK (skv, d, sq))."""
    return {"qk_baddbmm": (sq, skv, d), "pv": (sq, d, skv), "dp": (sq, skv, d),
            "dv": (skv, d, sq), "dq": (sq, d, skv), "dk": (skv, d, sq)}[gemm]


def _sbhd_t(s: int, bh: int, d: int) -> tuple[list, list]:
    """(shape, strides) in elements of ``x.transpose(0, 1)`` for a contiguous sbhd ``x [s, bh, d]``."""
    return [bh, s, d], [d, bh * d, 1]


def _sbhd_tt(s: int, bh: int, d: int) -> tuple[list, list]:
    """(shape, strides) of ``x.transpose(0, 1).transpose(1, 2)`` for a contiguous ``x [s, bh, d]``."""
    return [bh, d, s], [d, 1, bh * d]


def operands(gemm: str, bh: int, sq: int, skv: int, d: int) -> list[tuple[list, list]]:
    """[(shape, strides)] of the two multiplied operands of ``gemm`` as Megatron / autograd pass them
    (elements; scores [bh, sq, skv] contiguous, q / dO from [sq, bh, d], k / v from [skv, bh, d])."""
    scores = ([bh, sq, skv], [sq * skv, skv, 1])
    scores_t = ([bh, skv, sq], [sq * skv, 1, skv])
    return {"qk_baddbmm": [_sbhd_t(sq, bh, d), _sbhd_tt(skv, bh, d)],       # Q^T-view [bh,sq,d] x K^T [bh,d,skv]
            "pv": [scores, _sbhd_t(skv, bh, d)],                            # P x V
            "dp": [_sbhd_t(sq, bh, d), _sbhd_tt(skv, bh, d)],               # dO x V^T
            "dv": [scores_t, _sbhd_t(sq, bh, d)],                           # P^T x dO
            "dq": [scores, _sbhd_t(skv, bh, d)],                            # dS x K
            "dk": [_sbhd_tt(sq, bh, d), scores]}[gemm]                      # Q^T x dS -> dK^T [bh,d,skv]


def layout(ops: list[tuple[list, list]]) -> str:
    """Two letters, operand A then B: ``N`` unit stride on the last dim, ``T`` on the second-to-last."""
    return "".join("N" if st[-1] == 1 else "T" for _, st in ops)


def make_case(gemm: str, bh: int, s: int, d: int) -> dict:
    """One case: the attention shape (bh = b*heads, sq = skv = s, head_dim d), the simulator's
    (m, n, k, batch) and the torch call (op, operand shapes / strides, layout, alpha)."""
    m, n, k = sim_call(gemm, s, s, d)
    ops = operands(gemm, bh, s, s, d)
    case = dict(gemm=gemm, op="baddbmm" if gemm == "qk_baddbmm" else "bmm", bh=bh, seq=s, head_dim=d,
                m=m, n=n, k=k, batch=bh, dtype="bfloat16", layout=layout(ops),
                shapes=[sh for sh, _ in ops], strides=[st for _, st in ops])
    if gemm == "qk_baddbmm":
        case.update(alpha=1.0 / math.sqrt(d), beta=0.0)
    return case


def _logu(rng: random.Random, lo: float, hi: float) -> float:
    """A log-uniform draw over [lo, hi]."""
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _draw_shape(rng: random.Random) -> tuple[int, int, int]:
    """(bh, s, d): s log-uniform 256..8192 in multiples of 8, bh log-uniform 1..128 clamped so the
    bf16 score matrix stays within SCORE_BYTES_MAX, d from HEAD_DIMS by weight."""
    s = max(256, min(8192, 8 * round(_logu(rng, 256, 8192) / 8)))
    bh = max(1, min(int(round(_logu(rng, 1, 128))), SCORE_BYTES_MAX // (2 * s * s)))
    d = rng.choices(list(HEAD_DIMS), weights=list(HEAD_DIMS.values()))[0]
    return bh, s, d


def cases(seed: int = 78, small: bool = False, n: int = N_CASES) -> list[dict]:
    """The cases of draw ``seed``: ``n`` (48) cases, each GEMM of :data:`GEMMS` equally often in an
    order drawn with ``random.Random(f"bmm_random {seed}")``, each with its own (bh, s, d) draw; no
    (gemm, bh, s, d) twice. ``small``: three tiny cases for a smoke run."""
    if small:
        return [make_case("qk_baddbmm", 4, 64, 64), make_case("dv", 2, 128, 80), make_case("dk", 3, 96, 128)]
    rng = random.Random(f"{SUITE} {seed}")
    order = [GEMMS[i % len(GEMMS)] for i in range(n)]
    rng.shuffle(order)
    out, seen = [], set()
    for gemm in order:
        shape = _draw_shape(rng)
        while (gemm, *shape) in seen:
            shape = _draw_shape(rng)
        seen.add((gemm, *shape))
        out.append(make_case(gemm, *shape))
    return out


def label(case: dict) -> str:
    """The log's name of one case: GEMM, layout, bh x (m x n x k) of the simulator's call, s and d."""
    return (f"{case['gemm']:10s} {case['layout']} {case['batch']:4d}x({case['m']:5d}x{case['n']:5d}x{case['k']:5d}) "
            f"s={case['seq']} d={case['head_dim']}")


RECORD_FIELDS = ("m", "n", "k", "batch", "dtype", "gemm", "op", "layout", "bh", "seq", "head_dim",
                 "shapes", "strides", "alpha", "beta")


def record_of(case: dict, seed: int | None = None) -> dict:
    """The ``gemm`` record sustained.py writes for ``case`` without its measured fields: m, n, k and
    ``batch`` as the simulator costs it, the torch call's fields, ``flops`` = 2·batch·m·n·k."""
    rec = dict(kind="gemm", **{f: case[f] for f in RECORD_FIELDS if f in case},
               flops=2.0 * case["batch"] * case["m"] * case["n"] * case["k"], group=case["gemm"], set=SUITE)
    if seed is not None:
        rec["seed"] = seed
    return rec


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="print the bmm_random cases of a seed")
    ap.add_argument("--seed", type=int, default=78)
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    for i, c in enumerate(cases(a.seed, small=a.small)):
        print(f"{i:3d} {label(c)}")
