"""PyTorch's own elementwise paths that frameworks without fused extensions run (issue #11/#12).

    PYTHONUNBUFFERED=1 python3 validation/harness/torch_paths.py --out FILE --budget-s 240
    python3 validation/harness/torch_paths.py --dry-run      # list the cases; no torch, no GPU

Megatron-Core's local layer spec (no apex, no Transformer Engine) runs its attention and gradient
accumulation through plain TensorIterator kernels that are not the vectorized contiguous path the
kernel suite measures (kernels.py: copy, add, norms): a broadcast ``masked_fill_`` of the fp32
scores with an [s, s] bool mask (``elementwise_kernel<128, N>`` with offset calculators), the
``.float()`` of the bf16 scores (``unrolled_elementwise_kernel`` with dynamic casts), the
mixed-dtype ``main_grad.add_(grad)`` of its DDP hook (fp32 += bf16), and the fp32 softmax over rows
of the sequence length with its two-kernel backward. This suite times each of them on its own, at
the shapes such runs have, so their rates come from kernel measurements, not from step profiles.

Record kinds (docs/measurements.md "torch paths"):
  ``masked_fill_broadcast``  batch·heads ``bh``, ``seq``: fp32 scores [bh, s, s] masked in place by a
                             bool [s, s] mask (read 4 + write 4 bytes per score, the mask in L2/cached)
  ``cast_to_fp32``           ``elements``: a bf16 tensor ``.float()`` (read 2 + write 4)
  ``add_mixed``              ``elements``: fp32 ``a.add_(b)`` with b bf16 (read 4 + 2, write 4)
  ``softmax``                ``tokens`` (rows), ``hidden`` (row length), ``dtype`` float32 or bfloat16:
                             ``torch.softmax(x, -1)``, the existing kernel-suite kind at fp32
  ``softmax_bwd``            as softmax: ``torch._softmax_backward_data`` (grad·out, then the row kernel)
  ``clone``                  ``elements`` of fp32: ``x.clone()`` (masked_fill's out-of-place gradient)
Every record has ``bytes_min`` (the bytes above), the flushed-event timing of common.time_fn, and
``time_graph_s`` (common.time_graph: back to back in a CUDA graph, warm, no host gaps), whose
difference at small sizes is the per-kernel fixed cost a queued stream does not pay.
"""
from __future__ import annotations

import os
import sys

SEQS = (1024, 2048, 4096, 8192)
BH = (4, 16, 56)                  # batch x heads of one tensor-parallel rank's scores
ELEMENTS = tuple(1 << p for p in range(16, 30, 2))     # 65 k .. 268 M
ROWS = (1024, 2048, 4096, 8192)
ROW_ELEMENTS = (1 << 22, 1 << 25, 1 << 28)             # elements per softmax case
MAX_TENSOR_BYTES = 8 << 30
BYTES_PER = {"masked_fill_broadcast": 8, "cast_to_fp32": 6, "add_mixed": 10, "clone": 8}


def cases(small: bool = False) -> list[dict]:
    """Every case as a dict (kind and shape fields), plain Python."""
    if small:
        return [dict(kind="masked_fill_broadcast", bh=2, seq=64), dict(kind="cast_to_fp32", elements=4096),
                dict(kind="add_mixed", elements=4096), dict(kind="clone", elements=4096),
                dict(kind="softmax", tokens=64, hidden=128, dtype="float32"),
                dict(kind="softmax_bwd", tokens=64, hidden=128, dtype="float32")]
    out = []
    for s in SEQS:
        for bh in BH:
            if 4 * bh * s * s <= MAX_TENSOR_BYTES:
                out.append(dict(kind="masked_fill_broadcast", bh=bh, seq=s))
    for kind in ("cast_to_fp32", "add_mixed", "clone"):
        out += [dict(kind=kind, elements=n) for n in ELEMENTS]
    for kind in ("softmax", "softmax_bwd"):
        for dt in ("float32", "bfloat16"):
            for row in ROWS:
                out += [dict(kind=kind, tokens=n // row, hidden=row, dtype=dt) for n in ROW_ELEMENTS]
    return out


def elements_of(c: dict) -> int:
    if c["kind"] == "masked_fill_broadcast":
        return c["bh"] * c["seq"] * c["seq"]
    if "elements" in c:
        return c["elements"]
    return c["tokens"] * c["hidden"]


def bytes_min(c: dict) -> int:
    """Bytes read + written by the case's kernel(s), the mask and row statistics left out."""
    n = elements_of(c)
    if c["kind"] in BYTES_PER:
        return BYTES_PER[c["kind"]] * n
    w = 4 if c["dtype"] == "float32" else 2
    return (2 if c["kind"] == "softmax" else 6) * w * n    # bwd: grad·out (3 passes) + row kernel (3)


def label(c: dict) -> str:
    shape = f"bh={c['bh']} s={c['seq']}" if "bh" in c else (
        f"n={c['elements']}" if "elements" in c else f"{c['tokens']}x{c['hidden']} {c['dtype']}")
    return f"{c['kind']:22s} {shape}"


def make_call(c: dict):
    """fn() running the case's kernel(s) on fresh tensors."""
    import torch
    import common
    dev = common.device()
    n, kind = elements_of(c), c["kind"]
    if kind == "masked_fill_broadcast":
        s = c["seq"]
        x = torch.randn(c["bh"], s, s, device=dev, dtype=torch.float32)
        mask = torch.triu(torch.ones(s, s, device=dev, dtype=torch.bool), diagonal=1)
        return lambda: x.masked_fill_(mask, -10000.0)
    if kind == "cast_to_fp32":
        x = torch.randn(n, device=dev).to(torch.bfloat16)
        return lambda: x.float()
    if kind == "add_mixed":
        a = torch.randn(n, device=dev, dtype=torch.float32)
        b = torch.randn(n, device=dev).to(torch.bfloat16)
        return lambda: a.add_(b)
    if kind == "clone":
        x = torch.randn(n, device=dev, dtype=torch.float32)
        return lambda: x.clone()
    dt = getattr(torch, c["dtype"]) if common.on_cuda() else torch.float32
    x = torch.randn(c["tokens"], c["hidden"], device=dev, dtype=dt)
    if kind == "softmax":
        return lambda: torch.softmax(x, -1)
    y = torch.softmax(x, -1)
    g = torch.randn_like(y)
    return lambda: torch._softmax_backward_data(g, y, -1, y.dtype)


def run_case(c: dict, flush, rec) -> None:
    import common
    fn = make_call(c)
    st = common.time_fn(fn, flush=flush)
    graph = common.time_graph(fn, calls=10 if bytes_min(c) > (1 << 28) else 20)
    fn = None
    common.free_memory()
    r = dict(c, bytes_min=bytes_min(c), **st, time_graph_s=graph)
    r.setdefault("dtype", "float32")
    rec.add(r)
    common.log(f"  {label(c)}  {st['time_s'] * 1e6:10.1f} us  graph {1e6 * (graph or float('nan')):10.1f} us  "
               f"{common.fmt_rate(r['bytes_min'] / st['time_s'], 'B/s')}")


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite_cli import run_bytes_suite
    run_bytes_suite(__doc__, 240.0, "torch_paths", "common.time_fn (L2 flushed, events) and common.time_graph",
                    cases, label, bytes_min, run_case)


if __name__ == "__main__":
    main()
