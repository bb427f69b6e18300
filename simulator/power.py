"""Clocks under a power limit: the sustained SM clock of heavy tensor-core work.

A GPU's board power is a static part (leakage, memory, fans: roughly constant at a given
temperature) plus the dynamic power of switching, C·V²·f (Rabaey et al., *Digital Integrated
Circuits*, ch. 5). In the DVFS range the supply voltage rises roughly in proportion to the clock,
so the dynamic power of a given activity (a dtype's tensor-core work) grows as f³:

    P(f) = P_static + κ_dtype · f³          (f in GHz, κ in W/GHz³)

Under sustained load the power controller lowers the clock until P(f) = P_limit:

    f_sustained = min(f_max, ((P_limit − P_static) / κ_dtype)^(1/3))

A short burst (well under a second of work after idle: the controller's averaging window) runs at
f_max. A GEMM's time does not scale wholly with the SM clock: a share φ of its burst time is
clock-bound (tensor-core issue), the rest (HBM traffic, synchronisation) is not, so

    t_sustained / t_burst = φ · f_max / f_sustained + (1 − φ).

Parameters (``hardware_specs/profiles/<gpu>.yaml``, fitted by :func:`fit_power_model` from the
NVML samples of validation/harness/sustained.py): P_static = the idle board power, κ_dtype from the
sustained windows at the limit, φ (``gemm_clock_bound_fraction``) by least squares over the
burst/sustained time ratios; the calibration carries the result as ``sustained_clock_fraction``
= f_sustained / f_max per dtype.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

TORCH_TO_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float32": "tf32"}


def sustained_clock_mhz(power_limit_w: float, static_w: float, kappa_w_per_ghz3: float, max_clock_mhz: float) -> float:
    """The clock (MHz) at which static + κ·f³ meets the power limit, at most the maximum clock."""
    if kappa_w_per_ghz3 <= 0 or power_limit_w <= static_w:
        return max_clock_mhz if kappa_w_per_ghz3 <= 0 else 0.0
    f_ghz = ((power_limit_w - static_w) / kappa_w_per_ghz3) ** (1.0 / 3.0)
    return min(max_clock_mhz, 1000.0 * f_ghz)


def power_w(clock_mhz: float, static_w: float, kappa_w_per_ghz3: float) -> float:
    """Board power (W) of work with coefficient κ at a clock (MHz)."""
    return static_w + kappa_w_per_ghz3 * (clock_mhz / 1000.0) ** 3


def time_ratio(clock_fraction: float, clock_bound_fraction: float) -> float:
    """t_sustained / t_burst for a clock fraction f_sustained / f_max and clock-bound share φ."""
    if clock_fraction <= 0:
        return float("inf")
    return clock_bound_fraction / clock_fraction + (1.0 - clock_bound_fraction)


def fit_power_model(mf_records: list[dict], info: dict, settle_s: float = 5.0) -> dict:
    """Fit P_static, κ per dtype and φ from a sustained.py file: returns a dict with
    ``static_w``, ``power_limit_w``, ``max_clock_mhz``, ``kappa_w_per_ghz3`` {dtype: κ},
    ``sustained_clock_fraction`` {dtype: f_s/f_max} (from the model at the file's limit),
    ``gemm_clock_bound_fraction`` φ and per-shape ``shapes`` (measured and modelled ratios).
    Sustained windows starting before ``settle_s`` seconds are left out (the clock is settling)."""
    nv = info.get("nvml") or {}
    static = float(info["idle_nvml"]["power_w"])
    fmax = float(nv["max_sm_clock_mhz"])
    by_shape = defaultdict(lambda: defaultdict(list))
    for r in mf_records:
        if r.get("kind") == "gemm" and r.get("regime"):
            by_shape[(r["m"], r["n"], r["k"], r["dtype"])][r["regime"]].append(r)
    kappas = defaultdict(list)
    limits = []
    shapes = []
    for key, regs in by_shape.items():
        sus = [r for r in regs.get("sustained", []) if r.get("t_start_s", 0) >= settle_s and r.get("sm_clock_mhz")]
        if not sus or not regs.get("burst"):
            continue
        f = statistics.median(r["sm_clock_mhz"] for r in sus)
        p = statistics.median(r["power_w"] for r in sus)
        limits.append(statistics.median(r["power_limit_w"] for r in sus))
        kappas[TORCH_TO_DTYPE[key[3]]].append((p - static) / (f / 1000.0) ** 3)
        burst = statistics.median(r["time_s"] for r in regs["burst"])
        shapes.append(dict(shape=key, burst_s=burst, sustained_s=statistics.median(r["time_s"] for r in sus),
                           clock_mhz=f, power_w=p))
    limit = statistics.median(limits)
    kappa = {d: statistics.median(v) for d, v in kappas.items()}
    frac = {d: sustained_clock_mhz(limit, static, k, fmax) / fmax for d, k in kappa.items()}
    # φ by least squares of (ratio − 1) = φ (f_max/f − 1) over the shapes
    xs = [fmax / s["clock_mhz"] - 1.0 for s in shapes]
    ys = [s["sustained_s"] / s["burst_s"] - 1.0 for s in shapes]
    phi = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    phi = min(1.0, max(0.0, phi))
    for s in shapes:
        d = TORCH_TO_DTYPE[s["shape"][3]]
        s["measured_ratio"] = s["sustained_s"] / s["burst_s"]
        s["model_ratio"] = time_ratio(frac[d], phi)
    return dict(static_w=static, power_limit_w=limit, max_clock_mhz=fmax, kappa_w_per_ghz3=kappa,
                sustained_clock_fraction=frac, gemm_clock_bound_fraction=phi, shapes=shapes)
