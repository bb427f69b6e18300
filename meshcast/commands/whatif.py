"""``meshcast whatif``: sweep any input (GPUs, accelerator, bandwidths, HBM, sequence, batch,
model, cluster) with a fixed plan or re-planning at each point; table, JSON, HTML report."""
from __future__ import annotations

import argparse
import os
import sys

from meshcast.commands.common import (add_model_cluster, add_plan_options, check_host_speed, check_outputs, emit_json,
                                      plan_from_args)

EXAMPLES = """\
sweeps (repeat --sweep for a grid; NAME=V1,V2,... or NAME=LO:HI:STEP or NAME=LO:HI:xFACTOR):
  gpus=512,1024,2048,4096          GPU count
  accelerator=h100-sxm,h200-sxm    swap the node's accelerator (same node and fabric)
  cluster=dgx-h100,dgx-h200        the whole cluster
  ib_bandwidth=0.5x,1x,2x          scale-out NIC bandwidth (multiplier, or B/s per direction)
  ib_latency, nvlink_bandwidth, nvlink_latency, hbm_bandwidth   likewise
  hbm=80e9,141e9                   HBM capacity in bytes (or 2x)
  seq=4096:16384:x2, gbs=..., mbs=..., tp=..., pp=..., zero=..., recompute=..., precision=...
  model=llama3-8b,llama3-70b       models (catalog, YAML or config.json); layers=40,80 for depth

example:
  meshcast whatif --model llama3-70b --cluster dgx-h100 --gpus 1024 --tp 8 --pp 4 --mbs 1 \\
      --gbs 1024 --seq 8192 --sweep gpus=512,1024,2048,4096 --tokens 15e12 -o whatif.html
"""


def add_parser(sub) -> None:
    """Register the whatif subcommand."""
    p = sub.add_parser("whatif", help="sweep hardware, model or batch inputs: throughput, memory, cost per point",
                       description="Answer comparative questions: sweep any input and, at each point, simulate "
                                   "the fixed plan (points where it cannot run or does not fit are reported with "
                                   "the reason) or re-plan (--replan: the best plan at that point). Prints a "
                                   "table; --json; -o report.html (throughput/MFU, time and memory breakdown, "
                                   "roofline per accelerator, cost to train).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_cluster(p)
    add_plan_options(p)
    w = p.add_argument_group("sweep")
    w.add_argument("--sweep", action="append", default=[], metavar="NAME=VALUES",
                   help="a variable and its values; repeat for a grid")
    w.add_argument("--replan", action="store_true",
                   help="search the best plan at each point (planners.search) instead of keeping the plan")
    w.add_argument("--replan-fix", default="", metavar="tp,pp,...",
                   help="with --replan: keep these plan fields from the plan flags at every point")
    w.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: 2 when re-planning several points, else 1)")
    w.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr for sweeps longer than a second (default: when stderr is a terminal)")
    c = p.add_argument_group("cost")
    c.add_argument("--tokens", type=float, metavar="N", help="token budget to train, e.g. 15e12: days, dollars and energy")
    c.add_argument("--price", metavar="USD|NAME=USD,...", help="USD per GPU-hour (default: the catalog's indicative price), or "
                                   "per accelerator: h100-sxm=2.5,h200-sxm=3.4")
    c.add_argument("--pue", type=float, default=1.0, metavar="X",
                   help="power usage effectiveness for the facility energy (default 1.0)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object")
    o.add_argument("-o", "--output", metavar="FILE", help="write a self-contained HTML report (plotly)")
    o.add_argument("--trace-dir", metavar="DIR", help="write a Chrome/Perfetto trace JSON of one step per point into this folder")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and print or write its report."""
    from hardware_specs.errors import MeshcastError
    from planners.whatif import DEGREES, Base, parse_price, parse_sweeps, run_sweep
    from planners.whatif_report import format_text, write_html

    check_outputs(args)
    axes = parse_sweeps(args.sweep)
    plan = plan_from_args(args)
    if plan.num_gpus is not None and any(a.name == "gpus" for a in axes):
        raise MeshcastError("gpus", f"the plan file fixes num_gpus: {plan.num_gpus}, which a sweep over gpus "
                                    "would contradict at every other point; drop num_gpus from the plan")
    price, prices = parse_price(args.price)
    check_host_speed(args.host_speed)
    if args.tokens is not None and not args.tokens > 0:
        raise MeshcastError("tokens", f"must be positive, got {args.tokens:g}")
    if not args.pue >= 1.0:
        raise MeshcastError("pue", f"power usage effectiveness must be >= 1, got {args.pue:g}")
    fix = tuple(x.strip() for x in args.replan_fix.split(",") if x.strip())
    bad = [x for x in fix if x not in DEGREES]
    if bad:
        raise MeshcastError("replan-fix", f"unknown plan field {bad[0]!r}; choose from {', '.join(DEGREES)}")
    if fix and not args.replan:
        raise MeshcastError("replan-fix", "only applies with --replan")
    if args.jobs is not None and args.jobs < 1:
        raise MeshcastError("jobs", f"must be at least 1, got {args.jobs}")
    if args.gpus is not None and args.gpus <= 0:
        raise MeshcastError("gpus", f"must be positive, got {args.gpus}")
    # fail fast on base inputs that are wrong everywhere (unknown model or cluster names)
    from hardware_specs.catalog import load_cluster
    from models import load_model
    if not any(a.name == "model" for a in axes):
        load_model(args.model)
    if not any(a.name == "cluster" for a in axes):
        load_cluster(args.cluster)
    if args.replan and plan.gbs is None and not any(a.name == "gbs" for a in axes):
        raise MeshcastError("gbs", "--replan needs a global batch (--gbs)")
    if args.replan:
        given = [f for f in ("tp", "pp", "vp", "cp", "dp", "ep", "etp", "mbs", "zero_stage", "recompute",
                             "recompute_layers") if getattr(args, f, None) is not None]
        loose = [f for f in given if (f if f != "zero_stage" else "zero") not in fix]
        if loose:
            flags = ", ".join("--" + f.replace("_stage", "").replace("_", "-") for f in loose)
            print(f"note: --replan searches {flags} at every point; --replan-fix keeps them", file=sys.stderr)
    base = Base(model=args.model, cluster=args.cluster, gpus=args.gpus, plan=plan, calibration=args.calibration,
                replan=args.replan, replan_fix=fix, tokens=args.tokens, price=price, prices=prices, pue=args.pue,
                host_speed=args.host_speed,
                with_ops=bool(args.output), trace_dir=args.trace_dir)
    npoints = 1
    for a in axes:
        npoints *= len(a.levels)
    jobs = args.jobs or (min(2, os.cpu_count() or 1) if args.replan and npoints > 1 else 1)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    sweep = run_sweep(base, axes, jobs=jobs, progress=progress)
    _fail_if_nothing_valid(sweep)
    if args.output:
        write_html(sweep, args.output)
    if args.json:
        emit_json(sweep.to_dict(), "whatif")
    else:
        print(format_text(sweep))
        if args.output:
            print(f"wrote {args.output}")
        if args.trace_dir:
            print(f"wrote {sum(1 for p in sweep.points if p.trace)} traces to {args.trace_dir}")
    return 0


def _fail_if_nothing_valid(sweep) -> None:
    """Every point invalid (a base plan wrong everywhere, e.g. layers_per_stage that sums to
    another model's layers): the first point's error, not a table of failures and exit 0."""
    from hardware_specs.errors import MeshcastError

    if sweep.points and all(p.status in ("error", "invalid") for p in sweep.points):
        field, _, reason = (sweep.points[0].reason or "sweep: no valid point").partition(": ")
        raise MeshcastError(field, f"{reason} (at every point of the sweep)")
