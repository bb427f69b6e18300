"""Self-contained HTML accuracy report: predicted vs measured per kind (log axes), error
histograms, and the published-run table per source."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hardware_specs.fileio import write_text_atomic
from validation.accuracy import RecordResult


def accuracy_figure(results: list[RecordResult]) -> go.Figure:
    """Left: predicted vs measured time per kind on log axes; right: signed error histogram."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Predicted vs measured time (s)",
                                                        "Error: predicted / measured - 1"))
    kinds: dict[str, list[RecordResult]] = {}
    for r in results:
        if r.time_error is not None:
            kinds.setdefault(r.record["kind"], []).append(r)
    lo, hi = 1e9, 0.0
    for kind, rs in sorted(kinds.items()):
        meas = [r.record["time_s"] for r in rs]
        pred = [r.prediction.time_s for r in rs]
        lo, hi = min(lo, *meas, *pred), max(hi, *meas, *pred)
        fig.add_trace(go.Scatter(x=meas, y=pred, mode="markers", name=kind, legendgroup=kind,
                                 hovertext=[str({k: v for k, v in r.record.items() if k != "kind"})[:200] for r in rs]),
                      row=1, col=1)
        fig.add_trace(go.Histogram(x=[r.time_error for r in rs], name=kind, legendgroup=kind, showlegend=False,
                                   opacity=0.6, nbinsx=40), row=1, col=2)
    if hi > 0:
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="exact", line=dict(dash="dash")),
                      row=1, col=1)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(barmode="overlay", height=600)
    return fig


def published_table(done, per_source: dict) -> go.Figure:
    """Table of the per-source errors and every compared run."""
    fig = make_subplots(rows=2, cols=1, specs=[[{"type": "table"}], [{"type": "table"}]], row_heights=[0.25, 0.75])
    fig.add_trace(go.Table(header=dict(values=["source", "runs", "MAPE", "worst"]),
                           cells=dict(values=[list(per_source), [v["count"] for v in per_source.values()],
                                              [f"{v['mape']:.1%}" for v in per_source.values()],
                                              [f"{v['worst']:.1%}" for v in per_source.values()]])), row=1, col=1)
    fig.add_trace(go.Table(header=dict(values=["row", "model", "GPUs", "metric", "published", "predicted", "error"]),
                           cells=dict(values=[[c.row for c in done], [c.model for c in done], [c.num_gpus for c in done],
                                              [c.metric for c in done], [f"{c.published:.4g}" for c in done],
                                              [f"{c.predicted:.4g}" for c in done], [f"{c.error:+.1%}" for c in done]])),
                  row=2, col=1)
    fig.update_layout(height=1200)
    return fig


def write_report(path: str | Path, figures: list[tuple[str, go.Figure]]) -> None:
    """One HTML file, plotly.js embedded once, a heading per figure."""
    parts = ["<html><head><meta charset='utf-8'><title>meshcast validation</title></head><body>"]
    for i, (title, fig) in enumerate(figures):
        parts.append(f"<h2>{title}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("</body></html>")
    write_text_atomic(path, "\n".join(parts), "output")
