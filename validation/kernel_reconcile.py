"""Kernel-family reconciliation of profiled framework steps against meshcast's ops (issue #11).

For each ``plan_step`` record that carries a kernel profile (``profile_top``: the 30 kernels with
the most GPU time, [name, seconds, calls]; ``profile_kernel_s``: all kernels' summed seconds;
validation/harness/plan_step.py kernel_profile), the measured seconds are grouped into kernel
families by name, and meshcast's ops of the same step (one stage's ops per micro-batch times the
micro-batches, plus the data-parallel collectives and the optimizer step) into the same families.
Both sides are summed kernel seconds (a collective overlapped with compute counts in full), so
their totals compare with ``profile_kernel_s``, not with the step time.

    python -m validation.kernel_reconcile [FILE]   (default: validation/measurements/h200x2_plan_profile.json)

Measured "other" is everything outside the named families, including the kernels below the top
30 (their names are not recorded) and the optimizer's kernels that are not foreach kernels (grad
norm, the fp32-to-bf16 parameter copy); the optimizer is also compared with the record's
synchronized optimizer phase (``synced_opt_s``), which holds all of them. Attribution caveats: the measured GEMM family holds the
attention batched GEMMs, the linear layers and the logits alike; ``cast_to_fp32`` also holds the
loss's ``logits.float()``; ``softmax_bwd_mul`` is every vectorized fp32 binary kernel
(``vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float, ...>``), which in these
steps is the softmax backward's ``grad * output`` (one call per layer and micro-batch).
"""
from __future__ import annotations

import re
import sys
from dataclasses import replace

from hardware_specs.catalog import Hardware
from simulator.calibration import calibration_for
from simulator.compute import unfused_torch_attention_parts
from simulator.engine import _step
from validation.hardware import hardware_for
from validation.predict import plan_model, record_plan
from validation.records import load_measurements

DEFAULT_FILE = "validation/measurements/h200x2_plan_profile.json"

# measured kernel name -> family, first match wins
MEASURED_FAMILIES = (
    ("nccl", r"^ncclDevKernel|^ncclKernel"),
    ("gemm", r"nvjet|gemm|cutlass|xmma|cublas"),
    ("optimizer", r"multi_tensor_apply_kernel"),
    ("mask", r"masked_fill|::masked"),
    ("cast_to_fp32", r"unrolled_elementwise_kernel<at::native::direct_copy_kernel"),
    ("cast_to_bf16", r"bfloat16_copy_kernel"),
    ("softmax_fwd", r"softmax_warp_forward|SoftMaxForward"),
    ("softmax_bwd", r"softmax_warp_backward|SoftMaxBackward"),
    ("softmax_bwd_mul", r"vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float"),
    ("main_grad_add", r"unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>"),
    ("memcpy", r"^Memcpy DtoD"),
)
FAMILIES = [f for f, _ in MEASURED_FAMILIES] + ["other"]

# torch-native (framework torchtitan) steps: kernel classes by TensorIterator path, first match wins
TORCH_MEASURED_FAMILIES = (
    ("nccl", r"^ncclDevKernel|^ncclKernel"),
    ("gemm", r"nvjet|gemm|cutlass|xmma|cublas"),
    ("attention", r"flash|fmha|cudnn"),
    ("optimizer", r"multi_tensor_apply_kernel"),
    # autocast casts and their gradients: fp32 -> bf16 (vectorized bfloat16_copy_kernel) and the
    # dtype-converting direct_copy (unrolled_elementwise_kernel: bf16 -> fp32, the loss's .float())
    ("casts", r"bfloat16_copy_kernel|unrolled_elementwise_kernel<at::native::direct_copy_kernel"),
    # same-dtype fp32 adds: gradient sums in backward, AccumulateGrad over micro-batches
    ("fp32_add", r"vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>"),
    # RoPE's fp32 products, sums, negation, strided copies, bf16 gradient sums, zero fills
    ("rope", r"gpu_kernel_impl(_nocast)?<at::native::BinaryFunctor<float|neg_kernel|"
             r"gpu_kernel_impl_nocast<at::native::direct_copy|CUDAFunctor_add<c10::BFloat16>|FillFunctor"),
    ("norm", r"layer_norm|GammaBeta|rms_norm"),
    # DDP: each gradient into its bucket scaled by 1/world (mul_out), the bucket back (memcpy)
    ("ddp_bucket", r"AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor|^Memcpy DtoD"),
    ("mixed_add", r"unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>"),
)
TORCH_FAMILIES = [f for f, _ in TORCH_MEASURED_FAMILIES] + ["other"]


def _tables(rec: dict) -> tuple[tuple, list[str]]:
    """(measured name patterns, families) for the record's framework."""
    if rec.get("framework") == "torchtitan":
        return TORCH_MEASURED_FAMILIES, TORCH_FAMILIES
    return MEASURED_FAMILIES, FAMILIES


def measured_families(rec: dict) -> dict[str, float]:
    """Seconds per family of one profiled step; ``other`` takes the rest of profile_kernel_s."""
    table, families = _tables(rec)
    out = dict.fromkeys(families, 0.0)
    for name, seconds, _calls in rec["profile_top"]:
        fam = next((f for f, rx in table if re.search(rx, name)), "other")
        out[fam] += seconds
    out["other"] += rec["profile_kernel_s"] - sum(s for _, s, _ in rec["profile_top"])
    return out


def _torch_op_family(op) -> str:
    """The torch-native family of one of meshcast's ops (by kind and name)."""
    if op.kind in ("collective", "gemm", "attention"):
        return {"collective": "nccl"}.get(op.kind, op.kind)
    for key, fam in (("autocast_casts", "casts"), ("grad_sums", "fp32_add"), ("grad_accumulate", "fp32_add"),
                     ("rope", "rope"), ("norm", "norm"), ("residual", "mixed_add")):
        if key in op.name:
            return fam
    return "other"


def _op_family(op) -> str:
    if op.kind == "collective":
        return "nccl"
    if op.kind == "gemm":
        return "gemm"
    if op.name.endswith("main_grad_accumulate"):
        return "main_grad_add"
    return "other"


def modelled_families(rec: dict, hw: Hardware, cal) -> dict[str, float]:
    """meshcast's kernel seconds per family for the record's step (first pipeline stage)."""
    plan, model = record_plan(rec), plan_model(rec)
    st = _step(model, replace(hw, num_gpus=rec["world"]), plan, cal)
    p, ctx = st.plan, st.ctx
    m = p.microbatches()
    kinds, _norec, emb, head, _, _ = st.lowered
    dense = kinds["dense"]
    torch_native = rec.get("framework") == "torchtitan"
    out = dict.fromkeys(_tables(rec)[1], 0.0)
    stage = st.ranges[0]
    parts = [(dense.ops, len(stage) * m), (emb.ops, m)]
    if p.pp == 1:
        parts.append((head.ops, m))
    for ops, n in parts:
        for op in ops:
            if op.kind == "attention" and p.attention == "unfused_torch":
                batch, heads, s, d, _ = op.shape
                kv = max(1, model.kv_heads // p.tp)
                direction = "bwd" if op.phase == "bwd" else "fwd"
                for fam, t in unfused_torch_attention_parts(ctx.dev, batch, heads, kv, s, s, d, direction):
                    out[fam if fam not in ("small", "layout_copy") else "other"] += t * n
                continue
            out[_torch_op_family(op) if torch_native else _op_family(op)] += op.time_s * n
    out["nccl"] += st.dp_total
    out["optimizer"] += st.optimizer
    return out


def profiled_steps(path: str, field: str) -> tuple[Hardware, object, list[dict]]:
    """(hardware, calibration, records) of a plan-step file: its ``plan_step`` records that carry
    ``field`` (``profile_top``, ``gemm_calls``), with the file's hardware and its profile."""
    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    return hw, cal, [r for r in mf.records if r.get("kind") == "plan_step" and r.get(field)]


def reconcile(path: str = DEFAULT_FILE) -> list[dict]:
    """Per profiled record: its label, measured and modelled seconds per family, and totals."""
    hw, cal, recs = profiled_steps(path, "profile_top")
    rows = []
    for rec in recs:
        label = f"{rec['name']} s{rec['seq']} tp{rec['tp']} dp{rec['dp']} pp{rec['pp']}"
        meas, mod = measured_families(rec), modelled_families(rec, hw, cal)
        st = _step(plan_model(rec), replace(hw, num_gpus=rec["world"]), record_plan(rec), cal)
        rows.append({"label": label, "measured": meas, "modelled": mod, "step_s": rec["time_s"],
                     "busy_s": rec["profile_busy_s"], "kernel_s": rec["profile_kernel_s"],
                     "predicted_step_s": st.step, "synced_opt_s": rec.get("synced_opt_s")})
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        lines.append(f"{r['label']}: step {r['step_s'] * 1e3:.1f} ms measured, {r['predicted_step_s'] * 1e3:.1f} ms "
                     f"predicted; GPU busy {r['busy_s'] * 1e3:.1f} ms, kernels {r['kernel_s'] * 1e3:.1f} ms")
        lines.append(f"  {'family':16s} {'measured ms':>12s} {'modelled ms':>12s} {'model-meas':>11s}")
        for f in r["measured"]:
            a, b = r["measured"][f] * 1e3, r["modelled"][f] * 1e3
            lines.append(f"  {f:16s} {a:12.1f} {b:12.1f} {b - a:+11.1f}")
        a, b = sum(r["measured"].values()) * 1e3, sum(r["modelled"].values()) * 1e3
        lines.append(f"  {'total':16s} {a:12.1f} {b:12.1f} {b - a:+11.1f}")
        if r.get("synced_opt_s"):   # the optimizer phase timed on its own (host_phases): all its kernels
            a, b = r["synced_opt_s"] * 1e3, r["modelled"]["optimizer"] * 1e3
            lines.append(f"  {'(optimizer phase)':16s} {a:12.1f} {b:12.1f} {b - a:+11.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(format_rows(reconcile(argv[0] if argv else DEFAULT_FILE)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
