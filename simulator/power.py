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


def clock_bound_fraction(points: list[tuple[float, float]]) -> float:
    """φ by least squares of (ratio − 1) = φ·(1/x − 1) over (clock fraction x, sustained/burst
    time ratio) points, clamped to [0, 1] (time_ratio's model through the origin)."""
    xs = [1.0 / x - 1.0 for x, _ in points]
    ys = [r - 1.0 for _, r in points]
    return min(1.0, max(0.0, sum(a * b for a, b in zip(xs, ys)) / sum(a * a for a in xs)))


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
    phi = clock_bound_fraction([(s["clock_mhz"] / fmax, s["sustained_s"] / s["burst_s"]) for s in shapes])
    for s in shapes:
        d = TORCH_TO_DTYPE[s["shape"][3]]
        s["measured_ratio"] = s["sustained_s"] / s["burst_s"]
        s["model_ratio"] = time_ratio(frac[d], phi)
    return dict(static_w=static, power_limit_w=limit, max_clock_mhz=fmax, kappa_w_per_ghz3=kappa,
                sustained_clock_fraction=frac, gemm_clock_bound_fraction=phi, shapes=shapes)


# --------------------------------------------------------------------------- training steps
#
# A training step is not back-to-back GEMMs: it mixes tensor-core work, memory-bound kernels,
# communication and idle gaps (host-bound issue). The power controller holds the board's power,
# averaged over a window far longer than one kernel (measured: a GEMM/idle mix of 3 ms period
# averages 490 W at full clock with the GEMM itself above 900 W), under the limit. So the clock of
# a step is set by its *average* power over the mix of work it runs:
#
#     P(x) = Σ_c t_c(x)·[P_idle + ρ_c·(P_c(x) − P_idle)] / Σ_c t_c(x),   x = f / f_max,
#     P_c(x) = P_static + A_c + B_c·x³          (a clock-independent part A_c: HBM, L2, I/O;
#                                                  a switching part B_c·x³, as above)
#
# over the classes c of work: ``tensor`` (bf16/fp16 GEMMs), ``tensor_fp8`` (fp8/fp4 GEMMs),
# ``attention`` (fused attention kernels), ``memory`` (memory-bound kernels, and attention that
# materialises its scores) and ``idle`` (gaps between kernels, and communication kernels, which
# keep few SMs busy: P_idle). ρ_c is the class's activity: the time-weighted achieved FLOP rate of
# its kernels over the rate of the kernel its power was measured on (a GEMM at 60% of the
# reference rate switches 60% as much per second: the energy-per-operation view of Choi et al.,
# "A roofline model of energy", IPDPS 2013); memory-bound kernels count at ρ = 1. Tensor-core
# time grows as the clock falls (t·(φ/x + 1 − φ)); memory-bound and idle time do not. The step's
# clock is the x in (0, 1] where P(x) meets the effective limit (f_max if P(1) is under it).
# Parameters per GPU: calibration ``step_power`` (fit_step_power, from sustained.py's GEMM, add,
# attention and mixed runs).

STEP_POWER_CLASSES = ("tensor", "tensor_fp8", "attention", "memory")
UNFUSED_ATTENTION = ("unfused", "unfused_torch", "math")     # attention that materialises its scores


def work_class(kind: str, dtype: str | None = None, backend: str | None = None) -> str | None:
    """The power class of a kernel of ``kind`` (gemm, attention, collective, host_sync, or any
    memory-bound kind): ``tensor`` for bf16/fp16/tf32 GEMMs, ``tensor_fp8`` for fp8/fp4 GEMMs,
    ``attention`` for fused attention, ``memory`` for memory-bound kernels, the SSD scan and
    attention that materialises its scores; None for collectives and host synchronisations
    (counted with the idle time)."""
    if kind == "gemm":
        return "tensor_fp8" if dtype in ("fp8", "fp4") else "tensor"
    if kind == "attention":
        return "memory" if backend in UNFUSED_ATTENTION else "attention"
    return None if kind in ("collective", "host_sync") else "memory"
# the keys a calibration's ``step_power`` must hold (``memory_rate`` is optional: memory-bound
# kernels then count at activity 1)
STEP_POWER_KEYS = ("limit", "static", "idle", *(f"{c}_{p}" for c in STEP_POWER_CLASSES for p in ("fixed", "clock")),
                   "tensor_rate", "tensor_fp8_rate", "attention_rate")
STEP_POWER_OPTIONAL = ("memory_rate",)
CLOCKED_CLASSES = ("tensor", "tensor_fp8", "attention")
REFERENCE_RATE = {"tensor": "tensor_rate", "tensor_fp8": "tensor_fp8_rate", "attention": "attention_rate"}


def class_power_w(sp: dict, cls: str, x: float) -> float:
    """Board power (W) of class ``cls`` work at full activity at clock fraction x under parameters
    ``sp`` (calibration ``step_power``): static + A_c + B_c·x³; the ``idle`` class draws ``idle`` W."""
    if cls == "idle":
        return sp["idle"]
    return sp["static"] + sp[f"{cls}_fixed"] + sp[f"{cls}_clock"] * x ** 3


def activity(sp: dict | None, cls: str, flops: float, seconds: float, nbytes: float = 0.0) -> float:
    """ρ of one kernel: its FLOP rate over the class's reference rate (``<class>_rate`` FLOP/s),
    or for a memory-bound kernel with counted bytes its HBM rate over ``memory_rate`` (B/s), at
    most 1; 1 for kernels with nothing counted or without a step power model."""
    if not sp or seconds <= 0:
        return 1.0
    if cls == "memory":
        return min(1.0, nbytes / seconds / sp["memory_rate"]) if nbytes > 0 and "memory_rate" in sp else 1.0
    key = REFERENCE_RATE.get(cls)
    return 1.0 if key is None else min(1.0, flops / seconds / sp[key])


def average_power_w(sp: dict, mix: dict, x: float, phi: float) -> float:
    """Time-weighted board power (W) at clock fraction x of a mix of work: ``mix`` maps each
    class to (seconds, active seconds = Σ ρ·t) at full clock; ``idle`` maps to (seconds, 0)."""
    r = time_ratio(x, phi)
    num = den = 0.0
    for c, (t, act) in mix.items():
        scale = r if c in CLOCKED_CLASSES else 1.0
        num += scale * (t * sp["idle"] + act * (class_power_w(sp, c, x) - sp["idle"]))
        den += scale * t
    return num / den if den > 0 else sp["idle"]


def step_clock_fraction(sp: dict, mix: dict, phi: float, floor: float = 0.3) -> float:
    """The clock fraction x = f/f_max at which a mix of work (``mix`` as in average_power_w)
    averages the effective power limit ``sp['limit']``; 1.0 where it stays under the limit at
    full clock. Bisection (P(x) rises with x for every class)."""
    if not sp or average_power_w(sp, mix, 1.0, phi) <= sp["limit"]:
        return 1.0
    lo, hi = floor, 1.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if average_power_w(sp, mix, mid, phi) > sp["limit"]:
            hi = mid
        else:
            lo = mid
    return lo


def _median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _settled(rs: list, settle_s: float) -> list:
    return [r for r in rs if r.get("regime") == "sustained" and r.get("t_start_s", 0) >= settle_s and r.get("sm_clock_mhz")]


def sustained_point(rs: list, fmax: float, settle_s: float = 5.0) -> dict:
    """Medians of one work's settled sustained windows and its burst: clock fraction x, power (W),
    sustained and burst seconds per call."""
    sus = _settled(rs, settle_s)
    return dict(x=_median(r["sm_clock_mhz"] for r in sus) / fmax, power_w=_median(r["power_w"] for r in sus),
                sustained_s=_median(r["time_s"] for r in sus),
                burst_s=_median(r["time_s"] for r in rs if r.get("regime") == "burst"))


def _work_key(r: dict):
    if r["kind"] == "gemm":
        return ("gemm", r["m"], r["n"], r["k"], r["dtype"])
    if r["kind"] == "power_mix":
        adds = sum(p["calls"] for p in r["parts"] if p["kind"] == "add")
        return ("mix", adds, r.get("idle_s_per_call", 0.0))
    return (r["kind"],)


def fit_step_power(records: list[dict], info: dict, settle_s: float = 5.0) -> dict:
    """``step_power`` and φ from a sustained.py file run with ``--power`` (MEASUREMENTS format):

    * static: NVML power at idle before any work; idle: power idle at f_max (the burst records'
      ``before`` samples); limit: the median power of the capped sustained windows (the
      controller's effective target, a little under the enforced limit);
    * tensor: the bf16 8192³ GEMM, sustained (capped: A + B·x³ at the measured x) and at full
      clock from the GEMM/idle mix (its average power less the idle share, over the GEMM share);
    * memory: the add at full clock (never capped) and, for B, the GEMM + 2 add mix at its
      capped clock (its average power less the GEMM share, over the add share);
    * tensor_fp8 and attention: one capped sustained point each, split into A and B in the bf16
      GEMM's proportion (no full-clock point was measured for them);
    * reference rates ``tensor_rate``, ``tensor_fp8_rate``, ``attention_rate`` (FLOP/s): the
      burst rates of the bf16 and fp8 GEMMs and of the attention run (activity ρ = 1 there), and
      ``memory_rate`` (B/s) the add's;
    * φ: least squares over the bf16 GEMMs' sustained/burst time ratios.

    Returns dict(step_power_w, gemm_clock_bound_fraction, points) where ``points`` keeps the
    medians each parameter came from. The GEMM + 6 add mix is left out of the fit (a check)."""
    fmax = float(info["nvml"]["max_sm_clock_mhz"])
    static = float(info["idle_nvml"]["power_w"])
    idle = _median(r["before"]["power_w"] for r in records if r.get("regime") == "burst" and r.get("before")
                   and r["before"].get("sm_clock_mhz") == fmax)
    groups = defaultdict(list)
    for r in records:
        if r.get("regime"):
            groups[_work_key(r)].append(r)
    pts = {k: sustained_point(v, fmax, settle_s) for k, v in groups.items() if _settled(v, settle_s)}
    g = pts[("gemm", 8192, 8192, 8192, "bfloat16")]
    gap = next(v for k, v in pts.items() if k[0] == "mix" and k[1] == 0 and k[2] > 0)
    add = pts[("add",)]
    mix2 = pts[("mix", 2, 0.0)]
    capped = [r["power_w"] for k, v in groups.items() for r in _settled(v, settle_s)
              if "sw_power_cap" in (r.get("throttle_reasons") or [])]
    limit = statistics.median(capped)
    # tensor (bf16): full-clock power from the GEMM/idle mix, capped power from the sustained GEMM
    idle_s = gap["sustained_s"] - g["burst_s"]
    p_full = (gap["power_w"] * gap["sustained_s"] - idle * idle_s) / g["burst_s"] - static
    p_cap = g["power_w"] - static
    b_t = (p_full - p_cap) / (1.0 - g["x"] ** 3)
    a_t = p_full - b_t
    sp = dict(limit=limit, static=static, idle=idle, tensor_fixed=a_t, tensor_clock=b_t)
    # memory: full clock from the add, the clock part from the GEMM + 2 add mix
    t_add = 2 * add["sustained_s"]
    t_g = mix2["sustained_s"] - t_add
    p_add_mix = (mix2["power_w"] * mix2["sustained_s"] - t_g * class_power_w(sp, "tensor", mix2["x"])) / t_add - static
    p_add_full = add["power_w"] - static
    b_m = max(0.0, (p_add_full - p_add_mix) / (1.0 - mix2["x"] ** 3))
    sp.update(memory_fixed=p_add_full - b_m, memory_clock=b_m)
    # fp8 and attention: one capped point each, in the bf16 GEMM's A:B proportion
    for cls, key in (("tensor_fp8", ("gemm", 8192, 8192, 8192, "float8_e4m3fn")), ("attention", ("attention_fwd_bwd",))):
        p = pts[key]
        s = (p["power_w"] - static) / (a_t + b_t * p["x"] ** 3)
        sp.update({f"{cls}_fixed": s * a_t, f"{cls}_clock": s * b_t})
    # reference rates: what each class's power was measured at (burst FLOP/s)
    rate = {k: next(r["flops"] for r in groups[k] if r.get("flops")) / pts[k]["burst_s"]
            for k in (("gemm", 8192, 8192, 8192, "bfloat16"), ("gemm", 8192, 8192, 8192, "float8_e4m3fn"),
                      ("attention_fwd_bwd",))}
    sp.update(tensor_rate=rate[("gemm", 8192, 8192, 8192, "bfloat16")],
              tensor_fp8_rate=rate[("gemm", 8192, 8192, 8192, "float8_e4m3fn")],
              attention_rate=rate[("attention_fwd_bwd",)],
              memory_rate=next(r["bytes"] for r in groups[("add",)] if r.get("bytes")) / add["burst_s"])
    bf16 = [v for k, v in pts.items() if k[0] == "gemm" and k[4] == "bfloat16"]
    phi = clock_bound_fraction([(v["x"], v["sustained_s"] / v["burst_s"]) for v in bf16])
    return dict(step_power={k: float(f"{v:.5g}") for k, v in sp.items()}, gemm_clock_bound_fraction=round(phi, 4),
                points={" ".join(str(x) for x in k): v for k, v in pts.items()})
