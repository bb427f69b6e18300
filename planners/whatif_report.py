"""What-if output: the text table and the self-contained HTML report.

The report has one plotly figure per question: throughput and MFU against the swept variable;
the step-time breakdown as stacked bars per point; the memory of the fullest device per point
against its capacity; the roofline of one micro-batch's ops on each accelerator (arithmetic
intensity = FLOPs / HBM bytes against attained FLOP/s = FLOPs / predicted time, with the
accelerator's peak and HBM-bandwidth lines); and the days, dollars and energy to train.
plotly.js is embedded once, so the page opens offline.
"""
from __future__ import annotations

from pathlib import Path

from planners.whatif import Point, Sweep, describe_plan
from simulator.costing import ENERGY_NOTE
from simulator.result import BOTTLENECK_NAMES

STATUS_TEXT = {"ok": "ok", "does_not_fit": "DOES NOT FIT", "invalid": "invalid", "no_plan": "no plan",
               "error": "error"}
BREAKDOWN_ORDER = ("compute", "tp", "cp", "ep", "pp", "bubble", "dp", "optimizer")


def _num(v: float, digits: int = 3) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.{digits}g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.{digits}g}k"
    return f"{v:.{digits}g}"


def _money(v) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"${v / 1e6:.2f}M"
    if v >= 1e3:
        return f"${v / 1e3:.1f}k"
    return f"${v:.2f}"


def _energy(kwh) -> str:
    if kwh is None:
        return "-"
    return f"{kwh / 1e3:,.1f} MWh" if kwh >= 1e3 else f"{kwh:,.1f} kWh"


def headline(s: Sweep) -> str:
    """One line naming the study: model, cluster, GPUs, swept variables and plan mode."""
    b = s.base
    mode = ("re-planned at each point (best plan, throughput)" if b.replan
            else f"fixed plan: {describe_plan_text(b)}")
    axes = " x ".join(f"{a.name} ({len(a.levels)})" for a in s.axes)
    return (f"what if: {b.model} on {b.cluster}" + (f", {b.gpus} GPUs" if b.gpus else "") +
            f"; sweep {axes}; {mode}")


def describe_plan_text(b) -> str:
    """A compact text form of a plan for the table."""
    p = b.plan
    parts = [f"tp={p.tp}", f"pp={p.pp}"]
    for name, default in (("vp", 1), ("cp", 1), ("ep", 1)):
        if getattr(p, name) != default:
            parts.append(f"{name}={getattr(p, name)}")
    if p.dp is not None:
        parts.append(f"dp={p.dp}")
    parts += [f"mbs={p.mbs}", f"gbs={p.gbs}" if p.gbs else "gbs=dp*mbs", f"seq={p.seq or 'model'}"]
    if p.zero_stage is not None:
        parts.append(f"zero={p.zero_stage}")
    if p.framework != "megatron-core":
        parts.append(f"framework={p.framework}")
    if p.recompute != "none":
        parts.append(f"recompute={p.recompute}")
    return " ".join(parts)


def format_text(s: Sweep) -> str:
    """The table: one row per point; points that failed say why."""
    tokens = s.base.tokens
    cols = ["point", "plan", "step", "80% band", "tokens/s", "/GPU", "MFU", "mem GB", "vs #0", "bottleneck"]
    cols += ["days", "cost", "GPU energy"] if tokens else ["$/Mtok"]
    rows = []
    first = next((p for p in s.points if p.status == "ok"), None)
    for p in s.points:
        r = p.result
        if r is None:
            rows.append([p.label, f"{STATUS_TEXT[p.status]}: {p.reason}"])
            continue
        mark = "" if p.status == "ok" else " !"
        rel = f"{r.tokens_per_s / first.result.tokens_per_s:.2f}x" if first is not None else "-"
        row = [p.label, describe_plan(r.plan), f"{r.step_time_s:.3f}s", r.confidence.short(), _num(r.tokens_per_s),
               f"{r.tokens_per_s / r.num_gpus:,.0f}", f"{r.mfu:.1%}",
               f"{r.memory.total_bytes / 1e9:.1f}/{r.memory.capacity_bytes / 1e9:.0f}{mark}", rel,
               f"{r.bottleneck} {r.breakdown[r.bottleneck] / r.step_time_s:.0%}"]
        c = p.cost or {}
        if tokens:
            row += [f"{c['days']:.1f}" if c.get("days") is not None else "-", _money(c.get("cost_usd")),
                    _energy(c.get("gpu_energy_kwh"))]
        else:
            row += [_money(c.get("usd_per_million_tokens"))]
        rows.append(row)
    widths = [max(len(cols[i]), *(len(r[i]) for r in rows if len(r) > 2)) if any(len(r) > 2 for r in rows)
              else len(cols[i]) for i in range(len(cols))]
    lines = [headline(s), ""]
    lines.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(cols)))
    for r in rows:
        if len(r) == 2:
            lines.append(f"{r[0].ljust(widths[0])}  {r[1]}")
        else:
            lines.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(r)))
    notes = []
    for p in s.points:
        if p.status == "does_not_fit":
            notes.append(f"{p.label}: {p.reason}")
        for n in p.notes:
            notes.append(f"{p.label}: {n}")
        if p.result is not None and p.result.confidence.extrapolated:
            notes.append(f"{p.label}: {p.result.confidence.sentence}")
    cals = {p.calibration for p in s.points if p.calibration}
    if len(cals) > 1:
        notes.append("calibration differs between points (each accelerator's own profile; --calibration NAME "
                     "holds it fixed to compare datasheets alone):")
        seen = set()
        for p in s.points:
            if p.calibration and p.calibration not in seen:
                seen.add(p.calibration)
                notes.append(f"  {p.label}: {p.calibration}")
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    lines += ["", "80% band: the range the measured step falls in 4 times in 5 for predictions of this regime "
                  "(split-conformal, docs/confidence.md); '!' marks extrapolated points (see notes)."]
    if tokens:
        lines += ["", f"cost to train {tokens:.3g} tokens at the catalog's indicative price per GPU-hour "
                      f"(or --price); energy: {ENERGY_NOTE}"
                      + (f"; PUE {s.base.pue:g}" if s.base.pue != 1 else "") + "."]
    counts = {}
    for p in s.points:
        counts[p.status] = counts.get(p.status, 0) + 1
    summary = ", ".join(f"{n} {STATUS_TEXT[k]}" for k, n in counts.items())
    lines += ["", f"{len(s.points)} points ({summary}) in {s.elapsed_s:.2f} s"
                  + (f" on {s.jobs} worker processes" if s.jobs > 1 else "")]
    return "\n".join(lines)


# ---- HTML --------------------------------------------------------------------------------------
def _x_and_groups(s: Sweep):
    """The axis to plot against (the numeric axis with the most values, else the first axis),
    whether it is numeric, the points grouped by the other axes' values (one line per group in
    a grid), and each point's x (a number on a numeric axis, else its label)."""
    numeric_axes = [a for a in s.axes if a.numeric and len(a.levels) > 1]
    ax = max(numeric_axes, key=lambda a: len(a.levels)) if numeric_axes else s.axes[0]
    numeric = ax.numeric
    groups: dict[str, list[Point]] = {}
    for p in s.points:
        key = ", ".join(f"{k}={v}" for k, v in p.setting.items() if k != ax.name)
        groups.setdefault(key, []).append(p)

    def x_of(p: Point):
        return p.x[ax.name] if numeric else p.setting[ax.name]
    return ax, numeric, groups, x_of


def throughput_figure(s: Sweep):
    """Throughput (tokens/s) and MFU against the swept variable."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ax, numeric, groups, x_of = _x_and_groups(s)
    from simulator.palette import series_color
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Throughput (tokens/s)", "MFU (of dense bf16 peak)"),
                        horizontal_spacing=0.12)
    for gi, (key, pts) in enumerate(groups.items()):
        color = series_color(gi)
        name = key or "fits"
        bad = [p for p in pts if p.status == "does_not_fit"]
        for col, metric in ((1, lambda r: r.tokens_per_s), (2, lambda r: r.mfu)):
            ys = [metric(p.result) if p.status == "ok" else None for p in pts]
            fig.add_trace(go.Scatter(x=[x_of(p) for p in pts], y=ys, mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=col == 1,
                                     line=dict(color=color, dash=("solid", "dash", "dot", "dashdot")[gi % 4]),
                                     hovertext=[f"{p.label}<br>{describe_plan(p.result.plan)}" if p.result else p.label
                                                for p in pts], connectgaps=False), row=1, col=col)
            if bad:
                fig.add_trace(go.Scatter(x=[x_of(p) for p in bad], y=[metric(p.result) for p in bad], mode="markers",
                                         name=f"{name}: does not fit", legendgroup=f"{name}-nofit",
                                         showlegend=col == 1, marker=dict(symbol="x", size=10, color=color),
                                         hovertext=[f"{p.label}: {p.reason}" for p in bad]), row=1, col=col)
    fig.update_yaxes(title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(title_text="MFU", row=1, col=2)
    for col in (1, 2):
        fig.update_xaxes(title_text=ax.axis_title(), row=1, col=col)
        if numeric:
            fig.update_xaxes(tickvals=[lv.x for lv in ax.levels], ticktext=[lv.label for lv in ax.levels],
                             row=1, col=col)
            if _log_axis([lv.x for lv in ax.levels]):
                fig.update_xaxes(type="log", row=1, col=col)
        if not numeric:
            fig.update_xaxes(type="category", row=1, col=col)
    fig.update_yaxes(tickformat=".0%", row=1, col=2, rangemode="tozero")
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_layout(height=480, template="plotly_white", margin=dict(t=110),
                      title="Throughput and MFU" + ("" if not s.base.replan else " (best plan at each point)"))
    return fig


def _log_axis(xs) -> bool:
    xs = [x for x in xs if x is not None and x > 0]
    return len(xs) > 1 and max(xs) / min(xs) >= 8


def _labelled(s: Sweep) -> list[Point]:
    return [p for p in s.points if p.result is not None]


def breakdown_figure(s: Sweep):
    """Stacked exposed step-time breakdown (seconds) per point, the step time printed on each bar."""
    import plotly.graph_objects as go
    from simulator.palette import BREAKDOWN
    from simulator.report import SHORT

    pts = _labelled(s)
    fig = go.Figure()
    keys = [k for k in BREAKDOWN_ORDER if any(p.result.breakdown.get(k, 0) > 0 for p in pts)]
    keys += sorted({k for p in pts for k in p.result.breakdown if k not in keys and p.result.breakdown[k] > 0})
    xs = [_xlabel(p) for p in pts]
    for k in keys:
        fig.add_trace(go.Bar(name=SHORT.get(k, k), x=xs, y=[p.result.breakdown.get(k, 0.0) for p in pts],
                             marker_color=BREAKDOWN.get(k, "#888"),
                             hovertemplate="%{x}<br>%{y:.4g} s<extra>" + BOTTLENECK_NAMES.get(k, k) + "</extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[p.result.step_time_s for p in pts], mode="text", showlegend=False,
                             text=[f"{p.result.step_time_s:.3g} s" for p in pts], textposition="top center"))
    fig.update_layout(barmode="stack", height=520, template="plotly_white",
                      title="Step time breakdown per point (exposed seconds on the critical path)",
                      yaxis_title="seconds per step", xaxis=dict(type="category", title="point", tickangle=0),
                      margin=dict(t=70, b=110))
    return fig


def _xlabel(p: Point) -> str:
    """A point's axis label: one setting per line, so labels never run into each other."""
    tail = "<br>(does not fit)" if p.status != "ok" else ""
    return f"#{p.index}<br>" + "<br>".join(f"{k}={v}" for k, v in p.setting.items()) + tail


def memory_figure(s: Sweep):
    """Memory of the fullest device per point (GB) against HBM capacity (labelled marks)."""
    import plotly.graph_objects as go
    from simulator.palette import MARKS, MEMORY
    from simulator.report import memory_parts

    pts = _labelled(s)
    xs = [_xlabel(p) for p in pts]
    fig = go.Figure()
    for name in MEMORY:
        fig.add_trace(go.Bar(name=name, x=xs, y=[memory_parts(p.result.memory)[name] / 1e9 for p in pts],
                             marker_color=MEMORY[name]))
    fig.add_trace(go.Scatter(name="HBM capacity", x=xs, y=[p.result.memory.capacity_bytes / 1e9 for p in pts],
                             mode="markers+text", text=[f"HBM {p.result.memory.capacity_bytes / 1e9:.0f} GB" for p in pts],
                             textposition="top center", textfont=dict(color=MARKS["HBM capacity"]),
                             marker=dict(symbol="line-ew-open", size=40, color=MARKS["HBM capacity"], line=dict(width=3))))
    fig.add_trace(go.Scatter(x=xs, y=[p.result.memory.total_bytes / 1e9 for p in pts], mode="text", showlegend=False,
                             text=[f"{p.result.memory.total_bytes / 1e9:.1f}" for p in pts], textposition="top center"))
    fig.update_layout(barmode="stack", height=520, template="plotly_white", yaxis_title="GB per GPU",
                      title="Memory of the fullest device per point, against HBM capacity",
                      xaxis=dict(type="category", title="point", tickangle=0), margin=dict(t=70, b=110))
    return fig


def roofline_figure(s: Sweep, max_panels: int = 4):
    """Per accelerator (distinct peak and HBM bandwidth), the ops of one micro-batch of the first
    point run on it: kernels with FLOPs on the roofline (compute- and memory-bound), kernels
    without FLOPs against the HBM bandwidth (simulator.report's roofline functions)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    from simulator.report import bandwidth_traces, roofline_traces

    groups: dict[tuple, Point] = {}
    for p in s.points:
        if p.result is None or p.result.ops is None or p.hardware is None:
            continue
        h = p.hardware
        groups.setdefault((h["accelerator"], h["peak_bf16_flops"], h["hbm_bandwidth_Bps"]), p)
    keys = list(groups)[:max_panels]
    if not keys:
        fig = go.Figure()
        fig.add_annotation(text="no point produced a result to place on a roofline", showarrow=False)
        fig.update_layout(height=300, title="Roofline")
        return fig
    titles = []
    for k in keys:
        titles += [f"{k[0]}: kernels with FLOPs (point #{groups[k].index})", f"{k[0]}: kernels without FLOPs"]
    fig = make_subplots(rows=len(keys), cols=2, subplot_titles=titles, column_widths=[0.6, 0.4],
                        horizontal_spacing=0.1, vertical_spacing=0.35 / len(keys) if len(keys) > 1 else 0.1)
    left_out = {}
    for i, k in enumerate(keys):
        p, row = groups[k], i + 1
        fp8 = p.hardware.get("peak_fp8_flops")
        peak = fp8 if p.result.plan.precision == "fp8" and fp8 else k[1]
        got = roofline_traces(fig, p.result.ops, peak, k[2], row, 1, show_legend=i == 0)
        bandwidth_traces(fig, got["no_flops"], k[2], row, 2, show_legend=i == 0)
        n_coll = sum(1 for ops in p.result.ops.values() for op in ops if op.kind == "collective")
        left_out["collectives (on the timeline, not a roofline)"] = n_coll
        fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP per HBM byte)", row=row, col=1)
        fig.update_yaxes(type="log", title_text="attained FLOP/s", row=row, col=1)
        fig.update_xaxes(type="log", title_text="HBM bytes moved per kernel", row=row, col=2)
        fig.update_yaxes(type="log", title_text="attained bytes/s", row=row, col=2)
    more = len(groups) - len(keys)
    fig._meshcast_left_out = left_out
    fig.update_layout(height=160 + 430 * len(keys), template="plotly_white", margin=dict(t=110, b=90),
                      title="Roofline of one micro-batch's kernels (predicted times)"
                      + (f"; {more} more accelerators not shown" if more > 0 else ""),
                      legend=dict(orientation="h", y=-0.12 / len(keys), yanchor="top", x=0))
    return fig


def cost_figure(s: Sweep):
    """Days, dollars and GPU energy (TDP upper bound) to train the token budget, per point."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pts = [p for p in _labelled(s) if p.cost is not None]
    xs = [f"#{p.index}" for p in pts]       # three panels side by side: the Points table names each #
    tokens = s.base.tokens
    if tokens:
        fig = make_subplots(rows=1, cols=3, subplot_titles=(f"Days to train {tokens:.3g} tokens",
                                                            "Cost (USD)", "GPU energy, upper bound (MWh)"))
        fig.add_trace(go.Bar(x=xs, y=[p.cost["days"] for p in pts], name="days", marker_color="#4C78A8"), row=1, col=1)
        fig.add_trace(go.Bar(x=xs, y=[p.cost["cost_usd"] for p in pts], name="USD", marker_color="#54A24B",
                             hovertext=[f"{p.cost['price_per_gpu_hour_usd']} USD/GPU-h ({p.cost['price_source']})"
                                        for p in pts]), row=1, col=2)
        fig.add_trace(go.Bar(x=xs, y=[(p.cost["gpu_energy_kwh"] or 0) / 1e3 for p in pts], name="GPU energy (TDP)",
                             marker_color="#F58518"), row=1, col=3)
        if s.base.pue != 1:
            fig.add_trace(go.Bar(x=xs, y=[(p.cost["facility_energy_kwh"] or 0) / 1e3 for p in pts],
                                 name=f"x PUE {s.base.pue:g}", marker_color="#E45756"), row=1, col=3)
    else:
        fig = make_subplots(rows=1, cols=2, subplot_titles=("USD per million tokens", "GPU-hours per million tokens"))
        fig.add_trace(go.Bar(x=xs, y=[p.cost["usd_per_million_tokens"] for p in pts], name="USD / Mtok",
                             marker_color="#54A24B"), row=1, col=1)
        fig.add_trace(go.Bar(x=xs, y=[p.cost["gpu_hours_per_million_tokens"] for p in pts], name="GPU-h / Mtok",
                             marker_color="#4C78A8"), row=1, col=2)
    fig.update_xaxes(type="category", tickangle=0, tickfont=dict(size=10))
    fig.update_traces(texttemplate="%{y:.3s}", textposition="outside", selector=dict(type="bar"))
    fig.update_xaxes(title_text="point")
    units = ("days", "USD", "MWh") if tokens else ("USD per million tokens", "GPU-hours per million tokens")
    for col, unit in enumerate(units, 1):
        fig.update_yaxes(title_text=unit, row=1, col=col)
    fig.update_layout(height=520, template="plotly_white", barmode="group", margin=dict(t=90, b=80),
                      title="Cost and time to train" + ("" if tokens else " (give --tokens for totals)"))
    return fig


def points_table(s: Sweep):
    """One row per point, the same numbers as --json points[i].result."""
    from simulator.htmlpage import Cell, Table, num
    rows = []
    for p in s.points:
        r, c, key = p.result, p.cost or {}, f"points.{p.index}"
        cells = [Cell(str(p.index)), Cell(p.label), Cell(STATUS_TEXT[p.status])]
        if r is None:
            cells += [Cell(p.reason or "")] + [Cell("")] * 9
        else:
            cells += [Cell(describe_plan(r.plan)), num(r.step_time_s, ".3f", f"{key}.result.step_time_s"),
                      Cell(r.confidence.short()), num(r.tokens_per_s, ",.0f", f"{key}.result.tokens_per_s"),
                      num(r.mfu, ".1%", f"{key}.result.mfu"),
                      Cell(f"{r.memory.total_bytes / 1e9:.1f} / {r.memory.capacity_bytes / 1e9:.0f}",
                           r.memory.total_bytes, f"{key}.result.memory.total_bytes"),
                      Cell(f"{r.bottleneck} ({r.breakdown[r.bottleneck] / r.step_time_s:.0%})",
                           key=f"{key}.result.bottleneck"),
                      num(c.get("days"), ".1f", f"{key}.cost.days"), Cell(_money(c.get("cost_usd"))),
                      Cell("; ".join(([p.reason] if p.reason else []) + p.notes))]
        rows.append(cells)
    return Table("points", ["#", "point", "status", "plan", "step (s)", "80% band", "tokens/s", "MFU",
                            "memory GB (used / HBM)", "bottleneck", "days", "cost", "notes"], rows)


def write_html(s: Sweep, path: str | Path) -> None:
    """The whole report as one HTML file with plotly.js embedded once (opens offline)."""
    from simulator.htmlpage import Page, Section, write_page

    b = s.base
    roof = roofline_figure(s)
    left = getattr(roof, "_meshcast_left_out", {})
    left_text = ("Not placed: " + ", ".join(f"{n} {k}" for k, n in left.items()) + ".") if left else ""
    cals = "; ".join(dict.fromkeys(p.calibration for p in s.points if p.calibration)) or "default"
    inputs = [("model", b.model), ("hardware", f"{b.cluster}" + (f", {b.gpus} GPUs" if b.gpus else "")),
              ("plan", "re-planned at each point (best plan, throughput)" if b.replan else describe_plan_text(b)),
              ("framework", getattr(b.plan, "framework", "megatron-core")), ("calibration", cals),
              ("sweep", " x ".join(f"{a.name} = {', '.join(lv.label for lv in a.levels)}" for a in s.axes))]
    page = Page(f"meshcast what-if: {b.model} on {b.cluster}", "whatif", inputs=inputs, verdict=headline(s))
    page.add(Section("Points", tables=[points_table(s)],
                     note="80% band: the range the measured step falls in 4 times in 5 for predictions of this regime."))
    for heading, fig, note in (
            ("Throughput and MFU", throughput_figure(s), ""),
            ("Step time breakdown", breakdown_figure(s), ""),
            ("Memory", memory_figure(s), "Bars: the fullest device's memory; red marks: HBM capacity."),
            ("Roofline", roof, "Each marker is one kernel of one micro-batch at its predicted time. Left panels: "
                               "arithmetic intensity (counted FLOPs / counted HBM bytes) against attained FLOP/s "
                               "under the accelerator's HBM slope and peak; left of the ridge memory-bound, right "
                               "compute-bound. Right panels: kernels with no counted FLOPs against HBM bandwidth. "
                               + left_text),
            ("Cost and time to train", cost_figure(s), f"Points by # (the Points table names them). Energy: {ENERGY_NOTE}.")):
        page.add(Section(heading, figure=fig, note=note))
    write_page(page, path)
