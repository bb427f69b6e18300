"""Accuracy of the attention kernel models per backend and per set (issue #12, item 3).

    python -m validation.attention_backends --profile h200-sxm FILE [FILE ...]

Reads attention records (validation/harness/attention_backends.py, or kernels.py's attention
section), predicts each with the profile, and prints per (backend, direction, set) the count, MAPE,
median and worst error, and how many shapes the backend refused on the GPU. ``set: random``
records are the held-out draw (never fitted); ``sweep`` records were fitted (four in five of
them: meshcast calibrate holds every fifth out). The FA3 model has no records of its own: it is
printed beside cuDNN on the same shapes as a prediction only.
"""
from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from simulator.calibration import load_calibration
from validation.hardware import hardware_for
from validation.predict import Unsupported, predict_record
from validation.records import load_measurements

ATTENTION_KINDS = ("attention_fwd", "attention_fwd_bwd")


def backend_table(paths: list[str], profile: str | None) -> list[dict]:
    """One row per (backend, kind, set): count, refused, MAPE, median and worst |error|, and the
    mean ratio of meshcast's FA3 prediction to the measured time of those shapes."""
    cal = load_calibration(profile)
    groups: dict[tuple, dict] = defaultdict(lambda: {"errors": [], "refused": 0, "fa3": []})
    for path in paths:
        mf = load_measurements(path)
        hw = hardware_for(mf)
        for rec in mf.records:
            if rec.get("kind") not in ATTENTION_KINDS:
                continue
            g = groups[(rec.get("backend", "flash"), rec["kind"], rec.get("set", "-"))]
            if rec.get("unsupported"):
                g["refused"] += 1
                continue
            if not rec.get("time_s") or rec.get("oom"):
                continue
            try:
                pred = predict_record(rec, hw, cal).time_s
                fa3 = predict_record(dict(rec, backend="fa3"), hw, cal).time_s
            except Unsupported:
                continue
            g["errors"].append(pred / rec["time_s"] - 1.0)
            g["fa3"].append(fa3 / rec["time_s"])
    rows = []
    for (backend, kind, set_), g in sorted(groups.items()):
        errs = [abs(e) for e in g["errors"]]
        rows.append({"backend": backend, "kind": kind, "set": set_, "count": len(errs), "refused": g["refused"],
                     "mape": statistics.fmean(errs) if errs else None,
                     "median": statistics.median(errs) if errs else None, "worst": max(errs, default=None),
                     "bias": statistics.fmean(g["errors"]) if errs else None,
                     "fa3_over_measured": statistics.fmean(g["fa3"]) if g["fa3"] else None})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--profile", help="calibration profile (default: the documented defaults)")
    args = ap.parse_args(argv)

    def pct(x):
        return "-" if x is None else f"{100 * x:5.1f}%"

    print(f"{'backend':13s} {'kind':17s} {'set':6s} {'n':>4s} {'refused':>7s} {'MAPE':>7s} {'median':>7s} "
          f"{'worst':>7s} {'bias':>7s} {'fa3/meas':>8s}")
    for r in backend_table(args.files, args.profile):
        fa3 = "-" if r["fa3_over_measured"] is None else f"{r['fa3_over_measured']:.2f}"
        print(f"{r['backend']:13s} {r['kind']:17s} {r['set']:6s} {r['count']:4d} {r['refused']:7d} {pct(r['mape']):>7s} "
              f"{pct(r['median']):>7s} {pct(r['worst']):>7s} {pct(r['bias']):>7s} {fa3:>8s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
