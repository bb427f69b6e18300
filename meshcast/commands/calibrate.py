"""``meshcast calibrate``: fit the cost model's efficiency parameters to GPU measurements."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from meshcast.commands.common import check_outputs, emit_json


def add_parser(sub) -> None:
    """Register the calibrate subcommand."""
    p = sub.add_parser("calibrate", help="fit efficiency parameters to measurements, write a profile",
                       description="Fit the named efficiency parameters (achievable GEMM peak per dtype, tile "
                                   "and launch overheads, HBM, softmax and attention efficiency, NCCL α/β per "
                                   "link) to kernel and collective records, and the host's per-op, per-FSDP-unit "
                                   "and per-tensor costs to training steps of tiny models (hidden <= 512; with "
                                   "their per-phase host times where validation/harness/host_phases.py recorded "
                                   "them); every 5th kernel or collective record is held out and its error "
                                   "reported. Larger training steps are never fitted: they test the whole model.")
    p.add_argument("--measurements", nargs="+", required=True, help="measurement JSON files (MEASUREMENTS.md)")
    p.add_argument("--hardware", help="accelerator or cluster name (default: from each file's info.gpu)")
    p.add_argument("-o", "--output", required=True, help="profile YAML to write")
    p.add_argument("--name", help="profile name (default: the output file's stem)")
    p.add_argument("--start", help="profile whose values seed the fit and stand for parameters these "
                                   "measurements cannot fit (e.g. NVLink α/β from another machine)")
    p.add_argument("--only", nargs="+", metavar="GROUP",
                   help="fit only these parameters, every other one kept at the --start profile's value (needs "
                        "--start): groups gemm, attention (FlashAttention-2), attention_kernels (cudnn, efficient), "
                        "ssd (Mamba-2 SSD scan kernels), memory, launch, comm, host, or parameter paths or their prefixes "
                        "(attention_kernel_fraction.cudnn); the profile written keeps --start's provenance and "
                        "adds this fit's")
    p.add_argument("--fit-seeds", nargs="+", type=int, default=[], metavar="SEED",
                   help="fit the records of a random held-out set (set: random) drawn with these seeds (e.g. "
                        "the seed-21 draw of h100_gemm_random2.json); every other draw stays held out, never fitted; "
                        "the profile records them as fitted_random_draws")
    p.add_argument("--holdout-every", type=int, default=5, help="hold out every N-th record (0: none)")
    p.add_argument("--transfer", nargs="*", default=[],
                   help="measurement files of another accelerator: predict them from its datasheet with the "
                        "profile just fitted, and report that error (e.g. fit on H100, predict H200)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Fit, report fitted and held-out error, and write the profile."""
    from simulator.calibration import DEFAULT, load_calibration, save_calibration
    from validation.calibrate import calibrate, physical_violations, profile_metadata, restricted_metadata
    from validation.hardware import hardware_for
    from validation.records import load_measurements

    from hardware_specs.errors import MeshcastError

    check_outputs(args)
    if args.holdout_every < 0 or args.holdout_every == 1:
        raise MeshcastError("holdout-every", f"must be 0 (hold nothing out) or at least 2, got {args.holdout_every}")
    only = tuple(args.only) if args.only else None
    if only is not None:
        from validation.fit import COMPUTE_PARAMS, HOST_PARAMS, comm_params, unknown_selectors
        if not args.start:
            raise MeshcastError("only", "a restricted fit keeps every other parameter at a profile's value: "
                                        "give that profile with --start")
        every = COMPUTE_PARAMS + HOST_PARAMS + [p for link in ("nvlink", "pcie", "xgmi", "c2c", "scale_out")
                                                for p in comm_params(link)]
        bad = unknown_selectors(only, every)
        if bad:
            raise MeshcastError("only", f"{', '.join(bad)} names no fitted parameter (groups: gemm, attention, "
                                        f"attention_kernels, ssd, memory, launch, comm, host; or a parameter path)")
    files = []
    for path in args.measurements:
        mf = load_measurements(path)
        files.append((mf, hardware_for(mf, args.hardware)))
    held = {r.get("seed") for mf, _ in files for r in mf.records if r.get("set") == "random"}
    missing = sorted(set(args.fit_seeds) - held)
    if missing:
        raise MeshcastError("fit-seeds", f"no random-set record of seed {', '.join(map(str, missing))} in the "
                                         f"measurements (their draws: {', '.join(map(str, sorted(s for s in held if s is not None))) or 'none'})")
    name = args.name or Path(args.output).stem
    print(f"fitting {sum(len(mf.records) for mf, _ in files)} records from {len(files)} file(s)...", file=sys.stderr)
    start = load_calibration(args.start) if args.start else DEFAULT
    report = calibrate(files, name, start=start, holdout_every=args.holdout_every, only=only,
                       fit_seeds=tuple(args.fit_seeds))
    accelerator = files[0][1].accelerator.name
    if only is not None:
        meta = restricted_metadata(_profile_meta(args.start), args.start, report, only)
    else:
        meta = profile_metadata(report, accelerator)
    if args.transfer:
        meta["transfer_error"] = _transfer(args.transfer, report.calibration)
    meta["physical_checks"] = physical_violations(report.calibration) or "all fitted values physical"
    if args.start and only is None:
        meta["seeded_from"] = args.start
    save_calibration(report.calibration, Path(args.output), meta)
    if args.json:
        emit_json({**meta, "parameters": report.calibration.to_dict()}, "calibrate")
        return 0
    for key, res in report.fits.items():
        print(f"{key}: {res.n_records} records, rms log-error {res.residual_rms:.3f}, "
              f"{'converged' if res.success else 'NOT converged: ' + res.message}")
        for p, v in zip(res.params, res.values):
            print(f"  {p.path:<44} {v:.4g}")
        if res.unconstrained:
            print(f"  kept from the starting profile (no record constrains them): "
                  f"{', '.join(p.path for p in res.unconstrained)}")
    print(f"\n{'kind':<20}{'fitted MAPE':>12}{'held-out MAPE':>15}{'held-out worst':>16}")
    held = {s.kind: s for s in report.held_out}
    for s in report.fitted:
        h = held.get(s.kind)    # none held out (--holdout-every 0, or fewer records than N): '-', not 'nan%'
        print(f"{s.kind:<20}{s.mape:>12.1%}{f'{h.mape:.1%}' if h else '-':>15}"
              f"{f'{h.worst_abs_error:.1%}' if h else '-':>16}")
    for path, kinds in meta.get("transfer_error", {}).items():
        print(f"\ntransfer to {path} (its datasheet, this profile's efficiencies):")
        for kind, v in kinds.items():
            print(f"  {kind:<20} MAPE {v['mape']:6.1%}  worst {v['worst']:6.1%}  ({v['count']} records)")
    for v in physical_violations(report.calibration):
        print(f"warning: not physical: {v}", file=sys.stderr)
    print(f"\nwrote {args.output}")
    return 0


def _transfer(paths: list[str], cal) -> dict:
    """Per file and kind: MAPE and worst error of records of another accelerator predicted with
    ``cal`` (fitted elsewhere) and that accelerator's own datasheet."""
    from validation.accuracy import evaluate, summarize
    from validation.hardware import hardware_for
    from validation.records import load_measurements

    out = {}
    for path in paths:
        mf = load_measurements(path)
        results, _ = evaluate(mf, hardware_for(mf), cal)
        out[path] = {k.kind: {"count": k.count, "mape": round(k.mape, 4), "worst": round(k.worst_abs_error, 4)}
                     for k in summarize(results)}
    return out


def _profile_meta(name_or_path: str) -> dict:
    """The provenance fields of a profile (by name or path), as its YAML holds them."""
    from hardware_specs.yamlio import read_yaml_mapping
    from simulator.calibration import PROFILE_DIR

    path = Path(name_or_path)
    if not path.exists():
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    return {k: v for k, v in read_yaml_mapping(path).items() if k != "parameters"}
