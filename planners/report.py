"""Planner output: the ranked table, why each runner-up loses, JSON, plan YAML and the HTML
Pareto front (throughput vs memory headroom)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import yaml

from hardware_specs.fileio import write_text_atomic
from planners.search import Candidate, SearchResult
from planners.ties import set_aside_reason, rank_labels, tie_sentence

GB = 1e9

_PHRASES = {
    "compute": ("more compute (GEMMs, attention, recompute)", "less compute"),
    "tp": ("more tensor-parallel communication", "less tensor-parallel communication"),
    "cp": ("more context-parallel communication", "less context-parallel communication"),
    "ep": ("more expert-parallel all-to-all", "less expert-parallel all-to-all"),
    "dp": ("more exposed data-parallel communication", "less exposed data-parallel communication"),
    "pp": ("more pipeline point-to-point transfers", "fewer pipeline transfers"),
    "bubble": ("a larger pipeline bubble", "a smaller pipeline bubble"),
    "optimizer": ("a slower optimizer step", "a faster optimizer step"),
}


def _label(c: Candidate) -> str:
    bits = [c.shape.describe()]
    if c.shape.gpus != c.result.num_gpus:
        bits.append(f"{c.result.num_gpus} GPUs")
    return " ".join(bits)


def switches(c: Candidate) -> str:
    """The non-degree switches of a plan (ZeRO, recompute, schedule) as short text."""
    p = c.plan
    rec = p.recompute
    if p.recompute == "full":
        rec = "full" if p.recompute_layers is None else f"full x{p.recompute_layers}/stage"
    out = f"ZeRO-{p.zero_stage} rec={rec} {p.pipeline_schedule if p.pp > 1 else ''}".rstrip()
    if p.layers_per_stage is not None and len(set(p.layers_per_stage)) > 1:
        lps = p.layers_per_stage
        if len(lps) > 2 and len(set(lps[1:-1])) == 1:
            out += f" layers {lps[0]}/{lps[1]}x{len(lps) - 2}/{lps[-1]}"
        else:
            out += " layers " + "/".join(str(x) for x in lps)
    return out


def why_loses(best: Candidate, other: Candidate, name: str = "it") -> str:
    """One sentence: by how much ``other`` loses to ``best`` and the breakdown term that explains
    it, e.g. "the runner-up (tp=4 pp=8 ...) loses 6.0% to a larger pipeline bubble (+0.42 s per step)"."""
    if other.score <= best.score * (1 + 1e-12):
        return f"{name} ({_label(other)}) ties with the best"
    pct = other.score / best.score - 1
    # compare the score each breakdown term contributes (seconds per token, x GPUs for cost)
    def contrib(c: Candidate) -> dict:
        scale = c.score / c.result.step_time_s
        return {k: v * scale for k, v in c.result.breakdown.items()}

    a, b = contrib(best), contrib(other)
    diffs = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}
    worse = max(diffs, key=diffs.get)
    better = min(diffs, key=diffs.get)
    same_step = (best.result.num_gpus == other.result.num_gpus and best.plan.gbs == other.plan.gbs)
    verb = "costs" if best.objective.kind == "cost" else "loses"

    def amount(k: str) -> str:
        if same_step:
            d = other.result.breakdown.get(k, 0.0) - best.result.breakdown.get(k, 0.0)
            return f"{d:+.3g} s per step"
        return f"{diffs[k] / best.score:+.1%}"

    pct_text = f"{pct:.1%}" if pct >= 0.001 else f"{pct:.3%}"     # a near-tie still shows its size
    head = f"{name} ({_label(other)}) {verb} {pct_text}" + (" more" if verb == "costs" else "")
    text = f"{head} to {_PHRASES.get(worse, (worse,))[0]} ({amount(worse)})"
    if diffs[better] < -0.2 * diffs[worse]:
        text += f", partly offset by {_PHRASES.get(better, (None, better))[1]} ({amount(better)})"
    if best.result.num_gpus != other.result.num_gpus:
        text += f"; it uses {other.result.num_gpus} GPUs against {best.result.num_gpus}"
    elif best.plan.gbs != other.plan.gbs:
        text += f"; its global batch is {other.plan.gbs} against {best.plan.gbs}"
    return text


def candidate_dict(c: Candidate, rank: int, best: Candidate, model) -> dict:
    """One ranked candidate as plain data (units in key names)."""
    d = {
        "rank": rank,
        "score": c.score,
        "layout": c.shape.describe(),
        "plan": c.plan.to_dict(),
        "step_time_s": c.result.step_time_s,
        "tokens_per_s": c.result.tokens_per_s,
        "mfu": c.result.mfu,
        "memory_total_bytes": c.result.memory.total_bytes,
        "capacity_bytes": c.capacity_bytes,
        "headroom_bytes": c.headroom_bytes,
        "stage_headroom_bytes": [c.capacity_bytes - m.total_bytes for m in c.result.stage_memory],
        "bottleneck": c.result.bottleneck,
        "bottleneck_description": c.result.bottleneck_sentence(),
        "time_breakdown_s": dict(c.result.breakdown),
        **_launch_fields(c.plan, model),
        "why": None if rank == 1 else why_loses(best, c, "the runner-up" if rank == 2 else f"#{rank}"),
        "confidence": c.result.confidence.to_dict(),
    }
    if c.train_days is not None:
        d["train_days"] = c.train_days
    if c.cost_usd is not None:
        d["cost_usd"] = c.cost_usd
    return d


def result_dict(r: SearchResult, request: Optional[dict] = None) -> dict:
    """The whole search result as plain data for --json."""
    best = r.best
    return {
        "request": request or {},
        "objective": {"kind": r.objective.kind, "tokens": r.objective.tokens, "days": r.objective.days,
                      "price_per_gpu_hour_usd": r.objective.price_per_gpu_hour},
        "search": {**r.stats.to_dict(), "optimal": not r.notes},
        "plans": [{**candidate_dict(c, i + 1, best, r.model), "rank_label": label, "tied_with_best": i < r.ties}
                  for i, (c, label) in enumerate(zip(r.candidates, rank_labels(r)))],
        "ties": r.ties,
        "set_aside": [{"layout": c.shape.describe(), "zero_stage": c.shape.zero, "step_time_s": c.result.step_time_s,
                       "extrapolated": list(c.result.confidence.extrapolated),
                       "band_factor": c.result.confidence.factor, "why": set_aside_reason(c, r.candidates[0])}
                      for c in r.passed_over],
        "notes": list(r.notes),
    }


def _fmt_tokens(x: float) -> str:
    for unit, f in (("M", 1e6), ("k", 1e3)):
        if x >= f:
            return f"{x / f:.3g}{unit}"
    return f"{x:.3g}"


def format_text(r: SearchResult, request_line: str = "") -> str:
    """The human-readable table of the top plans, why each loses, and the search statistics."""
    s = r.stats
    best = r.best
    lines = []
    if request_line:
        lines.append(request_line)
    lines.append(f"searched {s.shapes:,} layouts in {s.elapsed_s:.2f} s: {s.simulated:,} simulated, "
                 f"{s.shapes_memory_pruned:,} ruled out by memory bounds, the rest by time bounds"
                 + ("" if r.notes else " (provably the best of the space under the cost model)"))
    lines.append("")
    head = (f"{'#':>3}  {'layout':<34} {'switches':<40} {'step':>8} {'80% band':>12} {'tokens/s':>9} {'MFU':>6} "
            f"{'headroom':>9}  bottleneck")
    lines.append(head)
    for label, c in zip(rank_labels(r), r.candidates):
        res = c.result
        lines.append(f"{label:>3}  {c.shape.describe():<34} {switches(c):<40} {res.step_time_s:>7.3f}s "
                     f"{res.confidence.short():>12} {_fmt_tokens(res.tokens_per_s):>9} {res.mfu:>6.1%} "
                     f"{c.headroom_bytes / GB:>6.1f} GB  "
                     f"{res.bottleneck} ({res.breakdown[res.bottleneck] / res.step_time_s:.0%})")
    lines += _confidence_lines(r)
    if len(r.candidates) > 1:
        lines.append("")
        lines.append("why not the others:")
        for i, c in enumerate(r.candidates[1:], 2):
            lines.append("  " + _why(r, best, c, i))
    if best.cost_usd is not None or best.train_days is not None:
        lines.append("")
        bits = []
        if best.train_days is not None:
            bits.append(f"{r.objective.tokens:.3g} tokens in {best.train_days:.1f} days")
        if best.cost_usd is not None:
            bits.append(f"${best.cost_usd:,.0f} at ${r.objective.price_per_gpu_hour:g}/GPU-hour")
        lines.append("best plan trains " + ", ".join(bits) + f" on {best.result.num_gpus} GPUs")
    mem = best.result.memory
    lines.append("")
    lines.append(f"best: {best.result.bottleneck_sentence()}; fullest device stage {mem.stage}: "
                 f"{mem.total_bytes / GB:.1f} of {best.capacity_bytes / GB:.1f} GB "
                 f"(weights {mem.weights_bytes / GB:.1f}, grads {mem.gradients_bytes / GB:.1f}, "
                 f"optimizer {mem.optimizer_bytes / GB:.1f}, activations {mem.activations_bytes / GB:.1f}, "
                 f"logits {mem.logits_bytes / GB:.1f})")
    for n in r.notes:
        lines.append(n)
    return "\n".join(lines)


def _why(r: SearchResult, best: Candidate, c: Candidate, i: int) -> str:
    """Why plan ``i`` is not first: a tie inside the band, or the term it loses on."""
    name = "the runner-up" if i == 2 else f"#{i}"
    if i <= r.ties:
        d = c.score / best.score - 1
        return (f"{name} ({_label(c)}) is a tie: {d:+.1%} against the plan listed first, inside the 80% band"
                + ("" if c.result.confidence.validated else "; it extrapolates beyond validated data"))
    return why_loses(best, c, name)


def _confidence_lines(r: SearchResult) -> list[str]:
    """The tie sentence and the best plan's confidence sentence."""
    out = [""]
    tie = tie_sentence(r)
    if tie:
        out.append(tie)
    out.append(f"confidence (plan 1): {r.best.result.confidence.sentence}")
    return out


def _launch_fields(plan, model) -> dict:
    """The plan's launch config in its framework's format (and, for Megatron, the argument list)."""
    from simulator.frameworks import get_framework
    from simulator.frameworks.launch import export_config
    if get_framework(plan.framework).export == "none":
        return {"launch_config": None}
    cfg = export_config(model, plan)
    out = {"launch_config": {"format": cfg.format, "filename": cfg.filename, "text": cfg.text, "notes": list(cfg.notes)}}
    if cfg.format == "megatron":
        from simulator.frameworks.megatron_config import megatron_arguments
        out["megatron_args"] = megatron_arguments(model, plan)[0]
        out["megatron_notes"] = list(cfg.notes)
    return out


def format_launch(c: Candidate, model, fmt: str) -> str:
    """The best plan's launch config in format ``fmt`` (PlanError if its framework writes another)."""
    from simulator.frameworks.launch import export_config, require_format
    require_format(c.plan, fmt)
    return export_config(model, c.plan).with_notes()


def plan_yaml_text(c: Candidate, model_name: str, cluster: str, filename: str = "plan.yaml") -> str:
    """The plan as YAML that ``meshcast simulate --plan`` (simulator.plan.load_plan) reads."""
    doc = {
        "plan": c.plan.to_dict(),
        "meshcast_plan": {
            "model": model_name, "cluster": cluster, "gpus": c.result.num_gpus,
            "predicted_step_time_s": c.result.step_time_s, "predicted_tokens_per_s": c.result.tokens_per_s,
            "predicted_mfu": c.result.mfu, "memory_total_bytes": c.result.memory.total_bytes,
        },
    }
    text = (f"# written by meshcast plan: {model_name} on {c.result.num_gpus} GPUs of {cluster}\n"
            f"# meshcast simulate --model {model_name} --cluster {cluster} --gpus {c.result.num_gpus} --plan {filename}\n")
    return text + yaml.safe_dump(doc, sort_keys=False)


def write_plan_yaml(c: Candidate, path: str | Path, model_name: str, cluster: str) -> None:
    """Write :func:`plan_yaml_text` to ``path``."""
    write_text_atomic(path, plan_yaml_text(c, model_name, cluster, Path(path).name), "write-plan")


def launch_config_text(model, plan) -> tuple[str, str]:
    """(title, text) of the launch config for ``plan`` in its framework's own format: the one place
    the reports ask for it (simulator/frameworks/launch.py: a Megatron-LM launch script, a
    torchtitan TOML or a DeepSpeed JSON with its launcher line), notes appended as comments."""
    from simulator.frameworks import get_framework
    from simulator.frameworks.launch import export_config
    fw = get_framework(plan.framework)
    if fw.export == "none":
        return f"{fw.name}: no launch config (it has no config format of its own)", ""
    cfg = export_config(model, plan)
    return f"{cfg.format} launch config ({cfg.filename})", cfg.with_notes()


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both throughput and headroom (both maximised)."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best_head = [], -math.inf
    for i in order:
        if points[i][1] > best_head:
            front.append(i)
            best_head = points[i][1]
    return front


def _label_groups(top: list, key) -> list[tuple[float, float, str]]:
    """Top plans that sit on the same point (rounded) share one label, so labels never overlap
    each other exactly: [(x, y, '1, 2'), ...]."""
    groups: dict[tuple, list[str]] = {}
    for i, c in enumerate(top, 1):
        x, y = key(c)
        groups.setdefault((round(x, 1), float(f"{y:.3g}")), []).append(str(i))
    return [(x, y, ", ".join(v)) for (x, y), v in groups.items()]


def pareto_figure(r: SearchResult, explored: list):
    """Throughput against memory headroom: every simulated plan that fits, the front, the top plans."""
    import plotly.graph_objects as go
    from simulator.palette import MARKS

    pts = [(e["tokens_per_s"], e["headroom_bytes"] / GB) for e in explored]
    labels = [e["label"] for e in explored]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[p[1] for p in pts], y=[p[0] for p in pts], mode="markers", name="simulated plans",
                             marker=dict(color=MARKS["simulated plans"], size=6), text=labels, hoverinfo="text+x+y"))
    front = sorted(pareto_front(pts), key=lambda i: pts[i][1])
    fig.add_trace(go.Scatter(x=[pts[i][1] for i in front], y=[pts[i][0] for i in front], mode="lines+markers",
                             name="Pareto front", line=dict(color=MARKS["Pareto front"]),
                             text=[labels[i] for i in front], hoverinfo="text+x+y"))
    top = r.candidates
    fig.add_trace(go.Scatter(x=[c.headroom_bytes / GB for c in top], y=[c.result.tokens_per_s for c in top],
                             mode="markers", name="top plans (rank)", marker=dict(color=MARKS["top plans"], size=11),
                             hovertext=[f"#{i} {c.shape.describe()} {switches(c)}" for i, c in enumerate(top, 1)],
                             hoverinfo="text+x+y"))
    for k, (x, y, text) in enumerate(_label_groups(top, lambda c: (c.headroom_bytes / GB, c.result.tokens_per_s))):
        fig.add_annotation(x=x, y=y, text=text, showarrow=True, arrowhead=0, ax=18 + 14 * (k % 3), ay=-22 - 12 * (k % 4),
                           font=dict(color=MARKS["top plans"], size=12), bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(title="Throughput against memory headroom of every simulated plan that fits",
                      xaxis_title="memory headroom of the fullest GPU (GB)", yaxis_title="throughput (tokens/s)",
                      template="plotly_white", height=520, legend=dict(orientation="h", y=-0.18, x=0))
    return fig


def ranked_table(r: SearchResult):
    """The ranked plans with their band, bottleneck and why each loses, as a report table."""
    from simulator.htmlpage import Cell, Table, num
    rows = []
    for i, (label, c) in enumerate(zip(rank_labels(r), r.candidates), 1):
        res = c.result
        rows.append([Cell(label), Cell(c.shape.describe()), Cell(switches(c)),
                     num(res.step_time_s, ".3f", f"plans.{i - 1}.step_time_s"), Cell(res.confidence.short()),
                     num(res.tokens_per_s, ",.0f", f"plans.{i - 1}.tokens_per_s"),
                     num(res.mfu, ".1%", f"plans.{i - 1}.mfu"),
                     num(c.headroom_bytes, ".1f", f"plans.{i - 1}.headroom_bytes", div=GB),
                     Cell(f"{res.bottleneck} ({res.breakdown[res.bottleneck] / res.step_time_s:.0%})",
                          key=f"plans.{i - 1}.bottleneck"),
                     Cell("best" if i == 1 else _why(r, r.best, c, i))])
    return Table("plans", ["#", "layout", "switches", "step (s)", "80% band", "tokens/s", "MFU", "headroom (GB)",
                           "bottleneck (share)", "why not first"], rows)


def write_html(r: SearchResult, explored: list, path: str | Path, title: str, model=None,
               request: Optional[dict] = None) -> None:
    """The plan report: inputs, the ranked table (band, bottleneck, ties), the Pareto chart and the
    chosen plan's YAML and launch config, copyable (simulator/htmlpage.py renders it)."""
    from simulator.htmlpage import Code, Page, Section, write_page

    req = request or {}
    best = r.best
    res = best.result
    inputs = [("model", req.get("model", res.model)),
              ("hardware", f"{req.get('gpus', res.num_gpus)} x {res.accelerator} ({req.get('cluster', res.cluster)})"),
              ("request", f"gbs {req.get('gbs', best.plan.gbs)} x seq {req.get('seq', best.plan.seq)}; objective "
                          f"{r.objective.kind}"),
              ("framework", req.get("framework", best.plan.framework)),
              ("calibration", req.get("calibration_note", res.calibration))]
    if req.get("min_headroom_note"):
        inputs.append(("memory headroom", req["min_headroom_note"]))
    s = r.stats
    inputs.append(("search", f"{s.shapes:,} layouts in {s.elapsed_s:.2f} s: {s.simulated:,} simulated, "
                             f"{s.shapes_memory_pruned:,} ruled out by memory bounds"
                             + ("" if r.notes else "; provably the best of the space under the cost model")))
    page = Page(title, "plan", inputs=inputs, verdict_ok=res.fits,
                verdict=f"Best plan: {best.shape.describe()} {switches(best)}: step {res.step_time_s:.3f} s "
                        f"({res.confidence.short()}), {res.tokens_per_s:,.0f} tokens/s, MFU {res.mfu:.1%}; "
                        f"{res.bottleneck_sentence()}; {best.headroom_bytes / GB:.1f} GB headroom.")
    page.summary = [("step time", f"{res.step_time_s:.3f} s", res.step_time_s, "plans.0.step_time_s"),
                    ("tokens/s", f"{res.tokens_per_s:,.0f}", res.tokens_per_s, "plans.0.tokens_per_s"),
                    ("MFU", f"{res.mfu:.1%}", res.mfu, "plans.0.mfu"),
                    ("headroom", f"{best.headroom_bytes / GB:.1f} GB", best.headroom_bytes, "plans.0.headroom_bytes")]
    notes = [n for n in (tie_sentence(r), f"Confidence (plan 1): {res.confidence.sentence}") if n] + list(r.notes)
    page.add(Section("Ranked plans", tables=[ranked_table(r)],
                     note=" ".join(n[0].upper() + n[1:].rstrip(".") + "." for n in notes)))
    page.add(Section("Pareto front: throughput against memory headroom", figure=pareto_figure(r, explored),
                     note="Every plan the search simulated that fits (plans ruled out by bounds are not simulated, "
                          "so they are not shown); the top plans carry their rank."))
    code = [Code("plan-yaml", "Plan YAML (meshcast simulate --plan plan.yaml)",
                 plan_yaml_text(best, req.get("model", res.model), req.get("cluster", res.cluster)))]
    if model is not None:
        t, text = launch_config_text(model, best.plan)
        code.append(Code("launch", t, text))
    page.add(Section("The chosen plan", code=code))
    write_page(page, path)
