"""Options shared by several subcommands: model, cluster, plan degrees, calibration, output."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from hardware_specs import load_hardware
from hardware_specs.errors import MeshcastError
from hardware_specs.fileio import check_output, check_output_dir
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
    ("--recipe", "recipe", str, "model-state recipe: megatron, zero or torch_amp"),
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


def plan_from_args(args: argparse.Namespace) -> ParallelPlan:
    """A plan from --plan FILE overridden by explicit flags."""
    data = load_plan(args.plan).to_dict() if getattr(args, "plan", None) else {}
    data = {k: v for k, v in data.items() if v is not None}
    gpus = getattr(args, "gpus", None)
    if data.get("num_gpus") is not None and gpus is not None and gpus != data["num_gpus"]:
        raise MeshcastError("gpus", f"--gpus {gpus} conflicts with num_gpus: {data['num_gpus']} in {args.plan} "
                                    "(give one of them, or make them agree)")
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
    return plan_from_dict(data, "")   # the file was checked by load_plan; name the flags plainly


def load_inputs(args: argparse.Namespace, plan: ParallelPlan | None = None):
    """(model, hardware, calibration, where the calibration came from) from the common options;
    without --gpus, a plan's ``num_gpus`` sets the GPU count (else the whole cluster)."""
    model = load_model(args.model)
    gpus = args.gpus if args.gpus is not None else (plan.num_gpus if plan is not None else None)
    hw = load_hardware(args.cluster, gpus)
    cal, note = calibration_for(hw.accelerator, args.calibration)
    return model, hw, cal, note


OUTPUT_OPTIONS = (("output", "output"), ("trace", "trace"), ("write_plan", "write-plan"))


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


def _finite(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def emit_json(obj) -> None:
    """Print one JSON object to stdout (strict JSON: NaN and infinities become null)."""
    json.dump(_finite(json.loads(json.dumps(obj, default=str))), sys.stdout, indent=2, allow_nan=False)
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
