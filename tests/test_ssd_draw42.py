"""The Mamba-2 SSD scan suite with a fresh 40-shape draw (seed 42), registered before it ran (issue #12,
session 25) by the committed model of 9738710 and by candidate ssd42 (the HBM bytes counted kernel by
kernel from mamba_ssm, the SSD parameters refitted on h200_ssd_scan.json), then measured on a newly lent
H200 and H100. The H100 never had an SSD measurement: its profile's SSD parameters are H200's (transfer).
The H100's first process ran out of budget after the sweep; the random draw ran in a second process on
the same machine (repeat/h100_ssd_scan42_random.json). Figures: docs/validation.md, "The Mamba-2 SSD scan"."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hardware_specs.catalog import load_accelerator
from simulator.calibration import calibration_for
from simulator.engine import device_model
from validation.ssd_draws import registered_times, score

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
LOGS = MEAS / "logs"
# run: (gpu, measured file, rows of the registration it covers)
RUNS = {"h200": ("h200", "repeat/h200_ssd_scan42.json", slice(0, 232)),
        "h100_sweep": ("h100", "repeat/h100_ssd_scan42.json", slice(0, 152)),
        "h100_random": ("h100", "repeat/h100_ssd_scan42_random.json", slice(152, 232))}
# (run, set, subset): {registration: (count, MAPE)} as registered
AS_REGISTERED = {
    ("h200", "random", "gpu_bound"): {"committed": (14, 0.0826), "candidate": (14, 0.0514)},
    ("h200", "sweep", "gpu_bound"): {"committed": (22, 0.0778), "candidate": (22, 0.0340)},
    ("h200", "random", "all"): {"committed": (80, 0.1078), "candidate": (80, 0.1004)},
    ("h200", "sweep", "all"): {"committed": (152, 0.1011), "candidate": (152, 0.0947)},
    ("h100_sweep", "sweep", "gpu_bound"): {"committed": (12, 0.2156), "candidate": (12, 0.1474)},
    ("h100_sweep", "sweep", "all"): {"committed": (152, 0.3391), "candidate": (152, 0.3271)},
    ("h100_random", "random", "gpu_bound"): {"committed": (8, 0.2446), "candidate": (8, 0.2836)},
    ("h100_random", "random", "all"): {"committed": (80, 0.3338), "candidate": (80, 0.3394)},
}


def _shape(r: dict) -> tuple:
    """A record's direction and shape: the key that pairs the same call across runs."""
    return (r["direction"], r["batch"], r["seq"], r["heads"], r["groups"], r["gate"])


def _sweep(rel: str) -> list[dict]:
    """The sweep records of measurement file ``rel`` (under validation/measurements)."""
    return [r for r in json.loads((MEAS / rel).read_text())["records"] if r["set"] == "sweep"]


def _run(name: str):
    gpu, rel, rows = RUNS[name]
    doc = json.loads((MEAS / rel).read_text())
    records = doc["records"][:rows.stop - rows.start]
    regs = {who: registered_times(LOGS / f"prereg_ssd42_{gpu}{suffix}.txt")[rows]
            for who, suffix in (("committed", ""), ("candidate", "_candidate"))}
    acc = load_accelerator(f"{gpu}-sxm")
    return doc, records, regs, device_model(acc, calibration_for(acc)[0])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runs_are_the_registered_draw(name):
    """Each run is seed 42 with 40 random shapes, every case timed, in the registered order, on the GPU
    it was registered for, measured the day after the fit data (2026-11-23)."""
    doc, records, regs, _ = _run(name)
    info = doc["info"]
    assert info["random_seed"] == 42 and info["random_n"] == 40 and info["date"] >= "2026-11-24"
    assert info["gpu"].startswith("NVIDIA " + RUNS[name][0].upper())
    assert info["random_only"] == (name == "h100_random")
    assert all(r["ran"] for r in records)
    for who in regs:
        assert len(regs[who]) == len(records)
        assert all(lab.split()[:2] == [r["set"], r["direction"]] for (lab, _), r in zip(regs[who], records))
        assert all(f"b{r['batch']} " in lab and f"s{r['seq']} " in lab and f"h{r['heads']} " in lab
                   for (lab, _), r in zip(regs[who], records))


@pytest.mark.parametrize("key", sorted(AS_REGISTERED))
def test_scored_as_registered(key):
    """H200: the candidate halves the error of the GPU-bound calls (random 8.3 -> 5.1%, sweep 7.8 -> 3.4%;
    their forward + backward from -26% / -25% to -12% / -10%, median). H100 (transfer): the first process's
    sweep 21.6 -> 14.7%, the second process's random draw 24.5 -> 28.4%; the two processes disagree (next
    test), so the H100 figures do not decide the model. Host-bound calls, most of every run, measure the
    machine's CPU: +5.5% (H200) and -38% (H100) median, alike for both."""
    name, set_, subset = key
    _, records, regs, dev = _run(name)
    got = score(records, regs, dev)[(set_, subset)]
    for who, (count, mape) in AS_REGISTERED[key].items():
        assert got[who][0] == count and got[who][1] == pytest.approx(mape, abs=5e-5), who


def test_candidate_wins_where_it_was_fitted_to_win():
    """On the H200 (the GPU whose measurements it was fitted on; this run is a separate, later one) the
    candidate is better on every subset; it was adopted in session 25."""
    for (name, _, _), v in AS_REGISTERED.items():
        if name == "h200":
            assert v["candidate"][1] < v["committed"][1]


def test_h100_processes_disagree():
    """The H100 sweep (first process) ran its large forward scans 1.75x the H200's times for the same shapes,
    more than HBM bandwidth alone allows (4.8 / 3.35 TB/s = 1.43x); the second process's random shapes ran at
    about 0.8x the model's H100 prediction while the first's ran at 1.2x. Clocks during the same process's
    later GEMM draw were at 1980 MHz. Not explained (Triton autotune picks per process); recorded."""
    h200 = {_shape(r): r["time_s"] for r in _sweep("repeat/h200_ssd_scan42.json")}
    big = [r["time_s"] / h200[_shape(r)] for r in _sweep("repeat/h100_ssd_scan42.json")
           if r["direction"] == "fwd" and h200[_shape(r)] > 1e-3]
    assert len(big) == 6 and all(1.7 < x < 1.8 for x in big)


def test_h200_sweep_reproduces_the_fit_run():
    """The seed-42 run's sweep against h200_ssd_scan.json's (session 8's fit data, another machine): the
    GPU-bound forward calls within 1%, forward + backward 5-6% slower."""
    fit = {_shape(r): r["time_s"] for r in _sweep("h200_ssd_scan.json")}
    new = _sweep("repeat/h200_ssd_scan42.json")
    for direction, lo, hi in (("fwd", 0.99, 1.01), ("fwd_bwd", 1.04, 1.07)):
        big = [r["time_s"] / fit[_shape(r)] for r in new if r["direction"] == direction
               and fit[_shape(r)] > (1e-3 if direction == "fwd" else 5e-3)]
        assert len(big) == 6 and all(lo < x < hi for x in big), direction


@pytest.mark.parametrize("gpu,like", [("h200", "h200_ssd_scan.json"), ("h100", "h100_kernels.json")])
def test_adopted_model_is_the_registered_candidate(gpu, like):
    """Today's code and committed profile predict every case exactly as candidate ssd42 was registered:
    nothing was changed after the draw was seen."""
    from validation.prereg import kernel_rows
    reg = registered_times(LOGS / f"prereg_ssd42_{gpu}_candidate.txt")
    today = kernel_rows("ssd_scan", str(MEAS / like), 42, None, 40)
    assert [lab for lab, _ in reg] == [lab.strip() for lab, _ in today]
    assert all(t == pytest.approx(r, abs=0.006e-6) for (_, r), (_, t) in zip(reg, today))


def test_score_refuses_a_registration_of_other_records():
    """A registration that does not list the run's records in order is refused, not scored."""
    _, records, regs, dev = _run("h100_random")
    with pytest.raises(ValueError, match="does not list"):
        score(records[1:], regs, dev)
