"""Every GEMM of one training step, timed inside the step and again in isolation.

A training step's GEMMs ran 8-14% faster than meshcast's GEMM model (fitted on isolated
``torch.mm`` calls) in the kernel profiles of session 12 (validation/kernel_reconcile.py). This
module tells which side is off, per GEMM:

* :func:`capture_calls` runs one step under a ``TorchDispatchMode`` and records each matrix
  multiply the step dispatches (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``): its operands'
  shapes, strides (the layout cuBLAS sees: which operand is transposed) and dtype, its scalar
  arguments, and how often it ran;
* :func:`profile_by_shape` runs one more step under ``torch.profiler`` with input shapes recorded
  and sums the device seconds each (op, shapes) launched: the GEMM's time *inside* the step;
* :func:`replay_isolated` rebuilds each call from its shapes and strides (random data, and again on
  the step's own operands) and times it alone exactly as the fit suites time theirs
  (``common.time_fn``: CUDA events per call, median), and back to back in a CUDA graph
  (``common.time_graph``).

:func:`trace` puts the three together as the record field ``gemm_calls``: a list of
dicts (see :func:`trace`). Inside-step seconds are per call (device time of the op's kernels over
its calls, layouts with the same shapes pooled); None where the profiler attributed no kernels.
"""
from __future__ import annotations

import time

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


def _log(msg: str) -> None:
    print(msg, flush=True)


def capture_calls(step, keep_operands: bool = False) -> list[dict]:
    """One step under a dispatch mode: unique GEMM calls with operand shapes, strides, dtype,
    scalar arguments and call counts, in first-seen order; with ``keep_operands`` also a copy of
    the first call's operands (``operands``: the values the step multiplied)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[tuple, dict] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._schema.name.split("::")[-1]
            if name in GEMM_OPS:
                tens = [a for a in args if isinstance(a, torch.Tensor)]
                scal = {k: v for k, v in kwargs.items() if isinstance(v, (int, float))}
                key = (name, tuple(tuple(t.shape) for t in tens), tuple(tuple(t.stride()) for t in tens),
                       str(tens[0].dtype).replace("torch.", ""), tuple(sorted(scal.items())))
                hit = seen.get(key)
                if hit is None:
                    hit = seen[key] = {"op": name, "shapes": [list(t.shape) for t in tens],
                                       "strides": [list(t.stride()) for t in tens], "dtype": key[3],
                                       "scalars": dict(scal), "count": 0}
                    if keep_operands:
                        hit["operands"] = [t.detach().clone() for t in tens]   # the step's own values
                hit["count"] += 1
            return func(*args, **kwargs)

    with Recorder():
        step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return list(seen.values())


def profile_by_shape(step) -> dict[tuple, tuple[float, int]]:
    """{(op, shapes): (device seconds, calls)} of one step under torch.profiler (CPU + CUDA,
    input shapes recorded); scalar arguments' empty shapes dropped."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    out: dict[tuple, tuple[float, int]] = {}
    for ev in prof.key_averages(group_by_input_shape=True):
        name = ev.key.split("::")[-1]
        if not ev.key.startswith("aten::") or name not in GEMM_OPS:
            continue
        shapes = tuple(tuple(s) for s in (ev.input_shapes or []) if s)
        dev_us = getattr(ev, "device_time_total", None)
        if dev_us is None:
            dev_us = getattr(ev, "cuda_time_total", 0.0)
        tot, n = out.get((name, shapes), (0.0, 0))
        out[(name, shapes)] = (tot + dev_us * 1e-6, n + ev.count)
    return out


def _operand(shape, stride, dtype, device="cuda"):
    """A random tensor with the recorded shape and strides (a view of a random flat buffer, so
    transposed and broadcast (stride-0) operands keep their layout)."""
    import torch
    size = 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 0)
    flat = torch.randn(size, device=device).to(getattr(torch, dtype))
    return flat.as_strided(shape, stride)


def replay_isolated(call: dict, device: str = "cuda", real: bool = False) -> tuple[float | None, float | None]:
    """(events median s, graph s per call) of one recorded GEMM call rebuilt on random data
    (standard normal, as the fit suites use), or with ``real`` on the step's own operands."""
    import torch
    import common

    op = getattr(torch.ops.aten, call["op"]).default
    if real:
        args = list(call["operands"])
    else:
        args = [_operand(s, st, call["dtype"], device) for s, st in zip(call["shapes"], call["strides"])]
    scal = call["scalars"]

    def fn():
        op(*args, **scal)
    try:
        ev = common.time_fn(fn)["time_s"]
        gr = common.time_graph(fn)
    finally:
        del args
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return ev, gr


def trace(step, budget_s: float = 120.0) -> dict:
    """The record fields of a GEMM trace: ``gemm_calls`` (one dict per unique call: op, shapes,
    strides, dtype, count; ``in_step_s`` per call; ``isolated_s`` / ``graph_s`` on random data and
    ``isolated_real_s`` on the step's own operands; the SM clock and board power NVML read right
    after each isolated timing) and ``gemm_trace_s``. Calls left when the budget runs out carry
    no isolated times."""
    import nvml
    t0 = time.time()
    try:
        calls = capture_calls(step, keep_operands=True)
        by_shape = profile_by_shape(step)
    except Exception as exc:  # noqa: BLE001
        _log(f"  (gemm trace not taken: {type(exc).__name__}: {exc})")
        return {}
    nv = nvml.Nvml(0)
    rows = []
    for c in sorted(calls, key=lambda c: -c["count"] * _flops(c)):
        dev_s, n = by_shape.get((c["op"], tuple(tuple(s) for s in c["shapes"])), (None, 0))
        row = {k: c[k] for k in ("op", "shapes", "strides", "dtype", "count")}
        row["in_step_s"] = _r(dev_s / n if dev_s and n else None)
        if time.time() - t0 < budget_s:
            for real, key in ((False, "isolated_s"), (True, "isolated_real_s")):
                try:
                    ev, gr = replay_isolated(c, real=real)
                    smp = nv.sample()
                    row[key] = _r(ev)
                    row["sm_clock_mhz" + ("_real" if real else "")] = smp.get("sm_clock_mhz")
                    row["power_w" + ("_real" if real else "")] = smp.get("power_w")
                    if not real:
                        row["graph_s"] = _r(gr)
                except Exception as exc:  # noqa: BLE001
                    _log(f"  (replay of {c['op']} {c['shapes']} failed: {type(exc).__name__}: {exc})")
        c.pop("operands", None)
        rows.append(row)
        _log(f"  gemm {c['op']:8s} {str(c['shapes']):44s} x{c['count']:<4d} in-step {_us(row['in_step_s'])} "
             f"random {_us(row.get('isolated_s'))} real {_us(row.get('isolated_real_s'))} "
             f"{row.get('sm_clock_mhz')}/{row.get('sm_clock_mhz_real')} MHz")
    return {"gemm_calls": rows, "gemm_trace_s": round(time.time() - t0, 1)}


def _flops(c: dict) -> float:
    """2·m·n·k (times the batch) of a recorded call, from its last two operands' shapes."""
    a, b = c["shapes"][-2], c["shapes"][-1]
    batch = a[0] if len(a) == 3 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def _r(x):
    return None if x is None else round(x, 9)


def _us(x):
    return "      -   " if x is None else f"{x * 1e6:8.1f}us"
