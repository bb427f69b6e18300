"""What-if output: the text table and the self-contained HTML report.

The report has one plotly figure per question: throughput and MFU against the swept variable;
the step-time breakdown as stacked bars per point; the memory of the fullest device per point
against its capacity; the roofline of one micro-batch's ops on each accelerator (arithmetic
intensity = FLOPs / HBM bytes against attained FLOP/s = FLOPs / predicted time, with the
accelerator's peak and HBM-bandwidth lines); and the days, dollars and energy to train.
plotly.js is embedded once, so the page opens offline.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

from hardware_specs.fileio import write_text_atomic
from planners.whatif import Point, Sweep, describe_plan
from simulator.costing import ENERGY_NOTE
from simulator.result import BOTTLENECK_NAMES

STATUS_TEXT = {"ok": "ok", "does_not_fit": "DOES NOT FIT", "invalid": "invalid", "no_plan": "no plan",
               "error": "error"}
BREAKDOWN_ORDER = ("compute", "tp", "cp", "ep", "pp", "bubble", "dp", "optimizer")
MEMORY_PARTS = (("weights", "weights_bytes"), ("gradients", "gradients_bytes"), ("optimizer", "optimizer_bytes"),
                ("activations", "activations_bytes"), ("logits", "logits_bytes"))
OP_COLORS = {"gemm": "#4C78A8", "attention": "#F58518", "elementwise": "#54A24B", "memory": "#B279A2"}


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
    if p.zero_stage != 1:
        parts.append(f"zero={p.zero_stage}")
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
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Throughput (tokens/s)", "MFU (of dense bf16 peak)"))
    palette = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"]
    for gi, (key, pts) in enumerate(groups.items()):
        color = palette[gi % len(palette)]
        name = key or "fits"
        bad = [p for p in pts if p.status == "does_not_fit"]
        for col, metric in ((1, lambda r: r.tokens_per_s), (2, lambda r: r.mfu)):
            ys = [metric(p.result) if p.status == "ok" else None for p in pts]
            fig.add_trace(go.Scatter(x=[x_of(p) for p in pts], y=ys, mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=col == 1, line=dict(color=color),
                                     hovertext=[f"{p.label}<br>{describe_plan(p.result.plan)}" if p.result else p.label
                                                for p in pts], connectgaps=False), row=1, col=col)
            if bad:
                fig.add_trace(go.Scatter(x=[x_of(p) for p in bad], y=[metric(p.result) for p in bad], mode="markers",
                                         name=f"{name}: does not fit", legendgroup=f"{name}-nofit",
                                         showlegend=col == 1, marker=dict(symbol="x", size=10, color=color),
                                         hovertext=[f"{p.label}: {p.reason}" for p in bad]), row=1, col=col)
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
    fig.update_layout(height=450, template="plotly_white", title="Throughput and MFU"
                      + ("" if not s.base.replan else " (best plan at each point)"))
    return fig


def _log_axis(xs) -> bool:
    xs = [x for x in xs if x is not None and x > 0]
    return len(xs) > 1 and max(xs) / min(xs) >= 8


def _labelled(s: Sweep) -> list[Point]:
    return [p for p in s.points if p.result is not None]


def breakdown_figure(s: Sweep):
    """Stacked exposed step-time breakdown (seconds) per point."""
    import plotly.graph_objects as go

    pts = _labelled(s)
    fig = go.Figure()
    keys = [k for k in BREAKDOWN_ORDER if any(p.result.breakdown.get(k, 0) > 0 for p in pts)]
    keys += sorted({k for p in pts for k in p.result.breakdown if k not in keys and p.result.breakdown[k] > 0})
    xs = [_xlabel(p) for p in pts]
    for k in keys:
        fig.add_trace(go.Bar(name=BOTTLENECK_NAMES.get(k, k), x=xs, y=[p.result.breakdown.get(k, 0.0) for p in pts],
                             hovertemplate="%{x}<br>%{y:.4g} s<extra>" + BOTTLENECK_NAMES.get(k, k) + "</extra>"))
    fig.update_layout(barmode="stack", height=480, template="plotly_white",
                      title="Step time breakdown per point (exposed seconds on the critical path)",
                      yaxis_title="seconds per step", xaxis=dict(type="category"))
    return fig


def _xlabel(p: Point) -> str:
    tail = "" if p.status == "ok" else " (does not fit)"
    return f"#{p.index} {p.label}{tail}"


def memory_figure(s: Sweep):
    """Memory of the fullest device per point (GB) against HBM capacity."""
    import plotly.graph_objects as go

    pts = _labelled(s)
    xs = [_xlabel(p) for p in pts]
    fig = go.Figure()
    for name, attr in MEMORY_PARTS:
        fig.add_trace(go.Bar(name=name, x=xs, y=[getattr(p.result.memory, attr) / 1e9 for p in pts]))
    fig.add_trace(go.Bar(name="workspace + fragmentation", x=xs,
                         y=[(p.result.memory.total_bytes - p.result.memory.peak_allocated_bytes) / 1e9 for p in pts]))
    fig.add_trace(go.Scatter(name="HBM capacity", x=xs, y=[p.result.memory.capacity_bytes / 1e9 for p in pts],
                             mode="markers", marker=dict(symbol="line-ew-open", size=40, color="red",
                                                         line=dict(width=3))))
    fig.update_layout(barmode="stack", height=480, template="plotly_white", yaxis_title="GB per GPU",
                      title="Memory of the fullest device per point, against HBM capacity", xaxis=dict(type="category"))
    return fig


def roofline_figure(s: Sweep, max_panels: int = 6):
    """One panel per accelerator (per distinct peak and HBM bandwidth): every op of one
    micro-batch (each layer kind, embedding, head; forward, backward, recompute) of the first
    point run on it, at (FLOPs / HBM bytes, FLOPs / predicted time). Collectives and ops
    without FLOPs are not on a roofline and are left out."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    groups: dict[tuple, Point] = {}
    for p in s.points:
        if p.result is None or p.result.ops is None or p.hardware is None:
            continue
        h = p.hardware
        key = (h["accelerator"], h["peak_bf16_flops"], h["hbm_bandwidth_Bps"])
        groups.setdefault(key, p)
    keys = list(groups)[:max_panels]
    if not keys:
        fig = go.Figure()
        fig.add_annotation(text="no point produced a result to place on a roofline", showarrow=False)
        fig.update_layout(height=300, title="Roofline")
        return fig
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    titles = []
    for k in keys:
        p = groups[k]
        bw = k[2] / 1e12
        titles.append(f"{k[0]} ({bw:.2f} TB/s HBM): ops of #{p.index} {p.label}")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08,
                        vertical_spacing=0.12 if rows > 1 else 0.1)
    shown = set()
    left_out: dict[str, int] = {}
    for i, k in enumerate(keys):
        p = groups[k]
        row, col = i // cols + 1, i % cols + 1
        r = p.result
        fp8 = p.hardware.get("peak_fp8_flops")
        peak_dtype, peak = ("fp8", fp8) if r.plan.precision == "fp8" and fp8 else ("bf16", k[1])
        bw = k[2]
        by_kind: dict[str, list] = {}
        for part, ops in r.ops.items():
            for op in ops:
                if op.kind == "collective":
                    left_out["collectives (no FLOPs)"] = left_out.get("collectives (no FLOPs)", 0) + 1
                elif op.flops <= 0:
                    left_out["memory-bound ops (no FLOPs counted)"] = \
                        left_out.get("memory-bound ops (no FLOPs counted)", 0) + 1
                elif op.bytes <= 0 or op.time_s <= 0:
                    key = f"{op.kind} ops with no HBM byte count on the op"
                    left_out[key] = left_out.get(key, 0) + 1
                else:
                    by_kind.setdefault(op.kind, []).append((part, op))
        ridge = peak / bw
        ai_all = [op.flops / op.bytes for v in by_kind.values() for _, op in v] or [ridge]
        lo, hi = min(min(ai_all) / 2, ridge / 30), max(max(ai_all) * 2, ridge * 4)
        xs = [lo, ridge, hi]
        ys = [lo * bw, peak, peak]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="roofline (peak, HBM bandwidth)",
                                 legendgroup="roof", showlegend="roof" not in shown,
                                 line=dict(color="black", width=2),
                                 hovertext=[f"HBM {bw / 1e12:.2f} TB/s", f"ridge {ridge:.0f} FLOP/B",
                                            f"{peak_dtype} peak {peak / 1e12:.0f} TFLOP/s"]), row=row, col=col)
        shown.add("roof")
        for kind, items in sorted(by_kind.items()):
            fig.add_trace(go.Scatter(
                x=[op.flops / op.bytes for _, op in items], y=[op.flops / op.time_s for _, op in items],
                mode="markers", name=kind, legendgroup=kind, showlegend=kind not in shown,
                marker=dict(color=OP_COLORS.get(kind, "gray"), size=8, opacity=0.8),
                hovertext=[f"{part}: {op.name} ({op.phase}) {op.shape}<br>{op.flops:.3g} FLOP, {op.bytes:.3g} B, "
                           f"{op.time_s * 1e3:.3g} ms" for part, op in items]), row=row, col=col)
            shown.add(kind)
        fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP / HBM byte)", row=row, col=col)
        fig.update_yaxes(type="log", title_text="attained FLOP/s", row=row, col=col)
    more = len(groups) - len(keys)
    fig._meshcast_left_out = left_out
    fig.update_layout(height=430 * rows, template="plotly_white",
                      title="Roofline of one micro-batch's ops (predicted times)"
                      + (f"; {more} more accelerators not shown" if more > 0 else ""))
    return fig


def cost_figure(s: Sweep):
    """Days, dollars and GPU energy (TDP upper bound) to train the token budget, per point."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pts = [p for p in _labelled(s) if p.cost is not None]
    xs = [_xlabel(p) for p in pts]
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
    fig.update_xaxes(type="category")
    fig.update_layout(height=480, template="plotly_white", barmode="group",
                      title="Cost and time to train" + ("" if tokens else " (give --tokens for totals)"))
    return fig


def _table_html(s: Sweep) -> str:
    head = ["#", "point", "status", "plan", "step (s)", "tokens/s", "MFU", "memory GB", "bottleneck",
            "days", "cost", "GPU energy", "notes"]
    out = ["<table class='pts'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for p in s.points:
        r, c = p.result, p.cost or {}
        cells = [str(p.index), p.label, STATUS_TEXT[p.status]]
        if r is None:
            cells += [p.reason or "", "", "", "", "", "", "", "", "", ""]
        else:
            cells += [describe_plan(r.plan), f"{r.step_time_s:.3f}", f"{r.tokens_per_s:,.0f}", f"{r.mfu:.1%}",
                      f"{r.memory.total_bytes / 1e9:.1f} / {r.memory.capacity_bytes / 1e9:.0f}",
                      r.bottleneck_sentence(), f"{c['days']:.1f}" if c.get("days") is not None else "-",
                      _money(c.get("cost_usd")), _energy(c.get("gpu_energy_kwh")),
                      "; ".join(([p.reason] if p.reason else []) + p.notes)]
        cls = "" if p.status == "ok" else " class='bad'"
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


STYLE = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222} table.pts{border-collapse:collapse;"
         "font-size:13px} .pts td,.pts th{border:1px solid #ccc;padding:3px 6px;text-align:left} "
         ".pts tr.bad{background:#fff0f0} .note{color:#555;font-size:13px;max-width:1100px}")


def write_html(s: Sweep, path: str | Path) -> None:
    """The whole report as one HTML file with plotly.js embedded once (opens offline)."""
    title = headline(s)
    roof = roofline_figure(s)
    left = getattr(roof, "_meshcast_left_out", {})
    left_text = ""
    if left:
        left_text = "Not placed (over all panels): " + ", ".join(f"{n} {k}" for k, n in left.items()) + "."
    figures = [("Throughput and MFU", throughput_figure(s), ""),
               ("Step time breakdown", breakdown_figure(s), ""),
               ("Memory", memory_figure(s), "Bars: the fullest device's memory; red marks: HBM capacity."),
               ("Roofline", roof,
                "Each marker is one kernel of one micro-batch at its predicted time: arithmetic intensity "
                "(counted FLOPs / counted HBM bytes) against attained FLOP/s. The black line is the "
                "accelerator's HBM-bandwidth slope up to its dense peak. " + left_text),
               ("Cost and time to train", cost_figure(s), f"Energy: {ENERGY_NOTE}.")]
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>meshcast what-if</h1><p>{html.escape(title)}</p>", _table_html(s)]
    for i, (heading, fig, note) in enumerate(figures):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("</body></html>")
    write_text_atomic(path, "\n".join(parts), "output")
