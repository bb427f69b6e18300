"""Ties in the planner's ranking: plans whose predicted difference lies inside the best plan's
80% band (simulator/confidence.py) are ties the model cannot tell apart. Among ties the plan in
the better-validated region wins (fewer extrapolated features, then a better-measured GPU), then
the search's own order (score, then cheaper switches). The search itself stays exact: this only
reorders the returned candidates and says how many lead as ties.
"""
from __future__ import annotations

from dataclasses import replace


def tied_count(candidates: list) -> int:
    """How many leading candidates (in score order) lie within the top plan's 80% band: plan i
    ties when score_i <= score_1 x band factor of plan 1 (its step could be that much longer)."""
    if not candidates:
        return 0
    top = candidates[0]
    limit = top.score * top.result.confidence.factor
    return sum(1 for c in candidates if c.score <= limit)


def apply_ties(result, keep: int | None = None):
    """A copy of a SearchResult whose leading tied plans are ordered by validation (then by the
    search's order), cut to the first ``keep`` plans, and whose ``ties`` says how many of those
    lead as ties (1: no tie). Searching a wider pool than ``keep`` lets a validated plan that
    ties with the top one lead even where the search ranked it below ``keep``."""
    cands = list(result.candidates)
    n = tied_count(cands)
    order = {id(c): i for i, c in enumerate(cands)}
    head = sorted(cands[:n], key=lambda c: (c.result.confidence.rank(), order[id(c)]))
    shown = (head + cands[n:])[:keep] if keep else head + cands[n:]
    passed = [c for c in head if c not in shown and c.score < shown[0].score]
    return replace(result, candidates=shown, ties=min(n, len(shown)), passed_over=passed)


def rank_labels(result) -> list[str]:
    """Rank column text: '1=' for each of the tied leaders, then 2, 3, ... by position."""
    n = getattr(result, "ties", 1) or 1
    if n <= 1:
        return [str(i) for i in range(1, len(result.candidates) + 1)]
    return ["1="] * n + [str(i) for i in range(n + 1, len(result.candidates) + 1)]


def tie_sentence(result) -> str | None:
    """'plans 1-4 are within the 80% band of each other: ...' or None without a tie."""
    n = getattr(result, "ties", 1) or 1
    if n <= 1:
        return None
    best = result.candidates[0]
    conf = best.result.confidence
    pref = ("the one listed first rests on validated data" if conf.validated else
            "none of them rests only on validated data; the one listed first has the fewest extrapolations")
    spread = max(c.score for c in result.candidates[:n]) / min(c.score for c in result.candidates[:n]) - 1
    text = (f"plans 1-{n} are within the 80% band of the top prediction ({conf.short()}; they differ by up to "
            f"{spread:.1%}): the model cannot tell them apart; {pref}, then cheaper switches")
    return text + _passed_over(result)


def set_aside_reason(cand, leader) -> str:
    """Why a tied, faster plan was listed after ``leader``: its first extrapolation, else that its
    80% band is wider (its regime's validation data pin it down less tightly)."""
    conf = cand.result.confidence
    if conf.extrapolated:
        return f"extrapolated: {conf.extrapolated[0]}"
    return f"a wider 80% band ({conf.short()} against {leader.result.confidence.short()}): less validated"


def _passed_over(result) -> str:
    """'; set aside: N tied plans predicted faster on less validated ground (fastest: ...)' or ''."""
    passed = getattr(result, "passed_over", None) or []
    if not passed:
        return ""
    fast = min(passed, key=lambda c: c.score)
    gain = result.candidates[0].result.step_time_s / fast.result.step_time_s - 1
    return (f"; set aside: {len(passed)} tied plan(s) predicted up to {gain:.1%} faster on less validated ground "
            f"(fastest: {fast.shape.describe()} ZeRO-{fast.shape.zero}, {fast.result.step_time_s:.3f} s: "
            f"{set_aside_reason(fast, result.candidates[0])})")
