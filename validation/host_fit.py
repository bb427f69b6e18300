"""Framework host costs from host-bound steps (issue #11).

The host grid of validation/harness/plan_step.py (``--grid host``) runs the real models' op
structure at sizes whose kernels take microseconds (host-llama, host-gpt: hidden 256), so a step
lasts as long as its host takes to issue it. Megatron-Core (local spec) and torch-native steps ran
on the same machine in the same call. Plain eager PyTorch is meshcast's reference
(``host_op_s`` per modelled op, fitted in the calibration profile on other machines), so:

  machine factor  k = median over the torch-native steps without tensor parallelism of
                      measured / predicted step seconds (how much slower this host CPU is than
                      the one the profile was fitted on);
  framework costs   the HostCosts (simulator/frameworks/profile.py) that minimise the squared
                      log error of predicted against measured / k over the framework's steps,
                      each predicted through simulate() itself.

Megatron-Core fits ``op_scale``, ``tp_op_scale`` and ``microbatch_ops`` (``p2p_sync`` is not
fitted: Megatron-Core's p2p_communication.py synchronizes the device after batch_isend_irecv);
torch-native is the reference (op_scale 1, no per-micro-batch extra) and fits ``tp_op_scale``
(DTensor's dispatch) and ``cp_op_scale`` (context parallel's, on the host-cp grid). Each file is one
machine and has its own machine factor. The fitted values are written into the framework YAMLs by hand and
tests/test_host_fit.py checks that they are what this fit gives on the committed files.

    PYTHONPATH=. python -m validation.host_fit          # print the fit
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from simulator.calibration import calibration_for
from simulator.frameworks import _LOADED, get_framework
from simulator.frameworks.profile import HostCosts
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent / "measurements"
HOST_FILES = ("h200_plan_host.json", "h200x2_plan_host.json", "h200x2_plan_host_cp.json")
FITTED = {"megatron-core-local": ("op_scale", "tp_op_scale", "microbatch_ops"),
          "torchtitan": ("tp_op_scale", "cp_op_scale")}
START = {"op_scale": 1.0, "tp_op_scale": 1.0, "cp_op_scale": 1.0, "microbatch_ops": 50.0}
BOUNDS = {"op_scale": (0.2, 10.0), "tp_op_scale": (0.2, 20.0), "cp_op_scale": (0.2, 20.0),
          "microbatch_ops": (0.0, 2000.0)}


def _timed(files=HOST_FILES) -> list[tuple[dict, object, object]]:
    """(record, hardware, calibration) of every timed record of the host files; each record
    carries its file's name as ``_file`` (one file, one machine)."""
    out = []
    for name in files:
        mf = load_measurements(MEAS / name)
        hw = hardware_for(mf)
        cal = calibration_for(hw.accelerator)[0]
        out += [(dict(r, _file=name), hw, cal) for r in mf.records if r.get("time_s")]
    return out


def _predict(rec, hw, cal, framework: str, host: HostCosts) -> float:
    """Predicted step seconds of ``rec`` with ``framework``'s profile given ``host`` costs."""
    base = get_framework(framework)
    _LOADED[framework] = base.model_copy(update={"host": host})
    try:
        return predict_record(rec, hw, cal).time_s
    finally:
        _LOADED[framework] = base


def machine_factors(rows) -> dict[str, float]:
    """Per file (one machine each): median measured/predicted over torch-native steps without
    tensor or context parallelism or sharding, predicted with the plain eager reference."""
    by_file: dict[str, list[float]] = {}
    for rec, hw, cal in rows:
        if rec["framework"] == "torchtitan" and rec["tp"] == 1 and rec["cp"] == 1 and rec["zero_stage"] == 0:
            pred = _predict(rec, hw, cal, "torchtitan", HostCosts())
            by_file.setdefault(rec["_file"], []).append(rec["time_s"] / pred)
    return {f: statistics.median(v) for f, v in by_file.items()}


def fit_framework(framework: str, rows, factors: dict[str, float]) -> tuple[HostCosts, float]:
    """The HostCosts of ``framework`` that best predict its host-bound steps (measured seconds
    divided by the machine factor), and the root-mean-square log error of the fit."""
    names = FITTED[framework]
    mine = [(r, hw, cal) for r, hw, cal in rows if r["framework"] == framework]
    base = get_framework(framework).host

    def costs(x) -> HostCosts:
        return base.model_copy(update=dict(zip(names, (float(v) for v in x))))

    def residuals(x):
        h = costs(x)
        return [math.log(_predict(r, hw, cal, framework, h) / (r["time_s"] / factors[r["_file"]]))
                for r, hw, cal in mine]

    lo, hi = zip(*(BOUNDS[n] for n in names))
    res = least_squares(residuals, [START[n] for n in names], bounds=(lo, hi), x_scale="jac")
    return costs(res.x), float(np.sqrt(np.mean(np.square(res.fun))))


def fit_all(files=HOST_FILES) -> dict[str, tuple[HostCosts, float]]:
    """Fitted host costs (and RMS log error) of every framework with host-grid records."""
    rows = _timed(files)
    factors = machine_factors(rows)
    return {fw: fit_framework(fw, rows, factors) for fw in FITTED}


def main() -> None:
    rows = _timed()
    factors = machine_factors(rows)
    print("machine factor (measured / predicted, torch-native without TP, CP or sharding), per file:",
          {f: round(v, 3) for f, v in factors.items()})
    for fw in FITTED:
        host, rms = fit_framework(fw, rows, factors)
        vals = ", ".join(f"{n} {getattr(host, n):.3g}" for n in FITTED[fw])
        print(f"{fw}: {vals}  (RMS log error {rms:.3f} over its host-grid steps)")


if __name__ == "__main__":
    main()
