"""How fast is this machine's host? A machine's host-speed factor from tiny "twin" steps run on it.

A training step whose kernels are short is bound by the host (CPU) that issues them: eager
PyTorch's dispatch, DTensor's sharding propagation, FSDP2's hooks, Megatron's autograd functions.
meshcast costs that host time from per-op host costs fitted on one machine
(``Calibration.host_*``, validation/host_fit.py). Lent machines of one GPU kind differ in host
speed far more than in GPU speed: the same host-bound plan measured on three 2xH200 machines took
537, 664 and 782 ms (Megatron-Core tp 2, llama-1b s2048), while GPU-bound pipelines repeat within
1% (docs/measurements.md, "host speed").

A **twin** of a plan is the same plan on a model with the same op structure (layers, norm,
activation, positions, GQA) at a size whose kernels take microseconds (the harness's host-grid
models, names ``host-*``): its step time is the host's time alone, and it is the same at real
size on the same machine (validation/measurements/h200x2_plan_hostdiag.json: four structures,
tiny and real, within 6%). The **host-speed factor** of a measurement file is the median over
its twins of measured / predicted step seconds (a twin's predicted step is its host's time);
``Calibration.with_host_speed`` scales every host cost by it. (Until session 7 the factor was the
median of measured / predicted host seconds to issue forward and backward, ``host_fwd_bwd_s``
against ``host_issue_s``; that separate, unsynchronised pass is one sample and ran up to 20%
longer than the median timed step of the same twin, so the timed step is used: the step that
validation/host_fit.py fits machine factors on.) A user measures it the same way on their own machine (a minute of
tiny steps: ``plan_step.py launch --grid host-twins``) and passes it as ``--host-speed``.

Twins are calibration data: validate reports the other records of the file, never the twins,
under the factor; and only files that carry twins get one (every other file: factor 1, the
reference host).
"""
from __future__ import annotations

import statistics

from hardware_specs.catalog import Hardware
from simulator.calibration import Calibration
from validation.records import MeasurementFile

TWIN_PREFIX = "host-"


def is_twin(rec: dict) -> bool:
    """A plan_step record of a host-grid model (tiny sizes, real op structure)."""
    return rec.get("kind") == "plan_step" and str(rec.get("name", "")).startswith(TWIN_PREFIX)


def twin_ratios(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> list[float]:
    """Measured / predicted step seconds per twin of ``mf`` that ran (not out of memory)."""
    from validation.predict import Unsupported, predict_record
    out = []
    for rec in mf.records:
        if not is_twin(rec) or rec.get("oom") or not rec.get("time_s"):
            continue
        try:
            pred = predict_record(rec, hw, cal)
        except Unsupported:
            continue
        if pred.time_s:
            out.append(float(rec["time_s"]) / pred.time_s)
    return out


def host_speed_factor(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> tuple[float, int]:
    """(factor, twins used): the median twin ratio, or (1.0, 0) where the file has no twin."""
    ratios = twin_ratios(mf, hw, cal)
    return (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)


def non_twin_indices(mf: MeasurementFile) -> list[int]:
    """Indices of the records that are not twins (what a host-speed-corrected report covers)."""
    return [i for i, r in enumerate(mf.records) if not is_twin(r)]
