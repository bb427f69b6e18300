"""Accuracy of predictions against measurement records: per kind count, MAPE, median and worst
error, the five worst records, and the same figures for a plain datasheet roofline."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from hardware_specs.catalog import Hardware
from simulator.calibration import Calibration, LinkEfficiency
from simulator.memory import fits_in, within_margin
from validation.predict import Prediction, Unsupported, predict_record
from validation.records import MeasurementFile

PLAIN_ROOFLINE = Calibration(
    gemm_peak_fraction={k: 1.0 for k in ("bf16", "fp16", "tf32", "fp32", "fp8", "fp4", "fp64")},
    gemm_tile_overhead_k=0.0, kernel_launch_s=0.0, hbm_fraction=1.0, attention_fwd_fraction=1.0,
    attention_bwd_fraction=1.0, attention_softmax_fraction=1e9,
    softmax_elements_per_cycle={"reg": 1e9, "reg_wide": 1e9, "smem": 1e9},
    links={k: LinkEfficiency(alpha_s=1e-12, bandwidth_fraction=1.0)
           for k in ("nvlink", "xgmi", "pcie", "c2c", "scale_out")},
    name="plain-roofline")


STEP_KINDS = ("train_step", "plan_step")   # whole training steps: time, peak memory and the fit verdict


@dataclass
class RecordResult:
    """One record with its prediction and signed relative errors (predicted/measured - 1)."""

    index: int
    record: dict
    prediction: Prediction
    time_error: float | None
    memory_error: float | None = None
    fit_correct: bool | None = None
    fit_borderline: bool | None = None     # the verdict within the memory model's margin (MEMORY_MARGIN)


@dataclass
class KindStats:
    """Accuracy of one record kind: count, MAPE, median and worst error, worst records."""
    kind: str
    count: int
    mape: float
    median_abs_error: float
    worst_abs_error: float
    worst: list = field(default_factory=list)
    memory_mape: float | None = None
    fit_correct: int | None = None
    fit_total: int | None = None
    fit_wrong_borderline: int | None = None    # wrong verdicts that were borderline (within MEMORY_MARGIN)
    baseline_mape: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def relative_error(predicted: float, measured: float) -> float:
    """Signed relative error predicted / measured - 1."""
    return predicted / measured - 1.0


def evaluate(mf: MeasurementFile, hw: Hardware, cal: Calibration,
             indices: list[int] | None = None) -> tuple[list[RecordResult], list[dict]]:
    """Predict every record (or those at ``indices``); returns results and the unsupported ones.
    Fit verdicts compare with the memory the measured GPU had (``info.total_memory_bytes``),
    else the catalog's HBM capacity."""
    results, unsupported = [], []
    usable = float(mf.info.get("total_memory_bytes") or hw.accelerator.hbm_capacity_bytes)
    for i in (indices if indices is not None else range(len(mf.records))):
        rec = mf.records[i]
        try:
            pred = predict_record(rec, hw, cal)
        except Unsupported as exc:
            unsupported.append({"index": i, "kind": rec.get("kind"), "reason": str(exc)})
            continue
        results.append(_compare(i, rec, pred, usable))
    return results, unsupported


def _compare(i: int, rec: dict, pred: Prediction, usable: float) -> RecordResult:
    measured_t = rec.get("time_s")
    oom = bool(rec.get("oom", False))
    t_err = relative_error(pred.time_s, measured_t) if measured_t and not oom and pred.time_s else None
    m_err = fit_ok = borderline = None
    if rec["kind"] in STEP_KINDS:
        if pred.peak_memory_bytes is not None and rec.get("peak_memory_bytes") and not oom:
            m_err = relative_error(pred.peak_memory_bytes, rec["peak_memory_bytes"])
        # simulate's own verdict (simulator.memory.fits_in), against the memory the GPU showed
        predicted_fits = pred.total_memory_bytes is not None and fits_in(pred.total_memory_bytes, usable)
        fit_ok = predicted_fits == (not oom)
        borderline = pred.total_memory_bytes is not None and within_margin(pred.total_memory_bytes, usable)
    return RecordResult(i, rec, pred, t_err, m_err, fit_ok, borderline)


def summarize(results: list[RecordResult], baseline: list[RecordResult] | None = None) -> list[KindStats]:
    """Per-kind statistics, worst records first; ``baseline`` adds the plain-roofline MAPE."""
    kinds: dict[str, list[RecordResult]] = {}
    for r in results:
        kinds.setdefault(r.record["kind"], []).append(r)
    base: dict[str, list[float]] = {}
    for r in baseline or []:
        if r.time_error is not None:
            base.setdefault(r.record["kind"], []).append(abs(r.time_error))
    out = []
    for kind, rs in sorted(kinds.items()):
        errs = [abs(r.time_error) for r in rs if r.time_error is not None]
        worst = sorted((r for r in rs if r.time_error is not None), key=lambda r: -abs(r.time_error))[:5]
        stats = KindStats(kind, len(rs), _mean(errs), _median(errs), max(errs, default=float("nan")),
                          [_describe(r) for r in worst])
        mem = [abs(r.memory_error) for r in rs if r.memory_error is not None]
        if kind in STEP_KINDS:
            stats.memory_mape = _mean(mem)
            fits = [r.fit_correct for r in rs if r.fit_correct is not None]
            stats.fit_correct, stats.fit_total = sum(fits), len(fits)
            stats.fit_wrong_borderline = sum(1 for r in rs if r.fit_correct is False and r.fit_borderline)
        if kind in base:
            stats.baseline_mape = _mean(base[kind])
        out.append(stats)
    return out


# What a record measured (or says about its run), as opposed to the case it measured
MEASURED_FIELDS = {"time_s", "time_min_s", "time_max_s", "reps", "peak_memory_bytes", "tokens_per_s", "oom",
                   "error", "tag", "allocated_before_bytes", "synced_step_s", "time_batched_s", "flops",
                   "bytes_min", "buffer_mb", "params", "peak_reserved_bytes", "step_times_s", "run", "optimizer",
                   "norm_impl", "synced_fwd_bwd_s", "synced_opt_s", "outside_allocator_bytes"}


def case_key(rec: dict) -> tuple:
    """The case a record measured (kind and configuration, without what was measured), so runs
    of the same case in several files can be grouped."""
    return tuple(sorted((k, v) for k, v in rec.items()
                        if k not in MEASURED_FIELDS and not k.startswith(("host_", "gpu_"))
                        and not isinstance(v, (list, dict))))     # samples and nested info are not the case


@dataclass
class RepeatStats:
    """Cases measured more than once (in several files or runs): the prediction against the
    mean of the runs, and how much the runs themselves spread (coefficient of variation)."""
    kind: str
    cases: int
    runs: int
    mape_vs_mean: float
    mean_cv: float
    max_cv: float
    per_run_mape: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def repeat_stats(results: list[RecordResult]) -> list[RepeatStats]:
    """Per kind, over cases with two or more timed runs: MAPE of the prediction against each
    case's mean measured time, the runs' coefficient of variation, and the per-run MAPE of the
    same records for comparison. A noisy quantity's prediction is judged against its mean."""
    groups: dict[tuple, list[RecordResult]] = {}
    for r in results:
        if r.time_error is not None:
            groups.setdefault(case_key(r.record), []).append(r)
    kinds: dict[str, list[list[RecordResult]]] = {}
    for rs in groups.values():
        if len(rs) >= 2:
            kinds.setdefault(rs[0].record["kind"], []).append(rs)
    out = []
    for kind, cases in sorted(kinds.items()):
        vs_mean, cvs, per_run = [], [], []
        for rs in cases:
            times = [r.record["time_s"] for r in rs]
            mean = statistics.fmean(times)
            vs_mean.append(abs(relative_error(rs[0].prediction.time_s, mean)))
            cvs.append(statistics.pstdev(times) / mean)
            per_run += [abs(r.time_error) for r in rs]
        out.append(RepeatStats(kind, len(cases), len(per_run), _mean(vs_mean), _mean(cvs), max(cvs), _mean(per_run)))
    return out


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _describe(r: RecordResult) -> dict:
    rec = {k: v for k, v in r.record.items() if k not in ("time_min_s", "time_max_s", "reps")}
    return {"index": r.index, "record": rec, "predicted_s": r.prediction.time_s, "error": r.time_error}


# ---- plan_step: does meshcast rank the plans of one model as the framework ran them? -------------
# The plans of one model compared with each other: same framework, model, sequence, GPUs and global batch.
PLAN_GROUP_FIELDS = ("framework", "name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq",
                     "world", "gbs")
PICK_TOLERANCE = 0.03        # meshcast's pick counts as right within 3% of the measured best (issue #11)


@dataclass
class PlanGroupStats:
    """The plans of one model (framework, model, sequence, GPUs, global batch) as measured and predicted.

    plans: records in the group; timed: those measured (not OOM); kendall_tau: Kendall's tau-b between
    measured and predicted step times over the timed plans (None under 3); pick: the plan meshcast
    predicts fastest among those it predicts to fit; pick_regret: its measured time over the measured
    best, minus 1 (None when the pick did not fit when measured: pick_oom); pick_ok: regret within
    PICK_TOLERANCE."""
    group: dict
    plans: int
    timed: int
    kendall_tau: float | None
    pick: str | None
    best: str | None
    pick_regret: float | None
    pick_oom: bool
    pick_ok: bool

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def plan_label(rec: dict) -> str:
    """A short name of a plan_step record's plan, e.g. 'tp2 sp z0 rc-full mbs1'."""
    bits = []
    for dim in ("tp", "pp", "dp", "cp"):
        if int(rec.get(dim, 1)) > 1:
            bits.append(f"{dim}{rec[dim]}")
    if int(rec.get("vp", 1)) > 1:
        bits.append(f"vp{rec['vp']}")
    if rec.get("sequence_parallel"):
        bits.append("sp")
    bits.append(f"z{rec.get('zero_stage', 0)}")
    if rec.get("recompute", "none") != "none":
        bits.append(f"rc-{rec['recompute']}")
    bits.append(f"mbs{rec.get('mbs', 1)}")
    return " ".join(bits)


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two equally long sequences (ties in either count as neither concordant
    nor discordant, and shrink the denominator)."""
    n = len(xs)
    conc = disc = tie_x = tie_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tie_x += 1
            elif dy == 0:
                tie_y += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = ((conc + disc + tie_x) * (conc + disc + tie_y)) ** 0.5
    return (conc - disc) / denom if denom else float("nan")


def plan_groups(results: list[RecordResult], usable: float | None = None) -> list[PlanGroupStats]:
    """Per group of plan_step records (one model's plans): Kendall tau of predicted against measured
    step times, and whether meshcast's pick is within 3% of the measured best."""
    groups: dict[tuple, list[RecordResult]] = {}
    for r in results:
        if r.record.get("kind") == "plan_step":
            groups.setdefault(tuple(r.record.get(k) for k in PLAN_GROUP_FIELDS), []).append(r)
    out = []
    for key, rs in groups.items():
        timed = [r for r in rs if r.time_error is not None]
        tau = None
        if len(timed) >= 3:
            tau = kendall_tau([r.record["time_s"] for r in timed], [r.prediction.time_s for r in timed])
        fits = [r for r in rs if r.prediction.time_s is not None and _predicted_to_fit(r, usable)]
        # a plan recorded twice (run again alone after it ran out of memory in a process that earlier
        # cases had filled): judged by its timed run; the other record still counts as a wrong verdict
        pick = min(fits, key=lambda r: (r.prediction.time_s, r.time_error is None)) if fits else None
        best = min(timed, key=lambda r: r.record["time_s"]) if timed else None
        pick_oom = bool(pick is not None and pick.record.get("oom"))
        regret = None
        if pick is not None and best is not None and not pick_oom and pick.record.get("time_s"):
            regret = pick.record["time_s"] / best.record["time_s"] - 1.0
        out.append(PlanGroupStats(dict(zip(PLAN_GROUP_FIELDS, key)), len(rs), len(timed), tau,
                                  plan_label(pick.record) if pick else None, plan_label(best.record) if best else None,
                                  regret, pick_oom, regret is not None and regret <= PICK_TOLERANCE))
    return out


def _predicted_to_fit(r: RecordResult, usable: float | None) -> bool:
    """meshcast's one fit verdict for a record (simulator.memory.fits_in on the fit-verdict bytes),
    against the measured GPU's memory where known."""
    p = r.prediction
    if usable and p.total_memory_bytes is not None:
        return fits_in(p.total_memory_bytes, usable)
    return bool(p.fits)


# ---- plan families (issue #11) ---------------------------------------------------------------
PLAN_FAMILIES = ("1 GPU", "dp", "dp + distributed optimizer", "FSDP / ZeRO-3", "tp", "tp + sp", "pp 1F1B",
                 "pp interleaved", "cp", "ep", "recompute full", "recompute selective")


def plan_families_of(rec: dict) -> list[str]:
    """The plan families a plan_step record belongs to: its structure (the first of pipeline,
    tensor, context, sharded or plain data parallelism that it uses), expert parallelism (ep > 1)
    and its recompute, if any."""
    pp, tp, cp, world = (int(rec.get(k, 1)) for k in ("pp", "tp", "cp", "world"))
    zero = int(rec.get("zero_stage", 0))
    if pp > 1:
        out = ["pp interleaved" if int(rec.get("vp", 1)) > 1 else "pp 1F1B"]
    elif tp > 1:
        out = ["tp + sp" if rec.get("sequence_parallel") else "tp"]
    elif cp > 1:
        out = ["cp"]
    elif world == 1:
        out = ["1 GPU"]
    else:
        out = ["FSDP / ZeRO-3" if zero == 3 else "dp + distributed optimizer" if zero else "dp"]
    if int(rec.get("ep", 1)) > 1:
        out.append("ep")
    if rec.get("recompute", "none") != "none":
        out.append(f"recompute {rec['recompute']}")
    return out


@dataclass
class FamilyStats:
    """Accuracy over the plan_step records of one plan family (a record may be in two: its
    structure and its recompute)."""
    framework: str
    family: str
    plans: int
    timed: int
    time_mape: float | None
    memory_mape: float | None
    fit_correct: int
    fit_total: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def plan_families(results: list[RecordResult]) -> list[FamilyStats]:
    """Per framework and plan family: time and peak-memory MAPE over the timed records, and fit
    verdicts."""
    members: dict[tuple[str, str], list[RecordResult]] = {}
    for r in results:
        if r.record.get("kind") == "plan_step":
            for fam in plan_families_of(r.record):
                members.setdefault((str(r.record.get("framework")), fam), []).append(r)
    out = []
    for fw, fam in sorted(members, key=lambda k: (k[0], PLAN_FAMILIES.index(k[1]))):
        rs = members[(fw, fam)]
        t = [abs(r.time_error) for r in rs if r.time_error is not None]
        m = [abs(r.memory_error) for r in rs if r.memory_error is not None]
        v = [r.fit_correct for r in rs if r.fit_correct is not None]
        out.append(FamilyStats(fw, fam, len(rs), len(t), statistics.fmean(t) if t else None,
                               statistics.fmean(m) if m else None, sum(v), len(v)))
    return out
