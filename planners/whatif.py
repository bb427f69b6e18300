"""What-if sweeps: the same question asked at many points of any input.

A sweep is one or more axes (``gpus=512,1024,2048``, ``accelerator=h100-sxm,h200-sxm``,
``ib_bandwidth=0.5x,1x,2x``, ``seq=4096:16384:x2``, ...); several axes make a grid. At every
point the model, hardware and plan are rebuilt from the base inputs with the point's values,
and either the fixed plan is simulated (``replan=False``; a point where that plan cannot run
or does not fit is reported with the reason, never dropped) or the planner searches the best
plan at that point (``replan=True``, through ``planners.search``). Every point is costed with
:func:`simulator.costing.train_cost`.

Hardware variants are pydantic copies of the catalog entries (``model_copy``); for re-planning
they are written as YAML files (content-addressed, in a temporary folder) because the planner
takes a cluster by name or file, exactly as a user's own cluster YAML.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from hardware_specs.catalog import Hardware, load_accelerator, load_cluster, load_node
from hardware_specs.errors import MeshcastError
from models import load_model
from simulator.calibration import calibration_for
from simulator.costing import train_cost
from simulator.engine import simulate
from simulator.plan import ATTENTION_BACKENDS, ParallelPlan
from simulator.result import Result

SWEEP_FIELD = "--sweep"
MAX_POINTS = 10_000


@dataclass(frozen=True)
class Variable:
    """A sweepable input. ``kind``: int (positive integer), name (catalog entry or file),
    quantity (SI number, or a multiplier of the base value written ``2x``), choice."""

    name: str
    kind: str
    target: str          # hardware, model, plan
    help: str
    unit: str = ""
    choices: tuple = ()


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("gpus", "int", "hardware", "GPU count (a cluster with fewer GPUs is enlarged, and the point says so)"),
    Variable("accelerator", "name", "hardware", "the node's accelerator (catalog name or YAML), same node and fabric"),
    Variable("cluster", "name", "hardware", "the whole cluster: node, accelerator and fabric (catalog name or YAML)"),
    Variable("ib_bandwidth", "quantity", "hardware",
             "per-NIC bandwidth of every scale-out tier, B/s per direction, or a multiplier (2x)", "B/s"),
    Variable("ib_latency", "quantity", "hardware", "one-hop latency of every scale-out tier, s, or a multiplier", "s"),
    Variable("nvlink_bandwidth", "quantity", "hardware",
             "intra-node (NVLink/xGMI/PCIe) bandwidth per GPU, B/s per direction, or a multiplier", "B/s"),
    Variable("nvlink_latency", "quantity", "hardware", "intra-node one-hop latency, s, or a multiplier", "s"),
    Variable("hbm", "quantity", "hardware", "HBM capacity per GPU, bytes (80e9), or a multiplier", "B"),
    Variable("hbm_bandwidth", "quantity", "hardware", "HBM bandwidth per GPU, B/s, or a multiplier", "B/s"),
    Variable("model", "name", "model", "the model (catalog name, model YAML or HF config.json)"),
    Variable("layers", "int", "model", "the model's depth (number of transformer layers)"),
    Variable("seq", "int", "plan", "sequence length, tokens"),
    Variable("gbs", "int", "plan", "global batch, sequences"),
    Variable("mbs", "int", "plan", "micro-batch, sequences"),
    Variable("tp", "int", "plan", "tensor-parallel degree"),
    Variable("pp", "int", "plan", "pipeline-parallel stages"),
    Variable("vp", "int", "plan", "virtual pipeline stages per device"),
    Variable("cp", "int", "plan", "context-parallel degree"),
    Variable("ep", "int", "plan", "expert-parallel degree"),
    Variable("etp", "int", "plan", "expert tensor-parallel degree"),
    Variable("dp", "int", "plan", "data-parallel degree"),
    Variable("zero", "choice", "plan", "ZeRO stage", choices=("0", "1", "2", "3")),
    Variable("recompute", "choice", "plan", "activation recompute", choices=("none", "selective", "full")),
    Variable("recompute_layers", "int", "plan", "fully recomputed layers per stage"),
    Variable("precision", "choice", "plan", "GEMM precision", choices=("bf16", "fp16", "fp8", "nvfp4")),
    Variable("schedule", "choice", "plan", "pipeline schedule", choices=("gpipe", "1f1b", "interleaved")),
    Variable("attention", "choice", "plan", "attention kernel", choices=ATTENTION_BACKENDS),
    Variable("framework", "choice", "plan", "framework that runs the plan",
             choices=("megatron-core", "megatron-core-local", "torchtitan", "deepspeed", "deepspeed-0.3", "pytorch")),
)}

ALIASES = {"num_gpus": "gpus", "gpu": "gpus", "accel": "accelerator", "gpu_type": "accelerator",
           "hbm_capacity": "hbm", "hbm_bytes": "hbm", "memory": "hbm",
           "scaleout_bandwidth": "ib_bandwidth", "nic_bandwidth": "ib_bandwidth",
           "scaleout_latency": "ib_latency", "nic_latency": "ib_latency",
           "intranode_bandwidth": "nvlink_bandwidth", "intranode_latency": "nvlink_latency",
           "seq_len": "seq", "sequence": "seq", "global_batch": "gbs", "micro_batch": "mbs",
           "zero_stage": "zero", "num_layers": "layers"}

# plan fields behind the plan variables (the rest have the same name)
_PLAN_FIELD = {"zero": "zero_stage"}
# degrees the planner searches; a swept one (or one in replan_fix) is pinned at each point
DEGREES = ("tp", "pp", "vp", "cp", "dp", "ep", "etp", "mbs", "zero", "recompute", "recompute_layers")


@dataclass(frozen=True)
class Level:
    """One value of an axis: its label as written, the parsed value, and a number for plots."""

    label: str
    value: Any
    x: Optional[float] = None


@dataclass(frozen=True)
class Axis:
    """One swept variable: its name and the values it takes."""
    variable: Variable
    levels: tuple[Level, ...]

    @property
    def name(self) -> str:
        return self.variable.name

    @property
    def numeric(self) -> bool:
        """True when every level has a number and they share a unit (all multipliers or none)."""
        if any(lv.x is None for lv in self.levels):
            return False
        modes = {lv.value[0] if isinstance(lv.value, tuple) else "abs" for lv in self.levels}
        return len(modes) == 1

    def axis_title(self) -> str:
        v = self.variable
        if self.levels and isinstance(self.levels[0].value, tuple) and self.levels[0].value[0] == "scale":
            return f"{v.name} (x base value)"
        return f"{v.name} ({v.unit})" if v.unit else v.name


# ---- parsing ---------------------------------------------------------------------------------
def _bad(reason: str) -> MeshcastError:
    return MeshcastError(SWEEP_FIELD, reason)


def _number(text: str, spec: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _bad(f"{text!r} is not a number in {spec!r}") from None
    if not math.isfinite(v):
        raise _bad(f"{text!r} is not a finite number in {spec!r}")
    return v


def _int(text: str, spec: str) -> int:
    v = _number(text, spec)
    if v != int(v) or v <= 0:
        raise _bad(f"{text!r} is not a positive integer in {spec!r}")
    return int(v)


def _quantity(text: str, spec: str) -> tuple[str, float]:
    t = text.strip().lower()
    if t.endswith("x"):
        v, mode = _number(t[:-1], spec), "scale"
    else:
        v, mode = _number(t, spec), "abs"
    if v <= 0:
        raise _bad(f"{text!r} must be positive in {spec!r}")
    return (mode, v)


def _expand_range(text: str, var: Variable, spec: str) -> list[str]:
    """``LO:HI:STEP`` (arithmetic) or ``LO:HI:xF`` (geometric), endpoints included."""
    parts = text.split(":")
    if len(parts) != 3:
        raise _bad(f"range {text!r} in {spec!r} must be LO:HI:STEP or LO:HI:xFACTOR")
    lo_t, hi_t, step_t = (p.strip() for p in parts)
    suffix = ""
    if var.kind == "quantity" and lo_t.lower().endswith("x") and hi_t.lower().endswith("x"):
        suffix, lo_t, hi_t = "x", lo_t[:-1], hi_t[:-1]
    lo, hi = _number(lo_t, spec), _number(hi_t, spec)
    if not (0 < lo <= hi):
        raise _bad(f"range {text!r} in {spec!r} needs 0 < LO <= HI")
    out: list[float] = []
    if step_t.lower().startswith("x"):
        f = _number(step_t[1:], spec)
        if f <= 1:
            raise _bad(f"geometric step {step_t!r} in {spec!r} must be above x1")
        v = lo
        while v <= hi * (1 + 1e-9):
            out.append(v)
            v *= f
            if len(out) > MAX_POINTS:
                break
    else:
        s = _number(step_t, spec)
        if s <= 0:
            raise _bad(f"step {step_t!r} in {spec!r} must be positive")
        n = int(math.floor((hi - lo) / s + 1e-9))
        out = [lo + i * s for i in range(min(n, MAX_POINTS) + 1)]
    fmt = (lambda v: str(int(round(v)))) if var.kind == "int" else (lambda v: f"{v:g}")
    return [fmt(v) + suffix for v in out]


def parse_sweep(spec: str) -> Axis:
    """One ``--sweep NAME=V1,V2,...`` (or ``NAME=LO:HI:STEP`` / ``LO:HI:xF``) as an Axis.
    Raises MeshcastError naming ``--sweep`` with the reason."""
    if "=" not in spec:
        raise _bad(f"expected NAME=V1,V2,... got {spec!r} (variables: {', '.join(VARIABLES)})")
    name, _, values = spec.partition("=")
    name = name.strip().lower().replace("-", "_")
    name = ALIASES.get(name, name)
    var = VARIABLES.get(name)
    if var is None:
        import difflib
        close = difflib.get_close_matches(name, list(VARIABLES) + list(ALIASES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _bad(f"unknown variable {name!r} in {spec!r}{hint} (variables: {', '.join(VARIABLES)})")
    texts: list[str] = []
    for item in values.split(","):
        item = item.strip()
        if not item:
            raise _bad(f"empty value in {spec!r}")
        if ":" in item and var.kind in ("int", "quantity"):
            texts += _expand_range(item, var, spec)
        else:
            texts.append(item)
    levels = []
    for t in texts:
        if var.kind == "int":
            v = _int(t, spec)
            levels.append(Level(t, v, float(v)))
        elif var.kind == "quantity":
            q = _quantity(t, spec)
            levels.append(Level(t, q, q[1]))
        elif var.kind == "choice":
            if t.lower() not in var.choices:
                raise _bad(f"{name}: {t!r} is not one of {', '.join(var.choices)}")
            levels.append(Level(t.lower(), int(t) if name == "zero" else t.lower(), None))
        else:
            _check_name(var, t)
            levels.append(Level(t, t, None))
    seen: set = set()
    dup = None
    for lv in levels:
        if lv.label in seen:
            dup = lv.label
            break
        seen.add(lv.label)
    if dup is not None:
        raise _bad(f"{name}: value {dup!r} is given twice")
    if len(levels) > MAX_POINTS:
        raise _bad(f"{name}: {len(levels)} values; at most {MAX_POINTS}")
    return Axis(var, tuple(levels))


def _check_name(var: Variable, text: str) -> None:
    loader = {"accelerator": load_accelerator, "cluster": load_cluster, "model": load_model}[var.name]
    try:
        loader(text)
    except MeshcastError as exc:
        raise _bad(f"{var.name}: {exc.reason}") from None


def parse_sweeps(specs: list[str]) -> list[Axis]:
    """Every ``--sweep`` (a grid when more than one); the variables must differ."""
    if not specs:
        raise _bad("give at least one --sweep NAME=V1,V2,...")
    axes = [parse_sweep(s) for s in specs]
    names = [a.name for a in axes]
    for n in names:
        if names.count(n) > 1:
            raise _bad(f"variable {n!r} is swept twice; give its values in one --sweep")
    total = math.prod(len(a.levels) for a in axes)
    if total > MAX_POINTS:
        raise _bad(f"the grid has {total:,} points; at most {MAX_POINTS:,}")
    return axes


def parse_price(text: Optional[str]) -> tuple[Optional[float], dict]:
    """``--price 2.5`` (every accelerator) or ``--price h100-sxm=2.5,h200-sxm=3.4``."""
    if text is None:
        return None, {}
    if "=" not in text:
        v = _price_number(text)
        return v, {}
    out = {}
    for item in text.split(","):
        name, _, val = item.partition("=")
        if not name.strip():
            raise MeshcastError("price", f"expected ACCELERATOR=USD, got {item!r}")
        out[name.strip()] = _price_number(val)
    return None, out


def _price_number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise MeshcastError("price", f"expected USD per GPU-hour, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise MeshcastError("price", f"must be positive, got {text!r}")
    return v


# ---- the base inputs and one point -----------------------------------------------------------
@dataclass(frozen=True)
class Base:
    """Everything a point starts from before its values are applied."""

    model: str
    cluster: str
    gpus: Optional[int]
    plan: ParallelPlan
    calibration: Optional[str] = None
    replan: bool = False
    replan_fix: tuple[str, ...] = ()
    tokens: Optional[float] = None
    price: Optional[float] = None
    prices: dict = field(default_factory=dict)
    pue: float = 1.0
    with_ops: bool = False
    trace_dir: Optional[str] = None
    time_limit_s: float = 10.0
    host_speed: Optional[float] = None   # --host-speed: host costs scaled by it at every point


@dataclass
class Point:
    """One point of a sweep and what happened there.

    status: ``ok`` (fits), ``does_not_fit`` (the plan runs but exceeds HBM; numbers are kept),
    ``invalid`` (the fixed plan cannot run at this point), ``no_plan`` (re-planning found no
    plan that fits), ``error`` (the inputs at this point are impossible, e.g. GPUs not whole nodes)."""

    index: int
    setting: dict                    # variable -> label
    x: dict                          # variable -> number for plots (None for names)
    status: str = "ok"
    reason: Optional[str] = None
    notes: list = field(default_factory=list)
    hardware: Optional[dict] = None
    calibration: Optional[str] = None
    result: Optional[Result] = None
    cost: Optional[dict] = None
    trace: Optional[str] = None
    search: Optional[dict] = None
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.setting.items())

    @property
    def has_result(self) -> bool:
        return self.result is not None

    def to_dict(self) -> dict:
        r = self.result
        d = {"index": self.index, "label": self.label, "setting": dict(self.setting), "status": self.status,
             "reason": self.reason, "notes": list(self.notes), "hardware": self.hardware,
             "calibration": self.calibration, "plan": r.plan.to_dict() if r is not None else None,
             "result": None, "cost": self.cost, "trace": self.trace, "search": self.search,
             "elapsed_s": self.seconds}
        if r is not None:
            m = r.memory
            d["result"] = {
                "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
                "tokens_per_s_per_gpu": r.tokens_per_s / r.num_gpus, "model_tflops_per_gpu": r.tflops_per_gpu,
                "mfu": r.mfu, "hfu": r.hfu, "fits": r.fits, "memory": m.to_dict(),
                "time_breakdown_s": dict(r.breakdown), "bottleneck": r.bottleneck,
                "bottleneck_description": r.bottleneck_sentence(), "confidence": r.confidence.to_dict(),
            }
        return d


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _scaled(base: float, level_value: tuple[str, float]) -> float:
    mode, v = level_value
    return base * v if mode == "scale" else v


class _Variants:
    """Builds (and memoises, so equal variants are the same objects and share the simulator's
    caches) the model and hardware of each point; writes YAML for the planner when asked."""

    def __init__(self, base: Base, yaml_dir: Optional[str]):
        self.base = base
        self.yaml_dir = yaml_dir
        self._memo: dict = {}

    def _once(self, key, build, *args, **kwargs):
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = build(*args, **kwargs)
        return hit

    def model(self, setting: dict):
        name = setting.get("model", self.base.model)
        m = load_model(name)
        if "layers" in setting:
            n = setting["layers"]
            m = self._once(("model", name, n), _with_layers, m, n)
        return m

    def hardware(self, setting: dict) -> tuple[Hardware, list[str], tuple]:
        """(hardware, notes, refs): refs are the (accelerator, node, cluster) names or files the
        planner can load, None for each part that was changed (cluster_file writes those)."""
        notes: list[str] = []
        cluster_ref = setting.get("cluster", self.base.cluster)
        cluster = load_cluster(cluster_ref)
        node_ref = cluster.node
        node = load_node(node_ref)
        acc_ref = setting.get("accelerator") or node.accelerator
        acc = load_accelerator(acc_ref)
        for var, fld in (("hbm", "hbm_capacity_bytes"), ("hbm_bandwidth", "hbm_bandwidth_Bps")):
            if var in setting:
                a0, val = acc, _scaled(getattr(acc, fld), setting[var])
                acc = self._once((var, id(a0), val), a0.model_copy, update={fld: val})
                acc_ref = None
        if acc_ref != node.accelerator:
            n0, a0 = node, acc
            node = self._once(("node-acc", id(n0), id(a0)), n0.model_copy, update={"accelerator": a0.name})
            node_ref = None
        for var, fld in (("nvlink_bandwidth", "bandwidth_per_direction_Bps"), ("nvlink_latency", "latency_s")):
            if var in setting:
                n0 = node
                val = _scaled(getattr(n0.intra_node, fld), setting[var])
                node = self._once((var, id(n0), val), n0.model_copy,
                                  update={"intra_node": n0.intra_node.model_copy(update={fld: val})})
                node_ref = None
        if node_ref is None:
            cluster_ref = None
        for var, fld in (("ib_bandwidth", "nic_bandwidth_per_direction_Bps"), ("ib_latency", "latency_s")):
            if var in setting:
                if not cluster.tiers:
                    notes.append(f"{cluster.name} has no scale-out tier: {var} changes nothing")
                    continue
                c0 = cluster
                vals = tuple(_scaled(getattr(t, fld), setting[var]) for t in c0.tiers)
                tiers = [t.model_copy(update={fld: v}) for t, v in zip(c0.tiers, vals)]
                cluster = self._once((var, id(c0), vals), c0.model_copy, update={"tiers": tiers})
                cluster_ref = None
        gpn = node.gpus_per_node
        total = cluster.num_nodes * gpn
        gpus = setting.get("gpus", self.base.gpus) or total
        if gpus > gpn and gpus % gpn:
            raise MeshcastError("gpus", f"{gpus} is not a whole number of {gpn}-GPU nodes")
        if gpus > total:
            nodes = -(-gpus // gpn)
            c0 = cluster
            cluster = self._once(("nodes", id(c0), nodes), c0.model_copy, update={"num_nodes": nodes})
            cluster_ref = None
            notes.append(f"hypothetical: {c0.name} has {total} GPUs ({c0.num_nodes} nodes); enlarged to {nodes} nodes")
        hw = Hardware(cluster=cluster, node=node, accelerator=acc, num_gpus=gpus)
        return hw, notes, (acc_ref, node_ref, cluster_ref)

    def cluster_file(self, hw: Hardware, refs: tuple) -> str:
        """The cluster as a YAML file the planner can load, its changed node and accelerator
        beside it (content-addressed names: equal variants share one file)."""
        import yaml

        if self.yaml_dir is None:
            raise RuntimeError("no folder for variant YAML files")
        acc_ref, node_ref, cluster_ref = refs
        if cluster_ref is not None:
            return cluster_ref

        def write(kind: str, data: dict) -> str:
            text = yaml.safe_dump(data, sort_keys=False)
            path = Path(self.yaml_dir) / f"{kind}-{_slug(data['name'])}-{_hash(text)}.yaml"
            if not path.exists():
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                tmp.write_text(text)
                os.replace(tmp, path)
            return str(path)

        if acc_ref is None:
            acc_ref = write("accelerator", hw.accelerator.model_dump(mode="json"))
        if node_ref is None:
            node_ref = write("node", {**hw.node.model_dump(mode="json"), "accelerator": acc_ref})
        return write("cluster", {**hw.cluster.model_dump(mode="json"), "node": node_ref})


def _with_layers(m, n: int):
    moe = m.moe
    if moe is not None and moe.first_dense_layers > n:
        raise MeshcastError("layers", f"{n} layers is fewer than {m.name}'s {moe.first_dense_layers} "
                            "leading dense layers")
    return m.model_copy(update={"num_layers": n, "name": f"{m.name}-{n}L", "published_params": None,
                                "published_params_precision": None})


def _plan_at(base: Base, setting: dict) -> ParallelPlan:
    upd = {}
    for name, value in setting.items():
        var = VARIABLES[name]
        if var.target == "plan":
            upd[_PLAN_FIELD.get(name, name)] = value
    plan = replace(base.plan, **upd) if upd else base.plan
    return plan


def _hardware_summary(hw: Hardware) -> dict:
    acc, node, cl = hw.accelerator, hw.node, hw.cluster
    return {"cluster": cl.name, "node": node.name, "accelerator": acc.name, "num_gpus": hw.num_gpus,
            "hbm_capacity_bytes": acc.hbm_capacity_bytes, "hbm_bandwidth_Bps": acc.hbm_bandwidth_Bps,
            "peak_bf16_flops": acc.peak_flops_dense.bf16, "peak_fp8_flops": acc.peak_flops_dense.fp8,
            "intra_node_bandwidth_per_direction_Bps": node.intra_node.bandwidth_per_direction_Bps,
            "intra_node_latency_s": node.intra_node.latency_s,
            "scale_out_nic_bandwidth_per_direction_Bps": [t.nic_bandwidth_per_direction_Bps for t in cl.tiers],
            "scale_out_latency_s": [t.latency_s for t in cl.tiers]}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "point"


def evaluate_point(base: Base, index: int, setting: dict, x: dict, yaml_dir: Optional[str] = None,
                   variants: Optional[_Variants] = None) -> Point:
    """Build the point's inputs, simulate the fixed plan or re-plan, and cost it."""
    t0 = time.perf_counter()
    pt = Point(index, {k: _label(v) for k, v in setting.items()}, dict(x))
    variants = variants or _Variants(base, yaml_dir)
    try:
        model = variants.model(setting)
        hw, notes, refs = variants.hardware(setting)
    except MeshcastError as exc:
        pt.status, pt.reason = "error", f"{exc.field}: {exc.reason}"
        pt.seconds = time.perf_counter() - t0
        return pt
    pt.notes += notes
    pt.hardware = _hardware_summary(hw)
    cal, cal_note = _calibration(base, hw)
    pt.calibration = cal_note
    plan = _plan_at(base, setting)
    want_timeline = base.trace_dir is not None
    try:
        if base.replan:
            plan = _replan(base, setting, model, hw, refs, variants, cal, plan, pt)
        result = simulate(model, hw, plan, cal, with_timeline=want_timeline, with_ops=base.with_ops)
    except MeshcastError as exc:
        pt.status = "no_plan" if base.replan else "invalid"
        pt.reason = f"{exc.field}: {exc.reason}"
        pt.seconds = time.perf_counter() - t0
        return pt
    pt.result = result
    if not result.fits:
        m = result.memory
        pt.status = "does_not_fit"
        pt.reason = (f"memory: needs {m.total_bytes / 1e9:.1f} GB per GPU (stage {m.stage}) but the "
                     f"{hw.accelerator.name} has {m.capacity_bytes / 1e9:.1f} GB")
    price = base.prices.get(hw.accelerator.name, base.price)
    pt.cost = train_cost(result, base.tokens, price, base.pue, accelerator=hw.accelerator)
    if base.trace_dir is not None:
        from simulator.trace import write_chrome_trace
        path = Path(base.trace_dir) / f"{index:03d}-{_slug(pt.label)}.json"
        write_chrome_trace(result, path, "trace-dir")
        pt.trace = str(path)
    pt.seconds = time.perf_counter() - t0
    return pt


def _label(value) -> str:
    return value.label if isinstance(value, Level) else str(value)


def _calibration(base: Base, hw: Hardware):
    """(calibration, note) of a point: the accelerator's (or --calibration), on a host
    ``base.host_speed`` times the calibration's where given."""
    cal, note = calibration_for(hw.accelerator, base.calibration)
    if base.host_speed is None:
        return cal, note
    return cal.with_host_speed(base.host_speed), note + f"; host {base.host_speed:g}x the calibration's (--host-speed)"


def _replan(base: Base, setting: dict, model, hw: Hardware, refs: tuple, variants: _Variants, cal,
            plan: ParallelPlan, pt: Point) -> ParallelPlan:
    """The best plan at this point (planners.search, throughput objective, top 1)."""
    from planners import Objective, make_constraints, search

    if plan.gbs is None:
        raise MeshcastError("gbs", "re-planning needs a global batch (--gbs)")
    ref = variants.cluster_file(hw, refs)
    fixed = {}
    for name in DEGREES:
        fld = _PLAN_FIELD.get(name, name)
        if name in setting or name in base.replan_fix:
            value = getattr(plan, fld)
            if value is not None:
                fixed[fld] = value
    schedules = (plan.schedule,) if "schedule" in setting and plan.schedule else None
    base_plan = replace(plan, dp=None, num_gpus=None, layers_per_stage=None)
    c = make_constraints(model, ref, gpus=hw.num_gpus, gbs=plan.gbs, seq=plan.seq, fixed=fixed, base=base_plan,
                         schedules=schedules)
    res = search(model, ref, c, calibration=cal, objective=Objective("throughput"), top=1, progress=False,
                 time_limit_s=base.time_limit_s)
    st = res.stats
    pt.search = {"simulated": st.simulated, "shapes": st.shapes, "elapsed_s": st.elapsed_s,
                 "fixed": {k: v for k, v in fixed.items()}}
    pt.notes += res.notes
    return res.best.result.plan


# ---- the sweep -------------------------------------------------------------------------------
@dataclass
class Sweep:
    """A what-if study: the base inputs, the axes (a grid when several) and the plan mode."""
    base: Base
    axes: list[Axis]
    points: list[Point]
    elapsed_s: float
    jobs: int

    @property
    def mode(self) -> str:
        return "replan" if self.base.replan else "fixed"

    def to_dict(self) -> dict:
        b = self.base
        return {
            "command": "whatif", "model": b.model, "cluster": b.cluster, "gpus": b.gpus, "mode": self.mode,
            "base_plan": b.plan.to_dict(), "replan_fix": list(b.replan_fix),
            "sweeps": [{"variable": a.name, "values": [lv.label for lv in a.levels]} for a in self.axes],
            "tokens": b.tokens, "price_per_gpu_hour_usd": b.price, "prices": dict(b.prices), "pue": b.pue,
            "points": [p.to_dict() for p in self.points], "elapsed_s": self.elapsed_s, "jobs": self.jobs,
        }


def grid(axes: list[Axis]) -> list[tuple[dict, dict]]:
    """Every combination of the axes' levels, the first axis varying slowest."""
    import itertools
    out = []
    for combo in itertools.product(*(a.levels for a in axes)):
        setting = {a.name: lv.value for a, lv in zip(axes, combo)}
        labels = {a.name: lv for a, lv in zip(axes, combo)}
        out.append(({k: labels[k] for k in setting}, {a.name: lv.x for a, lv in zip(axes, combo)}))
    return out


class Progress:
    """A progress bar on stderr, shown once a sweep has run longer than a second."""

    def __init__(self, total: int, enabled: bool, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter() - self.start
        if now < 1.0 or (now - self.last < 0.1 and done < self.total):
            return
        self.last = now
        width = 30
        fill = int(width * done / max(1, self.total))
        eta = now / done * (self.total - done) if done else float("nan")
        eta_text = f", eta {eta:.0f} s" if done and done < self.total else ""
        self.stream.write(f"\rwhatif [{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} points, "
                          f"{now:.1f} s{eta_text}   ")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


_WORKER: dict = {}


def _worker_init(base: Base, yaml_dir: Optional[str]) -> None:
    _WORKER["variants"] = _Variants(base, yaml_dir)
    _WORKER["base"] = base
    _WORKER["yaml_dir"] = yaml_dir


def _worker(task) -> Point:
    index, setting, x = task
    return evaluate_point(_WORKER["base"], index, setting, x, _WORKER["yaml_dir"], _WORKER["variants"])


def run_sweep(base: Base, axes: list[Axis], jobs: int = 1, progress: bool = False) -> Sweep:
    """Evaluate every point of the grid of ``axes`` (``jobs`` worker processes; results keep
    the grid's order). A point's failure is reported in that point, not raised."""
    t0 = time.perf_counter()
    tasks = []
    for i, (levels, x) in enumerate(grid(axes)):
        tasks.append((i, {k: lv.value for k, lv in levels.items()}, x))
    if base.trace_dir is not None:
        Path(base.trace_dir).mkdir(parents=True, exist_ok=True)
    yaml_dir = tempfile.mkdtemp(prefix="meshcast-whatif-") if base.replan else None
    bar = Progress(len(tasks), progress)
    points: list[Optional[Point]] = [None] * len(tasks)
    jobs = max(1, min(jobs, len(tasks)))
    try:
        if jobs == 1:
            variants = _Variants(base, yaml_dir)
            for n, (i, setting, x) in enumerate(tasks, 1):
                points[i] = evaluate_point(base, i, setting, x, yaml_dir, variants)
                bar.update(n)
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init,
                                     initargs=(base, yaml_dir)) as pool:
                futures = {pool.submit(_worker, t): t[0] for t in tasks}
                for n, fut in enumerate(as_completed(futures), 1):
                    p = fut.result()
                    points[p.index] = p
                    bar.update(n)
    finally:
        bar.done()
        if yaml_dir is not None:
            shutil.rmtree(yaml_dir, ignore_errors=True)
    # put the level labels back (workers saw values only)
    for p, (levels, _) in zip(points, grid(axes)):
        p.setting = {k: lv.label for k, lv in levels.items()}
    return Sweep(base, axes, points, time.perf_counter() - t0, jobs)


def describe_plan(plan: ParallelPlan) -> str:
    """A compact plan: degrees, then the switches that differ from the defaults."""
    parts = [f"tp{plan.tp}", f"pp{plan.pp}"]
    if plan.vp > 1:
        parts.append(f"vp{plan.vp}")
    if plan.cp > 1:
        parts.append(f"cp{plan.cp}")
    parts.append(f"dp{plan.dp}")
    if plan.ep > 1:
        parts.append(f"ep{plan.ep}")
    parts.append(f"mbs{plan.mbs}")
    if plan.zero_stage != 1:
        parts.append(f"z{plan.zero_stage}")
    if plan.recompute != "none":
        parts.append(f"rc-{plan.recompute}" + (f"{plan.recompute_layers}" if plan.recompute_layers else ""))
    return " ".join(parts)


__all__ = ["ALIASES", "Axis", "Base", "Level", "Point", "Progress", "Sweep", "VARIABLES", "describe_plan",
           "evaluate_point", "grid", "parse_price", "parse_sweep", "parse_sweeps", "run_sweep"]
