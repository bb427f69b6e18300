"""The fixed cost of a grouped GEMM call (issue #12 item 2): ``gemm_grouped_fixed_s``.

``torch._grouped_mm`` (a CUTLASS grouped kernel on Hopper) builds each group's problem size and
operand addresses on the device from the group offsets before its GEMM kernel runs; meshcast's
grouped model (simulator/compute.py grouped_gemm_time) has the tiles and the memory roofline of
the GEMM itself, so that set-up is one more fixed cost. Fitted on the first grouped run only
(``h100_grouped_gemm.json``, 60 layers): the median over its ``grouped_mm`` records of measured
minus predicted seconds with the parameter at 0 (a median: robust to the few large layers whose
tile choice is off either way). The second H100 run and the H200 run are never fitted; they test
it (tests/test_gemm_model.py). The value is written into hardware_specs/profiles/h100-sxm.yaml by
hand (H200 takes it as a transfer) and the test checks the profile equals this fit.

    PYTHONPATH=. python -m validation.grouped_fit
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from simulator.calibration import calibration_for
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent / "measurements"
FIT_FILE = "h100_grouped_gemm.json"


def fit_grouped_fixed_s(name: str = FIT_FILE) -> float:
    """Median of measured minus predicted seconds (set-up cost at 0) over the file's
    ``grouped_mm`` records: the grouped call's set-up, seconds."""
    mf = load_measurements(MEAS / name)
    hw = hardware_for(mf)
    cal = replace(calibration_for(hw.accelerator)[0], gemm_grouped_fixed_s=0.0)
    return statistics.median(r["time_s"] - predict_record(r, hw, cal).time_s
                             for r in mf.records if r.get("impl") == "grouped_mm")


def main() -> None:
    print(f"gemm_grouped_fixed_s = {fit_grouped_fixed_s():.3e} s (median residual of {FIT_FILE}'s grouped_mm records)")


if __name__ == "__main__":
    main()
