"""Clocks, power and GEMMs beyond the fitted shapes (issue #12).

Two suites, each writing a measurement file of format version 1 (records of kind ``gemm``):

* ``sustained``: a handful of large bf16 / fp8 GEMMs, each measured
  - ``regime: burst``: after ``--idle-s`` seconds of idle, timed exactly as kernels.py times a
    GEMM (L2 flush before each call, median of 5..50 calls), and
  - ``regime: sustained``: the same GEMM back to back (no flush, no gaps: as in training) for
    ``--sustain-s`` seconds, one record per timing window of ``--window-s`` seconds (``time_s``
    = window time / calls, ``t_start_s`` = seconds since the sustained run began), with the
    NVML samples a background thread took during the window (median SM clock, power, temperature;
    the union of throttle reasons), and
  - ``regime: after_sustained``: timed as the burst record, right after the sustained run
    (a hot GPU, L2 flushed).
  An ``info.idle_nvml`` sample is taken before anything runs.
* ``random``: a held-out random set of GEMM shapes (seeded, ``--seed``), timed as kernels.py
  times GEMMs, each record with the NVML sample taken right after it. bf16: m, n, k log-uniform
  over 16..16384 (a third of them small-MN / large-K: m, n in 16..1024, k in 4096..65536), 30% of
  the dims left unrounded (misaligned), the rest multiples of 8; fp8: the same draws with k and n
  rounded to multiples of 16 (torch._scaled_mm requires it), a third small (all dims <= 1024).

    PYTHONUNBUFFERED=1 python3 sustained.py --suite random --out r.json --budget-s 90
    PYTHONUNBUFFERED=1 python3 sustained.py --suite sustained --out s.json --budget-s 220
"""
from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fmt_rate, log, run_case, time_fn  # noqa: E402

# --------------------------------------------------------------------------- NVML


class Nvml:
    """SM clock (MHz), power draw and enforced power limit (W), temperature (C) and the
    current clock-event (throttle) reasons of GPU ``index``; every reading None if unavailable."""

    REASONS = {  # NVML clocks-event reason bits (nvml.h)
        0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
        0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
        0x100: "display_clocks"}

    def __init__(self, index: int = 0):
        self.h = None
        self.nv = None
        try:
            import pynvml as nv
            nv.nvmlInit()
            self.nv = nv
            self.h = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001
            log("  NVML unavailable:", common.short_exc(exc))

    def _try(self, f, *a):
        try:
            return f(*a)
        except Exception:  # noqa: BLE001
            return None

    def static(self) -> dict:
        if self.h is None:
            return {}
        nv = self.nv
        out = {
            "power_limit_w": self._w(self._try(nv.nvmlDeviceGetEnforcedPowerLimit, self.h)),
            "power_default_limit_w": self._w(self._try(nv.nvmlDeviceGetPowerManagementDefaultLimit, self.h)),
            "max_sm_clock_mhz": self._try(nv.nvmlDeviceGetMaxClockInfo, self.h, nv.NVML_CLOCK_SM),
            "max_mem_clock_mhz": self._try(nv.nvmlDeviceGetMaxClockInfo, self.h, nv.NVML_CLOCK_MEM),
            "driver": self._try(nv.nvmlSystemGetDriverVersion),
        }
        lim = self._try(nv.nvmlDeviceGetPowerManagementLimitConstraints, self.h)
        if lim:
            out["power_limit_range_w"] = [self._w(lim[0]), self._w(lim[1])]
        for name in ("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
                     "NVML_TEMPERATURE_THRESHOLD_GPU_MAX"):
            if hasattr(nv, name):
                out[name.split("THRESHOLD_")[1].lower() + "_temp_c"] = self._try(
                    nv.nvmlDeviceGetTemperatureThreshold, self.h, getattr(nv, name))
        return out

    @staticmethod
    def _w(mw):
        return None if mw is None else mw / 1000.0

    def reasons(self):
        if self.h is None:
            return None
        nv = self.nv
        f = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return None if f is None else self._try(f, self.h)

    def sample(self) -> dict:
        if self.h is None:
            return {}
        nv = self.nv
        return {
            "t": time.monotonic(),
            "sm_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, self.h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, self.h, nv.NVML_CLOCK_MEM),
            "power_w": self._w(self._try(nv.nvmlDeviceGetPowerUsage, self.h)),
            "temperature_c": self._try(nv.nvmlDeviceGetTemperature, self.h, nv.NVML_TEMPERATURE_GPU),
            "reasons": self.reasons(),
        }

    def names(self, bits):
        if bits is None:
            return None
        return sorted(v for k, v in self.REASONS.items() if bits & k)


def summarize_samples(nvml: Nvml, samples: list[dict], limit_w) -> dict:
    """Medians of the NVML samples of a window, with their count, extremes and throttle reasons."""
    out = {"nvml_samples": len(samples), "power_limit_w": limit_w}
    for key in ("sm_clock_mhz", "power_w", "temperature_c", "mem_clock_mhz"):
        vals = [s[key] for s in samples if s.get(key) is not None]
        out[key] = float(statistics.median(vals)) if vals else None
        if key in ("sm_clock_mhz", "power_w") and vals:
            out[key.replace("_mhz", "").replace("_w", "") + "_range"] = [min(vals), max(vals)]
    bits = 0
    seen = False
    for s in samples:
        if s.get("reasons") is not None:
            bits |= s["reasons"]
            seen = True
    out["throttle_reasons"] = nvml.names(bits) if seen else None
    return out


class Sampler:
    """NVML samples every ``period_s`` seconds, taken by a child process (this script with
    ``--sampler FILE``) writing one JSON line per sample: a thread of this process would starve
    while the main thread holds the GIL, blocked in a kernel launch on a full launch queue.
    Timestamps are CLOCK_MONOTONIC, shared by the processes of one host."""

    def __init__(self, path: str, period_s: float = 0.05):
        import subprocess
        self.path = path
        open(path, "w").close()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--sampler", path,
                                      "--period-s", str(period_s)])
        self._cache: list[dict] = []
        self._pos = 0

    def _read(self):
        import json
        with open(self.path) as f:
            f.seek(self._pos)
            data = f.read()
        cut = data.rfind("\n") + 1
        self._pos += len(data[:cut].encode())
        for line in data[:cut].splitlines():
            try:
                self._cache.append(json.loads(line))
            except ValueError:
                pass

    def between(self, t0, t1):
        time.sleep(0.06)
        self._read()
        return [s for s in self._cache if t0 <= s["t"] <= t1]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def sampler_main(path: str, period_s: float):
    import json
    nvml = Nvml(0)
    with open(path, "a") as f:
        while True:
            s = nvml.sample()
            if not s:
                return
            f.write(json.dumps(s) + "\n")
            f.flush()
            time.sleep(period_s)


# --------------------------------------------------------------------------- GEMM setup

def make_gemm(m, n, k, dtn):
    """fn() running one GEMM as kernels.py does (common.make_gemm)."""
    return common.make_gemm(m, n, k, dtn)


def base_record(m, n, k, dtn, st, group):
    return dict(kind="gemm", m=m, n=n, k=k, dtype=dtn, flops=2.0 * m * n * k, **st, group=group)


# --------------------------------------------------------------------------- sustained suite

def sustained_cases(small):
    if small:
        return [(64, 64, 64, "bfloat16", True)]
    # (m, n, k, dtype, sustained?) ; the last two only burst (cheap context for the model)
    return [(8192, 8192, 8192, "bfloat16", True), (8192, 8192, 8192, "float8_e4m3fn", True),
            (16384, 8192, 4096, "bfloat16", True), (4096, 4096, 4096, "bfloat16", False),
            (16384, 16384, 16384, "float8_e4m3fn", False)]


def burst(nvml, sampler, flush, m, n, k, dtn, regime, idle_s):
    if idle_s > 0:
        if common.on_cuda():
            torch.cuda.synchronize()
        time.sleep(idle_s)
    pre = nvml.sample()
    fn = make_gemm(m, n, k, dtn)
    t0 = time.monotonic()
    st = time_fn(fn, flush=flush)
    t1 = time.monotonic()
    r = base_record(m, n, k, dtn, st, "clocks")
    r["regime"] = regime
    r.update(summarize_samples(nvml, sampler.between(t0, t1), nvml.static().get("power_limit_w")))
    r["before"] = {k2: v for k2, v in pre.items() if k2 != "t"} if pre else None
    if pre and pre.get("reasons") is not None:
        r["before"]["reasons"] = nvml.names(pre["reasons"])
    if idle_s > 0:   # the record check wants fields in seconds positive
        r["idle_before_s"] = idle_s
    log(f"  {regime:15s} {dtn:14s} {m}x{n}x{k} {st['time_s'] * 1e6:9.1f} us "
        f"{fmt_rate(r['flops'] / st['time_s'], 'FLOP/s')} clock {r.get('sm_clock_mhz')} MHz "
        f"power {r.get('power_w')} W temp {r.get('temperature_c')} C")
    return r


def sustained(nvml, sampler, rec, m, n, k, dtn, sustain_s, window_s):
    """Back-to-back calls for sustain_s seconds, one record per window of window_s seconds."""
    fn = make_gemm(m, n, k, dtn)
    cuda = common.on_cuda()
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    # calls per window, from a short probe
    t = time.perf_counter()
    for _ in range(10):
        fn()
    if cuda:
        torch.cuda.synchronize()
    per = (time.perf_counter() - t) / 10
    calls = max(1, int(window_s / max(per, 1e-7)))
    limit_w = nvml.static().get("power_limit_w")
    t_start = time.monotonic()
    out = []
    w = 0
    # keep the GPU busy across windows: the next window is enqueued before the last one is waited on
    pending = []

    def enqueue():
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(calls):
                fn()
            e.record()
            return (s, e)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (t0, time.perf_counter())

    t_host = time.monotonic()
    pending.append((enqueue(), t_host))
    while True:
        more = time.monotonic() - t_start < sustain_s - window_s
        if more:
            nxt = enqueue()
        (s, e), t_enq = pending.pop(0)
        if cuda:
            e.synchronize()
            dt = s.elapsed_time(e) / 1e3
        else:
            dt = e - s
        t_done = time.monotonic()
        # the window ran roughly between the previous window's end and its own end
        t_begin = max(t_enq, t_done - dt)
        r = base_record(m, n, k, dtn, {"time_s": dt / calls, "reps": calls}, "clocks")
        r.update(regime="sustained", window=w, t_start_s=round(t_begin - t_start, 3),
                 window_s=dt)
        r.update(summarize_samples(nvml, sampler.between(t_begin, t_done), limit_w))
        out.append(r)
        rec.add(r)
        log(f"  sustained w{w:02d} t={r['t_start_s']:6.1f}s {dtn:14s} {m}x{n}x{k} "
            f"{r['time_s'] * 1e6:9.1f} us {fmt_rate(r['flops'] / r['time_s'], 'FLOP/s')} "
            f"clock {r.get('sm_clock_mhz')} MHz power {r.get('power_w')} W temp {r.get('temperature_c')} C "
            f"{r.get('throttle_reasons')}")
        w += 1
        if not more:
            break
        pending.append((nxt, t_done))
    return None   # records were added as they came


def suite_sustained(args, rec, nvml, flush, dl, sampler):
    cases = sustained_cases(args.small)
    # bursts of the burst-only shapes first, from idle; then per sustained shape: a burst from
    # idle, the sustained run, a burst right after it (hot)
    for m, n, k, dtn, sus in cases:
        if sus:
            continue
        if not dl.ok(reserve_s=5):
            rec.error("budget reached before burst cases")
            break
        run_case(rec, f"burst {m}x{n}x{k} {dtn}",
                 lambda: burst(nvml, sampler, flush, m, n, k, dtn, "burst", args.idle_s))
    for m, n, k, dtn, sus in cases:
        if not sus:
            continue
        if not dl.ok(reserve_s=args.sustain_s + args.idle_s + 5):
            rec.error(f"budget reached: sustained {m}x{n}x{k} {dtn} not run")
            continue
        run_case(rec, f"idle-burst {m}x{n}x{k} {dtn}",
                 lambda: burst(nvml, sampler, flush, m, n, k, dtn, "burst", args.idle_s))
        run_case(rec, f"sustained {m}x{n}x{k} {dtn}",
                 lambda: sustained(nvml, sampler, rec, m, n, k, dtn, args.sustain_s, args.window_s))
        run_case(rec, f"after {m}x{n}x{k} {dtn}",
                 lambda: burst(nvml, sampler, flush, m, n, k, dtn, "after_sustained", 0.0))


# --------------------------------------------------------------------------- random suite

def _logu(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def random_cases(seed=12, n_bf16=100, n_fp8=56, small=False):
    """(m, n, k, dtype, group) of the held-out random set. Groups (informative; validation
    re-derives its own regimes from the shape): small_mn_large_k, small, misaligned, general."""
    if small:
        return [(16, 24, 4096, "bfloat16", "small_mn_large_k"), (33, 64, 40, "bfloat16", "misaligned"),
                (32, 32, 64, "float8_e4m3fn", "small")]
    rng = random.Random(seed)
    out = []
    for i in range(n_bf16):
        if i % 3 == 0:                                    # small-MN, large-K
            m, n, k = _logu(rng, 16, 1024), _logu(rng, 16, 1024), _logu(rng, 4096, 65536)
            group = "small_mn_large_k"
        else:
            m, n, k = (_logu(rng, 16, 16384) for _ in range(3))
            group = "general"
        dims = []
        misaligned = rng.random() < 0.3
        for x in (m, n, k):
            x = max(16, int(round(x)))
            dims.append(x if misaligned else max(8, 8 * round(x / 8)))
        if misaligned and all(d % 8 == 0 for d in dims):
            dims[2] += 1
        if misaligned:
            group = "misaligned" if group == "general" else group + "_misaligned"
        out.append((*dims, "bfloat16", group))
    for i in range(n_fp8):
        if i % 3 == 0:
            m, n, k = (_logu(rng, 16, 1024) for _ in range(3))
            group = "small"
        elif i % 3 == 1:
            m, n, k = _logu(rng, 16, 1024), _logu(rng, 16, 1024), _logu(rng, 4096, 65536)
            group = "small_mn_large_k"
        else:
            m, n, k = (_logu(rng, 16, 16384) for _ in range(3))
            group = "general"
        m = max(16, 8 * round(m / 8)) if rng.random() < 0.8 else max(16, int(round(m)))
        n = max(16, 16 * round(n / 16))
        k = max(16, 16 * round(k / 16))
        out.append((m, n, k, "float8_e4m3fn", group))
    return out


def bench_random(nvml, flush, m, n, k, dtn, group, pass_no=1, seed=12):
    fn = make_gemm(m, n, k, dtn)
    st = time_fn(fn, flush=flush)
    s = nvml.sample()
    r = base_record(m, n, k, dtn, st, group)
    r.update(set="random", seed=seed, pass_no=pass_no, time_graph_s=common.time_graph(fn))
    if s:
        r.update(sm_clock_mhz=s["sm_clock_mhz"], power_w=s["power_w"], temperature_c=s["temperature_c"],
                 throttle_reasons=nvml.names(s["reasons"]))
    log(f"  random {dtn:14s} {m:6d}x{n:6d}x{k:6d} {group:24s} {st['time_s'] * 1e6:10.1f} us "
        f"{fmt_rate(r['flops'] / st['time_s'], 'FLOP/s')} {r.get('sm_clock_mhz')} MHz")
    return r


def suite_random(args, rec, nvml, flush, dl, sampler=None):
    """Every seed of ``--seed`` (comma-separated) in a shuffled order, then, with ``--passes 2``,
    all of them again in another order (``pass_no`` 2): whether a shape's time reproduces within
    one run. Each record also carries ``time_graph_s`` (common.time_graph: back to back, warm)."""
    cases = [(c, seed) for seed in args.seeds for c in random_cases(seed, small=args.small)]
    for pass_no in range(1, args.passes + 1):
        order = list(range(len(cases)))
        random.Random(args.seeds[0] + pass_no).shuffle(order)   # no drift confounded with the groups
        left = len(order)
        for i in order:
            if not dl.ok(reserve_s=2):
                rec.error(f"budget reached: pass {pass_no}: {left} random cases not run")
                return
            c, seed = cases[i]
            run_case(rec, f"random {c}", lambda: bench_random(nvml, flush, *c, pass_no=pass_no, seed=seed))
            left -= 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", choices=("sustained", "random"))
    ap.add_argument("--out")
    ap.add_argument("--sampler", help=argparse.SUPPRESS)
    ap.add_argument("--period-s", type=float, default=0.05, help=argparse.SUPPRESS)
    ap.add_argument("--budget-s", type=float, default=200)
    ap.add_argument("--sustain-s", type=float, default=40)
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--seed", default="12", help="random suite: seed(s), comma-separated")
    ap.add_argument("--passes", type=int, default=1, help="random suite: passes over the cases")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.sampler:
        return sampler_main(args.sampler, args.period_s)
    args.seeds = [int(x) for x in str(args.seed).split(",")]
    if not args.suite or not args.out:
        ap.error("--suite and --out are required")
    if args.small:
        args.sustain_s, args.window_s, args.idle_s = min(args.sustain_s, 1.0), min(args.window_s, 0.3), 0.0
    if common.on_cuda():
        torch.cuda.init()
    nvml = Nvml(0)
    idle = nvml.sample()
    if idle:
        idle = {**{k: v for k, v in idle.items() if k != "t"}, "reasons": nvml.names(idle.get("reasons"))}
    info = common.device_info(suite=f"gemm_{args.suite}", nvml=nvml.static(), idle_nvml=idle or None,
                              seed=args.seeds if args.suite == "random" else None, passes=args.passes,
                              sustain_s=args.sustain_s if args.suite == "sustained" else None,
                              window_s=args.window_s if args.suite == "sustained" else None,
                              idle_s=args.idle_s if args.suite == "sustained" else None)
    log("info:", info)
    rec = common.Recorder(args.out, info)
    flush = common.Flusher()
    torch.manual_seed(0)
    dl = common.Deadline(args.budget_s)
    t0 = time.time()
    sampler = Sampler(args.out + ".nvml.jsonl") if args.suite == "sustained" else None
    try:
        (suite_sustained if args.suite == "sustained" else suite_random)(args, rec, nvml, flush, dl, sampler)
    finally:
        if sampler is not None:
            sampler.stop()
    log(f"done in {time.time() - t0:.1f}s: {len(rec.records)} records; {len(rec.errors)} errors")
    for e in rec.errors:
        log("  error:", e)


if __name__ == "__main__":
    main()
