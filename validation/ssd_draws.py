"""Scoring a registered run of the Mamba-2 SSD scan suite (validation/harness/ssd_scan.py) against the
predictions committed before it ran (validation/measurements/logs/prereg_ssd*.txt).

A synchronised scan alone takes the larger of its GPU time and the host's Triton launch time
(simulator.ssm.ssd_time ``isolated``), and the host's time depends on the machine's CPU: most small
calls measure the host, not the kernels. So besides every record, the GPU-bound calls are scored on
their own: those whose GPU time as the committed model predicts it is at least ``GPU_BOUND_FACTOR``
times the file's host floor, the median measured time of the ``FLOOR_RECORDS`` calls of each
direction with the least predicted GPU work (a selection made from predictions, never from the
measured times of the calls selected).
"""
from __future__ import annotations

import statistics
from pathlib import Path

GPU_BOUND_FACTOR = 1.5
FLOOR_RECORDS = 15


def registered_times(log: str | Path) -> list[tuple[str, float]]:
    """(case label, predicted seconds) of every row of a registration log, in order."""
    out = []
    for line in Path(log).read_text().splitlines():
        if line and not line.startswith("#"):
            label, value, unit = line.rsplit(None, 2)
            if unit != "us":
                raise ValueError(f"{log}: a registration row ends in microseconds, not {unit!r}: {line!r}")
            out.append((label.strip(), float(value) * 1e-6))
    return out


def gpu_seconds(rec: dict, dev) -> float:
    """The committed model's GPU time of one ssd_scan record (forward, or forward + backward), without
    the host floor: simulator.ssm.ssd_time, not isolated."""
    from simulator.ssm import ssd_cost, ssd_time
    from validation.predict import ssd_record_args
    args = dict(ssd_record_args(rec), sm_count=dev.accelerator.sm_count)
    t = ssd_time(dev, ssd_cost(**args))
    if rec.get("direction") == "fwd_bwd":
        t += ssd_time(dev, ssd_cost(**args, backward=True), backward=True)
    return t


def host_floor(records: list[dict], gpu: list[float]) -> dict[str, float]:
    """Per direction, the median measured seconds of the FLOOR_RECORDS records with the least predicted
    GPU time: the machine's host launch time for one scan."""
    out = {}
    for d in ("fwd", "fwd_bwd"):
        least = sorted((g, r["time_s"]) for r, g in zip(records, gpu) if r["direction"] == d)[:FLOOR_RECORDS]
        out[d] = statistics.median(t for _, t in least)
    return out


def score(records: list[dict], regs: dict[str, list[tuple[str, float]]], dev) -> dict:
    """{(set, subset): {name: (count, MAPE, median signed error)}} of ``records`` (one process's run, in
    the suite's order, every one timed) against each registration in ``regs`` (the rows of
    :func:`registered_times` for those records); subset ``all`` or ``gpu_bound``."""
    for name, reg in regs.items():
        if len(reg) != len(records) or any(lab.split()[:2] != [r["set"], r["direction"]]
                                           for (lab, _), r in zip(reg, records)):
            raise ValueError(f"registration {name!r} does not list these {len(records)} records in order")
    gpu = [gpu_seconds(r, dev) for r in records]
    floor = host_floor(records, gpu)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault((r["set"], "all"), []).append(i)
        if gpu[i] >= GPU_BOUND_FACTOR * floor[r["direction"]]:
            groups.setdefault((r["set"], "gpu_bound"), []).append(i)
    out = {}
    for key, idx in groups.items():
        out[key] = {}
        for name, reg in regs.items():
            errs = [reg[i][1] / records[i]["time_s"] - 1 for i in idx]
            out[key][name] = (len(errs), sum(map(abs, errs)) / len(errs), statistics.median(errs))
    return out
