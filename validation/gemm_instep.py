"""Every GEMM of a profiled training step against meshcast's GEMM model (issues #11, #12).

``plan_step`` records taken with the harness's GEMM trace (validation/harness/gemm_trace.py;
``gemm_calls``) carry, per unique matrix multiply the step dispatched, its operand shapes and
strides, how often it ran, and its kernels' device seconds per call inside the step (torch.profiler,
layouts with the same shapes pooled), plus the same call replayed alone. This module predicts each
call with :func:`simulator.compute.gemm_time` on the device model the step itself is costed with
(its clock fraction included) and reports the signed error per call and per class:

* ``linear``: plain GEMMs (``aten::mm``/``addmm``: the linear layers and the logits), split by
  the layout cuBLAS sees (N: the operand's last dimension is contiguous, T: transposed);
* ``batched``: ``bmm``/``baddbmm`` (Megatron-Core's local attention: QKᵀ with k = head_dim, and
  the scores times V with n = head_dim).

    python -m validation.gemm_instep [FILE]   (default: profiles/h200_plan_gemmtrace.json)

The isolated replays in these files ran right after the steps, on a GPU at its power limit
(NVML read 1400-1600 MHz after most of them, against 1900-1980 MHz averaged over the steps), so
they are not compared with the model: the in-step seconds are the measurement.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from simulator.compute import TORCH_DTYPES, gemm_time, score_gemm_time
from simulator.engine import _step
from validation.kernel_reconcile import profiled_steps
from validation.predict import plan_model, record_plan

DEFAULT_FILE = "validation/measurements/profiles/h200_plan_gemmtrace.json"


@dataclass(frozen=True)
class GemmRow:
    """One traced GEMM call: its step, class, layout, m/n/k/batch, calls, in-step and
    predicted seconds per call."""
    step: str
    cls: str
    layout: str
    m: int
    n: int
    k: int
    batch: int
    calls: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Signed relative error predicted / measured − 1."""
        return self.predicted_s / self.measured_s - 1.0


def gemm_dims(shapes: list) -> tuple[int, int, int, int]:
    """(m, n, k, batch) of a traced call from its last two operands' shapes ([b,] m×k and [b,] k×n;
    addmm's and baddbmm's first operand is the added input)."""
    a, b = shapes[-2], shapes[-1]
    return a[-2], b[-1], a[-1], (a[0] if len(a) == 3 else 1)


def layout(strides: list) -> str:
    """cuBLAS's view of the two multiplied operands: N where an operand's last dimension is
    contiguous (row-major), T where it is not (a transposed view)."""
    return "".join("N" if s[-1] == 1 else "T" for s in strides[-2:])


def rows(path: str = DEFAULT_FILE, cal=None) -> list[GemmRow]:
    """Every traced call of every record with an in-step time, predicted on the step's device model (under
    ``cal``, a calibration, where given: a candidate; else the file's accelerator's profile)."""
    hw, own, recs = profiled_steps(path, "gemm_calls")
    cal = cal or own
    out = []
    for rec in recs:
        calls = rec["gemm_calls"]
        dev = _step(plan_model(rec), replace(hw, num_gpus=rec["world"]), record_plan(rec), cal).ctx.dev
        step = f"{rec['framework']} {rec['name']} s{rec['seq']}"
        for c in calls:
            if not c.get("in_step_s"):
                continue
            m, n, k, batch = gemm_dims(c["shapes"])
            cls = "batched" if c["op"] in ("bmm", "baddbmm") else "linear"
            cost = score_gemm_time if cls == "batched" else gemm_time      # as the simulator costs local attention's
            pred = cost(dev, m, n, k, TORCH_DTYPES[c["dtype"]], batch)
            out.append(GemmRow(step, cls, layout(c["strides"]), m, n, k, batch, c["count"], c["in_step_s"], pred))
    return out


def summary(rs: list[GemmRow]) -> dict[str, dict]:
    """Per class (and per linear layout): count, MAPE, mean signed error and the time-weighted
    error of the class's summed seconds (predicted total / measured total − 1)."""
    groups: dict[str, list[GemmRow]] = {}
    for r in rs:
        groups.setdefault(r.cls, []).append(r)
        if r.cls == "linear":
            groups.setdefault(f"linear {r.layout}", []).append(r)
    out = {}
    for name, g in sorted(groups.items()):
        meas = sum(r.measured_s * r.calls for r in g)
        pred = sum(r.predicted_s * r.calls for r in g)
        out[name] = {"count": len(g), "mape": sum(abs(r.error) for r in g) / len(g),
                     "mean_signed": sum(r.error for r in g) / len(g), "total_error": pred / meas - 1.0}
    return out


def main(argv: list[str] | None = None) -> int:
    """Print every traced GEMM call of FILE against the model, then the per-class summary."""
    import argparse
    ap = argparse.ArgumentParser(description="Every GEMM of profiled training steps against meshcast's GEMM model.")
    ap.add_argument("file", nargs="?", default=DEFAULT_FILE, help=f"plan_step records with gemm_calls (default {DEFAULT_FILE})")
    ap.add_argument("--profile", help="calibration profile YAML to cost them with (default: the committed one)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    cal = None
    if args.profile:
        from simulator.calibration import load_calibration
        cal = load_calibration(args.profile)
    rs = rows(args.file, cal=cal)
    for r in rs:
        print(f"{r.step:36s} {r.cls:7s} {r.layout} {r.m:6d} {r.n:6d} {r.k:6d} b{r.batch:<3d} x{r.calls:<4d} "
              f"in-step {r.measured_s * 1e6:8.1f} us  model {r.predicted_s * 1e6:8.1f} us  {r.error:+.3f}")
    print()
    for name, s in summary(rs).items():
        print(f"{name:10s} n={s['count']:3d}  MAPE {s['mape']:.1%}  mean signed {s['mean_signed']:+.1%}  "
              f"summed seconds {s['total_error']:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
