"""Collectives as GPU time plus the host's call: fit candidate coll40 (issue #12 item 4, session 40).

    python -m validation.coll40_fit                       # fit and report
    python -m validation.coll40_fit --out validation/candidates/h200-sxm-coll40.yaml

Why. Every earlier collectives file times one call between CUDA events after a GPU-side sync
(``time_s``). Run 40 (validation/harness/collectives.py v2) also timed each case replayed from a
CUDA graph (``time_graph_s``: no host work per call) and the host's seconds to issue one call while
the stream is held (``host_issue_s``). On that machine a call's ``time_s`` is, within a few µs, the
sum of the two at every size up to 64 MiB: the start event fires when the sync finishes, and the
collective starts only once the host has issued it (30–50 µs of ProcessGroupNCCL and NCCL enqueue
per call), so a small collective's "latency" of 30–80 µs, which moved 2× between lent machines, is
mostly the host's; the GPU's own is 7–15 µs below 1 MiB. The committed α (44 µs) is that sum.

What. The link law (simulator.comm: α, β, LL protocol, per-kind fractions, ring start-up) is
refitted on the GPU's time alone: ``time_graph_s`` up to 64 MiB, ``time_batched_s`` from 256 MiB
(back-to-back calls: the host runs ahead, the GPU never waits for it). The parameters that only
records on more than two GPUs constrain (chunk, own-shard steps) keep the committed values. The
host's cost of one call issued alone is ``collective_host_s[kind]``, the median ``host_issue_s`` of
the fit run per kind: ``validate`` predicts an isolated call's ``time_s`` as that plus the GPU
time; inside a training step the framework's host model already counts each collective call among
its ops (simulator.engine._host_seconds), so the GPU law is what a step's GPU stream pays.

Fit data: run 40 (``h200x2_collectives40.json``). Development checks (seen while building this):
run 40b, the same machine a minute later, and the GPU-bound part of the nine earlier 2-GPU runs
(``time_batched_s`` from 8 MiB: there the host issues faster than the GPU finishes, as run 40 shows,
batched within 2–5% of graph). The next fresh 2-GPU machine judges it.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from simulator.calibration import calibration_for
from simulator.comm import COLLECTIVES
from validation.calibrate import calibrate

from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.prereg_collectives import gpu_time_s
from validation.records import MeasurementFile, load_measurements

MEASUREMENTS = Path(__file__).resolve().parent / "measurements"
FIT_RUN = MEASUREMENTS / "h200x2_collectives40.json"
REPEAT_RUN = MEASUREMENTS / "h200x2_collectives40b.json"
EARLIER_RUNS = [MEASUREMENTS / "h200x2_collectives.json", MEASUREMENTS / "h200x2_collectives19.json"] + \
    [MEASUREMENTS / "repeat" / f"h200x2_collectives_run{i}.json" for i in (2, 4, 5, 6, 7, 8)]
NCCL_RING_BUS_BPS = 360e9           # NCCL's ring graph on H200 NVLink: 12 channels x 30 GB/s (its log)
GPU_BOUND_BATCHED_BYTES = 8 << 20    # from here batched back-to-back calls are the GPU's time (run 40)
GPU_PARAMS = ("links.nvlink.alpha_s", "links.nvlink.bandwidth_fraction", "links.nvlink.ll_alpha_s",
              "links.nvlink.ll_bandwidth_fraction", "links.nvlink.ramp_s", "links.nvlink.ramp_tau_s",
              "collective_fraction.", "collective_alpha_fraction.")


def gpu_time_file(path: Path, min_batched_bytes: int = 0) -> MeasurementFile:
    """The collective records of ``path`` that carry a GPU time, with ``time_s`` set to it."""
    mf = load_measurements(path)
    recs = [{**r, "time_s": t} for r in mf.records
            if r.get("kind") in COLLECTIVES and (t := gpu_time_s(r, min_batched_bytes)) is not None]
    return MeasurementFile(mf.path, mf.info, recs)


def host_call_seconds(path: Path) -> dict[str, float]:
    """{kind: median host seconds to issue one call} over the records of ``path`` that measured it."""
    recs = load_measurements(path).records
    return {k: statistics.median(v) for k in COLLECTIVES
            if (v := [float(r["host_issue_s"]) for r in recs if r.get("kind") == k and r.get("host_issue_s")])}


def fit_candidate(name: str = "h200-sxm-coll40"):
    """The candidate calibration: the committed H200 profile with its NVLink law refitted on run
    40's GPU times and ``collective_host_s`` from run 40's host issue times."""
    mf = gpu_time_file(FIT_RUN)
    hw = hardware_for(load_measurements(FIT_RUN))
    committed = calibration_for(hw.accelerator)[0]
    nvlink = dataclasses.replace(committed.link("nvlink"), nccl_bus_Bps=NCCL_RING_BUS_BPS)
    start = dataclasses.replace(committed, links={**committed.links, "nvlink": nvlink})
    report = calibrate([(mf, hw)], name, start=start, holdout_every=0, only=GPU_PARAMS)
    cal = dataclasses.replace(report.calibration, collective_host_s=host_call_seconds(FIT_RUN))
    return cal, report


def kind_mape(path: Path, cal, min_batched_bytes: int, min_bytes: int = 0) -> dict[str, tuple[float, int]]:
    """{kind: (MAPE of the predicted GPU time against the measured one, records)} of a run."""
    mf = gpu_time_file(path, min_batched_bytes)
    hw = hardware_for(load_measurements(path))
    errs: dict[str, list[float]] = {}
    for r in mf.records:
        if int(r["bytes"]) >= min_bytes:
            p = predict_record(r, hw, cal, gpu_only=True).time_s
            errs.setdefault(r["kind"], []).append(abs(p / r["time_s"] - 1.0))
    return {k: (100 * statistics.mean(v), len(v)) for k, v in errs.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write the candidate profile here")
    args = p.parse_args(argv)
    cal, report = fit_candidate()
    for key, res in report.fits.items():
        print(f"{key}: rms log {res.residual_rms:.4f} over {res.n_records} records; " +
              ", ".join(f"{q.path}={v:.4g}" for q, v in zip(res.params, res.values)))
    print("collective_host_s (µs):", {k: round(v * 1e6, 1) for k, v in cal.collective_host_s.items()})
    for label, path, lo in [("fit run 40", FIT_RUN, 0), ("repeat 40b", REPEAT_RUN, 0)] + \
            [(f"earlier {q.stem[18:] or 'fit'} (batched >= 8 MiB)", q, GPU_BOUND_BATCHED_BYTES) for q in EARLIER_RUNS]:
        m = kind_mape(path, cal, lo, lo)
        print(f"{label:40s} " + "  ".join(f"{k} {v:5.1f}%" for k, (v, n) in m.items()))
    if args.out:
        write_candidate(cal, report, Path(args.out))
    return 0


def write_candidate(cal, report, out: Path) -> None:
    """The committed H200 profile with the candidate's NVLink law, kind factors and host call
    costs, a ``fits`` entry and a ``candidate`` line, to ``out``."""
    import yaml

    from validation.candidate_io import write_candidate_profile
    data = yaml.safe_load((Path(__file__).resolve().parent.parent / "hardware_specs/profiles/h200-sxm.yaml").read_text())
    par = data["parameters"]
    par["links"]["nvlink"] = {k: float(v) for k, v in dataclasses.asdict(cal.link("nvlink")).items()}
    for key in ("collective_fraction", "collective_alpha_fraction", "collective_host_s"):
        par[key] = {k: float(v) for k, v in getattr(cal, key).items()}
    f = "validation/measurements/h200x2_collectives40.json"
    res = report.fits["comm:nvlink"]
    write_candidate_profile(data, [f], "comm:nvlink[coll40: GPU time]", {
        "fitted_on": [f], "method": ("validation/coll40_fit.py (issue #12 session 40): the NVLink law on each call's "
                                     "GPU time (CUDA-graph replay to 64 MiB, back-to-back from 256 MiB), NCCL's own "
                                     "protocol choice, least squares on log(predicted / measured); collective_host_s: "
                                     "median host_issue_s per kind"),
        "records": res.n_records, "fitted": [q.path for q in res.params] + ["collective_host_s"],
        "residual_rms_log": round(res.residual_rms, 4)},
        "coll40 (issue #12 session 40, {date}): registered beside h200-sxm for a fresh 2-GPU collectives run; a "
        "step's GPU pays the GPU law, validate's single calls the host's call too; not adopted unless it wins there "
        "and on the 2-GPU step sets", out)


if __name__ == "__main__":
    raise SystemExit(main())
