"""Simulate published training runs (../shared/validation/published_runs.csv) and compare
predicted with published per-GPU throughput under each source's own definition.

Comparison, most direct first: the published iteration time; tokens/s per GPU; else TFLOP/s per
GPU, converted with the source's own FLOP formula (e.g. Narayanan et al. 2021 count
96·B·s·l·h²(1 + s/6h + V/16lh) per iteration, recompute included), so the ratio
predicted/published is a ratio of step times whatever the formula.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import MeshcastError, SpecError
from hardware_specs.fileio import finite_number, read_csv_rows
from models.schema import ModelSpec
from simulator.calibration import calibration_for
from simulator.engine import simulate
from simulator.flops import step_model_flops
from simulator.plan import ParallelPlan

GPU_CLUSTERS = (("A100-80GB", "dgx-a100-superpod"), ("A100-40GB", "dgx-a100-40gb-superpod"),
                ("H100", "dgx-h100"), ("H200", "dgx-h200"))


@dataclass
class RunComparison:
    """One published run: the metric compared, published and predicted values, relative error."""
    row: int
    source: str
    model: str
    num_gpus: int
    metric: str                  # iteration_time_s, tokens_per_s_per_gpu or tflops_per_gpu
    published: float
    predicted: float
    error: float                 # predicted throughput / published throughput - 1
    plan: dict
    fits: bool
    note: str = ""


@dataclass
class Skipped:
    """A published row that could not be modelled, with the reason."""
    row: int
    source: str
    model: str
    reason: str


RUN_COLUMNS = ("source", "model", "gpu", "num_gpus", "tp", "pp", "global_batch", "micro_batch")
RUN_NUMBERS = ("params_b", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "moe_experts",
               "moe_topk", "num_gpus", "tp", "pp", "vp", "cp", "ep", "dp", "global_batch", "micro_batch",
               "measured_tflops_per_gpu", "measured_mfu", "tokens_per_sec_per_gpu", "iteration_time_s")
LAYER_COLUMNS = ("gpu", "num_gpus", "implementation", "seq_len", "num_heads", "batch_size", "hidden", "metric",
                 "value")
LAYER_NUMBERS = ("num_gpus", "seq_len", "head_dim", "num_heads", "batch_size", "hidden", "value")


def _check_numbers(rows: list[dict], path, columns) -> None:
    """Every non-empty cell of ``columns`` is a positive finite number (a trailing % allowed):
    a published count, time or rate cannot be zero, negative, NaN or infinite."""
    for i, row in enumerate(rows):
        for col in columns:
            text = (row.get(col) or "").strip()
            if text:
                finite_number(text.rstrip("%"), f"{path}: line {i + 2}: {col}", positive=True)


def _num(row: dict, key: str) -> float | None:
    v = (row.get(key) or "").strip().rstrip("%")
    try:
        return float(v)
    except ValueError:
        return None


def _int(row: dict, key: str) -> int | None:
    v = _num(row, key)
    return int(v) if v is not None else None


def source_family(source: str) -> str:
    """A short name for the source of a row (narayanan2021, korthikanti2022, nemo, ...)."""
    s = source.lower()
    for key, name in (("narayanan", "narayanan2021"), ("korthikanti", "korthikanti2022"),
                      ("examples/llama", "megatron-llama"), ("megatron-lm readme", "megatron-readme"),
                      ("nemo", "nemo"), ("flashattention", "flashattention2")):
        if key in s:
            return name
    return s.split(" ")[0]


def model_from_row(row: dict) -> ModelSpec:
    """A ModelSpec from the row's columns (GPT layout unless the name says Llama/Nemotron)."""
    name = row["model"]
    h, layers, heads = _int(row, "hidden"), _int(row, "layers"), _int(row, "heads")
    if not (h and layers and heads):
        raise MeshcastError("model", "layers, hidden or heads not stated")
    low = name.lower()
    llama = "llama" in low
    nemotron = "nemotron" in low
    ffn = _int(row, "ffn_hidden") or 4 * h
    return ModelSpec(
        name=name, family="llama" if llama else "gpt", num_layers=layers, hidden=h, ffn_hidden=ffn,
        num_heads=heads, num_kv_heads=_int(row, "kv_heads"), vocab=_int(row, "vocab") or 51200,
        seq_len=_int(row, "seq_len") or 2048,
        activation="swiglu" if llama else ("squared_relu" if nemotron else "gelu"),
        norm="rmsnorm" if llama else "layernorm", linear_bias=not (llama or nemotron),
        position="rope" if (llama or nemotron) else "learned", tied_embeddings=not (llama or nemotron))


def plan_from_row(row: dict, model: ModelSpec) -> ParallelPlan:
    """The row's parallel plan; raises MeshcastError naming what the row does not state."""
    gpus = _int(row, "num_gpus")
    tp, pp, gbs, mbs = _int(row, "tp"), _int(row, "pp"), _int(row, "global_batch"), _int(row, "micro_batch")
    for name, value in (("num_gpus", gpus), ("tp", tp), ("pp", pp), ("global_batch", gbs), ("micro_batch", mbs)):
        if value is None:
            raise MeshcastError(name, "not stated in the source")
    rec = (row.get("recompute") or "").lower()
    recompute = "full" if rec.startswith("full") else "selective" if "selective" in rec else "none"
    fam = source_family(row["source"])
    zero = _int(row, "zero_stage")
    if zero is None:
        zero = 0 if fam in ("narayanan2021", "korthikanti2022") else 1
    vp = _int(row, "vp") or 1
    cp = _int(row, "cp") or 1
    sp = "sequence parallel" in rec and "no sequence" not in rec or fam not in ("narayanan2021", "korthikanti2022")
    precision = "fp8" if "fp8" in (row.get("dtype") or "").lower() else "bf16"
    return ParallelPlan(tp=tp, pp=pp, vp=vp, cp=cp, ep=_int(row, "ep") or 1, mbs=mbs, gbs=gbs, seq=model.seq_len,
                        zero_stage=zero, recompute=recompute, sequence_parallel=sp, precision=precision,
                        dropout=fam in ("narayanan2021", "korthikanti2022"), 
                        num_gpus=gpus, overlap_grad_reduce="no grad-allreduce overlap" not in row.get("notes", ""),
                        framework=source_framework(row, fam),
                        attention="unfused" if fam in ("narayanan2021", "korthikanti2022") else None)


def source_framework(row: dict, family: str) -> str:
    """The framework a published run used: DeepSpeed where the notes say so, Megatron-LM's 2021-22
    code (unfused attention: the local layer spec) for the Megatron papers, else Megatron-Core + TE."""
    if "deepspeed" in (row.get("notes") or "").lower():
        return "deepspeed"
    return "megatron-core-local" if family in ("narayanan2021", "korthikanti2022") else "megatron-core"


def source_flops(row: dict, model: ModelSpec, plan: ParallelPlan) -> float:
    """FLOPs of one iteration under the source's own definition."""
    B, s, l, h, V = plan.gbs, model.seq_len, model.num_layers, model.hidden, model.vocab
    if source_family(row["source"]) == "narayanan2021":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return step_model_flops(model, s, B)


def cluster_for(gpu: str) -> str:
    """The catalog cluster for a row's GPU description (A100-80GB -> dgx-a100-superpod, ...)."""
    for key, cluster in GPU_CLUSTERS:
        if key.lower() in gpu.lower():
            return cluster
    raise MeshcastError("gpu", f"no catalog cluster for {gpu!r}")


def compare_row(i: int, row: dict, calibration: str | None) -> RunComparison:
    """Simulate one published row's plan and compare with its published throughput or time."""
    model = model_from_row(row)
    plan = plan_from_row(row, model)
    hw = load_hardware(cluster_for(row["gpu"]), plan.num_gpus)
    cal, note = calibration_for(hw.accelerator, calibration)
    r = simulate(model, hw, plan, cal)
    t_pred = r.step_time_s
    tokens = plan.gbs * model.seq_len
    if _num(row, "iteration_time_s"):
        published, metric = _num(row, "iteration_time_s"), "iteration_time_s"
        predicted, error = t_pred, published / t_pred - 1
    elif _num(row, "tokens_per_sec_per_gpu"):
        published, metric = _num(row, "tokens_per_sec_per_gpu"), "tokens_per_s_per_gpu"
        predicted = tokens / t_pred / plan.num_gpus
        error = predicted / published - 1
    elif _num(row, "measured_tflops_per_gpu"):
        published, metric = _num(row, "measured_tflops_per_gpu"), "tflops_per_gpu"
        predicted = source_flops(row, model, plan) / t_pred / plan.num_gpus / 1e12
        error = predicted / published - 1
    else:
        raise MeshcastError("measured", "no iteration time, tokens/s or TFLOP/s to compare")
    return RunComparison(i, row["source"], row["model"], plan.num_gpus, metric, published, predicted, error,
                         r.plan.to_dict(), r.fits, note)


def compare_published(path: str | Path, calibration: str | None = None) -> tuple[list[RunComparison], list[Skipped]]:
    """Every row of the CSV: compared where its configuration is complete, else skipped with the reason."""
    rows = read_csv_rows(path, RUN_COLUMNS)
    _check_numbers(rows, path, RUN_NUMBERS)
    done, skipped = [], []
    for i, row in enumerate(rows):
        try:
            done.append(compare_row(i, row, calibration))
        except MeshcastError as exc:
            skipped.append(Skipped(i, row.get("source", ""), row.get("model", ""), f"{exc.field}: {exc.reason}"))
    return done, skipped


def per_source(done: list[RunComparison]) -> dict[str, dict]:
    """MAPE and count of the comparisons of each source family."""
    out: dict[str, list[float]] = {}
    for c in done:
        out.setdefault(source_family(c.source), []).append(abs(c.error))
    return {k: {"count": len(v), "mape": sum(v) / len(v), "worst": max(v)} for k, v in sorted(out.items())}


@dataclass
class LayerComparison:
    """One published per-layer time (ms) against the predicted one."""
    implementation: str
    metric: str                  # forward_time, backward_time or combined_time
    published_ms: float
    predicted_ms: float
    error: float


LAYER_IMPLEMENTATIONS = {   # Korthikanti et al. 2022 Table 4 rows -> (sequence parallel, recompute)
    "baseline no recompute": (False, "none"), "sequence parallelism": (True, "none"),
    "baseline with recompute": (False, "full"), "selective recompute": (False, "selective"),
    "selective + sequence": (True, "selective"),
}


def compare_layer_times(path: str | Path, calibration: str | None = None) -> list[LayerComparison]:
    """One transformer layer's forward and backward times (Korthikanti et al. 2022, Table 4:
    GPT-22B layer, TP=8 on 8 A100s) against the layer ops simulate() costs."""
    from simulator.engine import _fabric, device_model, summarize_ops
    from simulator.lowering import Context, layer_ops
    from simulator.plan import resolve_plan

    out = []
    rows = read_csv_rows(path, LAYER_COLUMNS)
    _check_numbers(rows, path, LAYER_NUMBERS)
    for i, row in enumerate(rows):
        if row["metric"] not in ("forward_time", "backward_time", "combined_time"):
            raise SpecError(f"{path}: line {i + 2}: metric", "must be forward_time, backward_time or combined_time, "
                                                            f"got {row['metric']!r}")
    for row in rows:
        impl = row["implementation"].split(":", 1)[-1].strip().lower()
        if impl not in LAYER_IMPLEMENTATIONS:
            continue
        sp, recompute = LAYER_IMPLEMENTATIONS[impl]
        h, heads, s, b = int(row["hidden"]), int(row["num_heads"]), int(row["seq_len"]), int(row["batch_size"])
        model = ModelSpec(name="gpt-22b-layer", num_layers=1, hidden=h, ffn_hidden=4 * h, num_heads=heads,
                          vocab=51200, seq_len=s, activation="gelu", norm="layernorm", linear_bias=True,
                          position="learned", tied_embeddings=True)
        gpus = int(row["num_gpus"])
        hw = load_hardware(cluster_for(row["gpu"]), gpus)
        cal, _ = calibration_for(hw.accelerator, calibration)
        plan = resolve_plan(model, ParallelPlan(tp=gpus, mbs=b, gbs=b, seq=s, sequence_parallel=sp,
                                                recompute=recompute, framework="megatron-core-local", dropout=True,
                                                zero_stage=0), gpus)
        ctx = Context(model, plan, device_model(hw.accelerator, cal), _fabric(hw, cal))
        layer = summarize_ops(layer_ops(ctx, moe=False))   # summed as a pipeline stage sums it
        fwd, bwd = layer.forward_s, layer.backward_s
        pred = {"forward_time": fwd, "backward_time": bwd, "combined_time": fwd + bwd}[row["metric"]] * 1e3
        pub = float(row["value"])
        out.append(LayerComparison(impl, row["metric"], pub, pred, pred / pub - 1))
    return out
