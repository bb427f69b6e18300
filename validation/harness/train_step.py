"""The reference GPT training step of MEASUREMENTS.md, on one GPU or data-parallel.

Single GPU: imported by kernels.py (section `train`), or run directly:
    python3 validation/harness/train_step.py --out FILE --budget-s N
Several GPUs (one process per GPU):
    python3 -m torch.distributed.run --nproc_per_node=2 validation/harness/train_step.py \
        --dist --out FILE --budget-s N
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # pragma: no cover
    SDPBackend = sdpa_kernel = None


# --------------------------------------------------------------------------- model

class Block(nn.Module):
    """Pre-LN transformer block: LN, fused QKV (bias), causal flash SDPA, out proj (bias),
    residual; LN, MLP h->4h->h (biases, tanh-GELU), residual."""

    def __init__(self, hidden: int, heads: int, force_flash: bool = True):
        super().__init__()
        assert hidden % heads == 0
        self.hidden, self.heads = hidden, heads
        self.force_flash = force_flash
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=True)
        self.proj = nn.Linear(hidden, hidden, bias=True)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden, bias=True)
        self.fc2 = nn.Linear(4 * hidden, hidden, bias=True)

    def forward(self, x):
        b, s, h = x.shape
        nh = self.heads
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, nh, h // nh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        ctx = (sdpa_kernel(SDPBackend.FLASH_ATTENTION)
               if (self.force_flash and sdpa_kernel is not None) else contextlib.nullcontext())
        with ctx:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(a)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    """Token embedding (no positional embedding), `layers` blocks, final LN, untied head (no bias)."""

    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, force_flash: bool = True):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, force_flash) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def param_count(layers, hidden, vocab):
    per_block = 12 * hidden * hidden + 13 * hidden  # qkv,proj,fc1,fc2 weights+biases, 2 LNs
    return layers * per_block + 2 * vocab * hidden + 2 * hidden


def build_model(cfg: dict, dev) -> GPT:
    with torch.device(dev):
        return GPT(cfg["layers"], cfg["hidden"], cfg["heads"], cfg["vocab"], force_flash=(dev.type == "cuda"))


def loss_fn(logits, targets):
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# --------------------------------------------------------------------------- configs
# (layers, hidden, heads, vocab, seq, micro_batch). Same list on every GPU, so that
# configs that fit on an H200 but not on an H100 show up as oom on one and timed on the other.
SINGLE_CONFIGS = [
    (4, 1024, 16, 32768, 1024, 4),      # ~0.12B
    (4, 1024, 16, 32768, 1024, 16),
    (8, 1024, 16, 32768, 2048, 8),
    (12, 1536, 12, 50304, 2048, 4),     # ~0.49B
    (8, 2048, 16, 50304, 8192, 1),      # long sequence
    (24, 2048, 16, 50304, 2048, 8),     # ~1.4B
    (24, 2560, 20, 50304, 2048, 4),     # ~2.1B
    (16, 4096, 32, 50304, 2048, 2),     # ~3.6B, near the H100 limit
    (24, 4096, 32, 50304, 2048, 2),     # ~5.2B, > 80 GB, fits 141 GB
    (32, 4096, 32, 50304, 2048, 1),     # ~6.9B, > 80 GB, tight on 141 GB
    (32, 4096, 32, 50304, 2048, 4),     # ~6.9B, > 141 GB expected
    (12, 8192, 64, 50304, 2048, 1),     # ~10.5B, > 141 GB
]

# per-GPU micro-batch; both strategies run each config
DIST_CONFIGS = [
    (4, 1024, 16, 32768, 1024, 4),      # small model, short step
    (24, 2048, 16, 50304, 2048, 8),     # compute-heavy: comm hidden
    (8, 4096, 32, 50304, 512, 1),       # tiny micro-batch, big hidden: comm exposed
    (16, 4096, 32, 50304, 2048, 2),     # ~3.6B
    (32, 4096, 32, 50304, 2048, 2),     # ~6.9B: DDP expected OOM on 141 GB, FSDP fits
]

SMALL_CONFIGS = [(2, 64, 4, 512, 64, 2), (2, 128, 4, 1024, 128, 2)]


def cfg_dict(t):
    layers, hidden, heads, vocab, seq, mb = t
    return dict(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq=seq, micro_batch=mb)


# --------------------------------------------------------------------------- one config

def _make_batches(cfg, dev, n=2, seed=0):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    out = []
    for _ in range(n):
        idx = torch.randint(cfg["vocab"], (cfg["micro_batch"], cfg["seq"]), device=dev, generator=g)
        tgt = torch.randint(cfg["vocab"], (cfg["micro_batch"], cfg["seq"]), device=dev, generator=g)
        out.append((idx, tgt))
    return out


def _timed_steps(step, batches, warmup, steps):
    cuda = common.on_cuda()
    for i in range(warmup):
        step(*batches[i % len(batches)])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ev = []
    for i in range(steps):
        if cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            step(*batches[i % len(batches)])
            e.record()
            ev.append((s, e))
        else:
            t = time.perf_counter()
            step(*batches[i % len(batches)])
            ev.append(time.perf_counter() - t)
    if cuda:
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in ev]
        peak = int(torch.cuda.max_memory_allocated())
    else:
        times = ev
        peak = 0
    return times, peak


def setup_strategy(cfg, strategy, dev, local_rank=None):
    """Returns (model, optimizer, step_fn) for 'single', 'ddp' or 'fsdp_full_shard'."""
    model = build_model(cfg, dev)
    cuda = dev.type == "cuda"
    if strategy in ("single", "ddp"):
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        ac_dev = "cuda" if cuda else "cpu"

        def step(idx, tgt):
            with torch.autocast(ac_dev, dtype=torch.bfloat16):
                loss = loss_fn(model(idx), tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    elif strategy == "fsdp_full_shard":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.blocks:
            fully_shard(blk, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

        def step(idx, tgt):
            loss = loss_fn(model(idx), tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        raise ValueError(strategy)
    return model, opt, step


def run_config(cfg, strategy="single", world=1, dev=None, local_rank=None,
               warmup=3, steps=8, seed=0):
    """Run one config. Returns (record, error_string_or_None). On OOM the record has oom: true,
    time_s None. Memory is freed before returning (the frames holding the model die here)."""
    dev = dev or common.device()
    rec = dict(kind="train_step", **cfg, world=world, strategy=strategy, dtype="bfloat16",
               params=param_count(cfg["layers"], cfg["hidden"], cfg["vocab"]))
    err = None
    oom = False
    result = None
    try:
        result = _run_config_inner(cfg, strategy, dev, local_rank, warmup, steps, seed)
    except Exception as exc:  # noqa: BLE001
        oom = common.is_oom(exc)
        err = common.short_exc(exc)
        if not oom:
            import traceback
            traceback.print_exc(limit=4, file=sys.stdout)
    common.free_memory()
    if result is not None:
        times, peak = result
        rec.update(time_s=float(statistics.median(times)), time_min_s=float(min(times)),
                   time_max_s=float(max(times)), reps=len(times), peak_memory_bytes=peak, oom=False)
        toks = cfg["micro_batch"] * cfg["seq"] * world
        rec["tokens_per_s"] = toks / rec["time_s"]
        return rec, None, times
    if oom:
        rec.update(time_s=None, peak_memory_bytes=None, oom=True, error=err)
        return rec, err, None
    return None, err, None


def _run_config_inner(cfg, strategy, dev, local_rank, warmup, steps, seed):
    model, opt, step = setup_strategy(cfg, strategy, dev, local_rank)
    batches = _make_batches(cfg, dev, seed=seed)
    try:
        return _timed_steps(step, batches, warmup, steps)
    finally:
        del model, opt, step, batches


def steps_for(cfg):
    # keep every config short: fewer steps for big ones
    tokens = cfg["micro_batch"] * cfg["seq"]
    p = param_count(cfg["layers"], cfg["hidden"], cfg["vocab"])
    work = 6 * p * tokens
    if work > 5e13:
        return 2, 5
    if work > 5e12:
        return 3, 6
    return 3, 10


def single_suite(rec: common.Recorder, deadline: common.Deadline, small=False, configs=None):
    configs = configs or (SMALL_CONFIGS if small else SINGLE_CONFIGS)
    for t in configs:
        if not deadline.ok(reserve_s=10):
            log("  budget reached, skipping remaining train_step configs")
            break
        cfg = cfg_dict(t)
        w, s = steps_for(cfg)
        t0 = time.time()
        r, err, _ = run_config(cfg, "single", 1, warmup=w, steps=s)
        dt = time.time() - t0
        if common.on_cuda():
            log(f"    (allocated after cleanup: {torch.cuda.memory_allocated() / 2**30:.2f} GiB)")
        if r is None:
            rec.error(f"train_step {t}: {err}")
            continue
        rec.add(r)
        if r["oom"]:
            log(f"  train_step {t} OOM ({dt:.1f}s): {err[:120]}")
        else:
            log(f"  train_step {t} {r['time_s'] * 1e3:.1f} ms, peak {r['peak_memory_bytes'] / 2**30:.1f} GiB, "
                f"{r['tokens_per_s']:.0f} tok/s ({dt:.1f}s)")


# --------------------------------------------------------------------------- distributed

def dist_main(args):
    import torch.distributed as dist
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available() and not args.cpu
    if cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    info = common.device_info(world=world, nccl=common.nccl_version_str() if cuda else None,
                              suite="train_step_distributed")
    rec = common.Recorder(args.out, info, enabled=(rank == 0))
    t0 = time.time()
    strategies = args.strategies.split(",")
    plan = []
    if args.configs:
        # explicit configs (e.g. ones expected to OOM under DDP): every non-DDP run first,
        # DDP runs last, so an OOM that desynchronises the ranks can only cost the tail
        configs = parse_configs(args.configs)
        for st in sorted(strategies, key=lambda s: s == "ddp"):
            for t in configs:
                plan.append((t, st))
    else:
        configs = SMALL_CONFIGS if args.small else DIST_CONFIGS
        for t in configs[:-1]:
            for st in strategies:
                plan.append((t, st))
        # the last config is the one expected to OOM under DDP: run FSDP first, DDP last of all
        for st in sorted(strategies, key=lambda s: s == "ddp"):
            plan.append((configs[-1], st))

    for t, st in plan:
        go = torch.tensor([1 if time.time() - t0 < args.budget_s - 15 else 0], device=dev)
        dist.broadcast(go, 0)
        if not go.item():
            if rank == 0:
                log("  budget reached, stopping")
            break
        cfg = cfg_dict(t)
        w, s = steps_for(cfg)
        tc = time.time()
        r, err, times = run_config(cfg, st, world, dev=dev, local_rank=local_rank, warmup=w, steps=s, seed=rank)
        # agree across ranks: status 0 ok, 1 oom, 2 other error
        status = 0 if (r is not None and not r["oom"]) else (1 if r is not None else 2)
        st_t = torch.tensor([status], device=dev)
        dist.all_reduce(st_t, op=dist.ReduceOp.MAX)
        status_all = int(st_t.item())
        if status_all == 0:
            tt = torch.tensor(times, device=dev, dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)      # slowest GPU per step
            pk = torch.tensor([r["peak_memory_bytes"]], device=dev, dtype=torch.int64)
            dist.all_reduce(pk, op=dist.ReduceOp.MAX)      # largest memory over GPUs
            tl = tt.tolist()
            r.update(time_s=float(statistics.median(tl)), time_min_s=float(min(tl)),
                     time_max_s=float(max(tl)), peak_memory_bytes=int(pk.item()))
            r["tokens_per_s"] = cfg["micro_batch"] * cfg["seq"] * world / r["time_s"]
        elif status_all == 1:
            r = dict(kind="train_step", **cfg, world=world, strategy=st, dtype="bfloat16",
                     params=param_count(cfg["layers"], cfg["hidden"], cfg["vocab"]),
                     time_s=None, peak_memory_bytes=None, oom=True,
                     error=(err or "OOM on another rank"))
        else:
            r = None
        if rank == 0:
            dt = time.time() - tc
            if r is None:
                rec.error(f"train_step {st} {t}: {err}")
            else:
                rec.add(r)
                if r["oom"]:
                    log(f"  train_step {st} {t} OOM ({dt:.1f}s)")
                else:
                    log(f"  train_step {st} {t} {r['time_s'] * 1e3:.1f} ms, peak "
                        f"{r['peak_memory_bytes'] / 2**30:.1f} GiB, {r['tokens_per_s']:.0f} tok/s ({dt:.1f}s)")
        common.free_memory()
    dist.barrier()
    if rank == 0:
        log(f"done: {len(rec.records)} records, {len(rec.errors)} errors, {time.time() - t0:.1f}s")
    dist.destroy_process_group()


def parse_configs(text):
    """'L,hidden,heads,vocab,seq,mb;...' -> list of tuples"""
    out = []
    for part in text.split(";"):
        part = part.strip()
        if part:
            vals = tuple(int(x) for x in part.split(","))
            assert len(vals) == 6, part
            out.append(vals)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--dist", action="store_true")
    ap.add_argument("--strategies", default="ddp,fsdp_full_shard")
    ap.add_argument("--small", action="store_true", help="tiny configs (CPU dry run)")
    ap.add_argument("--configs", default=None,
                    help="explicit configs 'layers,hidden,heads,vocab,seq,micro_batch;...' instead of the built-in list")
    ap.add_argument("--cpu", action="store_true", help="use gloo/cpu even if CUDA is present")
    ap.add_argument("--pg-timeout-s", type=float, default=120)
    args = ap.parse_args()
    if args.dist:
        dist_main(args)
        return
    rec = common.Recorder(args.out, common.device_info(suite="train_step"))
    dl = common.Deadline(args.budget_s)
    dl.start_section("train")
    single_suite(rec, dl, small=args.small, configs=parse_configs(args.configs) if args.configs else None)
    log(f"done: {len(rec.records)} records, {len(rec.errors)} errors")


if __name__ == "__main__":
    main()
