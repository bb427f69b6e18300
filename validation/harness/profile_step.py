"""Where the GPU time of one reference training step goes: torch.profiler over a few steps,
kernels grouped into families (GEMM, flash attention, norms, elementwise, optimizer, ...), so
the simulator's op list can be checked family by family. Single GPU.

    python3 validation/harness/profile_step.py --configs "24,2048,16,50304,2048,8;4,1024,16,32768,1024,4" --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step  # noqa: E402

FAMILIES = (  # (family, substrings of the kernel name), first match wins
    ("flash_attention", ("flash", "fmha", "attention")),
    ("gemm", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "matmul", "wgmma")),
    ("layernorm", ("layer_norm", "layernorm")),
    ("softmax_loss", ("softmax", "nll_loss", "cross_entropy", "log_softmax")),
    ("optimizer", ("adam", "multi_tensor", "fused_adam")),
    ("cast_copy", ("copy", "cast", "convert")),
    ("reduce", ("reduce", "sum_kernel")),
    ("elementwise", ("elementwise", "vectorized", "gelu", "add", "mul", "fill")),
    ("embedding", ("embedding", "index", "scatter", "gather", "sort", "radix")),
)


def family(name: str) -> str:
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam
    return "other"


def profile_config(cfg: dict, steps: int = 3) -> dict:
    dev = torch.device("cuda")
    model, opt, step = train_step.setup_strategy(cfg, "single", dev)
    batches = train_step._make_batches(cfg, dev)
    for i in range(3):
        step(*batches[i % 2])
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(steps):
            step(*batches[i % 2])
        torch.cuda.synchronize()
    fams: dict = {}
    kernels: dict = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        f = family(e.name)
        fams[f] = fams.get(f, 0.0) + us / steps
        k = kernels.setdefault(e.name[:120], [0, 0.0])
        k[0] += 1
        k[1] += us / steps
    del model, opt
    torch.cuda.empty_cache()
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]
    return {"config": cfg, "gpu_us_per_step_by_family": fams, "gpu_us_per_step": sum(fams.values()),
            "top_kernels": [{"name": n, "calls_per_step": c / steps, "us_per_step": t} for n, (c, t) in top]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", required=True, help="layers,hidden,heads,vocab,seq,micro_batch;...")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = {"info": {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__}, "profiles": []}
    for t in train_step.parse_configs(args.configs):
        cfg = train_step.cfg_dict(t)
        p = profile_config(cfg)
        out["profiles"].append(p)
        print(json.dumps({"config": cfg, "total_ms": p["gpu_us_per_step"] / 1e3,
                          "by_family_ms": {k: round(v / 1e3, 2) for k, v in sorted(p["gpu_us_per_step_by_family"].items(),
                                                                                    key=lambda kv: -kv[1])}}))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "step_profiles.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
