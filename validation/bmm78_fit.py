"""Fit the score-GEMM floor candidate bmm78 (issue #12 session 37) and write it as candidate profiles.

    python -m validation.bmm78_fit --gpu h200 --write      # validation/candidates/h200-sxm-bmm78.yaml and -m76bmm.yaml
    python -m validation.bmm78_fit --gpu h100              # fit and report only

Why. Megatron-Core's local attention (and Megatron-LM's unfused attention) runs QK^T, PV and their four
gradients as batched GEMMs in which one operand or the output is an s x s score matrix and one dimension is
head_dim. The committed model floors them by streaming their bytes at the generic rate (``hbm_fraction``, 0.66 of
the datasheet), which costs them ~21% slow inside profiled steps (validation.gemm_instep). The first isolated
draws of these GEMMs (bmm_random78, H200; bmm_random79, H100; registered in commit 960db25) say the same of the
long-sequence cases: they stream at 0.71-0.83 of the datasheet and are predicted 13-28% slow.

What. ``score_gemm_floor_fraction`` and ``score_gemm_floor_exponent`` (simulator.compute.score_gemm_floor_Bps):
the rate these GEMMs stream at, a fraction of the datasheet bandwidth from 1 GB on, falling as a power of the bytes
below (the form of session 33's gemm60 law; alone, these GEMMs stream at ~0.25 of the datasheet at 10 MB and
0.71-0.83 from ~300 MB), used by unfused attention's GEMMs only (not the per-expert or any other GEMM; absent from
the committed profiles, which predict as before). Two values per GPU, fitted (scipy
least_squares, soft-L1 on log(predicted / measured)) on the records of that GPU's draw, development data now; no
other parameter moves. Two candidate files: ``bmm78`` (the committed profile with it) and ``m76bmm`` (candidate
membound76 with it: the softmax and the GEMMs of local attention both changed, what an adoption would ship). The
next draws (H200 seed 80, H100 seed 81) and a registered attention draw judge them.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from simulator.calibration import load_calibration
from validation.gemm_regimes import reproduced_times
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent
DRAW = {"h200": 78, "h100": 79}
PROFILES = {"h200": "h200-sxm", "h100": "h100-sxm"}
PARAMS = ("score_gemm_floor_fraction", "score_gemm_floor_exponent")
START, LOWER, UPPER = (0.75, 0.2), (0.3, 0.0), (1.0, 1.0)


def samples(gpu: str) -> list:
    """(record, hardware) of every case of ``gpu``'s draw, each shape's faster pass (reproduced_times)."""
    mf = load_measurements(ROOT / "measurements" / "repeat" / f"{gpu}_bmm_random{DRAW[gpu]}.json")
    hw = hardware_for(mf)
    return [(r, hw) for r in reproduced_times(mf.records)]


def log_errors(pairs: list, cal) -> np.ndarray:
    """log(predicted / measured) of each record under ``cal``."""
    return np.array([math.log(predict_record(r, hw, cal).time_s / r["time_s"]) for r, hw in pairs])


def mape(pairs: list, cal) -> float:
    """Mean |predicted / measured − 1| over ``pairs``."""
    return float(np.mean([abs(math.exp(e) - 1) for e in log_errors(pairs, cal)]))


def with_law(cal, law: tuple):
    """``cal`` with the score-GEMM floor law (fraction, exponent)."""
    return dataclasses.replace(cal, **dict(zip(PARAMS, (float(v) for v in law))))


def fit_law(pairs: list, cal) -> tuple:
    """(fraction, exponent) of the score-GEMM floor that fit ``pairs`` best under ``cal`` (soft-L1 on log errors)."""
    res = least_squares(lambda x: log_errors(pairs, with_law(cal, x)), START, bounds=(LOWER, UPPER),
                        loss="soft_l1", f_scale=0.05)
    return tuple(float(v) for v in res.x)


def run(gpu: str):
    """(fitted (fraction, exponent), samples, committed calibration of its time, calibration with the law). The
    committed profile of its time is the one before session 39 adopted the law (frozen as candidate pre39)."""
    pairs = samples(gpu)
    committed = load_calibration(str(Path(__file__).resolve().parent / "candidates" / f"{PROFILES[gpu]}-pre39.yaml"))
    law = fit_law(pairs, committed)
    return law, pairs, committed, with_law(committed, law)


def write_candidate(gpu: str, base_path: Path, out: Path, name: str, law: tuple, err: tuple) -> None:
    """``base_path``'s profile with the fitted law, a ``fits`` entry and a ``candidate`` line, to ``out``."""
    import yaml

    from validation.candidate_io import write_candidate_profile
    data = yaml.safe_load(base_path.read_text())
    data["parameters"].update({p: round(v, 6) for p, v in zip(PARAMS, law)})
    f = f"validation/measurements/repeat/{gpu}_bmm_random{DRAW[gpu]}.json"
    write_candidate_profile(data, [f], f"compute[bmm78: {' '.join(PARAMS)}]", {
        "fitted_on": [f], "method": ("validation/bmm78_fit.py (issue #12 session 37): the HBM rate of unfused attention's "
                                     "batched GEMMs, soft-L1 least squares on log(predicted / measured) over every "
                                     "case of the draw (its faster pass; development data), every other parameter kept"),
        "records": err[0], "fitted": list(PARAMS),
        "fitted_error": {"bmm": {"count": err[0], "mape_before": round(err[1], 4), "mape": round(err[2], 4)}}},
        f"{name} (issue #12 session 37, {{date}}): registered beside {PROFILES[gpu]} for the bmm_random draw of seed "
        f"{DRAW[gpu] + 2} and an attention draw; not adopted unless it wins there and on the step sets", out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", choices=sorted(PROFILES), required=True)
    ap.add_argument("--write", action="store_true", help="write the bmm78 and m76bmm candidate profiles")
    a = ap.parse_args(argv)
    law, pairs, committed, cand = run(a.gpu)
    err = (len(pairs), mape(pairs, committed), mape(pairs, cand))
    print(f"{a.gpu}: {err[0]} records; fraction {law[0]:.4f}, exponent {law[1]:.4f}; MAPE committed "
          f"{100 * err[1]:.2f}% -> {100 * err[2]:.2f}%")
    if a.write:
        cands = ROOT / "candidates"
        write_candidate(a.gpu, cands / f"{PROFILES[a.gpu]}-pre39.yaml", cands / f"{PROFILES[a.gpu]}-bmm78.yaml",
                        "bmm78", law, err)
        write_candidate(a.gpu, cands / f"{PROFILES[a.gpu]}-membound76.yaml", cands / f"{PROFILES[a.gpu]}-m76bmm.yaml",
                        "m76bmm (membound76 + bmm78)", law, err)
        print(f"wrote {cands}/{PROFILES[a.gpu]}-bmm78.yaml and -m76bmm.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
