"""Fit the FlashAttention-2 uneven-mask candidate fa2mask (issue #12 session 41) and write it as candidate profiles.

    python -m validation.fa2mask_fit --write     # validation/candidates/h100-sxm-fa2mask.yaml and h200-sxm-fa2mask.yaml
    python -m validation.fa2mask_fit             # fit and report only

Why. On every committed attention fresh draw the FlashAttention-2 forward (SDPA ``flash``) is predicted 25-33%
fast on causal shapes whose length is no multiple of 128 below ~1000 keys, and 5-15% fast up to ~3000, while the
same shapes at multiples of 128 are within a few per cent. A dedicated probe on one H100 (``--mask-probe`` of
validation/harness/attention_backends.py: forward, causal and not, head_dim 64 and 128, lengths 512..8200 with the
same heads at each multiple of 128 and just past it; ``validation/measurements/repeat/h100_attention_maskprobe.json``)
shows one kernel per call, the same time at 520 and 576 keys, and 1.55x (head_dim 64) / 1.34x (128) the time of
640 keys with the same tiles, fading by ~4000 keys; non-causal shapes, cuDNN and the memory-efficient kernel show
nothing of the kind. flash_fwd_kernel.h runs one more masking step per query block when Is_even_MN is false.

What. ``attention_uneven_mask_tiles`` (simulator.compute.fa2_uneven_mask_work): that step's cost beyond a plain
tile's, in tiles, on each causal query block with more tiles than the even kernel masks. One value, fitted (soft-L1 on
log(predicted / measured), scipy's bounded scalar search) on the probe's FlashAttention-2 records (one H100), every other
parameter kept. The H200 candidate carries the same value in tiles (transferred, not measured on an H200). The
committed fresh draws were looked at to find this (development data); the next registered draws judge it.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

from simulator.calibration import load_calibration
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent
PROBE = "validation/measurements/repeat/h100_attention_maskprobe.json"
PROFILES = {"h100": "h100-sxm", "h200": "h200-sxm"}
PARAM = "attention_uneven_mask_tiles"
F_SCALE = 0.05          # soft-L1 scale of the log errors (scipy least_squares' loss, one parameter: a bounded search)


def flash_forward(path: str) -> list:
    """(record, hardware) of every timed FlashAttention-2 forward record of ``path``."""
    mf = load_measurements(ROOT.parent / path)
    hw = hardware_for(mf)
    return [(r, hw) for r in mf.records
            if r.get("backend") == "flash" and r.get("kind") == "attention_fwd" and r.get("time_s")]


def fresh_draws(gpu: str) -> list:
    """(record, hardware) of the FlashAttention-2 forwards of every committed attention fresh draw of ``gpu``."""
    from validation.candidate_io import attention_fresh_paths
    paths = attention_fresh_paths(gpu)
    return [p for path in paths for p in flash_forward(str(path.relative_to(ROOT.parent)))]


def log_errors(pairs: list, cal) -> np.ndarray:
    """log(predicted / measured) of each record under ``cal``."""
    return np.array([math.log(predict_record(r, hw, cal).time_s / r["time_s"]) for r, hw in pairs])


def mape(pairs: list, cal) -> float:
    """Mean |predicted / measured - 1| over ``pairs``."""
    return float(np.mean([abs(math.exp(e) - 1) for e in log_errors(pairs, cal)]))


def with_extra(cal, extra: float):
    """``cal`` with ``attention_uneven_mask_tiles`` = extra."""
    return dataclasses.replace(cal, **{PARAM: float(extra)})


def fit_extra(pairs: list, cal) -> float:
    """The extra masked-step cost (tiles) that fits ``pairs`` best under ``cal`` (soft-L1 on log errors)."""
    def cost(x: float) -> float:
        z = (log_errors(pairs, with_extra(cal, x)) / F_SCALE) ** 2
        return float(np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))
    return float(minimize_scalar(cost, bounds=(0.0, 10.0), method="bounded", options={"xatol": 1e-3}).x)


def write_candidate(gpu: str, extra: float, err: dict) -> Path:
    """The committed profile of ``gpu`` with the fitted value, a ``fits`` entry and a ``candidate`` line."""
    import yaml

    from validation.candidate_io import registered_line, write_candidate_profile
    base = ROOT.parent / "hardware_specs" / "profiles" / f"{PROFILES[gpu]}.yaml"
    out = ROOT / "candidates" / f"{PROFILES[gpu]}-fa2mask.yaml"
    data = yaml.safe_load(base.read_text())
    data["parameters"][PARAM] = round(extra, 4)
    how = "fitted on the H100 probe" if gpu == "h100" else "the H100 probe's value in tiles, transferred"
    write_candidate_profile(data, [PROBE], f"compute[fa2mask: {PARAM}]", {
        "fitted_on": [PROBE], "method": (f"validation/fa2mask_fit.py (issue #12 session 41): {how}; soft-L1 least "
                                         "squares on log(predicted / measured) over the probe's FlashAttention-2 "
                                         "forwards, every other parameter kept"),
        "records": err["n"], "fitted": [PARAM],
        "fitted_error": {"flash_fwd_probe": {"count": err["n"], "mape_before": round(err["before"], 4),
                                             "mape": round(err["after"], 4)}}},
        registered_line("fa2mask", 41, PROFILES[gpu]), out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the fa2mask candidate profiles of both GPUs")
    a = ap.parse_args(argv)
    probe = flash_forward(PROBE)
    h100 = load_calibration(PROFILES["h100"])
    extra = fit_extra(probe, h100)
    err = {"n": len(probe), "before": mape(probe, h100), "after": mape(probe, with_extra(h100, extra))}
    print(f"probe (H100, {err['n']} FlashAttention-2 forwards): {PARAM} = {extra:.3f} tiles; MAPE "
          f"{100 * err['before']:.2f}% -> {100 * err['after']:.2f}%")
    for gpu in PROFILES:
        cal = load_calibration(PROFILES[gpu])
        dev = fresh_draws(gpu)
        print(f"{gpu} committed fresh draws (development data, {len(dev)} records): flash forward MAPE "
              f"{100 * mape(dev, cal):.2f}% -> {100 * mape(dev, with_extra(cal, extra)):.2f}%")
        if a.write:
            print("wrote", write_candidate(gpu, extra, err).relative_to(ROOT.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
