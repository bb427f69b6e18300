"""NVML readings for the harness: SM clock, power, temperature and throttle reasons (issue #12).

* :class:`Nvml` reads one GPU (every reading None where NVML or a query is unavailable).
* :class:`Sampler` samples every GPU of the host every ``period_s`` seconds from a child process
  (this file run with ``--sampler PATH``), one JSON line per GPU and sample: a thread of the
  measuring process would starve while its main thread holds the GIL, blocked in a kernel launch
  on a full launch queue. Timestamps are CLOCK_MONOTONIC, shared by the processes of one host, so
  the parent of a multi-process run can cut the samples of any window its children report.
* :func:`summarize_samples` reduces a window's samples to medians, extremes and the union of the
  throttle reasons.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

REASONS = {  # NVML clocks-event reason bits (nvml.h)
    0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks"}


def reason_names(bits):
    """The names of the set bits of an NVML clocks-event reason mask (None stays None)."""
    if bits is None:
        return None
    return sorted(v for k, v in REASONS.items() if bits & k)


def _try(f, *a):
    try:
        return f(*a)
    except Exception:  # noqa: BLE001
        return None


def _watts(mw):
    return None if mw is None else mw / 1000.0


class Nvml:
    """SM clock (MHz), power draw and enforced power limit (W), temperature (C) and the
    current clock-event (throttle) reasons of GPU ``index``; every reading None if unavailable."""

    def __init__(self, index: int = 0):
        self.h = None
        self.nv = None
        self.index = index
        try:
            import pynvml as nv
            nv.nvmlInit()
            self.nv = nv
            self.h = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001
            print(f"  NVML unavailable: {type(exc).__name__}: {str(exc)[:200]}", flush=True)

    @staticmethod
    def count() -> int:
        """GPUs NVML sees on this host (0 without NVML)."""
        try:
            import pynvml as nv
            nv.nvmlInit()
            return int(nv.nvmlDeviceGetCount())
        except Exception:  # noqa: BLE001
            return 0

    def static(self) -> dict:
        """Limits that do not change during a run: power limit, maximum clocks, thresholds."""
        if self.h is None:
            return {}
        nv, h = self.nv, self.h
        out = {
            "power_limit_w": _watts(_try(nv.nvmlDeviceGetEnforcedPowerLimit, h)),
            "power_default_limit_w": _watts(_try(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)),
            "max_sm_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            "max_mem_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
            "driver": _try(nv.nvmlSystemGetDriverVersion),
        }
        lim = _try(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
        if lim:
            out["power_limit_range_w"] = [_watts(lim[0]), _watts(lim[1])]
        for name in ("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
                     "NVML_TEMPERATURE_THRESHOLD_GPU_MAX"):
            if hasattr(nv, name):
                out[name.split("THRESHOLD_")[1].lower() + "_temp_c"] = _try(
                    nv.nvmlDeviceGetTemperatureThreshold, h, getattr(nv, name))
        return out

    def reasons(self):
        if self.h is None:
            return None
        f = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(self.nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return None if f is None else _try(f, self.h)

    def sample(self) -> dict:
        """One reading: monotonic time, SM and memory clocks, power, temperature, reason bits."""
        if self.h is None:
            return {}
        nv, h = self.nv, self.h
        return {
            "t": time.monotonic(),
            "gpu": self.index,
            "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "power_w": _watts(_try(nv.nvmlDeviceGetPowerUsage, h)),
            "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "reasons": self.reasons(),
        }

    def names(self, bits):
        return reason_names(bits)


def summarize_samples(samples: list[dict], limit_w) -> dict:
    """Medians of the NVML samples of a window, with their count, extremes and throttle reasons."""
    out = {"nvml_samples": len(samples), "power_limit_w": limit_w}
    for key in ("sm_clock_mhz", "power_w", "temperature_c", "mem_clock_mhz"):
        vals = [s[key] for s in samples if s.get(key) is not None]
        out[key] = float(statistics.median(vals)) if vals else None
        if key in ("sm_clock_mhz", "power_w") and vals:
            out[key.replace("_mhz", "").replace("_w", "") + "_range"] = [min(vals), max(vals)]
        if key == "power_w" and vals:
            out["power_mean_w"] = float(statistics.fmean(vals))
        if key == "sm_clock_mhz" and vals:
            out["sm_clock_mean_mhz"] = float(statistics.fmean(vals))
    bits, seen = 0, False
    for s in samples:
        if s.get("reasons") is not None:
            bits |= s["reasons"]
            seen = True
    out["throttle_reasons"] = reason_names(bits) if seen else None
    return out


class Sampler:
    """NVML samples of every GPU of the host (or ``gpus``) every ``period_s`` seconds, taken by a
    child process writing JSON lines to ``path``; :meth:`between` returns one GPU's samples of a
    monotonic-time window."""

    def __init__(self, path: str, period_s: float = 0.05, gpus: list[int] | None = None):
        self.path = path
        open(path, "w").close()
        cmd = [sys.executable, os.path.abspath(__file__), "--sampler", path, "--period-s", str(period_s)]
        if gpus is not None:
            cmd += ["--gpus", ",".join(str(g) for g in gpus)]
        self.proc = subprocess.Popen(cmd)
        self._cache: list[dict] = []
        self._pos = 0

    def _read(self):
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

    def between(self, t0: float, t1: float, gpu: int = 0, wait: bool = True) -> list[dict]:
        """Samples of GPU ``gpu`` taken in [t0, t1] (monotonic seconds)."""
        if wait:
            time.sleep(0.06)
        self._read()
        return [s for s in self._cache if t0 <= s["t"] <= t1 and s.get("gpu", 0) == gpu]

    def gpus(self) -> list[int]:
        self._read()
        return sorted({s.get("gpu", 0) for s in self._cache})

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def sampler_main(path: str, period_s: float, gpus: list[int] | None):
    """The sampling child: one line per GPU and sample until killed (returns at once without NVML)."""
    if gpus is None:
        gpus = list(range(Nvml.count()))
    devs = [Nvml(i) for i in gpus]
    devs = [d for d in devs if d.h is not None]
    if not devs:
        return
    with open(path, "a") as f:
        while True:
            for d in devs:
                f.write(json.dumps(d.sample()) + "\n")
            f.flush()
            time.sleep(period_s)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampler", required=True)
    ap.add_argument("--period-s", type=float, default=0.05)
    ap.add_argument("--gpus", default=None)
    a = ap.parse_args()
    sampler_main(a.sampler, a.period_s, [int(x) for x in a.gpus.split(",")] if a.gpus else None)
