"""How much a GEMM's time moves with its operand layout alone (issue #12, session 44).

The records of validation/harness/gemm_layouts.py time each (m, n, k) of a seeded bf16 draw as
``torch.mm`` with A and B contiguous (``NN``, what the random GEMM draws time), B a transposed view
(``NT``: a linear layer's forward) and A a transposed view (``TN``: its weight gradient), twice each.
meshcast's GEMM model (simulator.compute.gemm_time) takes no layout: it predicts one time per shape.
This module measures what that costs:

* ``layout_moves``: mean |t_NT / t_NN − 1| and |t_TN / t_NN − 1| over the shapes, and the median of
  each signed ratio (a layout that were simply slower would show a median away from 0);
* ``layout_floor``: the MAPE of each layout's time against the geometric mean of the shape's three
  times, the least a single per-shape prediction can miss by on average when the layout is any of
  the three (the geometric mean minimises the summed squared log error; for MAPE it is near-optimal);
* ``model_mape``: the committed model against each layout.

    python -m validation.gemm_layouts [FILE ...]   (default: the committed layout runs)

Timings per shape are the faster of the two passes (validation.gemm_regimes.reproduced_times).
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from validation.gemm_regimes import reproduced_times
from validation.records import load_measurements

LAYOUTS = ("NN", "NT", "TN")
RUNS = tuple(Path(__file__).resolve().parent / "measurements" / "repeat" / f
             for f in ("h100_gemm_layouts90.json", "h200_gemm_layouts90.json", "h200_gemm_layouts91.json"))


@dataclass(frozen=True)
class LayoutShape:
    """One shape's seconds per layout (the faster pass), its kernels per layout and the pass spread."""
    m: int
    n: int
    k: int
    seconds: dict
    kernels: dict
    spread: float


def layout_shapes(path) -> list[LayoutShape]:
    """Every shape of a layout run timed in all three layouts."""
    recs = [r for r in load_measurements(path).records if r.get("set") == "layouts"]
    by: dict = {}
    for lay in LAYOUTS:
        for r in reproduced_times([dict(x) for x in recs if x["layout"] == lay]):
            d = by.setdefault((r["m"], r["n"], r["k"]), {"s": {}, "kern": {}, "spread": 0.0})
            d["s"][lay] = r["time_s"]
            d["kern"][lay] = tuple(sorted(k["name"] for k in r.get("kernels") or []))
            d["spread"] = max(d["spread"], r.get("pass_spread", 0.0))
    return [LayoutShape(*key, d["s"], d["kern"], d["spread"]) for key, d in by.items() if len(d["s"]) == len(LAYOUTS)]


def layout_moves(shapes: list[LayoutShape]) -> dict:
    """{'NT'|'TN': (mean |t/t_NN − 1|, median signed t/t_NN − 1)} and 'both': the mean over the two."""
    out = {}
    for lay in ("NT", "TN"):
        r = [s.seconds[lay] / s.seconds["NN"] - 1.0 for s in shapes]
        out[lay] = (statistics.fmean(abs(x) for x in r), statistics.median(r))
    out["both"] = (out["NT"][0] + out["TN"][0]) / 2
    return out


def layout_floor(shapes: list[LayoutShape]) -> float:
    """MAPE of every layout's seconds against its shape's geometric mean over the three layouts."""
    errs = []
    for s in shapes:
        g = math.exp(statistics.fmean(math.log(t) for t in s.seconds.values()))
        errs += [abs(t / g - 1.0) for t in s.seconds.values()]
    return statistics.fmean(errs)


def kernel_changes(shapes: list[LayoutShape]) -> int:
    """How many shapes run a different cuBLAS kernel in some layout (names without the layout suffix
    letters compared: the tile, cluster and split choice)."""
    def tiles(names):
        return tuple(n.rsplit("_", 1)[0] for n in names)
    return sum(len({tiles(s.kernels[lay]) for lay in LAYOUTS}) > 1 for s in shapes)


def model_mape(path, shapes: list[LayoutShape]) -> dict:
    """{layout: MAPE} of the committed model (one time per shape) against each layout's seconds."""
    from simulator.calibration import calibration_for
    from validation.hardware import hardware_for
    from validation.predict import predict_record
    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    pred = [predict_record(dict(kind="gemm", m=s.m, n=s.n, k=s.k, dtype="bfloat16", flops=2.0 * s.m * s.n * s.k),
                           hw, cal).time_s for s in shapes]
    return {lay: statistics.fmean(abs(p / s.seconds[lay] - 1.0) for p, s in zip(pred, shapes)) for lay in LAYOUTS}


def main(argv=None) -> int:
    for path in (argv if argv else [str(p) for p in RUNS]):
        shapes = layout_shapes(path)
        moves, mape = layout_moves(shapes), model_mape(path, shapes)
        print(f"{Path(path).name}: {len(shapes)} shapes, pass spread median "
              f"{statistics.median(s.spread for s in shapes):.1%}; another kernel in some layout: "
              f"{kernel_changes(shapes)}")
        for lay in ("NT", "TN"):
            print(f"  {lay} vs NN: mean |change| {moves[lay][0]:.1%}, median {moves[lay][1]:+.1%}")
        print(f"  floor of a layout-free prediction (vs the geometric mean): {layout_floor(shapes):.1%}")
        print("  committed model: " + ", ".join(f"{lay} {v:.1%}" for lay, v in mape.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
