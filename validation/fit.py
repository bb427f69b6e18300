"""Fit the cost model's named efficiency parameters to measurements (robust least squares).

Residuals are log(predicted / measured) per record, so a 10% miss weighs the same on a 5 µs
kernel as on a 50 ms one. ``scipy.optimize.least_squares`` with a soft-L1 loss keeps a few
outliers from dragging the fit. Bounds keep every parameter physical: efficiencies in (0, 1],
latencies in microseconds, overheads non-negative. Training steps are never fitted: they are
the held-out test of the whole composition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from hardware_specs.catalog import Hardware
from simulator.calibration import DEFAULT, DICT_PARAMETERS, Calibration
from simulator.compute import FUSED_KERNELS, NORM_FORWARD_START, fused_attention_key, fused_attention_params
from simulator.comm import COLLECTIVES as COLLECTIVE_KINDS
from validation.predict import ELEMENTWISE_KINDS, Unsupported, predict_record


@dataclass(frozen=True)
class Param:
    """One fitted parameter: a path into Calibration, its bounds, and the kinds it affects."""

    path: str           # "hbm_fraction", "gemm_peak_fraction.bf16", "links.nvlink.alpha_s"
    lower: float
    upper: float


FITTED_ATTENTION_KERNELS = ("cudnn", "efficient", "triton_fa")


def fused_kernel_keys(backend: str) -> list[str]:
    """The profile keys of a fitted fused attention kernel's passes: ``<backend>_<direction>``, or one
    per head_dim specialisation and direction where it has them (simulator.compute.fused_attention_key)."""
    dims = [d for d, _ in FUSED_KERNELS[backend].head_dim_variants] or [None]
    return [fused_attention_key(backend, bwd, d) for d in dims for bwd in (False, True)]


COMPUTE_PARAMS = [Param(f"gemm_peak_fraction.{d}", 0.05, 1.0) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")] + [
    Param("gemm_tile_overhead_k", 0.0, 4096.0),
    Param("gemm_small_tile_exponent", 0.0, 2.0),
    Param("gemm_unaligned_fraction", 0.02, 1.0),
    Param("gemm_unaligned_fixed_s", 0.0, 30e-6),
    Param("gemm_split_k_fixed_s", 0.0, 30e-6),
    Param("gemm_fp8_fixed_s", 0.0, 30e-6),
    Param("gemm_sm_load_bytes_per_flop", 0.002, 0.2),   # per-SM operand loads per FLOP of bf16 peak
    Param("gemm_split_k_per_split_s", 0.0, 1e-6),       # splitKreduce: seconds per split (0 at start: never moves)
    Param("kernel_launch_s", 1e-6, 30e-6),
    Param("gemm_launch_s", 1e-6, 30e-6),
    Param("hbm_fraction", 0.3, 1.0),
    Param("attention_fwd_fraction", 0.1, 1.0),
    Param("attention_bwd_fraction", 0.1, 1.0),
    Param("attention_softmax_fraction", 0.05, 1.0),
    Param("attention_tile_overhead", 0.0, 16.0),
    Param("softmax_elements_per_cycle.reg", 0.05, 16.0),
    Param("softmax_elements_per_cycle.reg_wide", 0.05, 16.0),
    Param("softmax_elements_per_cycle.smem", 0.05, 16.0),
    Param("softmax_masked_cost", 1.0, 4.0),
    Param("softmax_wave_cycles", 0.0, 40000.0),
    Param("norm_forward.fraction", 0.3, 1.0),
    Param("norm_forward.reread_from_bytes", 0.0, 256 * 1024.0),
    Param("norm_forward.reread_span_bytes", 256.0, 256 * 1024.0),
    Param("norm_forward.rmsnorm_row_s", 0.0, 20e-6), Param("norm_forward.layernorm_row_s", 0.0, 20e-6),
    Param("norm_forward.rmsnorm_load_latency_s", 1e-8, 1e-5), Param("norm_forward.layernorm_load_latency_s", 1e-8, 1e-5),
] + [Param(f"memory_op_fraction.{k}", 0.1, 1.0) for k in ELEMENTWISE_KINDS + ("copy", "nonvectorized", "cast_unrolled")] + [
    # fused attention kernels other than FlashAttention-2 (simulator.compute.fused_attention_params);
    # only records with that ``backend`` move them; FlashAttention-3 (fa3) is never fitted; a kernel with a
    # design overlap (triton_fa) fits none; fractions from 0.05 (triton_fa's head_dim-128 backward: 0.098)
    Param(f"attention_kernel_{name}.{key}", lo, hi) for be in FITTED_ATTENTION_KERNELS
    for name, lo, hi in (("fraction", 0.05, 1.0), ("overlap", 0.0, 1.0), ("overhead", 0.0, 16.0))
    if name != "overlap" or FUSED_KERNELS[be].overlap is None for key in fused_kernel_keys(be)] + [
    # the memory-efficient kernel's per-score shared-memory staging (FP32-lane operations per score)
    Param(f"attention_kernel_score_ops.efficient_{d}", 0.0, 400.0) for d in ("fwd", "bwd")] + [
    # the Mamba-2 SSD scan's Triton kernels (simulator.ssm.ssd_time); only ssd_scan records move them
    Param("ssd_fraction.fwd", 0.02, 1.0), Param("ssd_fraction.bwd", 0.02, 1.0), Param("ssd_hbm_fraction", 0.05, 1.0),
    Param("ssd_kernel_fixed_s", 0.0, 100e-6), Param("ssd_host_s.fwd", 0.0, 5e-3), Param("ssd_host_s.bwd", 0.0, 10e-3)]


# extra starting points of the compute fit: the GEMM tile model has a second basin where smaller
# tiles lose little throughput (the lower-cost one on the H100 and H200 records); the per-SM
# operand-load cap starts both binding (0.02 B/FLOP: ~128 GB/s per H100 SM) and out of the way
COMPUTE_SEEDS = [{"gemm_small_tile_exponent": 0.02, "gemm_unaligned_fraction": 0.2},
                 {"gemm_small_tile_exponent": 0.02, "gemm_unaligned_fraction": 0.2, "gemm_sm_load_bytes_per_flop": 0.02},
                 {"gemm_small_tile_exponent": 0.3, "gemm_sm_load_bytes_per_flop": 0.2}]


HOST_PARAMS = [Param("host_op_s", 0.0, 200e-6), Param("fsdp_unit_host_s", 0.0, 50e-3),
               Param("ddp_tensor_host_s", 0.0, 1e-3), Param("optimizer_tensor_host_s", 0.0, 1e-3),
               Param("fsdp_optimizer_tensor_host_s", 0.0, 1e-3)]
HOST_BOUND_MAX_HIDDEN = 512   # training steps this small are host-bound: their GPU work is negligible


def host_bound(rec: dict) -> bool:
    """A training step of a model so small that the host, not the GPU, sets its time."""
    return rec.get("kind") == "train_step" and not rec.get("oom") and int(rec.get("hidden", 10 ** 9)) <= HOST_BOUND_MAX_HIDDEN


def host_targets(rec: dict) -> list[tuple[str, float]]:
    """What a host-bound training step measured: its time, and where the record has them
    (validation/harness/host_phases.py) the host's seconds to issue forward+backward and the
    optimizer step, each a target of the host fit (names as in :class:`Prediction`)."""
    out = [("time_s", rec["time_s"])]
    if rec.get("host_opt_s") and rec.get("host_fwd_s") and rec.get("host_bwd_s"):
        out += [("host_issue_s", rec["host_fwd_s"] + rec["host_bwd_s"]), ("host_optimizer_s", rec["host_opt_s"])]
    return out


# ring kinds with an own-shard term δ (all-to-all copies its own block concurrently: comm.self_copy_in_series)
RING_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
# the smallest collective record that fits the start-up term of a ring (validation.calibrate._fit_ramp)
RAMP_MIN_BYTES = 16 << 20


def comm_params(link: str) -> list[Param]:
    """α and β of one link kind, NCCL's per-collective bandwidth and fixed cost relative to
    all-reduce, each ring collective's own-shard steps δ and the chained broadcast's chunk
    (the last two are constrained only by records on more than two GPUs), and the start-up of a
    ring's two-way traffic (its size and time constant, comm.ring_ramp)."""
    others = [k for k in COLLECTIVE_KINDS if k != "all_reduce"]
    return [Param(f"links.{link}.alpha_s", 1e-6, 200e-6), Param(f"links.{link}.bandwidth_fraction", 0.1, 1.0),
            Param(f"links.{link}.ll_alpha_s", 1e-6, 200e-6), Param(f"links.{link}.ll_bandwidth_fraction", 0.02, 1.0),
            Param(f"links.{link}.chunk_bytes", 0.0, 64 * 2 ** 20),
            Param(f"links.{link}.ramp_s", 0.0, 2e-3), Param(f"links.{link}.ramp_tau_s", 1e-4, 20e-3)] + \
        [Param(f"collective_fraction.{k}", 0.2, 2.0) for k in others] + \
        [Param(f"collective_alpha_fraction.{k}", 0.2, 5.0) for k in COLLECTIVE_KINDS] + \
        [Param(f"collective_shard_steps.{k}", 0.0, 2.0) for k in RING_KINDS]


# named groups of fitted parameters (``meshcast calibrate --only``): a restricted fit moves only
# these and keeps every other parameter at the starting profile's value
PARAMETER_GROUPS = {
    "gemm": ("gemm_",),
    "attention": ("attention_fwd_fraction", "attention_bwd_fraction", "attention_softmax_fraction",
                  "attention_tile_overhead"),                          # FlashAttention-2 (``flash``)
    "attention_kernels": ("attention_kernel_",),                       # cudnn, efficient
    "memory": ("hbm_fraction", "memory_op_fraction.", "softmax_elements_per_cycle", "softmax_masked_cost", "softmax_wave_cycles",
               "norm_forward."),
    "launch": ("kernel_launch_s",),
    "ssd": ("ssd_",),                                                  # Mamba-2 SSD scan kernels
    "comm": ("links.", "collective_"),
    "host": tuple(p.path for p in HOST_PARAMS),
}


def restrict(params: list[Param], only: tuple[str, ...] | None) -> list[Param]:
    """The parameters of ``params`` that ``only`` names: a group of PARAMETER_GROUPS, or a
    parameter path or its prefix (``attention_kernel_fraction.cudnn``); None: all of them."""
    if only is None:
        return list(params)
    prefixes = tuple(x for o in only for x in PARAMETER_GROUPS.get(o, (o,)))
    return [p for p in params if p.path.startswith(prefixes)]


def unknown_selectors(only: tuple[str, ...], params: list[Param]) -> list[str]:
    """The names of ``only`` that select no parameter of ``params``."""
    return [o for o in only if not restrict(params, (o,))]


def get_value(cal: Calibration, path: str) -> float:
    """The current value of a calibration parameter named by its path ('links.nvlink.alpha_s')."""
    parts = path.split(".")
    if parts[0] == "links":
        return getattr(cal.links[parts[1]], parts[2])
    if parts[0].startswith("attention_kernel_") and parts[1] not in getattr(cal, parts[0]):
        # unfitted: the model's fallback (a start of the fit); an overlap starts half way, off its bound.
        # The key is <backend>_[<head_dim variant>_]<direction>; backends may hold "_" (triton_fa)
        backend = next(b for b in sorted(FUSED_KERNELS, key=len, reverse=True) if parts[1].startswith(b + "_"))
        frac, overlap, overhead = fused_attention_params(cal, backend, parts[1].endswith("_bwd"))
        return {"attention_kernel_fraction": frac, "attention_kernel_overlap": max(overlap, 0.5),
                "attention_kernel_overhead": overhead,
                "attention_kernel_score_ops": 8.0}[parts[0]]   # a start off its bound (0: none)
    if len(parts) == 2:
        d = getattr(cal, parts[0])
        if parts[0] == "norm_forward":
            return d.get(parts[1], NORM_FORWARD_START[parts[1]])
        default = {"memory_op_fraction": cal.hbm_fraction, "collective_shard_steps": 0.0, "ssd_host_s": 1e-4}.get(parts[0], 1.0)
        return d.get(parts[1], default)
    return getattr(cal, path)


def set_values(cal: Calibration, params: list[Param], values) -> Calibration:
    """A copy of ``cal`` with each parameter set to its value."""
    updates: dict = {}
    links = dict(cal.links)
    dicts = {k: dict(getattr(cal, k)) for k in DICT_PARAMETERS}
    for p, v in zip(params, values):
        parts = p.path.split(".")
        if parts[0] == "links":
            links[parts[1]] = replace(links[parts[1]], **{parts[2]: float(v)})
        elif len(parts) == 2:
            dicts[parts[0]][parts[1]] = float(v)
        else:
            updates[p.path] = float(v)
    return replace(cal, links=links, **dicts, **updates)


@dataclass
class FitResult:
    """A fitted calibration with its parameters, values, residual RMS (log) and solver status."""
    calibration: Calibration
    params: list
    values: list
    residual_rms: float
    n_records: int
    success: bool
    message: str
    cost: float = 0.0
    unconstrained: list = field(default_factory=list)   # params no record moves: kept from the start


def fit(samples: list[tuple[dict, Hardware]], params: list[Param], start: Calibration = DEFAULT,
        name: str = "fitted", seeds: list[dict] | None = None) -> FitResult:
    """Fit ``params`` to (record, hardware) samples by robust least squares on log errors.
    ``seeds`` ({path: value} overrides of ``start``) give extra starting points for models with
    several basins (NCCL's two protocols); the fit with the lowest cost wins."""
    samples = _targets(samples)
    used = constrained(samples, params, start)
    if seeds and len(used) < len(params):
        # a term that is off at the start (a size of 0) constrains its other parameters only once
        # it is on: check those again from the first seed
        first = _seeded(start, seeds[0])
        again = set(p.path for p in constrained(samples, [p for p in params if p not in used], first))
        used = [p for p in params if p in used or p.path in again]
    best = None
    for seed in [{}] + list(seeds or []):
        res = _fit_once(samples, used, _seeded(start, seed), start, name)
        if best is None or res.cost < best.cost:
            best = res
    best.unconstrained = [p for p in params if p not in used]
    return best


def _seeded(start: Calibration, seed: dict) -> Calibration:
    """``start`` with a seed's {path: value} overrides."""
    keys = list(seed)
    return set_values(start, [Param(k, -math.inf, math.inf) for k in keys], [seed[k] for k in keys])


def _targets(samples) -> list[tuple]:
    """(record, hardware, prediction field, measured value) of every usable sample: the
    record's time unless given, records that ran out of memory or measured nothing dropped."""
    samples = [s if len(s) == 4 else (s[0], s[1], "time_s", s[0].get("time_s")) for s in samples]
    return [s for s in samples if s[3] and not s[0].get("oom")]


def _log_errors(samples, cal: Calibration) -> np.ndarray:
    """log(predicted / measured) of every sample under ``cal`` (0 where a record is unsupported)."""
    out = np.empty(len(samples))
    for i, (rec, hw, what, measured) in enumerate(samples):
        try:
            pred = getattr(predict_record(rec, hw, cal), what)
        except Unsupported:
            pred = measured
        out[i] = math.log(max(pred, 1e-12) / measured)
    return out


def constrained(samples, params: list[Param], start: Calibration) -> list[Param]:
    """The parameters these samples constrain: moving one to either end of its bounds changes
    some prediction. The others (fp16 peak from bf16-only GEMMs, a link no collective crossed)
    keep their starting values instead of drifting to wherever the optimizer leaves them."""
    if not samples:
        return []
    base = _log_errors(samples, start)
    out = []
    for p in params:
        for v in (p.lower, p.upper):
            if np.any(np.abs(_log_errors(samples, set_values(start, [p], [v])) - base) > 1e-9):
                out.append(p)
                break
    return out


def _fit_once(samples, params, first: Calibration, start: Calibration, name: str) -> "FitResult":
    """Samples are (record, hardware) -- the target is the record's time -- or (record,
    hardware, prediction field, measured value) for other measured quantities."""
    if not samples or not params:
        return FitResult(replace(start, name=name), [], [], float("nan"), len(samples), False,
                         "nothing to fit: no usable record" if not samples else "no parameter is constrained",
                         math.inf)
    x0 = np.array([min(max(get_value(first, p.path), p.lower), p.upper) for p in params])
    lo = np.array([p.lower for p in params])
    hi = np.array([p.upper for p in params])
    scale = np.maximum(np.abs(x0), 1e-9)

    def residuals(z):
        return _log_errors(samples, set_values(start, params, z * scale))

    sol = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), loss="soft_l1", f_scale=0.1,
                        x_scale="jac", max_nfev=400)
    values = list(sol.x * scale)
    cal = replace(set_values(start, params, values), name=name)
    rms = float(np.sqrt(np.mean(sol.fun ** 2))) if len(sol.fun) else float("nan")
    return FitResult(cal, params, values, rms, len(samples), bool(sol.success), str(sol.message), float(sol.cost))


def comm_seeds(link: str) -> list[dict]:
    """Starting points for the two-protocol link model, over a grid of protocol switch sizes
    (a threshold has no gradient, so it is chosen by the best fit over the grid)."""
    shapes = [{f"links.{link}.alpha_s": 30e-6, f"links.{link}.bandwidth_fraction": 0.7,
             f"links.{link}.ll_alpha_s": 10e-6, f"links.{link}.ll_bandwidth_fraction": 0.3},
            {f"links.{link}.alpha_s": 30e-6, f"links.{link}.bandwidth_fraction": 0.67,
             f"links.{link}.ll_alpha_s": 70e-6, f"links.{link}.ll_bandwidth_fraction": 0.78},
            {f"links.{link}.alpha_s": 75e-6, f"links.{link}.bandwidth_fraction": 0.75,
             f"links.{link}.ll_alpha_s": 35e-6, f"links.{link}.ll_bandwidth_fraction": 0.25}]
    extra = {f"links.{link}.chunk_bytes": 8.0 * 2 ** 20, f"links.{link}.ramp_s": 2e-4,
             f"links.{link}.ramp_tau_s": 5e-4, **{f"collective_shard_steps.{k}": 0.2 for k in RING_KINDS}}
    return [{**shape, **extra, f"links.{link}.ll_max_bytes": float(2 ** k)} for shape in shapes for k in (14, 15, 16, 17, 19)]


def split_holdout(n: int, every: int = 5) -> tuple[list[int], list[int]]:
    """Deterministic split: every ``every``-th record is held out (default 20%)."""
    held = [i for i in range(n) if i % every == every - 1]
    return [i for i in range(n) if i % every != every - 1], held

