"""The GEMMs real training steps cost, as a pool the harness can time (issue #12, session 32).

Why. The random GEMM draws (validation/harness/gemm_cases.py) cover m, n, k log-uniformly over 16..16384 and
are what the residual correction (simulator/gemm_residual.py) learns from and is registered on. The GEMMs of
a training step are another population: large m (tokens), n and k set by a model's widths divided by the
tensor-parallel degree, and mostly "round" (n and k multiples of 64). The few that are not, the output head
over a vocabulary split by tp (32000 / 8 = 4000, 50257 / 8 -> 6283), feed-forward widths split by tp
(11008 / 8 = 1376) and MoE routers (n = the expert count), are exactly where the correction acts, and the
random draws say little about them (their m reaches 32768, beyond the draws' range).

This module lists those GEMMs from the simulator itself: every unbatched GEMM op (simulator.lowering) of
one transformer layer of each kind and of the last pipeline stage (output head), for every catalog model
under tensor-parallel degrees 1, 2, 4 and 8 (sequence parallel on, micro-batch 1, the model's sequence
length, bf16 and fp8 layers), on one DGX H100 node. Each distinct (m, n, k, dtype) is one entry, named by
the first model and degree that produced it; ``--mbs 2 --exclude real_gemm_pool.json`` gives session 33's
pool: micro-batch 2, without the shapes the first pool already holds; session 34's, ``--mbs 4`` excluding
both. ``python -m validation.real_gemms`` writes the pool
(validation/harness/real_gemm_pool.json); validation/harness/gemm_cases.real_cases draws a registered set
from it. The committed pool is the one seed 60 was registered and measured on: after a change to the lowered
GEMMs, write a new pool to another file (``--out``) for the next registered set rather than over it.

    python -m validation.real_gemms [--out FILE] [--mbs N] [--exclude POOL]...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

POOL = Path(__file__).resolve().parent / "harness" / "real_gemm_pool.json"
TP_DEGREES = (1, 2, 4, 8)
PRECISIONS = ("bf16", "fp8")
MAX_FLOPS = 1.2e13            # 2mnk: at most ~20 ms of bf16 on an H100, so a set fits one device call
TORCH_NAMES = {"bf16": "bfloat16", "fp8": "float8_e4m3fn"}
CLUSTER = "dgx-h100"


def step_gemms(model_name: str, tp: int, precision: str, mbs: int = 1) -> set[tuple[int, int, int, str]]:
    """(m, n, k, meshcast dtype) of every unbatched GEMM the simulator costs for one layer of each kind and
    the last stage of ``model_name`` under tensor parallelism ``tp`` (sequence parallel, micro-batch ``mbs``)."""
    from hardware_specs.catalog import load_hardware
    from models.catalog import load_model
    from simulator.calibration import load_calibration
    from simulator.engine import _step
    from simulator.lowering import last_stage_ops, layer_ops
    from simulator.memory import layer_kind_params
    from simulator.plan import ParallelPlan
    model, hw = load_model(model_name), load_hardware(CLUSTER, 8)
    plan = ParallelPlan(tp=tp, dp=8 // tp, sequence_parallel=tp > 1, mbs=mbs, gbs=64 * mbs, precision=precision)
    ctx = _step(model, hw, plan, load_calibration("h100-sxm")).ctx
    ops = [op for kind in layer_kind_params(model) for op in layer_ops(ctx, kind)] + last_stage_ops(ctx)
    return {(m, n, k, dt) for op in ops if op.kind == "gemm"
            for m, n, k, batch, dt, _bias in [op.shape] if batch == 1}


def runnable(m: int, n: int, k: int, dtype: str) -> bool:
    """Whether the harness can time the GEMM: torch._scaled_mm needs n and k multiples of 16 in fp8, and
    the set keeps each call under MAX_FLOPS."""
    return 2.0 * m * n * k <= MAX_FLOPS and (dtype != "fp8" or (n % 16 == 0 and k % 16 == 0))


def pool(models=None, mbs: int = 1) -> list[dict]:
    """Every distinct runnable GEMM of :func:`step_gemms` at micro-batch ``mbs`` over the catalog (``models``:
    names, default all),
    each {m, n, k, dtype (torch's name), source ("<model> tp<N>"), round (n and k multiples of 64)}, in
    the order first met (models sorted, degrees and precisions ascending)."""
    from hardware_specs.errors import PlanError
    from models.catalog import list_models
    seen: dict = {}
    for name in sorted(models or list_models()):
        for tp in TP_DEGREES:
            for precision in PRECISIONS:
                try:
                    shapes = step_gemms(name, tp, precision, mbs)
                except PlanError:          # a degree the model's heads do not divide
                    continue
                for m, n, k, dt in sorted(shapes):
                    if runnable(m, n, k, dt) and (m, n, k, dt) not in seen:
                        seen[(m, n, k, dt)] = f"{name} tp{tp}"
    return [dict(m=m, n=n, k=k, dtype=TORCH_NAMES[dt], source=src, round=n % 64 == 0 and k % 64 == 0)
            for (m, n, k, dt), src in seen.items()]


def shape(entry: dict) -> tuple:
    """(m, n, k, dtype) of a pool entry."""
    return entry["m"], entry["n"], entry["k"], entry["dtype"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=POOL)
    p.add_argument("--mbs", type=int, default=1, help="micro-batch size of the steps (default 1: the committed pool's)")
    p.add_argument("--exclude", type=Path, action="append", default=[],
                   help="a pool file whose shapes are left out (a set already measured); repeatable")
    args = p.parse_args(argv)
    if args.mbs < 1:
        p.error("--mbs: must be a positive integer")
    seen = set()
    for path in args.exclude:
        try:
            seen |= {shape(e) for e in json.loads(path.read_text())["entries"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            p.error(f"--exclude: cannot read a pool from {path}: {exc}")
    entries = [e for e in pool(mbs=args.mbs) if shape(e) not in seen]
    doc = {"description": "distinct unbatched GEMMs of the catalog's models under tp 1/2/4/8 (one layer of each "
                          f"kind and the output head) at micro-batch {args.mbs}, as simulator.lowering costs them",
           "generated_by": "python -m validation.real_gemms" + (f" --mbs {args.mbs}" if args.mbs != 1 else "")
                           + "".join(f" --exclude {path.name}" for path in args.exclude),
           "entries": entries}
    body = ",\n".join("  " + json.dumps(e) for e in entries)
    try:
        args.out.write_text(json.dumps({k: v for k, v in doc.items() if k != "entries"}, indent=1)[:-2]
                            + f',\n "entries": [\n{body}\n ]\n}}\n')
    except OSError as exc:
        print(f"error: --out: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    off = sum(1 for e in entries if not e["round"])
    print(f"wrote {len(entries)} GEMMs ({off} off the 64-grid) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
