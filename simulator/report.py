"""Self-contained plotly HTML report of one simulation: memory, time breakdown, pipeline timeline."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hardware_specs.fileio import write_text_atomic
from simulator.result import BOTTLENECK_NAMES, Result


def simulation_figure(r: Result) -> go.Figure:
    """Three panels: memory breakdown of the fullest device, time breakdown, pipeline timeline."""
    fig = make_subplots(rows=3, cols=1, row_heights=[0.25, 0.25, 0.5], vertical_spacing=0.08,
                        subplot_titles=("Memory per device (GB), fullest stage", "Step time breakdown (s)",
                                        "Pipeline timeline of one step (s)"))
    m = r.memory
    parts = {"weights": m.weights_bytes, "gradients": m.gradients_bytes, "optimizer": m.optimizer_bytes,
             "activations": m.activations_bytes, "logits": m.logits_bytes,
             "workspace+fragmentation": m.total_bytes - m.peak_allocated_bytes}
    for name, value in parts.items():
        fig.add_trace(go.Bar(name=name, y=["memory"], x=[value / 1e9], orientation="h",
                             legendgroup="mem"), row=1, col=1)
    fig.add_vline(x=m.capacity_bytes / 1e9, line_dash="dash", line_color="red", row=1, col=1)
    for key, value in r.breakdown.items():
        fig.add_trace(go.Bar(name=BOTTLENECK_NAMES.get(key, key), y=["time"], x=[value], orientation="h",
                             legendgroup="time"), row=2, col=1)
    if r.timeline:
        for kind, color in (("F", "#4C78A8"), ("B", "#F58518")):
            evs = [e for e in r.timeline if e.kind == kind]
            fig.add_trace(go.Bar(name="forward" if kind == "F" else "backward", orientation="h",
                                 y=[f"stage {e.stage}" for e in evs], x=[e.end_s - e.start_s for e in evs],
                                 base=[e.start_s for e in evs], marker_color=color,
                                 hovertext=[f"mb {e.microbatch} chunk {e.chunk}" for e in evs]), row=3, col=1)
    fig.update_layout(barmode="stack", height=900,
                      title=f"{r.model} on {r.num_gpus} x {r.accelerator}: step {r.step_time_s:.3f} s, "
                            f"MFU {r.mfu:.1%}, {'fits' if r.fits else 'DOES NOT FIT'}")
    fig.update_yaxes(autorange="reversed", row=3, col=1)
    return fig


def write_simulation_report(r: Result, path: str | Path) -> None:
    """Write the report as one HTML file with plotly.js embedded (opens offline)."""
    fig = simulation_figure(r)
    write_text_atomic(path, fig.to_html(include_plotlyjs=True, full_html=True), "output")
