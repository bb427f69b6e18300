"""``meshcast calibrate``: fit compute parameters on kernel records and link parameters on
collective records, report fit residuals and held-out error, and write a profile."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from hardware_specs.catalog import Hardware
from hardware_specs.errors import MeshcastError
from simulator.calibration import DEFAULT, Calibration
from validation.accuracy import KindStats, evaluate, summarize
from validation.fit import (COLLECTIVE_KINDS, COMPUTE_PARAMS, COMPUTE_SEEDS, HOST_PARAMS, RAMP_MIN_BYTES, comm_params,
                            comm_seeds, fit, host_bound, host_targets, restrict, set_values, split_holdout)
from validation.predict import KERNEL_KINDS, Unsupported, predict_record
from validation.records import MeasurementFile


@dataclass
class CalibrationReport:
    """The fitted calibration, its fits, and accuracy on fitted and held-out records."""

    calibration: Calibration
    fits: dict = field(default_factory=dict)          # "compute" / "comm:<link>" -> FitResult
    fitted: list = field(default_factory=list)        # KindStats on the records fitted
    held_out: list = field(default_factory=list)      # KindStats on the held-out records
    files: list = field(default_factory=list)
    draws: dict = field(default_factory=dict)         # file -> seeds of random draws fitted


def _select(files: list[tuple[MeasurementFile, Hardware]], kinds: tuple, holdout_every: int, fit_seeds: tuple = ()):
    """(train samples, held-out (file, indices, fitted indices)) over all files for records of
    ``kinds``. Records of a random held-out set (``set: random``, e.g. validation/harness/
    attention_backends.py, the random GEMM suite) are never fitted, all held out, except the
    draws named by ``fit_seeds``: random records whose ``seed`` is one of them are all fitted
    (none held out; shapes timed in several passes enter once, at the faster pass median:
    validation.gemm_regimes.reproduced_times). A random record without a ``seed``, or of any
    other seed, stays held out. The rest split every ``holdout_every``-th."""
    from validation.gemm_regimes import reproduced_times

    train, held = [], []
    for mf, hw in files:
        idx = [i for i, r in enumerate(mf.records) if r.get("kind") in kinds and r.get("set") != "random"]
        rand = [i for i, r in enumerate(mf.records) if r.get("kind") in kinds and r.get("set") == "random"]
        fit_rand = [i for i in rand if mf.records[i].get("seed") is not None and mf.records[i]["seed"] in fit_seeds]
        rand = [i for i in rand if i not in set(fit_rand)]
        tr, ho = split_holdout(len(idx), holdout_every) if holdout_every else (list(range(len(idx))), [])
        train += [(mf.records[idx[i]], hw) for i in tr]
        train += [(r, hw) for r in reproduced_times([mf.records[i] for i in fit_rand])]
        held.append((mf, hw, sorted([idx[i] for i in ho] + rand), sorted([idx[i] for i in tr] + fit_rand)))
    return train, held


def fitted_draws(files: list[tuple[MeasurementFile, Hardware]], fit_seeds: tuple) -> dict:
    """{file path: sorted seeds} of the random-set draws a fit with ``fit_seeds`` takes records
    from (the provenance a profile records as ``fitted_random_draws``)."""
    out = {}
    for mf, _ in files:
        seeds = sorted({r["seed"] for r in mf.records if r.get("set") == "random" and r.get("seed") is not None
                        and r["seed"] in fit_seeds})
        if seeds:
            out[mf.path] = seeds
    return out


def calibrate(files: list[tuple[MeasurementFile, Hardware]], name: str, start: Calibration = DEFAULT,
              holdout_every: int = 5, only: tuple[str, ...] | None = None,
              fit_seeds: tuple = ()) -> CalibrationReport:
    """Fit on (1 - 1/holdout_every) of the records of every file; report on the rest. ``only``
    (groups of validation.fit.PARAMETER_GROUPS or parameter paths/prefixes) restricts the fit to
    those parameters: every other one keeps its value in ``start``. ``fit_seeds``: draws of a
    random held-out set that are fitted instead (:func:`_select`); every other draw stays held out.
    A start profile's GEMM residual correction is turned off: its table holds residuals against the
    uncorrected model, so the fit is of that model (regenerate the table after a GEMM refit)."""
    cal = start.without_gemm_residuals()
    report = CalibrationReport(cal, files=[mf.path for mf, _ in files], draws=fitted_draws(files, tuple(fit_seeds)))

    def seeds_of(params, seeds):
        """Starting points, less their values of parameters a restricted fit keeps (a grid value
        that is no fitted parameter, such as NCCL's protocol switch size, stays)."""
        if only is None:
            return seeds
        every = {p.path for group in (COMPUTE_PARAMS, HOST_PARAMS) for p in group} | \
            {p.path for link in links for p in comm_params(link)}
        kept = every - {p.path for p in params}
        out = [{k: v for k, v in s.items() if k not in kept} for s in seeds]
        return [s for s in out if s]

    links = sorted({hw.node.intra_node.kind for mf, hw in files
                    if any(r.get("kind") in COLLECTIVE_KINDS for r in mf.records)})

    train, _ = _select(files, KERNEL_KINDS, holdout_every, tuple(fit_seeds))
    params = restrict(COMPUTE_PARAMS, only)
    if train and params:
        res = fit(train, params, cal, name, seeds=seeds_of(params, COMPUTE_SEEDS))
        cal = _keep(report, "compute", res, cal)
    for link in links:
        sub = [(mf, hw) for mf, hw in files if hw.node.intra_node.kind == link]
        train, _ = _select(sub, COLLECTIVE_KINDS, holdout_every, tuple(fit_seeds))
        params = restrict(comm_params(link), only)
        if train and params:
            cal, params = _fit_ramp(report, link, train, params, cal, name, seeds_of(params, comm_seeds(link)))
            res = fit(train, params, cal, name, seeds=seeds_of(params, comm_seeds(link)))
            cal = _keep(report, f"comm:{link}", res, cal)
    host = [(r, hw, what, v) for mf, hw in files for r in mf.records if host_bound(r) for what, v in host_targets(r)]
    params = restrict(HOST_PARAMS, only)
    if host and params:
        res = fit(host, params, cal, name, seeds=seeds_of(params, [{"host_op_s": 20e-6, "fsdp_unit_host_s": 2e-3,
                                                                    "optimizer_tensor_host_s": 10e-6,
                                                                    "fsdp_optimizer_tensor_host_s": 40e-6}]))
        cal = _keep(report, "host", res, cal)
    if not report.fits:
        raise MeshcastError("measurements", "no record constrains any parameter (kernel and collective "
                                            "records, or training steps of tiny models, are needed); "
                                            "no profile written")
    report.calibration = cal
    _, held = _select(files, KERNEL_KINDS + COLLECTIVE_KINDS, holdout_every, tuple(fit_seeds))
    fitted_results, held_results = [], []
    for mf, hw, ho, tr in held:
        if only is not None:   # a restricted fit reports on the records its parameters move
            ho, tr = ([i for i in idx if _moved(mf.records[i], hw, start, cal)] for idx in (ho, tr))
        fitted_results += evaluate(mf, hw, cal, tr)[0]
        held_results += evaluate(mf, hw, cal, ho)[0]
    report.fitted = summarize(fitted_results)
    report.held_out = summarize(held_results)
    return report


def _moved(rec: dict, hw: Hardware, before: Calibration, after: Calibration) -> bool:
    """Whether the record's predicted time differs between two calibrations."""
    try:
        a, b = predict_record(rec, hw, before).time_s, predict_record(rec, hw, after).time_s
    except Unsupported:
        return False
    return abs(a - b) > 1e-12 * max(abs(a), 1e-30)


def _fit_ramp(report: CalibrationReport, link: str, train: list, params: list, cal: Calibration, name: str,
              seeds: list) -> tuple[Calibration, list]:
    """Stage one of a link's fit: the start-up of a ring's two-way traffic (comm.ring_ramp, its
    size and time constant), fitted with every other parameter of ``params`` on the training
    records of at least RAMP_MIN_BYTES, where it acts; only those two values are kept, and the
    parameters left for stage two (every record) are returned. Below that size the fixed costs and
    the protocol switch set the time and the two are not identified: fitted on every record, the
    term turns into a second fixed cost (its time constant at its lower bound)."""
    ramp = [p for p in params if p.path.startswith(f"links.{link}.ramp_")]
    big = [s for s in train if s[0].get("bytes", 0) >= RAMP_MIN_BYTES]
    if not ramp or not big:
        return cal, params
    res = fit(big, params, cal, name, seeds=seeds)
    got = dict(zip((p.path for p in res.params), res.values))
    kept = [p for p in ramp if p.path in got]
    if not kept:
        return cal, params
    values = [got[p.path] for p in kept]
    report.fits[f"comm:{link}:ramp"] = replace(res, params=kept, values=values)
    return set_values(cal, kept, values), [p for p in params if p not in kept]


def _keep(report: CalibrationReport, key: str, res, cal: Calibration) -> Calibration:
    """Record fit ``res`` under ``key`` and return its calibration, if it fitted anything."""
    if not res.params:
        return cal
    report.fits[key] = res
    return res.calibration


def profile_metadata(report: CalibrationReport, accelerator: str) -> dict:
    """Provenance written at the top of a profile YAML."""
    def stats(ks: list[KindStats]) -> dict:
        return {s.kind: {"count": s.count, "mape": round(s.mape, 4), "worst": round(s.worst_abs_error, 4)}
                for s in ks}
    return {
        "accelerator": accelerator,
        "fitted_on": report.files,
        "fitted_random_draws": report.draws,
        "method": "scipy least_squares, soft-L1 loss on log(predicted/measured); every 5th record held out",
        "fits": {k: {"records": f.n_records, "residual_rms_log": round(f.residual_rms, 4), "converged": f.success,
                     "fitted": [p.path for p in f.params],
                     "kept_from_start": [p.path for p in f.unconstrained]}
                 for k, f in report.fits.items()},
        "fitted_error": stats(report.fitted),
        "held_out_error": stats(report.held_out),
    }


def restricted_metadata(start_meta: dict, start_name: str, report: CalibrationReport, only: tuple[str, ...]) -> dict:
    """Provenance of a restricted fit (``meshcast calibrate --only``) written over its starting
    profile: the start's own provenance kept, the new files added to ``fitted_on``, and each fit
    recorded under ``<fit>[<groups>]`` with its files, parameters and its records' errors."""
    def stats(ks: list[KindStats]) -> dict:
        return {s.kind: {"count": s.count, "mape": round(s.mape, 4), "worst": round(s.worst_abs_error, 4)}
                for s in ks}
    meta = {k: v for k, v in start_meta.items() if k != "parameters"}
    meta["fitted_on"] = list(meta.get("fitted_on") or []) + [f for f in report.files if f not in (meta.get("fitted_on") or [])]
    draws = {**(meta.get("fitted_random_draws") or {})}
    for path, seeds in report.draws.items():
        draws[path] = sorted(set(draws.get(path, [])) | set(seeds))
    meta["fitted_random_draws"] = draws
    fits = dict(meta.get("fits") or {})
    for key, f in report.fits.items():
        fits[f"{key}[{'+'.join(only)}]"] = {
            "fitted_on": report.files,
            "fitted_random_draws": report.draws,
            "method": f"restricted fit (--only {' '.join(only)}): only these parameters moved, every other one "
                      f"kept at profile {start_name}'s value; records of a random held-out set (set: random) held "
                      f"out except the draws in fitted_random_draws (fitted, faster pass median per shape), and "
                      f"every 5th other record held out; errors over the records these parameters move",
            "records": f.n_records, "residual_rms_log": round(f.residual_rms, 4), "converged": f.success,
            "fitted": [p.path for p in f.params], "kept_from_start": [p.path for p in f.unconstrained],
            "fitted_error": stats(report.fitted), "held_out_error": stats(report.held_out)}
    meta["fits"] = fits
    return meta


def physical_violations(cal: Calibration) -> list[str]:
    """Fitted values that would not be physical: an achieved fraction of a datasheet peak or
    bandwidth above 1 (per dtype, kernel family, link and collective), a negative or
    millisecond-scale fixed cost."""
    out = []
    for dtype, f in cal.gemm_peak_fraction.items():
        if not 0 < f <= 1:
            out.append(f"gemm_peak_fraction.{dtype} = {f:.3g} is not in (0, 1]")
    for key, f in cal.ssd_fraction.items():
        if not 0 < f <= 1:
            out.append(f"ssd_fraction.{key} = {f:.3g} is not in (0, 1]")
    for name in ("ssd_hbm_fraction", "hbm_fraction", "attention_fwd_fraction", "attention_bwd_fraction", "attention_softmax_fraction"):
        v = getattr(cal, name)
        if not 0 < v <= 1:
            out.append(f"{name} = {v:.3g} is not in (0, 1]")
    for op, f in cal.memory_op_fraction.items():
        if not 0 < f <= 1:
            out.append(f"memory_op_fraction.{op} = {f:.3g} is not in (0, 1]")
    for key, f in cal.attention_kernel_fraction.items():
        if not 0 < f <= 1:
            out.append(f"attention_kernel_fraction.{key} = {f:.3g} is not in (0, 1]")
    for link, eff in cal.links.items():
        for kind in ("all_reduce", *cal.collective_fraction):
            achieved = eff.bandwidth_fraction * cal.collective_fraction.get(kind, 1.0)
            if achieved > 1:
                out.append(f"links.{link}: {kind} would reach {achieved:.2f} of the link bandwidth")
        for name in ("alpha_s", "ll_alpha_s"):
            v = getattr(eff, name)
            if not 0 <= v <= 1e-3:
                out.append(f"links.{link}.{name} = {v:.3g} s is not a microsecond-scale latency")
    for name in ("kernel_launch_s", "gemm_launch_s", "gemm_fp8_fixed_s", "gemm_unaligned_fixed_s", "gemm_split_k_fixed_s",
                 "gemm_grouped_fixed_s", "ssd_kernel_fixed_s"):
        v = getattr(cal, name)
        if not 0 <= v <= 1e-4:
            out.append(f"{name} = {v:.3g} s is not a microsecond-scale cost")
    if not 0 <= cal.gemm_sm_load_bytes_per_flop <= 0.2:   # 0: no cap; 0.2 B/FLOP would be > 1 TB/s per H100 SM
        out.append(f"gemm_sm_load_bytes_per_flop = {cal.gemm_sm_load_bytes_per_flop:.3g} is not an SM's load rate")
    return out
