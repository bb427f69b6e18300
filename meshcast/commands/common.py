"""Options shared by several subcommands: model, cluster, plan degrees, calibration, output."""
from __future__ import annotations

import argparse
import json
import sys

from hardware_specs import load_hardware
from hardware_specs.errors import MeshcastError
from models import load_model
from simulator.calibration import calibration_for
from simulator.plan import ParallelPlan, load_plan, plan_from_dict

PLAN_OPTIONS = (  # (flag, plan field, type, help)
    ("--tp", "tp", int, "tensor-parallel degree (with sequence parallelism unless --no-sp)"),
    ("--pp", "pp", int, "pipeline-parallel stages"),
    ("--vp", "vp", int, "virtual pipeline stages (model chunks) per device"),
    ("--dp", "dp", int, "data-parallel degree (default: GPUs / (tp*pp*cp))"),
    ("--cp", "cp", int, "context-parallel degree"),
    ("--ep", "ep", int, "expert-parallel degree"),
    ("--etp", "etp", int, "expert tensor-parallel degree (default: tp)"),
    ("--mbs", "mbs", int, "micro-batch size (sequences)"),
    ("--gbs", "gbs", int, "global batch size (sequences)"),
    ("--seq", "seq", int, "sequence length (tokens; default: the model's)"),
    ("--zero", "zero_stage", int, "ZeRO stage 0-3 (1 = distributed optimizer; default 1)"),
    ("--recompute", "recompute", str, "activation recompute: none, selective or full"),
    ("--recompute-layers", "recompute_layers", int, "fully recompute only this many layers per stage"),
    ("--schedule", "schedule", str, "pipeline schedule: gpipe, 1f1b or interleaved"),
    ("--precision", "precision", str, "GEMM precision: bf16, fp16 or fp8"),
    ("--framework", "framework", str, "framework that runs the plan (default megatron-core; see "
                                       "`meshcast catalog --frameworks`)"),
    ("--attention", "attention", str, "attention kernel: flash or unfused"),
)


def add_model_cluster(p: argparse.ArgumentParser, gpus_required: bool = False) -> None:
    """Add --model, --cluster, --gpus and --calibration."""
    p.add_argument("--model", required=True, help="catalog model name, model YAML or HF config.json")
    p.add_argument("--cluster", required=True, help="catalog cluster name or cluster YAML")
    p.add_argument("--gpus", type=int, required=gpus_required, help="GPUs in use (default: whole cluster)")
    p.add_argument("--calibration", help="calibration profile name or YAML (default: the accelerator's)")


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """Add the parallel-plan flags (and --plan FILE)."""
    g = p.add_argument_group("parallel plan (or --plan FILE; flags override the file)")
    g.add_argument("--plan", help="plan YAML (fields of simulator.plan.ParallelPlan)")
    for flag, field, typ, help_ in PLAN_OPTIONS:
        g.add_argument(flag, dest=field, type=typ, help=help_)
    g.add_argument("--layers-per-stage", help="comma-separated layers per pipeline stage (uneven split)")
    g.add_argument("--no-sp", action="store_true", help="disable sequence parallelism")
    g.add_argument("--tp-comm-overlap", action="store_true", help="overlap TP communication with GEMMs")
    g.add_argument("--ep-comm-overlap", action="store_true", help="overlap MoE all-to-alls with expert compute")
    g.add_argument("--no-overlap-grad-reduce", action="store_true", help="do not overlap DP gradient reduction")
    g.add_argument("--offload-optimizer", action="store_true", help="optimizer state and step on the host")
    g.add_argument("--offload-params", action="store_true", help="parameters on the host too (ZeRO-Infinity)")
    g.add_argument("--dropout", action="store_true", help="model has dropout (stores masks)")


def plan_from_args(args: argparse.Namespace, base: dict | None = None) -> ParallelPlan:
    """A plan from ``base`` (fields read from a launch config) or --plan FILE, overridden by explicit flags."""
    data = load_plan(args.plan).to_dict() if getattr(args, "plan", None) else dict(base or {})
    data = {k: v for k, v in data.items() if v is not None}
    for _, field, _, _ in PLAN_OPTIONS:
        value = getattr(args, field, None)
        if value is not None:
            data[field] = value
    if getattr(args, "layers_per_stage", None):
        try:
            data["layers_per_stage"] = [int(x) for x in args.layers_per_stage.split(",")]
        except ValueError:
            raise MeshcastError("layers-per-stage", f"expected comma-separated integers, got {args.layers_per_stage!r}")
    for flag, field, value in (("no_sp", "sequence_parallel", False), ("tp_comm_overlap", "tp_comm_overlap", True),
                               ("ep_comm_overlap", "ep_comm_overlap", True),
                               ("no_overlap_grad_reduce", "overlap_grad_reduce", False),
                               ("offload_optimizer", "offload_optimizer", True),
                               ("offload_params", "offload_params", True), ("dropout", "dropout", True)):
        if getattr(args, flag, False):
            data[field] = value
    return plan_from_dict(data, "plan")


def add_export_options(g) -> None:
    """--export FORMAT, -O FILE and --megatron-args (an alias of --export megatron)."""
    from simulator.frameworks.launch import FORMATS
    g.add_argument("--export", choices=FORMATS, help="print (or with -O write) the plan's launch config in its "
                                                      "framework's format: a Megatron-LM script, a torchtitan TOML, "
                                                      "a DeepSpeed JSON")
    g.add_argument("--megatron-args", dest="export", action="store_const", const="megatron",
                   help="alias of --export megatron")
    g.add_argument("-O", "--export-file", metavar="FILE", help="write the launch config to FILE (needs --export)")


def emit_export(args: argparse.Namespace, model, plan, to_stdout: bool = True) -> None:
    """Print or write the launch config of a resolved plan when --export was given."""
    from simulator.frameworks.launch import export_config, require_format
    if args.export_file and not args.export:
        raise MeshcastError("export-file", "-O FILE needs --export megatron|torchtitan|deepspeed")
    if not args.export:
        return
    require_format(plan, args.export)
    cfg = export_config(model, plan)
    if args.export_file:
        with open(args.export_file, "w") as fh:
            fh.write(cfg.text)
        for note in cfg.notes:
            print(f"note: {note}", file=sys.stderr)
        print(f"wrote {args.export_file} ({args.export} launch config)", file=sys.stderr)
    elif to_stdout:
        print(f"\n{args.export} launch config ({cfg.filename}):")
        print(cfg.with_notes())
        if cfg.format == "deepspeed":
            for note in cfg.notes:
                print(f"# note: {note}")


def add_import_options(p: argparse.ArgumentParser) -> None:
    """--from-megatron-args / --from-torchtitan / --from-deepspeed FILE: the plan from a launch config."""
    g = p.add_argument_group("plan from a launch config (plan flags override it)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--from-megatron-args", metavar="FILE", help="a Megatron-LM command line or argument list")
    x.add_argument("--from-torchtitan", metavar="FILE", help="a torchtitan TOML job config")
    x.add_argument("--from-deepspeed", metavar="FILE", help="a DeepSpeed JSON config (world size: --gpus or the cluster)")


def imported_plan(args: argparse.Namespace, model, num_gpus: int | None = None):
    """(plan fields from the launch config given, its notes); ({}, []) when none was given.
    ``num_gpus`` (the world size: --gpus or the whole cluster) gives DeepSpeed's data parallelism."""
    from simulator.frameworks.launch import check_dims, import_config
    for fmt, path in (("megatron", args.from_megatron_args), ("torchtitan", args.from_torchtitan),
                      ("deepspeed", args.from_deepspeed)):
        if path:
            try:
                with open(path) as fh:
                    text = fh.read()
            except OSError as exc:
                raise MeshcastError(f"from-{fmt}", f"cannot read {path}: {exc.strerror}") from None
            got = import_config(fmt, text, model, num_gpus or args.gpus)
            check_dims(model, got.dims, path)
            return got.plan.to_dict(), list(got.notes)
    return {}, []


def load_inputs(args: argparse.Namespace):
    """(model, hardware, calibration, where the calibration came from) from the common options."""
    model = load_model(args.model)
    hw = load_hardware(args.cluster, args.gpus)
    cal, note = calibration_for(hw.accelerator, args.calibration)
    return model, hw, cal, note


def emit_json(obj) -> None:
    """Print one JSON object to stdout."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def fmt_bytes(b: float) -> str:
    """Bytes as GB (1e9 bytes) with one decimal."""
    return f"{b / 1e9:.1f} GB"


def fmt_time(s: float) -> str:
    """Seconds as s, ms or us."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"
