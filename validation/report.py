"""The validate report (rendered by simulator/htmlpage.py): the per-kind accuracy table of the text
output with its plain-roofline baseline, predicted against measured time per kind (log axes, a
y = x line), error histograms per kind, and the published runs per source."""
from __future__ import annotations

import math
from pathlib import Path

from simulator.htmlpage import Cell, Page, Section, Table, num, write_page
from simulator.palette import MARKS, kind_color
from validation.accuracy import RecordResult


def _pct(x, key: str = ""):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return Cell("-", None, key)
    return num(x, ".1%", key)


def kinds_table(f: dict, i: int) -> Table:
    """One file's per-kind table, the same numbers as --json files[i].kinds."""
    rows = []
    for j, k in enumerate(f["kinds"]):
        key = f"files.{i}.kinds.{j}"
        extra = ""
        if k.get("fit_total"):
            extra = f"mem MAPE {k['memory_mape']:.1%}; fit verdict {k['fit_correct']}/{k['fit_total']} right"
        rows.append([Cell(k["kind"], key=f"{key}.kind"), num(k["count"], "d", f"{key}.count"), _pct(k["mape"], f"{key}.mape"),
                     _pct(k["median_abs_error"], f"{key}.median_abs_error"),
                     _pct(k["worst_abs_error"], f"{key}.worst_abs_error"),
                     _pct(k["baseline_mape"], f"{key}.baseline_mape"), Cell(extra)])
    cap = f"{Path(f['path']).name}: {f['records']} records on {f['gpu']} ({f['hardware']}); {f['calibration']}"
    if f.get("in_profile_fit"):
        cap += " (among the profile's fit data: 4 in 5 of its kernel and collective records were fitted)"
    return Table(f"kinds-{i}", ["kind", "n", "MAPE", "median |error|", "worst |error|", "plain roofline MAPE",
                                "memory / fits"], rows, cap)


def scatter_figure(results: list[RecordResult]):
    """Predicted against measured time per kind on log axes, with the y = x line."""
    import plotly.graph_objects as go
    fig = go.Figure()
    lo, hi = math.inf, 0.0
    for kind, rs in sorted(_by_kind(results).items()):
        meas = [r.record["time_s"] for r in rs]
        pred = [r.prediction.time_s for r in rs]
        lo, hi = min(lo, *meas, *pred), max(hi, *meas, *pred)
        fig.add_trace(go.Scatter(x=meas, y=pred, mode="markers", name=f"{kind} ({len(rs)})",
                                 marker=dict(color=kind_color(kind), size=7, opacity=0.75),
                                 hovertext=[str({k: v for k, v in r.record.items() if k != "kind"})[:200] for r in rs]))
    if hi > 0:
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x (exact)",
                                 line=dict(dash="dash", color=MARKS["y = x"])))
    fig.update_layout(title="Predicted against measured time, per record", template="plotly_white", height=560,
                      xaxis=dict(type="log", title="measured time (s)"), yaxis=dict(type="log", title="predicted time (s)"),
                      legend=dict(title="kind (records)"))
    return fig


def histogram_figure(results: list[RecordResult]):
    """One error histogram per kind (predicted / measured - 1), small multiples on shared axes."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    kinds = sorted(_by_kind(results).items())
    cols = min(3, max(1, len(kinds)))
    rows = math.ceil(len(kinds) / cols)
    specs = [[{} if r * cols + c < len(kinds) else None for c in range(cols)] for r in range(rows)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{k} ({len(rs)} records)" for k, rs in kinds], specs=specs,
                        vertical_spacing=0.5 / max(rows, 1) if rows > 1 else 0.1, horizontal_spacing=0.07)
    for i, (kind, rs) in enumerate(kinds):
        r, c = i // cols + 1, i % cols + 1
        fig.add_trace(go.Histogram(x=[x.time_error for x in rs], name=kind, marker_color=kind_color(kind),
                                   xbins=dict(size=0.05), showlegend=False), row=r, col=c)
        fig.update_xaxes(title_text="error (predicted / measured - 1)", tickformat=".0%", row=r, col=c)
        fig.update_yaxes(title_text="records", row=r, col=c)
    fig.update_layout(title="Error distribution per kind", template="plotly_white", height=120 + 300 * rows,
                      bargap=0.05)
    return fig


def _by_kind(results: list[RecordResult]) -> dict:
    kinds: dict[str, list[RecordResult]] = {}
    for r in results:
        if r.time_error is not None:
            kinds.setdefault(r.record["kind"], []).append(r)
    return kinds


def published_section(pub: dict) -> Section:
    """The per-source table, every compared run, and predicted against published (y = x)."""
    import plotly.graph_objects as go
    src = ("published", "per_source")
    src_rows = [[Cell(s), num(v["count"], "d", (*src, s, "count")), num(v["mape"], ".1%", (*src, s, "mape")),
                 num(v["worst"], ".1%", (*src, s, "worst"))] for s, v in pub["per_source"].items()]
    runs = [[Cell(f"#{c['row']}"), Cell(c["source"]), Cell(c["model"]), Cell(str(c["num_gpus"])), Cell(c["metric"]),
             num(c["published"], ".4g", f"published.runs.{i}.published"),
             num(c["predicted"], ".4g", f"published.runs.{i}.predicted"),
             num(c["error"], "+.1%", f"published.runs.{i}.error")] for i, c in enumerate(pub["runs"])]
    fig = go.Figure()
    metrics = sorted({c["metric"] for c in pub["runs"]})
    for j, m in enumerate(metrics):
        cs = [c for c in pub["runs"] if c["metric"] == m]
        fig.add_trace(go.Scatter(x=[c["published"] / max(d["published"] for d in cs) for c in cs],
                                 y=[c["predicted"] / max(d["published"] for d in cs) for c in cs], mode="markers",
                                 name=m, marker=dict(size=8, color=kind_color(m)),
                                 hovertext=[f"#{c['row']} {c['model']} {c['num_gpus']} GPUs" for c in cs]))
    fig.add_trace(go.Scatter(x=[0, 1.05], y=[0, 1.05], mode="lines", name="y = x (exact)",
                             line=dict(dash="dash", color=MARKS["y = x"])))
    fig.update_layout(title="Published runs: predicted against published (each metric scaled by its largest value)",
                      xaxis_title="published (fraction of the metric's largest)",
                      yaxis_title="predicted (same scale)", template="plotly_white", height=480)
    note = (f"{len(pub['runs'])} runs compared, MAPE {pub['mape']:.1%}; {len(pub['skipped'])} not modelled: "
            + "; ".join(f"#{s['row']} {s['model']}: {s['reason']}" for s in pub["skipped"][:8]))
    return Section("Published runs", figure=fig, note=note, wide=True, tables=[
        Table("per-source", ["source", "runs", "MAPE", "worst"], src_rows, "per source"),
        Table("runs", ["row", "source", "model", "GPUs", "metric", "published", "predicted", "error"], runs)])


def layers_section(pl: dict) -> Section:
    """Published per-layer times against predictions."""
    rows = [[Cell(c["implementation"]), Cell(c["metric"]), num(c["published_ms"], ".1f", f"published_layers.rows.{i}.published_ms", " ms"),
             num(c["predicted_ms"], ".1f", f"published_layers.rows.{i}.predicted_ms", " ms"), num(c["error"], "+.1%", f"published_layers.rows.{i}.error")]
            for i, c in enumerate(pl["rows"])]
    return Section("Published per-layer times", note=f"MAPE {pl['mape']:.1%}", tables=[
        Table("layers", ["implementation", "metric", "published", "predicted", "error"], rows)])


def write_validation_report(path: str | Path, out: dict, results: list[RecordResult], calibration: str = "") -> None:
    """The page: ``out`` is the command's --json object, ``results`` every predicted record."""
    files = out["files"]
    inputs = [(f"measurements {i + 1}", f"{f['path']} ({f['records']} records on {f['gpu']}, {f['hardware']})")
              for i, f in enumerate(files)]
    inputs += [("calibration", "; ".join(dict.fromkeys(f["calibration"] for f in files)) or calibration or "default")]
    if "published" in out:
        inputs.append(("published runs", f"{len(out['published']['runs'])} compared"))
    names = ", ".join(Path(f["path"]).name for f in files) or "published runs"
    page = Page(f"meshcast validate: {names}", "validate", inputs=inputs)
    if files:
        page.add(Section("Accuracy per kind (measurements)", tables=[kinds_table(f, i) for i, f in enumerate(files)],
                         note="MAPE: mean |predicted / measured - 1| over the kind's records; plain roofline: the "
                              "same records predicted from datasheet peaks alone (no calibration), for scale."))
    if results:
        page.add(Section("Predicted against measured", figure=scatter_figure(results),
                         note="Points on the dashed line are exact; above it the simulator predicts too slow, below it "
                              "too fast."))
        page.add(Section("Error histograms", figure=histogram_figure(results)))
    if "published" in out:
        page.add(published_section(out["published"]))
    if "published_layers" in out:
        page.add(layers_section(out["published_layers"]))
    write_page(page, path)
