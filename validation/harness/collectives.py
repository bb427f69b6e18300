"""NCCL collective suite, one process per GPU:

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    python3 -m torch.distributed.run --nproc_per_node=2 validation/harness/collectives.py --out FILE

Each rep: synchronize, barrier, then CUDA events around one collective on each rank; the per-rep
time is the max over ranks (all-reduced with MAX after all reps, outside the timed region);
time_s is the median over reps. For sizes up to 64 MiB, `time_batched_s` (informative) is the
per-call time of 20 back-to-back calls in one event pair (median of 5, max over ranks): it spreads
the ranks' launch skew after the barrier over 20 calls, as nccl-tests do, and is the better
small-message latency figure. `bytes` is each rank's input buffer (all_gather: the input shard;
reduce_scatter: the full input), bf16.

Since session 40 (`info.collectives_version` 2) each record also separates the GPU's time from the
host's (informative fields; `time_s` keeps its meaning):
- `time_batched_s` for every size (from 256 MiB: `BIG_BATCH_OPS` calls per event pair);
- `time_graph_s` (up to 64 MiB): the per-call time of `BATCH_OPS` calls captured in one CUDA graph
  and replayed (median of `BATCH_REPS` replays, max over ranks). A replay issues no host work per
  call, so this is the GPU's time of the collective alone: NCCL's kernel and the wait for the peer;
- `host_issue_s` (up to 64 MiB): host seconds per call to issue `BATCH_OPS` calls while the stream
  is held by a sleep kernel (the GPU cannot finish anything meanwhile, so the host never waits):
  the CPU cost of one torch.distributed call (ProcessGroupNCCL's bookkeeping and NCCL's enqueue),
  median of `BATCH_REPS`, max over ranks.
`graph_error` names why a case could not be captured (both ranks must capture for any to replay).
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fmt_rate, log  # noqa: E402

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BATCH_MAX_BYTES = 64 * MiB     # graph replay and host issue up to here; batched at every size
BATCH_OPS = 20
BATCH_REPS = 5
BIG_BATCH_OPS = 4              # back-to-back calls per event pair from 256 MiB
SLEEP_CYCLES = 40_000_000      # ~20 ms at 1.98 GHz: holds the stream while the host issues BATCH_OPS calls


def sizes(small, max_bytes):
    if small:
        return [KiB, 64 * KiB]
    s = [1 << i for i in range(10, 27)]          # 1 KiB .. 64 MiB, powers of 2
    s += [256 * MiB, 1 * GiB, 4 * GiB]           # then powers of 4
    return [x for x in s if x <= max_bytes]


def reps_for(nbytes):
    # deterministic on every rank (no agreement needed)
    if nbytes <= 16 * MiB:
        return 5, 100
    if nbytes <= 256 * MiB:
        return 2, 15
    if nbytes <= 1 * GiB:
        return 2, 8
    return 1, 5


def bus_factor(op, world):
    n = world
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1), "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n, "broadcast": 1.0, "send_recv": 1.0}[op]
    # all_gather: nccl-tests busbw = (n*shard)/t * (n-1)/n = shard/t * (n-1)


def make_op(op, nbytes, rank, world, dev, dtype):
    esz = torch.tensor([], dtype=dtype).element_size()
    numel = nbytes // esz
    if op == "all_reduce":
        x = torch.randn(numel, device=dev, dtype=dtype)
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        x = torch.randn(numel, device=dev, dtype=dtype)
        out = torch.empty(numel * world, device=dev, dtype=dtype)
        return lambda: dist.all_gather_into_tensor(out, x)
    if op == "reduce_scatter":
        numel -= numel % world
        x = torch.randn(numel, device=dev, dtype=dtype)
        out = torch.empty(numel // world, device=dev, dtype=dtype)
        return lambda: dist.reduce_scatter_tensor(out, x)
    if op == "all_to_all":
        numel -= numel % world
        x = torch.randn(numel, device=dev, dtype=dtype)
        out = torch.empty_like(x)
        return lambda: dist.all_to_all_single(out, x)
    if op == "broadcast":
        x = torch.randn(numel, device=dev, dtype=dtype)
        return lambda: dist.broadcast(x, 0)
    if op == "send_recv":
        x = torch.randn(numel, device=dev, dtype=dtype)
        if rank == 0:
            return lambda: dist.send(x, 1)
        if rank == 1:
            return lambda: dist.recv(x, 0)
        return lambda: None
    raise ValueError(op)


def bench(op, nbytes, rank, world, dev, dtype):
    fn = make_op(op, nbytes, rank, world, dev, dtype)
    cuda = dev.type == "cuda"
    warm, reps = reps_for(nbytes)
    for _ in range(warm):
        fn()
    if cuda:
        torch.cuda.synchronize()
    # a one-element all-reduce right before the start event lines the ranks up on the GPU, so
    # the timed call does not include the ranks' launch skew after the host barrier
    gpu_sync = torch.zeros(1, device=dev)
    times = [_time_region(fn, dev, gpu_sync) for _ in range(reps)]
    tt = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    tl = tt.tolist()
    out = dict(time_s=float(statistics.median(tl)), time_min_s=float(min(tl)),
               time_max_s=float(max(tl)), reps=len(tl))
    out.update(_batched(fn, nbytes, dev))
    if cuda and nbytes <= BATCH_MAX_BYTES:
        out.update(_host_issue(fn, dev))
        out.update(_graph(fn, dev))
    del fn
    return out


def _time_region(body, dev, gpu_sync=None) -> float:
    """Seconds ``body`` takes after a host barrier: between CUDA events on the GPU (first lining
    the ranks up with a one-element all-reduce of ``gpu_sync`` where given), by the host's clock
    without CUDA."""
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    if not cuda:
        t = time.perf_counter()
        body()
        return time.perf_counter() - t
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    if gpu_sync is not None:
        dist.all_reduce(gpu_sync)
    s.record()
    body()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3


def _max_over_ranks(values, dev) -> float:
    """Per rep the largest value over ranks (the slower rank gates), then the median over reps."""
    t = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(statistics.median(t.tolist()))


def _batched(fn, nbytes, dev) -> dict:
    """Per-call seconds of back-to-back calls in one event pair after one barrier, so the ranks'
    launch skew is spread over many calls (as nccl-tests time it)."""
    ops, reps = (BATCH_OPS, BATCH_REPS) if nbytes <= BATCH_MAX_BYTES else (BIG_BATCH_OPS, 3)

    def calls():
        for _ in range(ops):
            fn()
    per = [_time_region(calls, dev) / ops for _ in range(reps)]
    return dict(time_batched_s=_max_over_ranks(per, dev), batch_ops=ops)


def _host_issue(fn, dev) -> dict:
    """Host seconds per call to issue BATCH_OPS calls while a sleep kernel holds the stream."""
    per = []
    for _ in range(BATCH_REPS):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda._sleep(SLEEP_CYCLES)
        t = time.perf_counter()
        for _ in range(BATCH_OPS):
            fn()
        per.append((time.perf_counter() - t) / BATCH_OPS)
        torch.cuda.synchronize()
    return dict(host_issue_s=_max_over_ranks(per, dev))


def _graph(fn, dev) -> dict:
    """Per-call GPU seconds of BATCH_OPS calls captured in one CUDA graph and replayed; replayed
    only when every rank captured (a one-sided replay would wait for its peer forever)."""
    torch.cuda.synchronize()
    dist.barrier()
    graph, err = torch.cuda.CUDAGraph(), None
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(BATCH_OPS):
                fn()
    except Exception as exc:  # noqa: BLE001
        err = common.short_exc(exc)
    ok = torch.tensor([0 if err else 1], device=dev)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if not ok.item():
        return dict(graph_error=err or "another rank failed to capture")
    gpu_sync = torch.zeros(1, device=dev)
    graph.replay()
    per = [_time_region(graph.replay, dev, gpu_sync) / BATCH_OPS for _ in range(BATCH_REPS)]
    del graph
    return dict(time_graph_s=_max_over_ranks(per, dev))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget-s", type=float, default=240)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--max-bytes", type=int, default=4 * GiB)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available() and not args.cpu
    if cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=120))
        dtype = torch.bfloat16
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        dtype = torch.float32
    rank, world = dist.get_rank(), dist.get_world_size()
    info = common.device_info(world=world, nccl=common.nccl_version_str() if cuda else None,
                              suite="collectives", timing="GPU-aligned: one-element all_reduce before the start event",
                              collectives_version=2)
    if rank == 0:
        log("info:", info)
    rec = common.Recorder(args.out, info, enabled=(rank == 0))
    torch.manual_seed(rank)
    t0 = time.time()
    stop = False
    for op in args.ops.split(","):
        if stop:
            break
        for nb in sizes(args.small, args.max_bytes):
            go = torch.tensor([1 if time.time() - t0 < args.budget_s - 5 else 0], device=dev)
            dist.broadcast(go, 0)
            if not go.item():
                if rank == 0:
                    rec.error(f"budget reached before {op} {nb}")
                stop = True
                break
            err = None
            try:
                st = bench(op, nb, rank, world, dev, dtype)
            except Exception as exc:  # noqa: BLE001
                st = None
                err = common.short_exc(exc)
            common.free_memory()
            if rank == 0:
                if st is None:
                    rec.error(f"{op} {nb}: {err}")
                    continue
                algbw = nb / st["time_s"]
                r = dict(kind=op, bytes=nb, world=world, dtype="bfloat16", **st,
                         algbw_GBps=algbw / 1e9, busbw_GBps=algbw * bus_factor(op, world) / 1e9)
                rec.add(r)
                tb = st.get("time_batched_s")
                tbs = f"  batched {tb * 1e6:8.1f} us" if tb else ""
                if "time_graph_s" in st:
                    tbs += f"  graph {st['time_graph_s'] * 1e6:8.1f} us"
                if "host_issue_s" in st:
                    tbs += f"  host {st['host_issue_s'] * 1e6:6.1f} us"
                if "graph_error" in st:
                    tbs += f"  graph error: {st['graph_error']}"
                log(f"  {op:14s} {nb:>11d} B {st['time_s'] * 1e6:10.1f} us  algbw {fmt_rate(algbw, 'B/s')}"
                    f"  busbw {fmt_rate(algbw * bus_factor(op, world), 'B/s')}{tbs}")
    dist.barrier()
    if rank == 0:
        log(f"done: {len(rec.records)} records, {len(rec.errors)} errors, {time.time() - t0:.1f}s")
        for e in rec.errors:
            log("  error:", e)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
