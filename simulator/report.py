"""The simulate report: one step read without hovering (templates: simulator/htmlpage.py).

The page answers how long a step is (with its 80% band), what dominates it, whether it fits and
by how much, in printed numbers; then four titled figures, each with a table of the numbers it
draws: the time breakdown, memory per stage against HBM, the pipeline timeline with its
communication (simulator/trace.py's segments) and a roofline of one micro-batch's ops.
"""
from __future__ import annotations

from pathlib import Path

from simulator.htmlpage import Cell, Page, Section, Table, num, write_page
from simulator.memory import MEMORY_MARGIN
from simulator.palette import BREAKDOWN, MARKS, MEMORY, PASSES
from simulator.result import BOTTLENECK_NAMES, Result

GB = 1e9
MEMORY_KEYS = {"weights": "weights_bytes", "gradients": "gradients_bytes", "optimizer states": "optimizer_bytes",
               "activations": "activations_bytes", "logits / loss": "logits_bytes"}
SHORT = {"compute": "compute", "tp": "TP comm", "cp": "CP comm", "ep": "EP all-to-all", "dp": "DP comm",
         "pp": "PP send/recv", "bubble": "pipeline bubble", "optimizer": "optimizer step", "host": "host-bound"}


def memory_parts(m) -> dict:
    """Bytes of the fullest-device memory parts, by the names every report uses."""
    return {"weights": m.weights_bytes, "gradients": m.gradients_bytes, "optimizer states": m.optimizer_bytes,
            "activations": m.activations_bytes, "logits / loss": m.logits_bytes,
            "workspace + fragmentation": m.total_bytes - m.peak_allocated_bytes}


def plan_text(p) -> str:
    """The plan on one line (every degree and switch)."""
    return (f"dp={p.dp} tp={p.tp}{' (SP)' if p.sp else ''} pp={p.pp} vp={p.vp} cp={p.cp} ep={p.ep} "
            f"zero={p.zero_stage} recompute={p.recompute} mbs={p.mbs} gbs={p.gbs} seq={p.seq} {p.precision} "
            f"{p.pipeline_schedule} ({p.microbatches()} micro-batches)")


def inputs_of(r: Result, calibration_note: str = "") -> list:
    """The header rows: what was simulated."""
    return [("model", r.model), ("hardware", f"{r.num_gpus} x {r.accelerator} ({r.cluster})"),
            ("plan", plan_text(r.plan)), ("framework", r.plan.framework),
            ("calibration", calibration_note or r.calibration)]


def _verdict(r: Result) -> str:
    m, c = r.memory, r.confidence
    lo, hi = c.step_range_s
    fit = (f"fits: {m.total_bytes / GB:.1f} of {m.capacity_bytes / GB:.1f} GB on the fullest GPU (stage {m.stage}), "
           f"{m.headroom_bytes / GB:.1f} GB headroom" if m.fits else
           f"DOES NOT FIT: {m.total_bytes / GB:.1f} GB needed on stage {m.stage}, {m.capacity_bytes / GB:.1f} GB "
           f"of HBM, {-m.headroom_bytes / GB:.1f} GB over")
    if m.borderline:
        fit += f" (borderline: within {MEMORY_MARGIN:.0%} of the capacity, the memory model's margin)"
    return (f"A step takes {r.step_time_s:.3g} s (80% band {lo:.3g} - {hi:.3g} s); {r.bottleneck_sentence()}; "
            f"{fit}.")


def summary_of(r: Result) -> list:
    """The key numbers: (label, text, value, key) for the page's summary boxes."""
    m = r.memory
    share = r.breakdown[r.bottleneck] / r.step_time_s
    return [("step time", f"{r.step_time_s:.3f} s", r.step_time_s, "step_time_s"),
            ("80% band", r.confidence.short(), None),
            ("tokens/s", f"{r.tokens_per_s:,.0f}", r.tokens_per_s, "tokens_per_s"),
            ("MFU", f"{r.mfu:.1%}", r.mfu, "mfu"),
            ("dominant", f"{SHORT.get(r.bottleneck, r.bottleneck)} {share:.0%}",
             r.breakdown[r.bottleneck], f"time_breakdown_s.{r.bottleneck}"),
            ("memory (fullest GPU)", f"{m.total_bytes / GB:.1f} / {m.capacity_bytes / GB:.1f} GB",
             m.total_bytes, "memory.total_bytes"),
            ("headroom" if m.fits else "over HBM by", f"{abs(m.headroom_bytes) / GB:.1f} GB", m.headroom_bytes,
             "memory.headroom_bytes")]


def breakdown_section(r: Result) -> Section:
    """Horizontal bars of the exposed step time per category, values printed on the bars."""
    import plotly.graph_objects as go
    items = [(k, v) for k, v in sorted(r.breakdown.items(), key=lambda kv: -kv[1]) if v > 0]
    fig = go.Figure()
    for k, v in items:        # one trace per category: its legend words and colour match every report
        fig.add_trace(go.Bar(y=[SHORT.get(k, k)], x=[v], orientation="h", name=SHORT.get(k, k),
                             marker_color=BREAKDOWN.get(k, "#888"), text=[f"{v:.3g} s ({v / r.step_time_s:.0%})"],
                             textposition="auto", hovertext=[BOTTLENECK_NAMES.get(k, k)]))
    fig.update_layout(title=f"Step time breakdown: {r.step_time_s:.3g} s per step (exposed, critical path)",
                      xaxis_title="seconds per step", yaxis_title="category", yaxis_autorange="reversed",
                      template="plotly_white", height=120 + 42 * len(items), showlegend=False,
                      margin=dict(l=140, r=30, t=60, b=50))
    rows = [[Cell(SHORT.get(k, k)), num(v, ".4g", f"time_breakdown_s.{k}", " s"),
             num(v / r.step_time_s, ".1%")] for k, v in items]
    rows.append([Cell("step time"), num(r.step_time_s, ".4g", "step_time_s", " s"), Cell("100%")])
    return Section("Where the step goes", figure=fig,
                   tables=[Table("breakdown", ["category", "seconds", "share"], rows)],
                   note=f"Bottleneck: {r.bottleneck_sentence()}. Exposed seconds on the critical path; communication "
                        "hidden under compute is not counted here (the timeline below shows it).")


def memory_section(r: Result) -> Section:
    """Stacked memory per stage against HBM capacity (a labelled line), the fullest stage's table."""
    import plotly.graph_objects as go
    stages = r.stage_memory
    ys = [f"stage {i}" for i in range(len(stages))]
    fig = go.Figure()
    for name in MEMORY:
        vals = [memory_parts(m)[name] / GB for m in stages]
        if any(v > 0 for v in vals):
            fig.add_trace(go.Bar(name=name, y=ys, x=vals, orientation="h", marker_color=MEMORY[name],
                                 text=[f"{v:.1f}" if v >= 2 else "" for v in vals], textposition="inside"))
    cap = r.memory.capacity_bytes / GB
    fig.add_vline(x=cap, line_dash="dash", line_color=MARKS["HBM capacity"], line_width=2,
                  annotation_text=f"HBM capacity {cap:.1f} GB", annotation_position="top",
                  annotation_font_color=MARKS["HBM capacity"])
    top = max(cap, max(m.total_bytes for m in stages) / GB)
    fig.update_layout(barmode="stack", template="plotly_white", height=max(380, 230 + 36 * len(stages)),
                      title=f"Memory per GPU by pipeline stage against HBM ({'fits' if r.fits else 'DOES NOT FIT'})",
                      xaxis=dict(title="GB per GPU", range=[0, top * 1.08]), yaxis=dict(title="stage", autorange="reversed"),
                      legend=dict(traceorder="normal", orientation="h", y=-0.22, yanchor="top", x=0),
                      margin=dict(l=80, r=30, t=80, b=110))
    m = r.memory
    rows = [[Cell(k), num(v, ".2f", f"memory.{MEMORY_KEYS[k]}" if k in MEMORY_KEYS else "", " GB", GB)]
            for k, v in memory_parts(m).items()]
    rows += [[Cell("total"), num(m.total_bytes, ".2f", "memory.total_bytes", " GB", GB)],
             [Cell("HBM capacity"), num(m.capacity_bytes, ".2f", "memory.capacity_bytes", " GB", GB)],
             [Cell("headroom" if m.fits else "over by"), num(m.headroom_bytes, ".2f", "memory.headroom_bytes", " GB", GB)]]
    per_stage = [[Cell(f"stage {i}"), num(x.total_bytes, ".2f", f"stage_memory_total_bytes.{i}", " GB", GB),
                  num(x.headroom_bytes, ".2f", suffix=" GB", div=GB)] for i, x in enumerate(stages)]
    return Section("Does it fit", figure=fig, tables=[
        Table("memory", ["fullest GPU (stage %d)" % m.stage, "GB"], rows,
              f"{m.in_flight_microbatches:g} micro-batches of activations in flight"),
        Table("stage_memory", ["stage", "total", "headroom"], per_stage)])


def timeline_section(r: Result, max_bars: int = 6000) -> Section:
    """Pipeline timeline: passes and, on a row under each stage, its communication."""
    import plotly.graph_objects as go
    from simulator.trace import step_segments
    segs, flows = step_segments(r)
    color = {"forward": PASSES["forward"], "backward": PASSES["backward"], "optimizer": BREAKDOWN["optimizer"],
             "host": BREAKDOWN["host"], **{k: BREAKDOWN[k] for k in ("tp", "cp", "ep", "dp", "pp", "bubble")}}
    label = {"forward": "forward pass", "backward": "backward pass", "optimizer": "optimizer step",
             "host": "host-bound wait", "bubble": "idle (closed form beyond the replay)", "tp": "TP comm (exposed in pass)", "cp": "CP comm (exposed in pass)",
             "ep": "EP all-to-all (exposed in pass)", "dp": "DP comm", "pp": "PP send/recv"}
    row = {"compute": "stage {s}", "pp recv": None}
    fig = go.Figure()
    by_cat: dict[str, list] = {}
    for g in segs:
        name = row.get(g.track, "stage {s} comm")
        if name is None:
            continue
        by_cat.setdefault(g.cat, []).append((name.format(s=g.stage), g))
    for cat, items in by_cat.items():
        items = items[:max_bars]
        fig.add_trace(go.Bar(name=label.get(cat, cat), orientation="h", y=[y for y, _ in items],
                             x=[g.end_s - g.start_s for _, g in items], base=[g.start_s for _, g in items],
                             marker_color=color.get(cat, "#888"), marker_line_width=0,
                             hovertext=[g.name for _, g in items], hoverinfo="text+x"))
    order = [f"stage {s}{t}" for s in range(r.plan.pp) for t in ("", " comm")]
    fig.update_layout(barmode="overlay", template="plotly_white", bargap=0.25,
                      height=160 + 48 * len(order),
                      title=f"Pipeline timeline of one step: {r.plan.pp} stages, {r.plan.microbatches()} micro-batches, "
                            f"{r.plan.pipeline_schedule}",
                      xaxis=dict(title="seconds from the step's start", range=[0, r.step_time_s * 1.01]),
                      yaxis=dict(title="pipeline stage", categoryorder="array", categoryarray=order[::-1]),
                      legend=dict(orientation="h", y=-0.18 if r.plan.pp > 2 else -0.35, x=0),
                      margin=dict(l=110, r=30, t=60, b=60))
    rows = []
    for st in r.stages:
        per = st.forward_s + st.backward_s
        rows.append([Cell(f"stage {st.index}"), Cell(str(st.layers)), num(st.forward_s, ".3g", f"stages.{st.index}.forward_s", " ms", 1e-3),
                     num(st.backward_s, ".3g", f"stages.{st.index}.backward_s", " ms", 1e-3),
                     Cell(", ".join(f"{SHORT.get(k, k)} {v / per:.0%}" for k, v in st.groups.items() if v > 0 and per > 0))])
    info = [[Cell("PP transfer (one send)"), num(r.p2p_s, ".3g", "p2p_s", " ms", 1e-3)],
            [Cell("pipeline sends drawn"), Cell(str(len(flows)))],
            [Cell("DP comm per step (total)"), num(r.dp_comm_total_s, ".3g", "dp_comm_total_s", " s")],
            [Cell("pipeline (first forward to last backward)"), num(r.pipeline_s, ".4g", "pipeline_s", " s")]]
    return Section("Pipeline timeline with communication", figure=fig, wide=True, tables=[
        Table("stages", ["stage", "layers", "forward / mb", "backward / mb", "time per pass"], rows),
        Table("timeline", ["", ""], info)],
        note="Each stage's row shows its forward and backward passes; the row under it its communication: the "
             "exposed TP/CP/EP seconds of each pass (one slice per kind at the pass's end: the simulator costs how "
             "much, not in which order), the pipeline sends, and data-parallel communication (the part hidden "
             "under the last backward, then the exposed tail). The Perfetto trace (--trace) has the same slices "
             "with flow arrows between stages.")


def roofline_traces(fig, ops: dict, peak: float, bw: float, row=None, col=None, show_legend=True,
                    label: str = "") -> dict:
    """Add the roofline of ``ops`` ({part: [Op]}) to ``fig``: the peak/bandwidth roof and every
    kernel with counted FLOPs, coloured compute- or memory-bound by its side of the ridge. Returns
    the kernels without FLOPs ({name: [Op]}, bandwidth-bound) for :func:`bandwidth_traces`."""
    import plotly.graph_objects as go
    at = dict(row=row, col=col) if row else {}
    ridge = peak / bw
    placed, no_flops = {"compute-bound": [], "memory-bound": []}, []
    for part, lst in ops.items():
        for op in lst:
            if op.kind == "collective" or op.time_s <= 0 or op.bytes <= 0:
                continue
            if op.flops <= 0:
                no_flops.append((part, op))
            else:
                placed["compute-bound" if op.flops / op.bytes >= ridge else "memory-bound"].append((part, op))
    ai = [op.flops / op.bytes for v in placed.values() for _, op in v] or [ridge]
    lo, hi = min(min(ai) / 2, ridge / 30), max(max(ai) * 2, ridge * 4)
    fig.add_trace(go.Scatter(x=[lo, ridge, hi], y=[lo * bw, peak, peak], mode="lines+text", name="roofline",
                             line=dict(color=MARKS["roofline"], width=2), showlegend=show_legend, legendgroup="roof",
                             text=[f"HBM {bw / 1e12:.2f} TB/s", f"ridge {ridge:.0f} FLOP/B",
                                   f"peak {peak / 1e12:.0f} TFLOP/s{label}"],
                             textposition=["bottom right", "top left", "bottom left"]), **at)
    for bound, items in placed.items():
        if items:
            fig.add_trace(go.Scatter(
                x=[op.flops / op.bytes for _, op in items], y=[op.flops / op.time_s for _, op in items],
                mode="markers", name=bound, legendgroup=bound, showlegend=show_legend,
                marker=dict(color=MARKS[bound], size=8, opacity=0.8,
                            symbol=["circle" if op.kind == "gemm" else "diamond" for _, op in items]),
                hovertext=[f"{part}: {op.name} ({op.kind}, {op.phase}) {op.shape}<br>{op.flops:.3g} FLOP, "
                           f"{op.bytes:.3g} B, {op.time_s * 1e3:.3g} ms" for part, op in items]), **at)
    return {"placed": placed, "no_flops": no_flops}


def bandwidth_traces(fig, no_flops: list, bw: float, row=None, col=None, show_legend=True) -> None:
    """Kernels with no counted FLOPs (norms, activations, copies): attained HBM bandwidth against
    the HBM line, by bytes moved."""
    import plotly.graph_objects as go
    at = dict(row=row, col=col) if row else {}
    if not no_flops:
        return
    xs = [op.bytes for _, op in no_flops]
    fig.add_trace(go.Scatter(x=[min(xs) / 2, max(xs) * 2], y=[bw, bw], mode="lines+text", name="HBM bandwidth",
                             line=dict(color=MARKS["roofline"], width=2, dash="dot"), showlegend=False,
                             text=["", f"HBM {bw / 1e12:.2f} TB/s"], textposition="bottom left"), **at)
    fig.add_trace(go.Scatter(x=xs, y=[op.bytes / op.time_s for _, op in no_flops], mode="markers",
                             name="memory-bound (no FLOPs counted)", showlegend=show_legend,
                             marker=dict(color=MARKS["memory-bound"], size=8, symbol="square", opacity=0.8),
                             hovertext=[f"{part}: {op.name} ({op.kind}, {op.phase}) {op.bytes:.3g} B, "
                                        f"{op.time_s * 1e3:.3g} ms" for part, op in no_flops]), **at)


def roofline_section(r: Result, peak: float, bw: float) -> Section:
    """The step's kernels (one micro-batch, each layer kind, embedding, head) on the roofline."""
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=("Kernels with FLOPs: attained FLOP/s vs arithmetic intensity",
                                        "Kernels without FLOPs: attained HBM bandwidth"))
    got = roofline_traces(fig, r.ops, peak, bw, 1, 1)
    bandwidth_traces(fig, got["no_flops"], bw, 1, 2)
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP per HBM byte)", row=1, col=1)
    fig.update_yaxes(type="log", title_text="attained FLOP/s", row=1, col=1)
    fig.update_xaxes(type="log", title_text="HBM bytes moved per kernel", row=1, col=2)
    fig.update_yaxes(type="log", title_text="attained bytes/s", row=1, col=2)
    fig.update_layout(template="plotly_white", height=520, title="Roofline of one micro-batch's kernels "
                      f"(predicted times, {r.accelerator})", legend=dict(orientation="h", y=-0.2, x=0),
                      margin=dict(t=90))
    rows = []
    for name, items in (*got["placed"].items(), ("memory-bound (no FLOPs)", got["no_flops"])):
        t = sum(op.time_s for _, op in items)
        rows.append([Cell(name), Cell(str(len(items))), num(t, ".3g", suffix=" ms", div=1e-3)])
    return Section("Roofline of the step's kernels", figure=fig, wide=True,
                   tables=[Table("roofline", ["kernels", "count", "predicted time (one of each)"], rows)],
                   note="Each marker is one kernel of one micro-batch (per layer kind, embedding and head; forward, "
                        "backward and recompute) at its predicted time. Left of the ridge a kernel is memory-bound, "
                        "right of it compute-bound (circles: GEMMs). Kernels with no counted FLOPs are on the right "
                        "panel against the HBM bandwidth. Collectives are on the timeline, not here.")


def cost_section(cost: dict) -> Section:
    """GPU-hours and dollars per million tokens; days, dollars and energy for a token budget."""
    rows = [[Cell("GPU-hours per million tokens"), num(cost["gpu_hours_per_million_tokens"], ".3g",
                                                       "cost.gpu_hours_per_million_tokens")]]
    if cost.get("price_per_gpu_hour_usd"):
        rows.append([Cell(f"price per GPU-hour ({cost['price_source']})"),
                     num(cost["price_per_gpu_hour_usd"], ".2f", "cost.price_per_gpu_hour_usd", " USD")])
    for label, key, fmt, unit in (("tokens", "tokens", ".3g", ""), ("days", "days", ".1f", ""),
                                  ("GPU-hours", "gpu_hours", ",.0f", ""), ("cost", "cost_usd", ",.0f", " USD"),
                                  ("GPU energy (TDP bound)", "gpu_energy_kwh", ",.0f", " kWh")):
        if cost.get(key) is not None:
            rows.append([Cell(label), num(cost[key], fmt, f"cost.{key}", unit)])
    return Section("Cost to train", tables=[Table("cost", ["", ""], rows)])


def write_simulation_report(r: Result, path: str | Path, calibration_note: str = "", cost: dict | None = None,
                            peak_flops: float | None = None, hbm_Bps: float | None = None) -> None:
    """Write the report as one self-contained HTML file (plotly.js embedded, opens offline)."""
    page = Page(f"meshcast simulate: {r.model} on {r.num_gpus} x {r.accelerator}", "simulate",
                inputs=inputs_of(r, calibration_note), summary=summary_of(r), verdict=_verdict(r), verdict_ok=r.fits)
    page.add(breakdown_section(r))
    page.add(memory_section(r))
    if r.timeline is not None:
        page.add(timeline_section(r))
    if r.ops is not None and peak_flops and hbm_Bps:
        page.add(roofline_section(r, peak_flops, hbm_Bps))
    if cost:
        page.add(cost_section(cost))
    page.add(Section("Confidence", note=r.confidence.sentence))
    write_page(page, path)
