"""Framework host costs from host-bound steps (issue #11).

The host grid of validation/harness/plan_step.py (``--grid host``) runs the real models' op
structure at sizes whose kernels take microseconds (host-llama, host-gpt: hidden 256), so a step
lasts as long as its host takes to issue it; the "twins" that later plan sets carry (``--twins``:
the same plan on a host-grid model) are such steps too, on other machines. Plain eager PyTorch is
meshcast's reference (``host_op_s`` per modelled op, fitted in the calibration profile), so one
joint least-squares fit over every host-bound step of HOST_FILES finds:

  machine factors   one per file (one machine each) but the anchor (ANCHOR, the one-GPU host grid,
                    whose factor is the median measured/predicted of its plain torch-native steps):
                    how much slower that machine's host is than the profile's;
  framework costs   the HostCosts (simulator/frameworks/profile.py) of each framework in FITTED,

minimising the squared log error of predicted x factor against measured step seconds, each
predicted through simulate() itself. Megatron-Core fits ``op_scale``, ``tp_op_scale``,
``microbatch_ops`` (per micro-batch and model chunk) and ``recompute_call_ops`` (per checkpointed
region: CheckpointFunction's RNG-state save/restore and nested backward); ``p2p_sync`` is not
fitted (p2p_communication.py synchronizes after batch_isend_irecv). Torch-native is the reference
(op_scale 1) and fits ``tp_op_scale`` (DTensor's dispatch), ``cp_op_scale`` (context parallel's)
and ``pp_microbatch_ops`` (torch.distributed.pipelining's per-micro-batch, per-chunk schedule code).
Only twins (``host-*`` models) enter; the fitted values are written into the framework YAMLs by
hand and tests/test_host_fit.py checks that they are what this fit gives on the committed files.

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
HOST_FILES = ("h200_plan_host.json", "h200x2_plan_host.json", "h200x2_plan_host_cp.json",
              "h200x2_plan_hostdiag.json", "h200x2_plan_native6.json")
ANCHOR = "h200_plan_host.json"
# host-bound MoE steps (tiny experts, 4-64 of them) that fitted megatron-core-local's
# expert_loop_op_scale by hand (session 19; simulator/frameworks/megatron-core-local.yaml): every
# record of them is fit data
EXPERT_LOOP_FILES = ("h200_moe_host.json",)
FITTED = {"megatron-core-local": ("op_scale", "tp_op_scale", "microbatch_ops", "recompute_call_ops"),
          "torchtitan": ("tp_op_scale", "cp_op_scale", "pp_microbatch_ops")}
START = {"op_scale": 1.0, "tp_op_scale": 1.0, "cp_op_scale": 1.0, "microbatch_ops": 50.0, "recompute_call_ops": 10.0,
         "pp_microbatch_ops": 10.0}
BOUNDS = {"op_scale": (0.2, 10.0), "tp_op_scale": (0.2, 20.0), "cp_op_scale": (0.2, 20.0),
          "microbatch_ops": (0.0, 2000.0), "recompute_call_ops": (0.0, 2000.0),
          "pp_microbatch_ops": (0.0, 2000.0)}


def _timed(files=HOST_FILES) -> list[tuple[dict, object, object]]:
    """(record, hardware, calibration) of every timed host-bound twin (``host-*`` model) of the
    host files; each record carries its file's name as ``_file`` (one file, one machine)."""
    out = []
    for name in files:
        mf = load_measurements(MEAS / name)
        hw = hardware_for(mf)
        cal = calibration_for(hw.accelerator)[0]
        out += [(dict(r, _file=name), hw, cal) for r in mf.records
                if r.get("time_s") and str(r.get("name", "")).startswith("host-")]
    return out


def _predict(rec, hw, cal, framework: str, host: HostCosts) -> float:
    """Predicted step seconds of ``rec`` with ``framework``'s profile given ``host`` costs."""
    base = get_framework(framework)
    _LOADED[framework] = base.model_copy(update={"host": host})
    try:
        return predict_record(rec, hw, cal).time_s
    finally:
        _LOADED[framework] = base


def anchor_factor(rows) -> float:
    """The anchor file's machine factor: median measured/predicted over its plain torch-native
    steps (no tensor, context or pipeline parallelism, no sharding), with the eager reference."""
    ratios = [rec["time_s"] / _predict(rec, hw, cal, "torchtitan", HostCosts()) for rec, hw, cal in rows
              if rec["_file"] == ANCHOR and rec["framework"] == "torchtitan" and rec["tp"] == rec["cp"] == rec["pp"] == 1
              and rec["zero_stage"] == 0]
    return statistics.median(ratios)


def _unpack(x, files: list[str]) -> tuple[dict[str, HostCosts], dict[str, float]]:
    """Parameter vector -> (HostCosts per framework, log machine factor per non-anchor file)."""
    costs, i = {}, 0
    for fw, names in FITTED.items():
        costs[fw] = get_framework(fw).host.model_copy(update=dict(zip(names, (float(v) for v in x[i:i + len(names)]))))
        i += len(names)
    return costs, dict(zip(files, (float(v) for v in x[i:])))


def fit_joint(rows) -> tuple[dict[str, HostCosts], dict[str, float], dict[str, float]]:
    """(HostCosts per framework, machine factor per file, RMS log error per framework) that best
    predict every host-bound step of ``rows``: one least-squares fit of log(predicted x factor /
    measured) over all of them (module docstring)."""
    files = sorted({r["_file"] for r, _, _ in rows} - {ANCHOR})
    log_anchor = math.log(anchor_factor(rows))

    def residuals(x):
        costs, logf = _unpack(x, files)
        return [math.log(_predict(r, hw, cal, r["framework"], costs[r["framework"]]) / r["time_s"])
                + logf.get(r["_file"], log_anchor) for r, hw, cal in rows if r["framework"] in FITTED]

    names = [n for fw in FITTED for n in FITTED[fw]]
    lo = [BOUNDS[n][0] for n in names] + [-1.0] * len(files)
    hi = [BOUNDS[n][1] for n in names] + [1.0] * len(files)
    res = least_squares(residuals, [START[n] for n in names] + [0.0] * len(files), bounds=(lo, hi), x_scale="jac")
    costs, logf = _unpack(res.x, files)
    rms, k = {}, 0
    fws = [r["framework"] for r, _, _ in rows if r["framework"] in FITTED]
    for fw in FITTED:
        mine = [e for e, f in zip(res.fun, fws) if f == fw]
        rms[fw] = float(np.sqrt(np.mean(np.square(mine))))
    factors = {f: math.exp(v) for f, v in logf.items()} | {ANCHOR: math.exp(log_anchor)}
    return costs, factors, rms


def fit_all(files=HOST_FILES) -> dict[str, tuple[HostCosts, float]]:
    """Fitted host costs (and RMS log error) of every framework with host-grid records."""
    costs, _, rms = fit_joint(_timed(files))
    return {fw: (costs[fw], rms[fw]) for fw in FITTED}


def main() -> None:
    costs, factors, rms = fit_joint(_timed())
    print("machine factor (this file's host / the profile's), per file:", {f: round(v, 3) for f, v in factors.items()})
    for fw in FITTED:
        vals = ", ".join(f"{n} {getattr(costs[fw], n):.3g}" for n in FITTED[fw])
        print(f"{fw}: {vals}  (RMS log error {rms[fw]:.3f} over its host-bound steps)")


if __name__ == "__main__":
    main()
