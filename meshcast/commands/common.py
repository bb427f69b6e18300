"""Options shared by several subcommands: model, cluster, plan degrees, calibration, output.

This module is imported while the parser is built (``meshcast --help``), so it imports nothing
heavy at module level: numpy, scipy, pydantic, plotly and PuLP load inside the functions that
run a command.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from meshcast import __version__

# The values simulator.plan accepts (tests/test_cli_ux.py checks they stay equal).
SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
# simulator/frameworks/*.yaml (kept here so --help imports nothing heavy; a test checks they agree)
FRAMEWORKS = ("deepspeed", "deepspeed-0.3", "megatron-core", "megatron-core-local", "pytorch", "torchtitan")
DEFAULT_FRAMEWORK = "megatron-core"
EXPORT_FORMATS = ("megatron", "torchtitan", "deepspeed")   # simulator.frameworks.launch.FORMATS (tested)
PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4")
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")   # simulator.plan.FP8_RECIPES (Megatron-Core's names)
ATTENTION = ("flash", "cudnn", "fa3", "efficient", "triton_fa", "unfused", "math", "unfused_torch")   # = simulator.frameworks.profile.ATTENTION_BACKENDS, copied: importing simulator costs --help ~0.45 s

MEGATRON_ALIASES = {  # meshcast flag -> Megatron-LM spellings accepted as the same option
    "--tp": ("--tensor-model-parallel-size",),
    "--pp": ("--pipeline-model-parallel-size",),
    "--vp": ("--num-virtual-stages-per-pipeline-rank",),
    "--dp": ("--data-parallel-size",),
    "--cp": ("--context-parallel-size",),
    "--ep": ("--expert-model-parallel-size",),
    "--etp": ("--expert-tensor-parallel-size",),
    "--mbs": ("--micro-batch-size",),
    "--gbs": ("--global-batch-size",),
    "--seq": ("--seq-length",),
    "--recompute": ("--recompute-granularity",),
}

PLAN_OPTIONS = (  # (flag, plan field, type, choices, help)
    ("--tp", "tp", int, None, "tensor-parallel degree (with sequence parallelism unless --no-sp)"),
    ("--pp", "pp", int, None, "pipeline-parallel stages"),
    ("--vp", "vp", int, None, "virtual pipeline stages (model chunks) per device"),
    ("--dp", "dp", int, None, "data-parallel degree (default: GPUs / (tp*pp*cp))"),
    ("--cp", "cp", int, None, "context-parallel degree"),
    ("--ep", "ep", int, None, "expert-parallel degree"),
    ("--etp", "etp", int, None, "expert tensor-parallel degree (default: tp)"),
    ("--mbs", "mbs", int, None, "micro-batch size in sequences"),
    ("--gbs", "gbs", int, None, "global batch size in sequences"),
    ("--seq", "seq", int, None, "sequence length in tokens (default: the model's)"),
    ("--zero", "zero_stage", int, (0, 1, 2, 3), "ZeRO stage, as the framework means it (default: the framework's; megatron-core: 1)"),
    ("--recompute", "recompute", str, RECOMPUTE, "activation recompute (default none)"),
    ("--recompute-layers", "recompute_layers", int, None, "fully recompute only this many layers per stage"),
    ("--schedule", "schedule", str, SCHEDULES, "pipeline schedule (default: interleaved when vp > 1, else 1f1b)"),
    ("--precision", "precision", str, PRECISIONS, "GEMM precision (default bf16)"),
    ("--fp8-recipe", "fp8_recipe", str, FP8_RECIPES,
     "Transformer Engine FP8 recipe under --precision fp8 (default: Megatron-Core's, delayed; tensorwise = current "
     "scaling); costed: its quantize kernels (docs/cost_model.md)"),
    ("--framework", "framework", str, FRAMEWORKS,
     "framework that runs the plan; decides the plan space, memory semantics and kernels (default megatron-core)"),
    ("--attention", "attention", str, ATTENTION, "attention kernel (default: the framework's first, e.g. cudnn for megatron-core)"),
)


def option_strings(flag: str) -> tuple[str, ...]:
    """``flag`` and its Megatron-LM aliases, for ``add_argument``."""
    return (flag, *MEGATRON_ALIASES.get(flag, ()))


def add_model_cluster(p: argparse.ArgumentParser, gpus_required: bool = False) -> None:
    """Add --model, --cluster, --gpus and --calibration."""
    p.add_argument("--model", required=True, metavar="NAME|PATH",
                   help="catalog model name, model YAML, HF config.json or its folder, or HF cache ORG/NAME")
    p.add_argument("--cluster", required=True, metavar="NAME|PATH", help="catalog cluster name or cluster YAML")
    p.add_argument("--gpus", type=int, required=gpus_required, metavar="N", help="GPUs in use (default: the whole cluster)")
    p.add_argument("--calibration", metavar="NAME|PATH", help="calibration profile name or YAML (default: the accelerator's)")
    add_host_speed(p)


def add_host_speed(p: argparse.ArgumentParser) -> None:
    """Add --host-speed (the host's slowness relative to the calibration's; validation/host_speed.py)."""
    p.add_argument("--host-speed", type=float, default=None, metavar="X",
                   help="your host's speed relative to the calibration's (>1: slower; host-bound plans scale with "
                        "it): measure it with the harness's tiny twin steps (docs/measurements.md, 'host speed'); "
                        "lent machines of one GPU kind differed by up to 1.5x")


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """Add the parallel-plan flags (and --plan FILE), with their Megatron-LM spellings."""
    g = p.add_argument_group("parallel plan (or --plan FILE; flags override the file; "
                             "Megatron-LM spellings accepted)")
    g.add_argument("--plan", metavar="FILE", help="plan YAML (fields of simulator.plan.ParallelPlan)")
    for flag, field, typ, choices, help_ in PLAN_OPTIONS:
        g.add_argument(*option_strings(flag), dest=field, type=typ, choices=choices,
                       metavar=None if choices else "N", help=help_)
    g.add_argument("--layers-per-stage", metavar="N,N,...", help="layers per pipeline stage (uneven split)")
    g.add_argument("--sequence-parallel", dest="sp", action="store_true", default=None,
                   help="sequence parallelism with tp (the default)")
    g.add_argument("--no-sp", "--no-sequence-parallel", dest="sp", action="store_false",
                   help="disable sequence parallelism")
    g.add_argument("--tp-comm-overlap", action="store_true", help="overlap TP communication with GEMMs")
    g.add_argument("--ep-comm-overlap", action="store_true", help="overlap MoE all-to-alls with expert compute")
    g.add_argument("--no-overlap-grad-reduce", action="store_true", help="do not overlap DP gradient reduction")
    g.add_argument("--offload-optimizer", action="store_true", help="optimizer state and step on the host")
    g.add_argument("--offload-params", action="store_true", help="parameters on the host too (ZeRO-Infinity)")
    g.add_argument("--dropout", action="store_true", help="model has dropout (stores masks)")


def plan_from_args(args: argparse.Namespace, base: dict | None = None):
    """A :class:`~simulator.plan.ParallelPlan` from ``base`` (fields read from a launch config) or
    --plan FILE, overridden by explicit flags."""
    from hardware_specs.errors import MeshcastError
    from simulator.plan import load_plan, plan_from_dict

    data = load_plan(args.plan).to_dict() if getattr(args, "plan", None) else dict(base or {})
    data = {k: v for k, v in data.items() if v is not None}
    gpus = getattr(args, "gpus", None)
    if data.get("num_gpus") is not None and gpus is not None and gpus != data["num_gpus"]:
        raise MeshcastError("gpus", f"--gpus {gpus} conflicts with num_gpus: {data['num_gpus']} in {args.plan} "
                                    "(give one of them, or make them agree)")
    for _, field, _, _, _ in PLAN_OPTIONS:
        value = getattr(args, field, None)
        if value is not None:
            data[field] = value
    if getattr(args, "layers_per_stage", None) is not None:    # --layers-per-stage "" is an error, not no split
        try:
            data["layers_per_stage"] = [int(x) for x in args.layers_per_stage.split(",")]
        except ValueError:
            raise MeshcastError("layers-per-stage", f"expected comma-separated integers, got {args.layers_per_stage!r}")
    if getattr(args, "sp", None) is False:
        data["sequence_parallel"] = False
    for flag, field, value in (("tp_comm_overlap", "tp_comm_overlap", True),
                               ("ep_comm_overlap", "ep_comm_overlap", True),
                               ("no_overlap_grad_reduce", "overlap_grad_reduce", False),
                               ("offload_optimizer", "offload_optimizer", True),
                               ("offload_params", "offload_params", True), ("dropout", "dropout", True)):
        if getattr(args, flag, False):
            data[field] = value
    return plan_from_dict(data, "")   # the file was checked by load_plan; name the flags plainly


def add_export_options(g) -> None:
    """--export FORMAT, -O FILE and --megatron-args (an alias of --export megatron)."""
    g.add_argument("--export", choices=EXPORT_FORMATS, help="print (or with -O write) the plan's launch config in its "
                                                      "framework's format: a Megatron-LM script, a torchtitan TOML, "
                                                      "a DeepSpeed JSON")
    g.add_argument("--megatron-args", dest="export", action="store_const", const="megatron",
                   help="alias of --export megatron")
    g.add_argument("-O", "--export-file", metavar="FILE", help="write the launch config to FILE (needs --export)")


def emit_export(args: argparse.Namespace, model, plan, to_stdout: bool = True) -> None:
    """Print or write the launch config of a resolved plan when --export was given."""
    from hardware_specs.errors import MeshcastError
    from hardware_specs.fileio import write_text_atomic
    from simulator.frameworks.launch import export_config, require_format

    if args.export_file and not args.export:
        raise MeshcastError("export-file", "-O FILE needs --export megatron|torchtitan|deepspeed")
    if not args.export:
        return
    require_format(plan, args.export)
    cfg = export_config(model, plan)
    if args.export_file:
        write_text_atomic(args.export_file, cfg.text, "export-file")
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
    from hardware_specs.fileio import read_text
    from simulator.frameworks.launch import check_dims, import_config

    for fmt, path in (("megatron", args.from_megatron_args), ("torchtitan", args.from_torchtitan),
                      ("deepspeed", args.from_deepspeed)):
        if path:
            text = read_text(path)
            got = import_config(fmt, text, model, num_gpus or args.gpus)
            check_dims(model, got.dims, path)
            return got.plan.to_dict(), list(got.notes)
    return {}, []


def load_inputs(args: argparse.Namespace, plan=None):
    """(model, hardware, calibration, where the calibration came from) from the common options;
    without --gpus, a plan's ``num_gpus`` sets the GPU count (else the whole cluster)."""
    from hardware_specs import load_hardware
    from models import load_model
    from simulator.calibration import calibration_for

    model = load_model(args.model)
    gpus = args.gpus if args.gpus is not None else (plan.num_gpus if plan is not None else None)
    hw = load_hardware(args.cluster, gpus)
    cal, note = with_host_speed(*calibration_for(hw.accelerator, args.calibration), args)
    return model, hw, cal, note


def with_host_speed(cal, note: str, args: argparse.Namespace):
    """(calibration, note) with ``--host-speed`` applied where given."""
    return apply_host_speed(cal, note, getattr(args, "host_speed", None))


HOST_SPEED_RANGE = (0.01, 100.0)
"""--host-speed factors accepted: lent machines of one GPU kind differed by up to 1.5x; a factor
of 1e308 or inf would overflow every host cost into an infinite step."""


def check_host_speed(speed: float | None) -> None:
    """One clear error naming --host-speed unless ``speed`` is None or a finite factor in
    :data:`HOST_SPEED_RANGE`."""
    from hardware_specs.errors import MeshcastError
    if speed is None:
        return
    if not speed > 0:
        raise MeshcastError("--host-speed", f"must be a positive factor, got {speed}")
    lo, hi = HOST_SPEED_RANGE
    if not lo <= speed <= hi:
        raise MeshcastError("--host-speed", f"must be between {lo:g} and {hi:g} (a host that many times slower "
                                            f"or faster than the calibration's), got {speed:g}")


def apply_host_speed(cal, note: str, speed: float | None):
    """(calibration, note) on a host ``speed`` times the calibration's (None: unchanged); one clear
    error naming --host-speed unless it is a factor :func:`check_host_speed` accepts."""
    if speed is None:
        return cal, note
    check_host_speed(speed)
    return cal.with_host_speed(speed), note + f"; host {speed:g}x the calibration's (--host-speed)"


OUTPUT_OPTIONS = (("output", "output"), ("trace", "trace"), ("write_plan", "write-plan"), ("export_file", "export-file"))


def _input_paths(args: argparse.Namespace) -> list[str]:
    """Every option value that names an existing file: the command's inputs."""
    found = []
    for name, value in vars(args).items():
        if name in {a for a, _ in OUTPUT_OPTIONS} or name == "trace_dir":
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and Path(v).is_file():
                found.append(v)
    return found


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every output file (-o, --trace, --write-plan) can be written, is not an
    input of the command and is not another output; a --trace-dir folder can be created."""
    from hardware_specs.errors import MeshcastError
    from hardware_specs.fileio import check_output, check_output_dir

    inputs = _input_paths(args)
    seen: dict[str, str] = {}
    for attr, field in OUTPUT_OPTIONS:
        path = getattr(args, attr, None)
        if path is None:
            continue
        check_output(path, field, inputs)
        key = str(Path(path).resolve())
        if key in seen:
            raise MeshcastError(field, f"{path} is also the --{seen[key]} file; give each output its own file")
        seen[key] = field
    check_output_dir(getattr(args, "trace_dir", None), "trace-dir")


JSON_SCHEMA_REVISION = 1
"""Revision of every command's JSON layout (docs/json.md); bumped when a field changes meaning or goes."""


def json_header(command: str) -> dict:
    """The fields every ``--json`` output starts with: its schema and the meshcast version."""
    return {"schema_version": f"meshcast.{command}/{JSON_SCHEMA_REVISION}", "meshcast_version": __version__}


def finite(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def emit_json(obj: dict, command: str) -> None:
    """Print one strict JSON object (no NaN) to stdout, headed by ``json_header(command)``."""
    json.dump(finite({**json_header(command), **obj}), sys.stdout, indent=2, default=str, allow_nan=False)
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
