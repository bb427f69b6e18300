"""``meshcast plan``: the best parallel plans for a model on a cluster, before the run.

Searches tp (with sequence parallelism), cp, pp with its schedule (gpipe, 1f1b, interleaved
with vp), ep and etp, ZeRO 0-3, recompute (none, selective, full or N layers per stage),
micro-batch, layer split and, within ranges, GPU count and global batch; every candidate is
costed by simulate(), and bounds prove the returned plans are the best under the cost model.
"""
from __future__ import annotations

import argparse
import sys

from meshcast.commands.common import (DEFAULT_FRAMEWORK, FRAMEWORKS, PRECISIONS, RECOMPUTE, SCHEDULES, add_host_speed,
                                      emit_json, option_strings, with_host_speed)

FIXED = (  # (flag, field, help); Megatron-LM spellings from common.MEGATRON_ALIASES
    ("--tp", "tp", "fix the tensor-parallel degree"),
    ("--pp", "pp", "fix the pipeline-parallel degree"),
    ("--cp", "cp", "fix the context-parallel degree"),
    ("--dp", "dp", "fix the data-parallel degree"),
    ("--vp", "vp", "fix the virtual pipeline stages per device"),
    ("--ep", "ep", "fix the expert-parallel degree"),
    ("--etp", "etp", "fix the expert tensor-parallel degree"),
    ("--mbs", "mbs", "fix the micro-batch size"),
    ("--zero", "zero_stage", "fix the ZeRO stage (0-3)"),
    ("--recompute-layers", "recompute_layers", "fix full recompute to N layers per stage"),
)


def add_parser(subparsers) -> None:
    """Register the plan subcommand."""
    p = subparsers.add_parser(
        "plan", help="find the best parallel plans for a model, cluster and batch",
        description="Search parallel plans (tp/sp, cp, pp + schedule + vp, ep/etp, ZeRO, recompute, micro-batch, "
                    "layer split) with simulate() as the cost model; prune by memory and time bounds so the "
                    "plans returned are provably the best under the model. Ranges: --gpus 512:2048, --gbs 1024:4096.")
    p.add_argument("--model", required=True, metavar="NAME|PATH",
                   help="catalog model name, model YAML, HF config.json or its folder, or HF cache ORG/NAME")
    p.add_argument("--cluster", metavar="NAME|PATH", help="catalog cluster name or cluster YAML (required unless --pool)")
    p.add_argument("--gpus", metavar="N|LO:HI[:STEP]", help="GPU count N or range LO:HI[:STEP] (default: the whole cluster)")
    p.add_argument(*option_strings("--gbs"), dest="gbs", required=True, metavar="N|LO:HI",
                   help="global batch in sequences: N, or a range LO:HI")
    p.add_argument(*option_strings("--seq"), dest="seq", type=int, metavar="N",
                   help="sequence length in tokens (default: the model's)")
    p.add_argument("--top", type=int, default=5, metavar="N", help="how many plans (distinct layouts) to show (default 5)")
    p.add_argument("--calibration", metavar="NAME|PATH", help="calibration profile name or YAML (default: the accelerator's)")
    add_host_speed(p)
    g = p.add_argument_group("constraints")
    for flag, field, help_ in FIXED:
        choices = (0, 1, 2, 3) if field == "zero_stage" else None
        g.add_argument(*option_strings(flag), dest=f"fix_{field}", type=int, choices=choices,
                       metavar=None if choices else "N", help=help_)
    g.add_argument(*option_strings("--recompute"), dest="fix_recompute", choices=RECOMPUTE,
                   help="fix the recompute mode")
    g.add_argument("--schedules", metavar="LIST", help=f"comma-separated pipeline schedules to consider ({','.join(SCHEDULES)})")
    g.add_argument("--max-tp", type=int, metavar="N", help="largest tensor-parallel degree")
    g.add_argument("--max-pp", type=int, metavar="N", help="largest pipeline degree")
    g.add_argument("--max-cp", type=int, default=16, metavar="N", help="largest context-parallel degree (default 16)")
    g.add_argument("--max-vp", type=int, default=8, metavar="N", help="largest virtual pipeline degree (default 8)")
    g.add_argument("--max-mbs", type=int, default=16, metavar="N", help="largest micro-batch size (default 16)")
    g.add_argument("--min-headroom-gb", type=float, default=None, metavar="GB",
                   help="memory each GPU must keep free, GB (1e9 B; default 5%% of HBM: the memory model's "
                        "validated error on 2-GPU steps, docs/validation.md; 0 to use every byte)")
    g.add_argument("--allow-cross-node-tp", action="store_true",
                   help="let tp and ep*etp span more than one NVLink domain")
    g.add_argument("--even-layers", action="store_true", help="only even layer splits (no uneven first/last stage)")
    g.add_argument("--precision", choices=PRECISIONS, default="bf16", help="GEMM precision (default bf16)")
    g.add_argument("--framework", default=DEFAULT_FRAMEWORK, choices=FRAMEWORKS,
                   help=f"framework that runs the plan: the plan space is its space (default {DEFAULT_FRAMEWORK})")
    b = p.add_argument_group("budget (cheapest plan that trains N tokens within D days)")
    b.add_argument("--tokens", type=float, metavar="N", help="tokens to train, e.g. 1e12")
    b.add_argument("--days", type=float, metavar="D", help="wall-clock limit in days (needs --tokens)")
    b.add_argument("--price", type=float, metavar="USD", help="USD per GPU-hour (default: the accelerator's catalog price)")
    b.add_argument("--objective", choices=("throughput", "cost"),
                   help="rank by tokens/s or by cost per token (default: cost with --tokens, else throughput)")
    h = p.add_argument_group("heterogeneous cluster (stage-to-GPU-type ILP; degrees fixed with --tp --pp --dp)")
    h.add_argument("--pool", action="append", metavar="CLUSTER:GPUS",
                   help="a GPU pool: catalog cluster and how many of its GPUs (repeat for each GPU type)")
    h.add_argument("--per-stage-recompute", action="store_true",
                   help="let every stage choose its own recomputed layers (the simulator and Megatron-LM "
                        "express one count for all stages)")
    s = p.add_argument_group("solver and output")
    s.add_argument("--inner", choices=("enum", "ilp"), default="enum",
                   help="inner choices (layer split, recompute count): exact enumeration of the split family, "
                        "or additionally the ILP's split for each shape (slower: one ILP per shape expanded; default enum)")
    s.add_argument("--solver", choices=("highs", "cbc"), default="highs", help="MILP solver behind PuLP (default highs)")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="seconds per ILP solve (default 10)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--write-plan", metavar="FILE", help="write the best plan as YAML for meshcast simulate --plan")
    from meshcast.commands.common import add_export_options
    add_export_options(s)
    s.add_argument("-o", "--output", metavar="FILE", help="write a self-contained HTML page: Pareto front throughput vs headroom")
    s.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace JSON of one step of the best plan")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress counter on stderr (default: when stderr is a terminal)")
    p.set_defaults(run=run)


TIE_POOL = 12              # plans searched (distinct layouts) among which ties are ordered by validation


def resolve_headroom(args) -> str:
    """Set ``args.min_headroom_gb`` (default: 5% of the smallest HBM in use) and say what is kept free."""
    from hardware_specs import load_hardware
    from simulator.memory import MEMORY_MARGIN

    if args.min_headroom_gb is not None:
        return f"min headroom {args.min_headroom_gb:g} GB kept free (--min-headroom-gb)"
    names = [p.split(":")[0] for p in args.pool] if args.pool else [args.cluster] if args.cluster else []
    if not names:
        args.min_headroom_gb = 0.0
        return "min headroom 0 GB"
    hbm = min(load_hardware(n, 1).accelerator.hbm_capacity_bytes for n in names)
    args.min_headroom_gb = MEMORY_MARGIN * hbm / 1e9
    return (f"min headroom {args.min_headroom_gb:.1f} GB ({MEMORY_MARGIN:.0%} of HBM: the memory model's "
            f"validated error) kept free; --min-headroom-gb 0 uses every byte")


def _fixed(args) -> dict:
    out = {field: getattr(args, f"fix_{field}") for _, field, _ in FIXED}
    out["recompute"] = args.fix_recompute
    return {k: v for k, v in out.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    """Search the best plans and print, write or export them."""
    from hardware_specs import load_hardware
    from hardware_specs.catalog import load_cluster, load_node
    from hardware_specs.errors import MeshcastError
    from models import load_model
    from planners.report import format_text, result_dict, write_html, write_plan_yaml
    from planners.search import Objective, search
    from planners.ties import apply_ties
    from planners.space import make_constraints
    from simulator.calibration import calibration_for
    from meshcast.commands.common import check_outputs
    from simulator.plan import ParallelPlan, check_precision

    check_outputs(args)
    if not args.time_limit > 0 or args.time_limit == float("inf"):
        raise MeshcastError("time-limit", f"must be a positive number of seconds, got {args.time_limit:g}")
    if args.min_headroom_gb is not None and not args.min_headroom_gb >= 0:
        raise MeshcastError("min-headroom-gb", f"must be >= 0, got {args.min_headroom_gb:g}")
    model = load_model(args.model)
    headroom_note = resolve_headroom(args)
    if args.pool:
        return run_heterogeneous(args, model)
    if not args.cluster:
        raise MeshcastError("cluster", "give --cluster (or --pool CLUSTER:GPUS for a heterogeneous cluster)")
    cluster = load_cluster(args.cluster)
    node = load_node(cluster.node)
    hw0 = load_hardware(args.cluster, min(node.gpus_per_node, cluster.num_nodes * node.gpus_per_node))
    cal, cal_note = with_host_speed(*calibration_for(hw0.accelerator, args.calibration), args)
    check_precision(args.precision, hw0.accelerator)
    if args.top < 1:
        raise MeshcastError("top", f"must be at least 1, got {args.top}")
    if args.days is not None and args.tokens is None:
        raise MeshcastError("days", "a deadline needs --tokens (how many tokens to train)")
    for name in ("tokens", "days", "price"):
        v = getattr(args, name)
        if v is not None and not 0 < v < float("inf"):    # NaN too: --days nan was silently no deadline
            raise MeshcastError(name, f"must be a positive finite number, got {v}")
    kind = args.objective or ("cost" if args.tokens is not None else "throughput")
    price = args.price if args.price is not None else hw0.accelerator.price_per_gpu_hour_usd
    if kind == "cost" and price is None and args.tokens is not None:
        raise MeshcastError("price", f"{hw0.accelerator.name} has no catalog price; pass --price USD per GPU-hour")
    schedules = [x.strip() for x in args.schedules.split(",")] if args.schedules is not None else None
    base = ParallelPlan(precision=args.precision, framework=args.framework)
    if args.export:   # before the search: a torchtitan plan is no Megatron config
        from simulator.frameworks.launch import require_format
        require_format(base, args.export)
    c = make_constraints(model, args.cluster, gpus=args.gpus, gbs=args.gbs, seq=args.seq, fixed=_fixed(args),
                         min_headroom_gb=args.min_headroom_gb, base=base, schedules=schedules,
                         max_tp=args.max_tp, max_pp=args.max_pp, max_cp=args.max_cp, max_vp=args.max_vp,
                         max_mbs=args.max_mbs, nvlink_only=not args.allow_cross_node_tp,
                         uneven=not args.even_layers)
    objective = Objective(kind, args.tokens, args.days, price)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    # search a wider pool than shown, so that validated plans tied with the top one can lead
    pool = max(args.top, TIE_POOL)
    res = apply_ties(search(model, args.cluster, c, calibration=cal, objective=objective, top=pool, progress=progress,
                 inner=args.inner, solver=args.solver, time_limit_s=args.time_limit, keep_explored=bool(args.output)),
                     keep=args.top)
    gpus_text = args.gpus or str(c.gpus[0])
    request = {"model": model.name, "cluster": cluster.name, "gpus": gpus_text, "gbs": args.gbs, "seq": c.seq,
               "framework": args.framework,
               "calibration": cal.name, "calibration_note": cal_note, "min_headroom_gb": args.min_headroom_gb,
               "min_headroom_note": headroom_note}
    best = res.best
    if args.write_plan:
        write_plan_yaml(best, args.write_plan, args.model, args.cluster)
    if args.trace:
        from simulator import simulate
        from simulator.trace import write_chrome_trace
        hw = load_hardware(args.cluster, best.result.num_gpus)
        write_chrome_trace(simulate(model, hw, best.result.plan, cal, with_timeline=True), args.trace)
    if args.output:
        write_html(res, res.explored, args.output,
                   f"meshcast plan: {model.name} on {gpus_text} x {hw0.accelerator.name}, gbs {args.gbs} x seq {c.seq}",
                   model, request)
    from meshcast.commands.common import emit_export
    if args.json:
        emit_export(args, model, best.plan, to_stdout=False)
        emit_json(result_dict(res, request), "plan")
        return 0
    line = (f"{model.name} on {gpus_text} x {hw0.accelerator.name} ({cluster.name}), gbs {args.gbs} x seq {c.seq}, "
            f"objective {kind}; calibration: {cal_note}\n"
            f"framework: {args.framework}{' (the default; --framework chooses)' if args.framework == DEFAULT_FRAMEWORK else ''}"
            f": only plans it can launch are searched\n{headroom_note}")
    print(format_text(res, line))
    emit_export(args, model, best.plan)
    if args.write_plan:
        print(f"\nwrote {args.write_plan} (meshcast simulate --model {args.model} --cluster {args.cluster} "
              f"--gpus {best.result.num_gpus} --plan {args.write_plan})")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def run_heterogeneous(args: argparse.Namespace, model) -> int:
    """Stages of one fixed layout on several GPU types: layers, recompute and type per stage."""
    from simulator.calibration import calibration_for

    pools = _parse_pools(args.pool)
    plan, modes = _heterogeneous_layout(args, model, pools)
    cal, _ = calibration_for(pools[0][0].accelerator, args.calibration)
    out, mode = _best_heterogeneous(args, model, pools, plan, modes, cal)
    sol = out.solution
    rows = [{"stage": s, "gpu_type": sol.types[s], "layers": sol.layers[s], "recomputed_layers": sol.recomputed[s],
             "stage_time_s": sol.stage_times[s], "memory_bytes": sol.stage_bytes[s]} for s in range(len(sol.layers))]
    if args.write_plan:
        _write_heterogeneous_plan(args, model, out)
    if args.json:
        emit_json({"plan": out.plan.to_dict(), "stages": rows, "pipeline_s": sol.pipeline_s,
                   "step_time_s": out.step_time_s, "gpus_by_type": out.gpus_by_type,
                   "solver": {"name": sol.info.solver, "status": sol.info.status, "gap": sol.info.gap,
                              "time_s": sol.info.time_s}}, "plan")
        return 0
    _print_heterogeneous(args, model, plan, out, rows, mode)
    return 0


def _parse_pools(specs: list[str]) -> list:
    """(Hardware, GPU count) for each ``CLUSTER:GPUS`` pool."""
    from hardware_specs import load_hardware
    from hardware_specs.catalog import load_cluster, load_node
    from hardware_specs.errors import MeshcastError

    pools = []
    for spec in specs:
        name, _, count = spec.rpartition(":")
        if not name or not count.isdigit() or int(count) <= 0:
            raise MeshcastError("pool", f"expected CLUSTER:GPUS, got {spec!r}")
        cl = load_cluster(name)
        node = load_node(cl.node)
        total = cl.num_nodes * node.gpus_per_node
        pools.append((load_hardware(name, min(total, max(int(count), 1))), int(count)))
    return pools


def _heterogeneous_layout(args: argparse.Namespace, model, pools) -> tuple:
    """The fixed layout (a ParallelPlan: tp, pp, dp from the flags) and the recompute modes to try."""
    from hardware_specs.errors import MeshcastError
    from planners.space import parse_count_range
    from simulator.plan import ParallelPlan

    fixed = _fixed(args)
    for need in ("tp", "pp", "dp"):
        if need not in fixed:
            raise MeshcastError(need, f"a heterogeneous plan needs --{need} fixed (the stage-to-type ILP "
                                      "assigns stages of one layout)")
    width = fixed["tp"] * fixed.get("cp", 1) * fixed["dp"]
    slots = sum(count // width for _, count in pools)
    if slots < fixed["pp"]:
        raise MeshcastError("pool", f"{fixed['pp']} stages of tp*cp*dp = {width} GPUs need {fixed['pp'] * width} GPUs "
                                    f"in whole stages; the pools hold {slots} such stages "
                                    f"({sum(c for _, c in pools)} GPUs)")
    lo, hi, _ = parse_count_range(args.gbs, "gbs")
    if lo != hi:
        raise MeshcastError("gbs", "a heterogeneous plan takes one global batch")
    rec = fixed.get("recompute")
    full_mode = "per_stage" if args.per_stage_recompute else "uniform"
    modes = ["none"] if rec == "none" else [full_mode] if rec == "full" else ["none", full_mode]
    plan = ParallelPlan(tp=fixed["tp"], pp=fixed["pp"], dp=fixed["dp"], cp=fixed.get("cp", 1), vp=fixed.get("vp", 1),
                        mbs=fixed.get("mbs", 1), gbs=hi, seq=args.seq or model.seq_len,
                        zero_stage=fixed.get("zero_stage"), precision=args.precision, framework=args.framework,
                        layers_per_stage=_even_blocks(model.num_layers, fixed["pp"], fixed.get("vp", 1)))
    return plan, modes


def _best_heterogeneous(args: argparse.Namespace, model, pools, plan, modes: list[str], cal):
    """The faster of the recompute modes' ILP solutions; MeshcastError when none fits."""
    from hardware_specs.errors import MeshcastError
    from planners.ilp import ILPError, plan_heterogeneous

    out, best_mode, err = None, None, None
    for mode in modes:    # without --recompute: the better of no recompute and full recompute
        try:
            o = plan_heterogeneous(model, pools, plan, recompute=mode, min_headroom_bytes=args.min_headroom_gb * 1e9,
                                   calibration=cal, solver=args.solver, time_limit_s=args.time_limit)
        except ILPError as exc:
            if "infeasible" not in exc.reason:
                raise
            err = exc
            continue
        if out is None or o.step_time_s < out.step_time_s:
            out, best_mode = o, mode
    if out is None:
        raise MeshcastError("memory", f"no assignment of stages to {', '.join(args.pool)} fits memory and the "
                                      f"GPU counts ({err.reason if err else ''})")
    return out, best_mode


def _write_heterogeneous_plan(args: argparse.Namespace, model, out) -> None:
    import yaml

    from hardware_specs.fileio import write_text_atomic

    sol = out.solution
    doc = {"plan": {k: v for k, v in out.plan.to_dict().items() if v is not None}, "stage_gpu_types": list(sol.types),
           "stage_recomputed_layers": list(sol.recomputed),
           "meshcast_plan": {"model": model.name, "pools": args.pool, "predicted_step_time_s": out.step_time_s}}
    head = (f"# written by meshcast plan --pool: stages on several GPU types (plan.stage_clusters);\n"
            f"# meshcast simulate --model {args.model} --cluster {out.plan.stage_clusters[0]} "
            f"--gpus {out.plan.num_gpus} --plan {args.write_plan}\n")
    write_text_atomic(args.write_plan, head + yaml.safe_dump(doc, sort_keys=False), "write-plan")


def _print_heterogeneous(args: argparse.Namespace, model, plan, out, rows: list, mode: str) -> None:
    sol = out.solution
    print(f"{model.name}: tp={plan.tp} pp={plan.pp} dp={plan.dp} over {', '.join(args.pool)} "
          f"(stage costs from simulate() on each GPU type; {sol.info.solver} {sol.info.status}, gap "
          f"{sol.info.gap if sol.info.gap is not None else 'n/a'})")
    print(f"{'stage':>5}  {'GPU type':<16} {'layers':>6} {'recomputed':>10} {'time/mb':>9} {'memory':>9}")
    for r in rows:
        print(f"{r['stage']:>5}  {r['gpu_type']:<16} {r['layers']:>6} {r['recomputed_layers']:>10} "
              f"{r['stage_time_s'] * 1e3:>7.2f}ms {r['memory_bytes'] / 1e9:>6.1f} GB")
    print(f"pipeline {sol.pipeline_s:.3f} s (ILP, without sends); step {out.step_time_s:.3f} s (simulate() of the "
          f"plan stage by stage: sends between clusters, data-parallel and optimizer time); GPUs used: "
          + ", ".join(f"{k} {v}" for k, v in out.gpus_by_type.items()))
    if mode == "per_stage" and len(set(sol.recomputed)) > 1:
        print("note: recompute differs per stage; Megatron-LM's --recompute-num-layers is one count for all stages")


def _even_blocks(layers: int, pp: int, vp: int):
    blocks = layers // vp
    base, extra = divmod(blocks, pp)
    return tuple((base + (1 if i >= pp - extra else 0)) * vp for i in range(pp))
