"""``meshcast simulate``: predict one training step of a model on a cluster under a plan."""
from __future__ import annotations

import argparse

import sys

from meshcast.commands.common import (add_export_options, add_import_options, add_model_cluster, add_plan_options,
                                      check_outputs, emit_export, emit_json, fmt_bytes, fmt_time, imported_plan,
                                      load_inputs, plan_from_args)


def framework_line(p) -> str:
    """The framework, whether it is the default, and what its ZeRO stage means there."""
    from simulator.frameworks import DEFAULT_FRAMEWORK, get_framework
    fw = get_framework(p.framework)
    default = " (the default; --framework chooses)" if p.framework == DEFAULT_FRAMEWORK else ""
    return f"{fw.name}{default}; ZeRO-{p.zero_stage} = {fw.zero[p.zero_stage].means}; attention {p.attention}"


def add_parser(sub) -> None:
    """Register the simulate subcommand."""
    p = sub.add_parser("simulate", help="predict step time, throughput, MFU and memory of one plan",
                       description="Predict one training step: step time, tokens/s, MFU/HFU, memory per "
                                   "device (fits or not), the time breakdown and the bottleneck.")
    add_model_cluster(p)
    add_plan_options(p)
    add_import_options(p)
    add_export_options(p.add_argument_group("launch config"))
    g = p.add_argument_group("cost to train")
    g.add_argument("--tokens", type=float, metavar="N", help="token budget, e.g. 15e12: prints days, dollars and energy")
    g.add_argument("--price", type=float, metavar="USD", help="USD per GPU-hour (default: the accelerator's catalog price)")
    g.add_argument("--pue", type=float, default=1.0, metavar="X", help="power usage effectiveness for facility energy (default 1.0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-o", "--output", metavar="FILE", help="write a self-contained HTML report (plotly)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace JSON of one step (docs/traces.md)")
    p.add_argument("--trace-ops", action="store_true",
                   help="in --trace, nest every layer and kernel of micro-batch 0 in its passes")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Simulate one plan and print (or write) the result."""
    from simulator import simulate
    from simulator.costing import train_cost

    check_outputs(args)
    if args.trace_ops and not args.trace:
        from hardware_specs.errors import MeshcastError
        raise MeshcastError("trace-ops", "adds the per-op level to a trace: give --trace FILE as well")
    if getattr(args, "plan", None) and imported_source(args):
        from hardware_specs.errors import MeshcastError
        raise MeshcastError("plan", "give --plan FILE or a launch config (--from-...), not both")
    model, hw, cal, cal_note = load_inputs(args)
    base, import_notes = imported_plan(args, model, hw.num_gpus)
    plan = plan_from_args(args, base)
    if plan.num_gpus is not None and args.gpus is None and plan.num_gpus != hw.num_gpus:
        model, hw, cal, cal_note = load_inputs(args, plan)
    for note in import_notes:
        print(f"note: {note}", file=sys.stderr)
    if args.export:   # fail before simulating: a Megatron plan is no torchtitan config
        from simulator.frameworks.launch import require_format
        require_format(plan, args.export, model)
    want_timeline = bool(args.output or args.trace)
    result = simulate(model, hw, plan, cal, with_timeline=want_timeline,
                      with_ops=bool(args.output or args.trace_ops))
    cost = train_cost(result, args.tokens, args.price, args.pue, accelerator=hw.accelerator)
    if args.output:
        from simulator.plan import precision_peak_dtype
        from simulator.report import write_simulation_report
        acc = hw.accelerator
        write_simulation_report(result, args.output, cal_note, cost,
                                acc.peak_flops(precision_peak_dtype(result.plan.precision)), acc.hbm_bandwidth_Bps)
    if args.trace:
        from simulator.trace import write_chrome_trace
        write_chrome_trace(result, args.trace, ops=args.trace_ops)
    if args.json:
        if result.fits:   # a launch config of a plan that would run out of memory is not written
            emit_export(args, model, result.plan, to_stdout=False)
        doc = {**result.to_dict(), "calibration_note": cal_note, "cost": cost}
        if args.export and not args.export_file and result.fits:
            from simulator.frameworks.launch import export_config
            cfg = export_config(model, result.plan)
            doc["launch_config"] = {"format": cfg.format, "text": cfg.text, "notes": list(cfg.notes)}
        emit_json(doc, "simulate")
    else:
        print(format_result(result))
        print(f"calibration: {cal_note}")
        print(format_cost(cost))
        if result.fits:
            emit_export(args, model, result.plan)
    if not result.fits:
        print(f"error: memory: {does_not_fit_reason(result, bool(args.export))}", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


EXIT_DOES_NOT_FIT = 3     # docs/errors.md: the prediction is printed, the plan would run out of memory


def memory_parts(m) -> dict[str, float]:
    """Bytes of the fullest device by part (a :class:`simulator.memory.MemoryBreakdown`), in report order."""
    return {"weights": m.weights_bytes, "gradients": m.gradients_bytes, "optimizer states": m.optimizer_bytes,
            "activations": m.activations_bytes, "logits / loss": m.logits_bytes,
            "workspace + fragmentation": m.total_bytes - m.peak_allocated_bytes}


def memory_levers(part: str, p) -> str:
    """What shrinks ``part`` of a device's memory under plan ``p``, leaving out what it already uses
    (docs/cost_model.md, memory)."""
    split = "a larger tp, pp" + (" or ep" if p.ep > 1 else "")
    if part == "weights":
        return f"shard the weights: {split}" + ("" if p.zero_stage >= 3 else ", or ZeRO-3 / FSDP")
    if part == "gradients":
        return f"shard the gradients: {split}" + ("" if p.zero_stage >= 2 else ", or ZeRO-2 / -3")
    if part == "optimizer states":
        sharded = (f"(sharded over dp={p.dp} already) a larger dp, {split}" if p.zero_stage >= 1 and p.dp > 1
                   else f"{split}, or data parallelism with the distributed optimizer (ZeRO-1)")
        return f"shard the optimizer states: {sharded}"
    if part == "activations":
        levers = ([] if p.recompute == "full" else ["recompute (selective or full)"]) + \
                 (["a smaller micro-batch"] if p.mbs > 1 else []) + \
                 (["sequence parallelism"] if p.tp > 1 and not p.sp else ["a larger tp with sequence parallelism"]) + \
                 ["cp", "pp"]
        return "shrink the activations: " + ", ".join(levers)
    if part == "logits / loss":
        return "shrink the logits: " + ("a smaller micro-batch, " if p.mbs > 1 else "") + "tp (vocabulary-parallel) or pp"
    return "a smaller micro-batch" if p.mbs > 1 else "fewer tensors in flight"


def does_not_fit_reason(r, export: bool = False) -> str:
    """One sentence for a plan whose fullest device runs out of memory: what it needs against what
    the device has, its largest part and what shrinks that part (GB = 1e9 bytes, as the report)."""
    m = r.memory
    parts = memory_parts(m)
    largest = max(parts, key=parts.get)
    borderline = " (within the memory model's margin: the verdict may go either way)" if m.borderline else ""
    unexported = "; no launch config exported" if export else ""
    return (f"the plan does not fit: stage {m.stage} needs {fmt_bytes(m.total_bytes)} per GPU, the "
            f"{r.accelerator} has {fmt_bytes(m.capacity_bytes)}{borderline}; the largest part is {largest} "
            f"({fmt_bytes(parts[largest])}): {memory_levers(largest, r.plan)}; or more GPUs; `meshcast plan` searches "
            f"for a plan that fits{unexported}")


def imported_source(args: argparse.Namespace) -> bool:
    """Whether a launch config was given (--from-megatron-args, --from-torchtitan, --from-deepspeed)."""
    return bool(args.from_megatron_args or args.from_torchtitan or args.from_deepspeed)


def format_cost(c: dict) -> str:
    """Cost lines: per million tokens always; days, dollars and energy with a token budget."""
    price = f"${c['price_per_gpu_hour_usd']:.2f}/GPU-hour ({c['price_source']})" if c["price_per_gpu_hour_usd"] else "no price"
    lines = [f"cost: {c['gpu_hours_per_million_tokens']:.2f} GPU-hours per million tokens; {price}"]
    if c["days"] is not None:
        usd = f", ${c['cost_usd']:,.0f}" if c["cost_usd"] is not None else ""
        kwh = f", {c['gpu_energy_kwh'] / 1e3:,.0f} MWh GPU energy (TDP bound)" if c["gpu_energy_kwh"] else ""
        lines.append(f"  {c['tokens']:.3g} tokens: {c['days']:.1f} days, {c['gpu_hours']:,.0f} GPU-hours{usd}{kwh}")
    return "\n".join(lines)


def confidence_lines(r) -> list[str]:
    """The prediction's 80% band (step, tokens/s, MFU) and the sentence saying what it rests on."""
    c = r.confidence
    lo, hi = c.step_range_s
    return [f"  80% band         step {fmt_time(lo)} - {fmt_time(hi)}, {c.tokens_per_s_range[0]:,.0f} - "
            f"{c.tokens_per_s_range[1]:,.0f} tokens/s, MFU {c.mfu_range[0]:.1%} - {c.mfu_range[1]:.1%}",
            f"  confidence       {c.sentence}"]


def format_result(r) -> str:
    """The human-readable summary of a simulation (a :class:`simulator.result.Result`)."""
    from simulator.memory import MEMORY_MARGIN
    from simulator.result import BOTTLENECK_NAMES

    p = r.plan
    mem = r.memory
    lines = [
        f"{r.model} on {r.num_gpus} x {r.accelerator} ({r.cluster}), calibration: {r.calibration}",
        f"plan: dp={p.dp} tp={p.tp}{' (SP)' if p.sp else ''} pp={p.pp} vp={p.vp} cp={p.cp} ep={p.ep} "
        f"zero={p.zero_stage} recompute={p.recompute} mbs={p.mbs} gbs={p.gbs} seq={p.seq} "
        f"{p.precision} {p.pipeline_schedule} ({p.microbatches()} micro-batches)",
        f"framework: {framework_line(p)}",
        *([f"layers: {r.split_note}"] if r.split_note else []),
        "",
        f"  step time        {fmt_time(r.step_time_s)}",
        *([f"  SM clock         {r.clock_fraction:.1%} of max under the power limit (at full clock the step "
           f"would take {fmt_time(r.full_clock_step_time_s)}; docs/cost_model.md \"Clocks and power\")"]
          if r.clock_fraction < 1.0 else []),
        f"  throughput       {r.tokens_per_s:,.0f} tokens/s ({r.tokens_per_s / r.num_gpus:,.0f} per GPU)",
        f"  model TFLOP/s    {r.tflops_per_gpu:.1f} per GPU",
        f"  MFU / HFU        {r.mfu:.1%} / {r.hfu:.1%} (of dense bf16 peak)",
        *([f"  (over 100%: the FLOP count (Megatron's convention, simulator/flops.py) takes causal attention as "
           f"the full s x s product, about twice what the kernels compute; at long sequences it exceeds the work done)"]
          if max(r.mfu, r.hfu) > 1.0 and p.precision in ("bf16", "fp16") else []),
        *confidence_lines(r),
        "",
        f"memory per device (stage {mem.stage}, the fullest): {fmt_bytes(mem.total_bytes)} of "
        f"{fmt_bytes(mem.capacity_bytes)} -> {'FITS' if mem.fits else 'DOES NOT FIT'} "
        f"(headroom {fmt_bytes(mem.headroom_bytes)})",
        *([f"  borderline: within {MEMORY_MARGIN:.0%} of the capacity, the memory model's margin (peak memory within "
           f"~5% on measured plan steps; the allocator reserves 1-9% more): the verdict may go either way"]
          if mem.borderline else []),
    ]
    for label, value in memory_parts(mem).items():
        if label == "activations":
            label = f"activations ({mem.in_flight_microbatches:g} micro-batches in flight)"
        lines.append(f"  {label:<44} {fmt_bytes(value):>10}")
    lines += ["", "time breakdown (exposed, critical path):"]
    for key, value in sorted(r.breakdown.items(), key=lambda kv: -kv[1]):
        if value > 0:
            lines.append(f"  {BOTTLENECK_NAMES.get(key, key):<52} {fmt_time(value):>10} {value / r.step_time_s:6.1%}")
    lines += ["", f"bottleneck: {r.bottleneck_sentence()}"]
    return "\n".join(lines)
