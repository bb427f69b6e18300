"""Shared pieces of the meshcast GPU measurement harness.

Timing, L2 flushing, device info, time budgets and an incremental record writer.
Records follow /work/shared/MEASUREMENTS.md (format version 1).
"""
from __future__ import annotations

import datetime
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings

import torch

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning, message=".*TF32.*")

HARNESS_VERSION = "1"


def log(*args):
    print(*args, flush=True)


def on_cuda() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if on_cuda() else torch.device("cpu")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def nccl_version_str():
    try:
        v = torch.cuda.nccl.version()
        if isinstance(v, tuple):
            return ".".join(str(x) for x in v)
        # old style integer, e.g. 21903 -> 2.19.3
        v = int(v)
        return f"{v // 10000}.{(v // 100) % 100}.{v % 100}" if v >= 10000 else f"{v // 1000}.{(v // 100) % 10}.{v % 100}"
    except Exception:  # noqa: BLE001
        return None


def device_info(**extra) -> dict:
    info = {}
    if on_cuda():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(
            gpu=p.name,
            sm_count=p.multi_processor_count,
            total_memory_bytes=int(p.total_memory),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)),
        )
    else:
        info.update(gpu="cpu", sm_count=0, total_memory_bytes=0, l2_bytes=0)
    info.update(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        harness_version=HARNESS_VERSION,
        date=utc_now(),
        **host_info(),
    )
    info.update(extra)
    return info


def host_info() -> dict:
    """The host CPU (model, cores) and how fast it dispatches: the median host seconds per
    eager op of 400 one-element adds on the GPU (no synchronisation inside the loop, so the time
    is the framework's dispatch and launch cost, not the GPU's). Host-bound steps scale with it."""
    out = {"cpu": "unknown", "cpu_count": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            out["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")
    except OSError:
        pass
    if on_cuda():
        a = torch.ones(1, device="cuda")
        c = torch.empty_like(a)
        trials = []
        for _ in range(7):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(400):
                torch.add(a, a, out=c)
            trials.append((time.perf_counter() - t) / 400)
        torch.cuda.synchronize()
        out["host_dispatch_s"] = statistics.median(trials)
    return out


class Recorder:
    """Holds {"info":..., "records": [...]} and rewrites the file atomically after each record,
    so a killed run still leaves every finished record on disk."""

    def __init__(self, path: str | None, info: dict, enabled: bool = True):
        self.path = path
        self.info = info
        self.records: list[dict] = []
        self.enabled = enabled and path is not None
        self.errors: list[str] = []
        if self.enabled:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self.flush()

    def add(self, rec: dict):
        self.records.append(rec)
        self.flush()

    def error(self, msg: str):
        self.errors.append(msg)
        log("  ERROR", msg)

    def flush(self):
        if not self.enabled:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"info": self.info, "records": self.records}, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)


class Deadline:
    """Global time budget split into cumulative section deadlines.

    Each section may run until start + (sum of fractions of the sections so far) * budget,
    so time left unused by an early section rolls over to later ones."""

    def __init__(self, budget_s: float, fractions: dict[str, float] | None = None):
        self.t0 = time.time()
        self.budget_s = budget_s
        self.fractions = fractions or {}
        self.section_end = self.t0 + budget_s
        self._cum = 0.0

    def start_section(self, name: str):
        frac = self.fractions.get(name)
        if frac is None:
            self.section_end = self.t0 + self.budget_s
        else:
            self._cum += frac
            self.section_end = self.t0 + min(1.0, self._cum) * self.budget_s
        log(f"== section {name}: elapsed {self.elapsed():.1f}s, section deadline at {self.section_end - self.t0:.0f}s")

    def elapsed(self) -> float:
        return time.time() - self.t0

    def ok(self, reserve_s: float = 0.0) -> bool:
        return time.time() + reserve_s < self.section_end


class Flusher:
    """Writes a buffer several times the L2 size, evicting whatever a timed call left in L2."""

    def __init__(self, factor: int = 4, min_bytes: int = 128 << 20):
        self.buf = None
        self.flag = 0
        if on_cuda():
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            n = max(factor * int(l2), min_bytes)
            self.buf = torch.empty(n, dtype=torch.uint8, device=device())

    def __call__(self):
        if self.buf is not None:
            self.flag ^= 1
            self.buf.fill_(self.flag + 1)


def start_seeded_run(out: str, info: dict, budget_s: float, section: str) -> tuple[Recorder, Flusher, Deadline]:
    """The opening of a single-GPU kernel suite: its Recorder (writing ``out``), an L2 Flusher,
    torch's RNG seeded at 0 (the same inputs every run) and a Deadline of ``budget_s`` seconds
    with ``section`` started."""
    rec = Recorder(out, info)
    flush = Flusher()
    torch.manual_seed(0)
    dl = Deadline(budget_s)
    dl.start_section(section)
    return rec, flush, dl


def _stats(times):
    return {
        "time_s": float(statistics.median(times)),
        "time_min_s": float(min(times)),
        "time_max_s": float(max(times)),
        "reps": len(times),
    }


def time_fn(fn, *, flush=None, setup=None, warmup: int = 2, target_s: float = 0.03,
            min_reps: int = 5, max_reps: int = 50):
    """Time fn() with one pair of CUDA events per call (the L2 flush and setup are outside
    the events). Warm-up calls first; the number of timed calls is sized from the last
    warm-up so that about target_s of work is timed (min_reps..max_reps).
    Returns dict(time_s (median), time_min_s, time_max_s, reps)."""
    cuda = on_cuda()

    def one():
        if setup is not None:
            setup()
        if flush is not None:
            flush()
        if cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            return (s, e)
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def resolve(x):
        if cuda:
            return x[0].elapsed_time(x[1]) / 1e3
        return x

    est = None
    for _ in range(max(1, warmup)):
        r = one()
        if cuda:
            torch.cuda.synchronize()
        est = resolve(r)
    reps = int(min(max_reps, max(min_reps, math.ceil(target_s / max(est, 1e-7)))))
    pend = [one() for _ in range(reps)]
    if cuda:
        torch.cuda.synchronize()
    return _stats([resolve(x) for x in pend])


def kernel_times(fn, *, flush=None, setup=None, calls: int = 3) -> dict:
    """Every CUDA kernel of ``calls`` calls of fn() under torch.profiler, each call profiled alone
    (setup and the L2 flush before it, outside the profile): ``kernels`` [[name (first 160
    characters), device seconds per call, launches per call], ...] by time, ``kernel_s`` their sum
    and ``busy_s`` the union of the kernels' intervals per call (what the GPU was busy), all per
    call. Empty where the profiler fails or no kernel ran."""
    try:
        from torch.profiler import ProfilerActivity, profile
        by_name: dict = {}
        busy = 0.0
        for _ in range(calls):
            if setup is not None:
                setup()
            if flush is not None:
                flush()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            spans = []
            for e in prof.events():
                if getattr(e.device_type, "name", "") != "CUDA":
                    continue
                a, b = e.time_range.start, e.time_range.end          # microseconds
                spans.append((a, b))
                tot, cnt = by_name.get(e.name, (0.0, 0))
                by_name[e.name] = (tot + (b - a) * 1e-6, cnt + 1)
            busy += union_length(spans) * 1e-6
        if not by_name:
            return {}
        rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])
        return {"kernels": [[k[:160], round(v[0] / calls, 9), round(v[1] / calls, 3)] for k, v in rows],
                "kernel_s": round(sum(v[0] for v in by_name.values()) / calls, 9),
                "busy_s": round(busy / calls, 9), "profiled_calls": calls}
    except Exception as exc:  # noqa: BLE001
        log(f"  (kernel profile not taken: {type(exc).__name__}: {exc})")
        return {}


def union_length(spans: list) -> float:
    """Total length covered by a list of (start, end) intervals."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(spans):
        if cur_b is None or a > cur_b:
            total += (cur_b - cur_a) if cur_b is not None else 0.0
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + ((cur_b - cur_a) if cur_b is not None else 0.0)


def time_graph(fn, calls: int = 20, replays: int = 7) -> float | None:
    """Seconds per call of fn() run back to back on the GPU alone: ``calls`` calls captured in one
    CUDA graph, replayed ``replays`` times (median), no L2 flush (operands warm where they fit in
    L2), no host gaps between kernels. None without CUDA or when fn cannot be captured."""
    if not on_cuda():
        return None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
    except Exception:  # noqa: BLE001  (capture refused: e.g. a host sync inside fn)
        torch.cuda.synchronize()
        return None
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / calls)
    del g
    return float(statistics.median(times))


def free_memory():
    gc.collect()
    if on_cuda():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc)
    return "out of memory" in msg.lower() or "CUDA_ERROR_OUT_OF_MEMORY" in msg


def short_exc(exc: BaseException, limit: int = 300) -> str:
    s = f"{type(exc).__name__}: {exc}"
    s = " ".join(s.split())
    return s[:limit]


def run_case(rec: Recorder, label: str, fn):
    """Run one case; any exception is logged, nothing is recorded for it, and the run goes on.
    fn returns a record dict (or a list of them, or None)."""
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001
        rec.error(f"{label}: {short_exc(exc)}")
        if not is_oom(exc):
            traceback.print_exc(limit=3, file=sys.stdout)
        out = None
    free_memory()
    if out is None:
        return None
    outs = out if isinstance(out, list) else [out]
    for o in outs:
        rec.add(o)
    return out


def run_within_budget(cases: list, dl: "Deadline", rec: Recorder, run_one, label) -> float:
    """Run ``run_one(case)`` for each case while the deadline allows (the cases not reached are one
    recorded error), logging progress every 25 cases; a case that raises is recorded as an error
    and its memory freed, and the run goes on. Returns the seconds taken."""
    t0 = time.time()
    for i, c in enumerate(cases):
        if not dl.ok(reserve_s=1):
            rec.error(f"budget reached: {len(cases) - i} of {len(cases)} cases not run")
            break
        if i % 25 == 0:
            log(f"-- case {i + 1}/{len(cases)}, {time.time() - t0:.0f} s")
        try:
            run_one(c)
        except Exception as exc:  # noqa: BLE001
            rec.error(f"{label(c)}: {short_exc(exc)}")
            free_memory()
    return time.time() - t0


def add_nvml_sample(rec: dict, nvml, keys=("sm_clock_mhz", "temperature_c")) -> None:
    """Copy one NVML sample's ``keys`` (those it has) into the record ``rec``; nothing without NVML."""
    if nvml is None:
        return
    smp = nvml.sample()
    rec.update({k: smp[k] for k in keys if smp.get(k) is not None})


def fmt_rate(x, unit):
    if x is None:
        return "-"
    for p, s in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= p:
            return f"{x / p:.1f} {s}{unit}"
    return f"{x:.1f} {unit}"


def attention_pass(fwd, grad, inputs, backward: bool):
    """(fn, setup) for common.time_fn timing one attention call: the forward alone under no_grad,
    or forward + backward of ``grad`` with the ``inputs``' gradients cleared before each call."""
    import torch
    if not backward:
        def fn():
            with torch.no_grad():
                fwd()
        return fn, None

    def fn():
        fwd().backward(grad)

    def setup():
        for t in inputs:
            t.grad = None
    return fn, setup


def make_gemm(m: int, n: int, k: int, dtn: str):
    """fn() running one GEMM as the kernel suites time it: torch.mm into a preallocated C (bfloat16,
    float16, float32; half types run as float32 without CUDA), or for float8_e4m3fn
    torch._scaled_mm with float32 per-tensor scales of 1, B column-major, and bf16 output."""
    import torch
    dev = device()
    if dtn == "float8_e4m3fn":
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device=dev).to(f8)
        b = torch.randn(n, k, device=dev).to(f8).t()     # row-major [n, k] viewed column-major [k, n]
        sa = torch.tensor(1.0, device=dev)
        sb = torch.tensor(1.0, device=dev)

        def fn():
            torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return fn
    dt = getattr(torch, dtn) if on_cuda() or dtn == "float32" else torch.float32
    a = torch.randn(m, k, device=dev, dtype=dt)
    b = torch.randn(k, n, device=dev, dtype=dt)
    c = torch.empty(m, n, device=dev, dtype=dt)

    def fn():
        torch.mm(a, b, out=c)
    return fn
