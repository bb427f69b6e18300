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

**MoE twins** (session 20): a dense twin runs none of a MoE layer's Python (router, token dispatcher,
the loop over local experts), and on the diagnostic run (h200_moe_diag.json) the host-bound
tiny-moe-64 step ran 1.2x what its dense twin's factor predicts, so a MoE plan is paired with a twin
of its own expert count and top-k where one ran (the harness's host-moe-E), else with its dense twin.

**Per-plan twins** (session 8, ``plan_host_speeds``): one factor per machine hides that a CPU
favours one framework's code over another's and one plan structure over another (set 8, one
machine: Megatron-Core's tensor-parallel twins 0.79-0.83x the reference, torch-native's DDP and
pipeline twins 1.28-1.49x). Where a plan's own twin ran (same framework, plan, sequence, layer
count and MLP family), that twin's ratio is the plan's factor; other plans keep the file's
median. Developed on sets 6-8 (mean error 7.2 -> 5.2% on set 8, 7.1 -> 6.8% on set 7, 4.5 ->
3.8% on the host diagnostic); registered for set 9 before it ran.
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


def twin_ratio_by_index(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> dict[int, float]:
    """{record index: measured / predicted step seconds} per twin of ``mf`` that ran (not out of
    memory) and that the simulator predicts."""
    from validation.predict import Unsupported, predict_record
    out = {}
    for i, rec in enumerate(mf.records):
        if not is_twin(rec) or rec.get("oom") or not rec.get("time_s"):
            continue
        try:
            pred = predict_record(rec, hw, cal)
        except Unsupported:
            continue
        if pred.time_s:
            out[i] = float(rec["time_s"]) / pred.time_s
    return out


def twin_ratios(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> list[float]:
    """Measured / predicted step seconds per twin of ``mf`` that ran (twin_ratio_by_index)."""
    return list(twin_ratio_by_index(mf, hw, cal).values())


def host_speed_factor(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> tuple[float, int]:
    """(factor, twins used): the median twin ratio, or (1.0, 0) where the file has no twin."""
    ratios = twin_ratios(mf, hw, cal)
    return (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)


TWIN_KEY_FIELDS = ("framework", "seq", "layers", "world", "tp", "pp", "vp", "cp", "dp", "sequence_parallel",
                   "zero_stage", "recompute", "mbs", "gbs", "schedule", "fsdp_grad_sync")


def twin_key(rec: dict, moe: bool = True) -> tuple:
    """What a plan and its twin share: MLP family (gated or not), framework, plan, sequence, layers;
    with ``moe``, also the expert count and top-k (a MoE plan's own twin runs its MoE layers' host
    code: the harness's host-moe-E models, session 20). The expert-parallel degree ``ep`` (absent
    before session 31: 1) is part of the plan."""
    key = (rec.get("activation") == "swiglu",) + tuple(rec.get(k) for k in TWIN_KEY_FIELDS) + (int(rec.get("ep", 1)),)
    return key + (rec.get("experts"), rec.get("topk")) if moe else key


def plan_host_speeds(mf: MeasurementFile, hw: Hardware, cal: Calibration) -> tuple[dict[int, float], float, int, int]:
    """({index: factor} for every non-twin record, the file's median factor, plans with their own
    twin, twins that ran): a plan's factor is its own twin's measured / predicted step where that
    twin ran, else the median over the file's twins (host_speed_factor; 1.0 without any)."""
    ratios = twin_ratio_by_index(mf, hw, cal)
    own = {twin_key(mf.records[i]): r for i, r in ratios.items()}
    dense = {twin_key(mf.records[i], moe=False): r for i, r in ratios.items() if not mf.records[i].get("experts")}
    median = statistics.median(ratios.values()) if ratios else 1.0

    def factor(rec: dict) -> float | None:     # its own twin; a MoE plan without one: its dense twin
        return own.get(twin_key(rec), dense.get(twin_key(rec, moe=False)))
    factors = {i: factor(mf.records[i]) or median for i in non_twin_indices(mf)}
    return factors, median, sum(factor(mf.records[i]) is not None for i in factors), len(ratios)


def evaluate_per_plan_twins(mf: MeasurementFile, hw: Hardware, cal: Calibration,
                            factors: dict[int, float] | None = None):
    """``accuracy.evaluate`` of the non-twin records, each under its own host factor (``factors``,
    else ``plan_host_speeds``); results in record order, and the unsupported records."""
    from validation.accuracy import evaluate
    if factors is None:
        factors = plan_host_speeds(mf, hw, cal)[0]
    results, unsupported = [], []
    for factor in sorted(set(factors.values())):
        r, u = evaluate(mf, hw, cal.with_host_speed(factor), [i for i, f in factors.items() if f == factor])
        results += r
        unsupported += u
    return sorted(results, key=lambda r: r.index), sorted(unsupported, key=lambda u: u["index"])


def non_twin_indices(mf: MeasurementFile) -> list[int]:
    """Indices of the records that are not twins (what a host-speed-corrected report covers)."""
    return [i for i, r in enumerate(mf.records) if not is_twin(r)]
