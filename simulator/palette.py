"""One palette for every report: a category keeps its colour in the simulate, plan, validate and
what-if reports (and a test holds them to it).

    color_of(name)     -> '#rrggbb' of a named category (breakdown term, memory part, op kind, pass)
    series_color(i)    -> the i-th colour of the series palette (20 colours before any repeat)

Categories are matched by the names the reports show (``BOTTLENECK_NAMES`` values, memory part
names, op kinds), so a legend entry with the same words has the same colour on every page.
"""
from __future__ import annotations

# Step-time breakdown terms (simulator.result.BOTTLENECK_NAMES keys) and the communication tracks.
BREAKDOWN = {
    "compute": "#4C78A8", "tp": "#F58518", "cp": "#B279A2", "ep": "#E45756", "dp": "#72B7B2",
    "pp": "#54A24B", "bubble": "#BAB0AC", "optimizer": "#9D755D", "host": "#EECA3B",
}
# Memory parts of the fullest device.
MEMORY = {
    "weights": "#1F77B4", "gradients": "#AEC7E8", "optimizer states": "#8C564B", "activations": "#FF7F0E",
    "logits / loss": "#C49C94", "workspace + fragmentation": "#C7C7C7",
}
# Kernel kinds on rooflines and in traces; passes on pipeline timelines.
OPS = {"gemm": "#3366CC", "attention": "#DC3912", "elementwise": "#109618", "memory": "#990099",
       "collective": "#FF9900"}
PASSES = {"forward": "#6BAED6", "backward": "#2171B5", "recompute": "#9ECAE1"}
MARKS = {"HBM capacity": "#D62728", "roofline": "#000000", "y = x": "#555555", "Pareto front": "#3182BD",
         "top plans": "#D62728", "simulated plans": "#BDBDBD", "compute-bound": "#3366CC",
         "memory-bound": "#990099"}

# 20 distinguishable colours (Tableau 20 order: dark then light of each hue) for series without a
# category of their own (validation kinds, what-if groups).
SERIES = ["#4E79A7", "#F28E2B", "#E15759", "#76B7B2", "#59A14F", "#EDC948", "#B07AA1", "#FF9DA7",
          "#9C755F", "#BAB0AC", "#A0CBE8", "#FFBE7D", "#FF9D9A", "#8CD17D", "#B6992D", "#F1CE63",
          "#499894", "#86BCB6", "#D37295", "#D4A6C8"]

# Validation record kinds (MEASUREMENTS.md) and published-run metrics, each its own colour from SERIES.
KINDS = ["gemm", "attention_fwd", "attention_fwd_bwd", "add", "copy", "gelu", "layernorm", "rmsnorm", "silu_mul",
         "softmax", "train_step", "all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter",
         "send_recv", "iteration_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu"]
assert len(KINDS) <= 20 and len(set(KINDS)) == len(KINDS)

CATEGORY_COLORS: dict[str, str] = {}
for _table in (BREAKDOWN, MEMORY, OPS, PASSES, MARKS):
    for _k, _v in _table.items():
        CATEGORY_COLORS.setdefault(_k, _v)


def _breakdown_names() -> dict[str, str]:
    from simulator.result import BOTTLENECK_NAMES
    return {v: BREAKDOWN[k] for k, v in BOTTLENECK_NAMES.items() if k in BREAKDOWN}


def series_color(i: int) -> str:
    """The i-th series colour (20 before any repeat)."""
    return SERIES[i % len(SERIES)]


def kind_color(kind: str) -> str:
    """A validation record kind's colour: fixed by KINDS order, else a stable hash into SERIES."""
    if kind in KINDS:
        return series_color(KINDS.index(kind))
    return series_color(sum(map(ord, kind)))


def color_of(name: str) -> str:
    """The colour of a named category (short key or the words the reports show)."""
    if name in CATEGORY_COLORS:
        return CATEGORY_COLORS[name]
    long = _breakdown_names()
    if name in long:
        return long[name]
    raise KeyError(f"no palette colour for category {name!r}")
