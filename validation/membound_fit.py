"""Fit the memory-bound kernel candidate (issue #12 session 22) and write it as a candidate profile.

    python -m validation.membound_fit --gpu h200 --out validation/candidates/h200-sxm-membound42.yaml
    python -m validation.membound_fit --gpu h100 --out validation/candidates/h100-sxm-membound42.yaml
    python -m validation.membound_fit --gpu h200            # fit and report only

Three mechanisms, each gated on profile parameters the committed profiles do not carry (so those
predict exactly as before):

* ``memory_kernel_fixed_s``: the fixed time of one memory-bound kernel as CUDA events see it
  (simulator.compute.memory_fixed_s), in place of ``kernel_launch_s`` for every elementwise, copy,
  norm and softmax kernel;
* ``memory_op_fraction["silu"]``: the kernel suite's ``silu_mul`` (``F.silu(x) * y``) costed as the
  two kernels eager PyTorch runs (simulator.compute.torch_silu_mul_time), not one, the second with
  ``memory_kernel_chained_s`` as its fixed time;
* ``softmax_warp_cycles``: PyTorch's one-warp-per-row softmax (rows <= 2048) as SM cycles
  (simulator.compute.softmax_warp_time) instead of bytes at a fraction of HBM bandwidth.

They are fitted jointly, with the rates and per-kernel terms that were fitted together with the
old fixed cost (memory_op_fraction copy / add / gelu, norm_forward, the block softmax kernels'
rates and wave cycles), by validation.fit.fit (soft-L1 least squares on log(predicted / measured))
on the fit data only: the memory-bound records (copy, add, gelu, silu_mul, softmax, layernorm,
rmsnorm; burst, not ``regime: sustained``) of ``<gpu>_kernels.json``, ``<gpu>_norm_kernels.json``,
``<gpu>_norm_kernels2.json``, ``<gpu>_row_kernels.json`` and the two development draws
``<gpu>_membound_random40.json`` / ``41.json``. Every other parameter keeps the committed profile's
value. The profile written is the committed one with the fitted values and a ``fits`` entry naming
the files and the fit's per-kind error.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from simulator.calibration import PROFILE_DIR, calibration_for
from validation.fit import Param, fit
from validation.hardware import hardware_for
from validation.predict import Unsupported, predict_record
from validation.records import load_measurements

MEMBOUND_KINDS = ("copy", "add", "gelu", "silu_mul", "softmax", "layernorm", "rmsnorm")
FIT_FILES = ("kernels", "norm_kernels", "norm_kernels2", "row_kernels", "membound_random40", "membound_random41")
PROFILES = {"h200": "h200-sxm", "h100": "h100-sxm"}
PARAMS = [Param("memory_kernel_fixed_s", 1e-6, 30e-6), Param("memory_kernel_chained_s", 0.1e-6, 30e-6),
          Param("memory_op_fraction.copy", 0.1, 1.0), Param("memory_op_fraction.add", 0.1, 1.0),
          Param("memory_op_fraction.gelu", 0.1, 1.0), Param("memory_op_fraction.silu", 0.1, 1.0),
          Param("softmax_warp_cycles.kernel", 0.0, 60000.0), Param("softmax_warp_cycles.row", 0.0, 5000.0),
          Param("softmax_warp_cycles.element", 0.01, 10.0), Param("softmax_warp_cycles.element_wide", 0.01, 10.0),
          Param("softmax_wave_cycles", 0.0, 40000.0),
          Param("softmax_elements_per_cycle.reg", 0.05, 16.0), Param("softmax_elements_per_cycle.reg_wide", 0.05, 16.0),
          Param("softmax_elements_per_cycle.smem", 0.05, 16.0),
          Param("norm_forward.fraction", 0.3, 1.0),
          Param("norm_forward.reread_from_bytes", 0.0, 256 * 1024.0),
          Param("norm_forward.reread_span_bytes", 256.0, 256 * 1024.0),
          Param("norm_forward.rmsnorm_row_s", 0.0, 20e-6), Param("norm_forward.layernorm_row_s", 0.0, 20e-6),
          Param("norm_forward.rmsnorm_load_latency_s", 1e-8, 1e-5),
          Param("norm_forward.layernorm_load_latency_s", 1e-8, 1e-5)]
# starting values of the new parameters (validation.fit scales each parameter by its start, so
# none may start at 0): the smallest kernels' times, a silu a little below the copy's rate, and
# warp-softmax cycles of the order the dev draws' rates give (~0.3-0.5 cycles per element per SM)
NEW_START = {"memory_kernel_fixed_s": 4.7e-6, "memory_kernel_chained_s": 2.5e-6, "silu": 0.8,
             "softmax_warp_cycles": {"kernel": 5000.0, "row": 100.0, "element": 0.35, "element_wide": 0.5}}


def fit_samples(gpu: str, root: Path = Path("validation/measurements"), files=FIT_FILES) -> list:
    """(record, hardware) of every memory-bound burst record of ``files`` (the fit files) of ``gpu``."""
    out = []
    for name in files:
        mf = load_measurements(root / f"{gpu}_{name}.json")
        hw = hardware_for(mf)
        out += [(r, hw) for r in mf.records
                if r.get("kind") in MEMBOUND_KINDS and r.get("regime") != "sustained" and r.get("condition") is None]
    return out


def start_calibration(gpu: str):
    """The committed profile of ``gpu`` with the new parameters at their starting values."""
    from dataclasses import replace
    samples = fit_samples(gpu)
    cal = calibration_for(samples[0][1].accelerator)[0]
    return replace(cal, memory_kernel_fixed_s=NEW_START["memory_kernel_fixed_s"],
                   memory_kernel_chained_s=NEW_START["memory_kernel_chained_s"],
                   memory_op_fraction={**cal.memory_op_fraction, "silu": NEW_START["silu"]},
                   softmax_warp_cycles=dict(NEW_START["softmax_warp_cycles"])), samples


def refit_masked_cost(cal, root: Path = Path(__file__).resolve().parent / "measurements"):
    """``cal`` with ``softmax_masked_cost`` refitted by the restricted fit (calibrate --only softmax_masked_cost,
    started at 1) on the isolated causal / N(0, 1) pairs of h200_instep_conditions.json, on top of ``cal``'s unmasked
    softmax cost: what the H200 profile's value is (sessions 14, 23 and 36); the H100 has no such file."""
    from dataclasses import replace

    from validation.calibrate import calibrate
    mf = load_measurements(root / "h200_instep_conditions.json")
    report = calibrate([(mf, hardware_for(mf))], "h200-sxm", start=replace(cal, softmax_masked_cost=1.0),
                       only=("softmax_masked_cost",))
    return replace(cal, softmax_masked_cost=report.calibration.softmax_masked_cost)


def kind_errors(samples, cal) -> dict:
    """{kind: (count, MAPE)} of the samples under ``cal``."""
    errs: dict = {}
    for rec, hw in samples:
        try:
            p = predict_record(rec, hw, cal).time_s
        except Unsupported:
            continue
        errs.setdefault(rec["kind"], []).append(abs(p / rec["time_s"] - 1))
    return {k: (len(v), sum(v) / len(v)) for k, v in sorted(errs.items())}


def run(gpu: str):
    """The fit of ``gpu``: (FitResult, samples, start calibration)."""
    start, samples = start_calibration(gpu)
    return fit(samples, PARAMS, start, name=f"{PROFILES[gpu]}-membound42"), samples, start


def write_candidate(gpu: str, res, samples, out: Path, name: str, method: str, files: list[str], session: int,
                    seed: int, fixed: dict | None = None) -> None:
    """Write to ``out`` the committed profile of ``gpu`` with the fitted values of ``res`` (and the
    unfitted ``fixed`` values, e.g. a mechanism's switch, as {"group.key": value}), ``files`` added to
    its fitted_on, a ``fits`` entry ``compute[<name>: <parameters>]`` with ``method`` and the per-kind
    fitted errors over ``samples``, and a ``candidate:`` line: candidate ``name`` of issue #12 session
    ``session``, registered beside the committed profile for memory-bound draw ``seed``."""
    import yaml

    from validation.candidate_io import write_candidate_profile
    data = yaml.safe_load((PROFILE_DIR / f"{PROFILES[gpu]}.yaml").read_text())
    p = data["parameters"]
    for path, v in [(x.path, float(v)) for x, v in zip(res.params, res.values)] + list((fixed or {}).items()):
        parts = path.split(".")
        if len(parts) == 2:
            p.setdefault(parts[0], {})[parts[1]] = v
        else:
            p[path] = v
    write_candidate_profile(data, files, f"compute[{name}: {' '.join(x.path for x in res.params)}]", {
        "fitted_on": files, "method": method,
        "records": res.n_records, "residual_rms_log": round(res.residual_rms, 4), "converged": res.success,
        "fitted": [x.path for x in res.params], "kept_from_start": [x.path for x in res.unconstrained],
        "fitted_error": {k: {"count": n, "mape": round(e, 4)} for k, (n, e) in kind_errors(samples, res.calibration).items()},
    }, f"{name} (issue #12 session {session}, {{date}}): registered beside {PROFILES[gpu]} for the seed-{seed} "
       "memory-bound draw; not adopted unless it wins there", out)


def write_profile(gpu: str, res, samples, out: Path) -> None:
    """The committed profile of ``gpu`` with the fitted values and a ``fits`` entry, to ``out``."""
    files = [f"validation/measurements/{gpu}_{n}.json" for n in FIT_FILES]
    method = ("validation/membound_fit.py (issue #12 session 22): memory_kernel_fixed_s, the eager silu_mul as "
              "two kernels (memory_op_fraction.silu) and the warp softmax in SM cycles (softmax_warp_cycles), "
              "fitted jointly with the memory-bound rates fitted before with kernel_launch_s, soft-L1 least "
              "squares on log(predicted/measured) over every memory-bound burst record of these files (the "
              "membound_random draws 40 and 41 as development data; no record held out); every other "
              f"parameter kept at profile {PROFILES[gpu]}'s value")
    write_candidate(gpu, res, samples, out, "membound42", method, files, session=22, seed=42)


def print_fit(gpu: str, res, samples) -> None:
    """Print a fit's records, residual, fitted values and per-kind MAPE, committed profile -> fit."""
    before = kind_errors(samples, calibration_for(samples[0][1].accelerator)[0])
    after = kind_errors(samples, res.calibration)
    print(f"{gpu}: {res.n_records} records, residual rms log {res.residual_rms:.4f}, converged {res.success}")
    for param, v in zip(res.params, res.values):
        print(f"  {param.path:42s} {v:.6g}")
    for kind in after:
        print(f"  {kind:9s} n={after[kind][0]:3d}  MAPE {100 * before[kind][1]:5.1f}% -> {100 * after[kind][1]:5.1f}%")


def draw_errors(gpu: str, cal, draws) -> dict:
    """{seed: {kind: (count, MAPE)}} of the memory-bound random ``draws`` of ``gpu`` under ``cal``."""
    return {s: kind_errors(fit_samples(gpu, files=(f"membound_random{s}",)), cal) for s in draws}


def report_and_write(gpu: str, res, samples, before, draws, out, write_profile) -> None:
    """Print the fit (:func:`print_fit`) and each of ``draws``' per-kind MAPE under ``before`` and the fitted
    calibration; with ``out``, write the candidate there through ``write_profile(gpu, res, samples, out)``."""
    print_fit(gpu, res, samples)
    db, da = draw_errors(gpu, before, draws), draw_errors(gpu, res.calibration, draws)
    for s in draws:
        print(f"  draw {s}: " + "  ".join(f"{k} {100 * db[s][k][1]:.1f}->{100 * da[s][k][1]:.1f}" for k in da[s]))
    if out:
        write_profile(gpu, res, samples, out)
        print(f"wrote {out}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", choices=sorted(PROFILES), required=True)
    ap.add_argument("--out", type=Path, help="write the candidate profile here")
    a = ap.parse_args(argv)
    res, samples, start = run(a.gpu)
    print_fit(a.gpu, res, samples)
    if a.out:
        write_profile(a.gpu, res, samples, a.out)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
