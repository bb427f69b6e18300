"""Planner output: the ranked table, why each runner-up loses, JSON, plan YAML and the HTML
Pareto front (throughput vs memory headroom)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import yaml

from hardware_specs.fileio import write_text_atomic
from planners.search import Candidate, SearchResult
from planners.ties import rank_labels, tie_sentence

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


def write_plan_yaml(c: Candidate, path: str | Path, model_name: str, cluster: str) -> None:
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
            f"# meshcast simulate --model {model_name} --cluster {cluster} --gpus {c.result.num_gpus} --plan {Path(path).name}\n")
    write_text_atomic(path, text + yaml.safe_dump(doc, sort_keys=False), "write-plan")


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both throughput and headroom (both maximised)."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best_head = [], -math.inf
    for i in order:
        if points[i][1] > best_head:
            front.append(i)
            best_head = points[i][1]
    return front


def write_html(r: SearchResult, explored: list, path: str | Path, title: str) -> None:
    """Self-contained plotly page: every simulated plan that fits, its Pareto front, the top-k."""
    import plotly.graph_objects as go

    pts = [(e["tokens_per_s"], e["headroom_bytes"] / GB) for e in explored]
    labels = [e["label"] for e in explored]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[p[1] for p in pts], y=[p[0] for p in pts], mode="markers", name="simulated plans",
                             marker=dict(color="lightgray", size=6), text=labels, hoverinfo="text+x+y"))
    front = sorted(pareto_front(pts), key=lambda i: pts[i][1])
    fig.add_trace(go.Scatter(x=[pts[i][1] for i in front], y=[pts[i][0] for i in front], mode="lines+markers",
                             name="Pareto front", line=dict(color="royalblue"), text=[labels[i] for i in front],
                             hoverinfo="text+x+y"))
    top = r.candidates
    fig.add_trace(go.Scatter(x=[c.headroom_bytes / GB for c in top], y=[c.result.tokens_per_s for c in top],
                             mode="markers+text", name="top plans", marker=dict(color="crimson", size=11),
                             text=[str(i) for i in range(1, len(top) + 1)], textposition="top center",
                             hovertext=[f"{c.shape.describe()} {switches(c)}" for c in top], hoverinfo="text+x+y"))
    fig.update_layout(title=title, xaxis_title="memory headroom of the fullest device (GB)",
                      yaxis_title="throughput (tokens/s)", template="plotly_white")
    table = "".join(f"<tr><td>{i}</td><td>{c.shape.describe()}</td><td>{switches(c)}</td>"
                    f"<td>{c.result.step_time_s:.3f}</td><td>{c.result.tokens_per_s:,.0f}</td>"
                    f"<td>{c.result.mfu:.1%}</td><td>{c.headroom_bytes / GB:.1f}</td></tr>"
                    for i, c in enumerate(top, 1))
    why = "".join(f"<li>{why_loses(r.best, c, 'the runner-up' if i == 2 else f'#{i}')}</li>"
                  for i, c in enumerate(top[1:], 2))
    html = fig.to_html(include_plotlyjs=True, full_html=False)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h2>{title}</h2><p>Every plan the search simulated that fits (plans ruled out by bounds are "
            f"not simulated, so they are not shown).</p>{html}"
            f"<table border=1 cellpadding=4><tr><th>#</th><th>layout</th><th>switches</th><th>step s</th>"
            f"<th>tokens/s</th><th>MFU</th><th>headroom GB</th></tr>{table}</table><ul>{why}</ul></body></html>")
    write_text_atomic(path, page, "output")
