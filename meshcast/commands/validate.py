"""``meshcast validate``: accuracy against measurement files and against published runs."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from meshcast.commands.common import FRAMEWORKS, emit_json


def add_parser(sub) -> None:
    """Register the validate subcommand."""
    p = sub.add_parser("validate", help="accuracy against GPU measurements or published runs",
                       description="Predict every record of measurement files (MEASUREMENTS.md format) through "
                                   "the simulator's own per-op path and report per kind: count, MAPE, median and "
                                   "worst error, the five worst records, and a plain datasheet roofline for scale. "
                                   "With --published, simulate each complete published run and compare throughput.")
    p.add_argument("--measurements", nargs="*", default=[], help="measurement JSON files")
    p.add_argument("--published", nargs="+", help="published runs CSVs (columns of shared/validation/published_runs.csv; "
                                                  "validation/published/ holds both published_runs*.csv)")
    p.add_argument("--published-layers", help="published per-layer times CSV (published_layer_times.csv)")
    p.add_argument("--hardware", help="accelerator or cluster the measurements ran on (default: from info.gpu)")
    p.add_argument("--calibration", help="calibration profile (default: the accelerator's own, or nearest)")
    p.add_argument("--framework", choices=FRAMEWORKS,
                   help="only training steps and published runs that ran on this framework (kernel and collective "
                        "records run on none and are kept); default: every record, each with its own framework")
    p.add_argument("--host-speed", default="reference", metavar="reference|twins|X",
                   help="host speed of the machines the files ran on: 'reference' (the calibration's host, the "
                        "default), 'twins' (from each file's tiny twin steps, left out of the report: a "
                        "plan under its own twin's factor where that ran, else the file's median; "
                        "validation/host_speed.py), or a factor X (>1: a slower host)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-o", "--output", help="write an HTML report")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compare predictions with measurement files and/or published runs."""
    from simulator.calibration import calibration_for, profile_fitted_on
    from validation.accuracy import PLAIN_ROOFLINE, evaluate, plan_families, plan_groups, repeat_stats, summarize
    from validation.hardware import hardware_for
    from validation.records import load_measurements

    from hardware_specs.errors import MeshcastError
    from meshcast.commands.common import check_outputs

    check_outputs(args)
    if not args.measurements and not args.published and not args.published_layers:
        raise MeshcastError("measurements", "give --measurements FILE... and/or --published FILE.csv")
    out: dict = {"files": []}
    all_results = []
    for path in args.measurements:
        mf = framework_records(load_measurements(path), args.framework)
        if not mf.records:
            raise MeshcastError(f"{path}: records", f"no record of this file ran on {args.framework}"
                                if args.framework else "the file holds no records")
        hw = hardware_for(mf, args.hardware)
        cal, note = calibration_for(hw.accelerator, args.calibration)
        results, unsupported, host_note = file_results(mf, hw, cal, args.host_speed)
        if not results and host_note == ONLY_TWINS:
            out["files"].append({"path": path, "gpu": mf.gpu, "hardware": hw.cluster.name, "records": len(mf.records),
                                 "calibration": note + host_note, "kinds": [], "unsupported": []})
            continue
        if not results:
            why = f" (first: #{unsupported[0]['index']} {unsupported[0]['reason']})" if unsupported else ""
            raise MeshcastError(f"{path}: records", f"no record the simulator can predict{why}")
        baseline, _ = evaluate(mf, hw, PLAIN_ROOFLINE)
        kinds = summarize(results, baseline)
        all_results += results
        in_fit = Path(path).name in {Path(f).name for f in profile_fitted_on(cal.name)}
        usable = float(mf.info.get("total_memory_bytes") or hw.accelerator.hbm_capacity_bytes)
        entry = {"path": path, "gpu": mf.gpu, "hardware": hw.cluster.name, "calibration": note + host_note,
                 "records": len(mf.records), "in_profile_fit": in_fit,
                 "kinds": [k.to_dict() for k in kinds], "unsupported": unsupported}
        groups = plan_groups(results, usable)
        if groups:
            entry["plan_groups"] = [g.to_dict() for g in groups]
            entry["plan_families"] = [f.to_dict() for f in plan_families(results)]
        out["files"].append(entry)
    repeats = repeat_stats(all_results)
    if repeats:
        out["repeats"] = [r.to_dict() for r in repeats]
    if args.published:
        done, out["published"] = published_summary(args.published, args.calibration, args.framework)
    if args.published_layers:
        from validation.published import LAYER_IMPLEMENTATIONS, compare_layer_times
        layers = compare_layer_times(args.published_layers, args.calibration)
        if not layers:
            raise MeshcastError(f"{args.published_layers}: implementation", "no row names a layer implementation "
                                f"meshcast models ({', '.join(LAYER_IMPLEMENTATIONS)})")
        out["published_layers"] = {"rows": [c.__dict__ for c in layers],
                                   "mape": sum(abs(c.error) for c in layers) / max(1, len(layers))}
    if args.output:
        from validation.report import write_validation_report
        write_validation_report(args.output, out, all_results, args.calibration or "")
    if args.json:
        emit_json(out, "validate")
    else:
        print(format_text(out))
    return 0


ONLY_TWINS = "; only twin steps (host calibration data), nothing left to report under --host-speed twins"


def file_results(mf, hw, cal, how: str):
    """(results, unsupported, note) of one file under ``--host-speed``: the reference host (every
    record), a given factor (every record), or per plan from the file's twins (the other records,
    each under its own twin's factor where that ran, else the file's median: validation/host_speed.py)."""
    from validation.accuracy import evaluate
    if how == "twins":
        from validation.host_speed import evaluate_per_plan_twins, plan_host_speeds
        factors, median, own, n = plan_host_speeds(mf, hw, cal)
        if not n:
            return (*evaluate(mf, hw, cal), "; host: reference (no twin steps in this file)")
        if not factors:
            return [], [], ONLY_TWINS
        results, unsupported = evaluate_per_plan_twins(mf, hw, cal, factors)
        return results, unsupported, (f"; host per plan: its own twin's factor ({own} of {len(factors)} records), "
                                      f"else {median:.2f}x the reference (median of {n} twin steps); twins left out")
    if how == "reference":
        return (*evaluate(mf, hw, cal), "")
    cal, note = fixed_host_speed(cal, how)
    return (*evaluate(mf, hw, cal), note)


def fixed_host_speed(cal, how: str):
    """(calibration, note) for ``--host-speed X``: every host cost scaled by the factor X."""
    from hardware_specs.errors import MeshcastError
    from meshcast.commands.common import apply_host_speed
    try:
        factor = float(how)
    except ValueError:
        raise MeshcastError("--host-speed", f"{how!r} is not 'reference', 'twins' or a positive factor") from None
    return apply_host_speed(cal, "", factor)


def framework_records(mf, framework: str | None):
    """``mf`` with only the training steps that ran on ``framework`` (a plan_step record names it;
    the reference train_step runs plain PyTorch); kernel and collective records run on none and stay."""
    if framework is None:
        return mf
    from dataclasses import replace

    def ran_on(rec: dict):
        if rec.get("kind") == "plan_step":
            return rec.get("framework")
        return "pytorch" if rec.get("kind") == "train_step" else framework
    return replace(mf, records=[r for r in mf.records if ran_on(r) == framework])


def published_summary(paths: list[str], calibration: str | None, framework: str | None = None) -> tuple[list, dict]:
    """Compare every row of the published CSVs (those that ran on ``framework`` when given): per source
    the rows evaluated and skipped (reasons grouped), MAPE and signed median error; the same per GPU
    and per precision."""
    from hardware_specs.errors import MeshcastError
    from validation.published import (compare_published, coverage, dtype_label, gpu_label, group_stats,
                                       per_regime, per_source)
    done, skipped = compare_published(paths, calibration)
    modelled = len(done)
    if framework is not None:
        done = [c for c in done if c.plan.get("framework") == framework]
        if not done:
            raise MeshcastError("framework", f"none of the {modelled} modelled published rows ran on {framework}")
    if not done:
        raise MeshcastError(paths[0], f"no row could be modelled (first: row {skipped[0].row}: {skipped[0].reason})")
    return done, {"per_source": per_source(done), "coverage": coverage(done, skipped),
                  "per_gpu": group_stats(done, lambda c: gpu_label(c.gpu)),
                  "per_dtype": group_stats(done, lambda c: dtype_label(c.dtype)),
                  "per_regime": per_regime(done),
                  "evaluated": len(done), "rows": len(done) + len(skipped),
                  "runs": [c.__dict__ for c in done], "skipped": [s.__dict__ for s in skipped],
                  "mape": sum(abs(c.error) for c in done) / len(done),
                  "framework": framework, "modelled": modelled}


def format_published(pub: dict) -> list[str]:
    """The text report of the published-run comparison."""
    only = f" (only the {pub['evaluated']} of {pub['modelled']} modelled rows that ran on {pub['framework']})" \
        if pub.get("framework") else ""
    lines = [f"published runs: {pub['evaluated']} of {pub['rows']} rows evaluated{only}, MAPE {pub['mape']:.1%}; "
             f"{len(pub['skipped'])} skipped"]
    for title, key in (("per source", "per_source"), ("per GPU", "per_gpu"), ("per precision", "per_dtype"),
                       ("per regime", "per_regime")):
        lines.append(f"  {title}:")
        for name, v in pub[key].items():
            lines.append(f"    {name:<20} {v['count']:>4} runs  MAPE {v['mape']:6.1%}  median {v['median_error']:+6.1%}  "
                         f"worst {v['worst']:6.1%}")
    lines.append("  rows evaluated / skipped per source (why):")
    for src, v in pub["coverage"].items():
        lines.append(f"    {src:<20} {v['evaluated']:>4} evaluated {v['skipped']:>4} skipped")
        for reason, n in sorted(v["reasons"].items(), key=lambda kv: -kv[1]):
            lines.append(f"      {n:>4} x {reason}")
    for c in pub["runs"]:
        lines.append(f"  #{c['row']:<3} {c['model'][:26]:<26} {c['num_gpus']:>5} GPUs  {c['metric']:<22} "
                     f"published {c['published']:>9.4g}  predicted {c['predicted']:>9.4g}  {c['error']:+.1%}"
                     f"  [{c['file']}]")
    return lines


def _pct(x) -> str:
    return "   -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:6.1%}"


def format_text(out: dict) -> str:
    """The text report of a validation (per file, per kind; published sources)."""
    from simulator.memory import MEMORY_MARGIN

    lines = []
    for f in out["files"]:
        lines.append(f"{f['path']}: {f['records']} records on {f['gpu']} ({f['hardware']}); {f['calibration']}")
        if f.get("in_profile_fit"):
            lines.append("  (this file is among the profile's fit data: 4 in 5 of its kernel and collective records "
                         "and all its host-bound tiny training steps were fitted; the rest are held out)")
        if f["kinds"]:
            lines.append(f"  {'kind':<20}{'n':>5}{'MAPE':>8}{'median':>8}{'worst':>8}{'roofline':>10}  memory / fits")
        for k in f["kinds"]:
            extra = ""
            if k["kind"] in ("train_step", "plan_step"):
                extra = f"  mem MAPE {_pct(k['memory_mape'])}, fit verdict {k['fit_correct']}/{k['fit_total']} right"
                if k.get("fit_wrong_borderline"):
                    extra += (f" ({k['fit_wrong_borderline']} of the wrong borderline: within {MEMORY_MARGIN:.0%} "
                              "of the memory)")
            lines.append(f"  {k['kind']:<20}{k['count']:>5}{_pct(k['mape']):>8}{_pct(k['median_abs_error']):>8}"
                         f"{_pct(k['worst_abs_error']):>8}{_pct(k['baseline_mape']):>10}{extra}")
        for k in f["kinds"]:
            for w in k["worst"][:5]:
                if w["error"] is not None and abs(w["error"]) > 0.15:
                    rec = {a: b for a, b in w["record"].items() if a not in ("kind", "time_s")}
                    lines.append(f"    worst {k['kind']}: {w['error']:+.0%} {str(rec)[:110]}")
        if f.get("plan_families"):
            lines.append("  plan families: timed/plans, step-time MAPE, peak-memory MAPE, fit verdicts right")
            for fam in f["plan_families"]:
                lines.append(f"    {fam['framework']:<20}{fam['family']:<28}{fam['timed']:>3}/{fam['plans']:<3} time {_pct(fam['time_mape']):>6}"
                             f"  memory {_pct(fam['memory_mape']):>6}  fits {fam['fit_correct']}/{fam['fit_total']}")
        if f.get("plan_groups"):
            lines.append("  plans of one model (framework, model, seq, GPUs, global batch): Kendall tau of predicted vs "
                         "measured step time; meshcast's pick against the measured best (right within 3%)")
            for g in f["plan_groups"]:
                gk = g["group"]
                tau = "  -  " if g["kendall_tau"] is None else f"{g['kendall_tau']:+.2f}"
                verdict = ("pick OOM when measured" if g["pick_oom"] else
                           "-" if g["pick_regret"] is None else
                           f"{'ok ' if g['pick_ok'] else 'MISS'} {g['pick_regret']:+.1%}")
                lines.append(f"    {gk['framework']:<20}{gk['name'] or '':<10} s{gk['seq']:<5} {gk['world']} GPU gbs{gk['gbs']:<3}"
                             f"{g['timed']:>3}/{g['plans']:<3} tau {tau}  pick [{g['pick']}] best [{g['best']}] {verdict}")
        if f["unsupported"]:
            lines.append(f"  {len(f['unsupported'])} records not predicted:")
            for u in f["unsupported"][:10]:
                lines.append(f"    #{u['index']} {u['kind']}: {u['reason']}")
        lines.append("")
    if out.get("repeats"):
        lines.append("cases measured more than once (across the files given): prediction vs the runs' mean")
        for r in out["repeats"]:
            lines.append(f"  {r['kind']:<20}{r['cases']:>4} cases, {r['runs']:>3} runs  MAPE vs mean {_pct(r['mape_vs_mean'])}"
                         f"  (per run {_pct(r['per_run_mape'])}; runs spread {_pct(r['mean_cv'])} on average, "
                         f"up to {_pct(r['max_cv'])})")
        lines.append("")
    if "published" in out:
        lines += format_published(out["published"])
    if "published_layers" in out:
        pl = out["published_layers"]
        lines.append(f"published per-layer times: {len(pl['rows'])} compared, MAPE {pl['mape']:.1%}")
        for c in pl["rows"]:
            lines.append(f"  {c['implementation']:<26} {c['metric']:<14} published {c['published_ms']:6.1f} ms  "
                         f"predicted {c['predicted_ms']:6.1f} ms  {c['error']:+.1%}")
    return "\n".join(lines)
