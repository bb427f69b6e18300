"""Where the host (CPU) time of a reference training step goes, phase by phase.

An eager PyTorch step is issued by one Python thread: the GPU cannot run a kernel before the host
has launched it. This script times, for the reference GPT of MEASUREMENTS.md, how long the host
takes to issue each phase of a step -- forward (to the loss), ``backward()``, and the optimizer
(``step()`` + ``zero_grad``) -- and how long the GPU takes for the same phases, so the simulator's
host model can be split by phase instead of lumped into one number.

Per step, from an idle GPU (``synchronize`` first): host wall clock at each phase boundary
(``perf_counter``) and a CUDA event at the same points; then, as in ``train_step.py``, steady-state
steps with no synchronisation between them (``time_s``, the usual train_step measurement). Records
are ``train_step`` records of MEASUREMENTS.md with extra fields (``host_fwd_s``, ``host_bwd_s``,
``host_opt_s``: host seconds to return from each phase; ``gpu_fwd_s``, ``gpu_bwd_s``, ``gpu_opt_s``:
CUDA-event seconds between the boundaries; ``synced_step_s``: wall seconds of a step started from an
idle GPU; all medians, and over GPUs the slowest). With ``--profile`` a torch.profiler summary of the
host's self time by operator is written beside the output (``*_cpu_profile.json``).

    python3 validation/harness/host_phases.py --out single.json              # one GPU, strategy single
    python3 -m torch.distributed.run --nproc_per_node=2 validation/harness/host_phases.py --dist --out d.json
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import train_step  # noqa: E402
from common import log  # noqa: E402

# layers, hidden, heads, vocab, seq, micro_batch: host-bound tiny models up to GPU-bound ones
CONFIGS = ((2, 128, 4, 512, 64, 1), (8, 128, 4, 512, 64, 1), (32, 128, 4, 512, 64, 1),
           (12, 512, 8, 4096, 256, 2), (4, 1024, 16, 32768, 1024, 4), (8, 4096, 32, 50304, 512, 1),
           (16, 4096, 32, 50304, 2048, 2))
PROFILED = ((8, 128, 4, 512, 64, 1), (8, 4096, 32, 50304, 512, 1))
PHASES = ("fwd", "bwd", "opt")


def phase_functions(strategy, model, opt, dev):
    """The three phases of ``train_step.setup_strategy``'s step, callable one at a time."""
    autocast = strategy in ("single", "ddp")
    ctx = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext

    def fwd(idx, tgt):
        with ctx():
            return train_step.loss_fn(model(idx), tgt)

    def bwd(loss):
        loss.backward()

    def optim():
        opt.step()
        opt.zero_grad(set_to_none=True)

    return fwd, bwd, optim


def synced_phases(fwd, bwd, optim, batches, steps):
    """Per step from an idle GPU: host seconds and CUDA-event seconds of each phase, and wall."""
    host = {p: [] for p in PHASES}
    gpu = {p: [] for p in PHASES}
    wall = []
    for i in range(steps):
        idx, tgt = batches[i % len(batches)]
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        t = [time.perf_counter()]
        ev[0].record()
        loss = fwd(idx, tgt)
        t.append(time.perf_counter())
        ev[1].record()
        bwd(loss)
        t.append(time.perf_counter())
        ev[2].record()
        optim()
        t.append(time.perf_counter())
        ev[3].record()
        torch.cuda.synchronize()
        wall.append(time.perf_counter() - t[0])
        for k, p in enumerate(PHASES):
            host[p].append(t[k + 1] - t[k])
            gpu[p].append(ev[k].elapsed_time(ev[k + 1]) / 1e3)
    out = {f"host_{p}_s": statistics.median(v) for p, v in host.items()}
    out.update({f"gpu_{p}_s": statistics.median(v) for p, v in gpu.items()})
    out["synced_step_s"] = statistics.median(wall)
    return out


def cpu_profile(fwd, bwd, optim, batches, steps=3, top=25):
    """torch.profiler over ``steps`` steps: the host's self time per operator (µs per step)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            idx, tgt = batches[i % len(batches)]
            bwd(fwd(idx, tgt))
            optim()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) / steps
    return {"self_cpu_us_per_step": total,
            "top": [{"name": e.key[:100], "self_cpu_us": e.self_cpu_time_total / steps, "calls": e.count / steps}
                    for e in rows[:top]]}


def measure(cfg, strategy, world, dev, local_rank, profile):
    """One config: the train_step record with the phase fields, and the CPU profile or None.
    ``allocated_before_bytes``: what the process held before the model was built (0 when the
    previous configuration was freed; the caller frees once this frame and its closures die)."""
    before = torch.cuda.memory_allocated()
    model, opt, _ = train_step.setup_strategy(cfg, strategy, dev, local_rank)
    fwd, bwd, optim = phase_functions(strategy, model, opt, dev)
    batches = train_step._make_batches(cfg, dev, seed=local_rank or 0)
    warmup, steps = train_step.steps_for(cfg)

    def step(idx, tgt):
        bwd(fwd(idx, tgt))
        optim()

    times, peak = train_step._timed_steps(step, batches, warmup, steps)
    rec = dict(kind="train_step", **cfg, world=world, strategy=strategy, dtype="bfloat16",
               params=train_step.param_count(cfg["layers"], cfg["hidden"], cfg["vocab"]),
               time_s=statistics.median(times), time_min_s=min(times), time_max_s=max(times), reps=len(times),
               peak_memory_bytes=peak, oom=False, tag="host_phases", allocated_before_bytes=before)
    rec.update(synced_phases(fwd, bwd, optim, batches, steps))
    prof = cpu_profile(fwd, bwd, optim, batches) if profile else None
    return rec, prof


def slowest(rec, dev):
    """Each timing field as the slowest GPU's (MEASUREMENTS.md: timing is the slowest GPU)."""
    import torch.distributed as dist
    keys = sorted(k for k in rec if k.endswith("_s") or k == "peak_memory_bytes")
    t = torch.tensor([float(rec[k]) for k in keys], device=dev, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    for k, v in zip(keys, t.tolist()):
        rec[k] = int(v) if k == "peak_memory_bytes" else v
    return rec


def run(args):
    world, rank, local_rank = 1, 0, None
    dev = torch.device("cuda", 0)
    strategies = ["single"]
    if args.pin_cpus:      # rank r on cores [r*k, (r+1)*k): no two ranks' threads share a core
        r = int(os.environ.get("LOCAL_RANK", 0))
        os.sched_setaffinity(0, range(r * args.pin_cpus, (r + 1) * args.pin_cpus))
    if args.dist:
        import torch.distributed as dist
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=120))
        world, rank = dist.get_world_size(), dist.get_rank()
        strategies = args.strategies.split(",")
    else:
        torch.cuda.set_device(0)
    info = common.device_info(world=world, suite="host_phases", pinned_cpus_per_rank=args.pin_cpus,
                              **({"nccl": common.nccl_version_str()} if args.dist else {}))
    rec = common.Recorder(args.out, info, enabled=(rank == 0))
    profiles = {}
    configs = train_step.parse_configs(args.configs) if args.configs else CONFIGS
    for t in configs:
        for st in strategies:
            cfg = train_step.cfg_dict(t)
            r, prof = measure(cfg, st, world, dev, local_rank, profile=t in PROFILED)
            common.free_memory()     # here, once measure's frame and the step closures are gone
            if args.dist:
                r = slowest(r, dev)
            if rank == 0:
                rec.add(r)
                if prof:
                    profiles[f"{st} {t}"] = prof
                log(f"  {st:16s} {t}: step {r['time_s'] * 1e3:.2f} ms; host fwd/bwd/opt "
                    + "/".join(f"{r[f'host_{p}_s'] * 1e3:.2f}" for p in PHASES) + " ms; gpu "
                    + "/".join(f"{r[f'gpu_{p}_s'] * 1e3:.2f}" for p in PHASES) + " ms")
    if rank == 0 and args.out:
        with open(args.out.replace(".json", "_cpu_profile.json"), "w") as f:
            json.dump({"info": info, "profiles": profiles}, f, indent=1)
    if args.dist:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--dist", action="store_true", help="one process per GPU under torch.distributed.run")
    ap.add_argument("--strategies", default="ddp,fsdp_full_shard")
    ap.add_argument("--configs", default=None,
                    help="explicit configs 'layers,hidden,heads,vocab,seq,micro_batch;...' instead of the built-in list")
    ap.add_argument("--pin-cpus", type=int, default=0, help="pin each rank to this many cores of its own")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
