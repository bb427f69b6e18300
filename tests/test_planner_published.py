"""The planner's best is predicted at least as fast as published plans (same cost model,
same switches), and the comparison names what differs. The full table:
``python benchmarks/plan_vs_published.py``."""
import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT.parent / "shared" / "validation" / "published_runs.csv"
if not PUBLISHED.exists():
    PUBLISHED = ROOT / "validation" / "published" / "published_runs.csv"   # the committed copy
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.skipif(not PUBLISHED.exists(), reason="shared/validation not beside the checkout")
@pytest.mark.parametrize("row", [25, 58, 62])
def test_planner_at_least_as_fast_as_published_plan(row):
    from plan_vs_published import compare_row
    rows = list(csv.DictReader(PUBLISHED.open()))
    c = compare_row(rows[row])
    assert c["published_fits"]
    assert c["planner_step_s"] <= c["published_step_s"] * (1 + 1e-9)
    if c["speedup"] > 1.001:
        assert c["differences"], "a faster plan must differ from the published one"


@pytest.mark.skipif(not PUBLISHED.exists(), reason="shared/validation not beside the checkout")
def test_claimed_gains_lie_in_the_band_or_are_the_documented_full_recompute_plans():
    """docs/planner.md 'Replaying published plans': the planner's gain over a published plan that
    fits lies inside its own 80% band, except on the 2021-22 Megatron plans with full recompute,
    which Korthikanti et al. 2022 measured to leave ~30% on the table (selective recompute + SP)."""
    from plan_vs_published import compare_row
    from hardware_specs.errors import MeshcastError
    rows = list(csv.DictReader(PUBLISHED.open()))
    inside = outside = 0
    for row in rows:
        try:
            c = compare_row(row)
        except MeshcastError:
            continue
        if not c["published_fits"]:
            continue
        if c["speedup"] <= c["band_factor"]:
            inside += 1
            continue
        outside += 1
        assert row["recompute"].startswith("full"), (row["model"], c)
        assert "recompute: full -> selective" in c["differences"] or "recompute: full -> none" in c["differences"] \
            or any(d.startswith("recompute_layers") for d in c["differences"]), c
        assert c["speedup"] < 1.75, c        # ratchet: 1.70 at most today
    assert inside >= 32 and outside <= 13, (inside, outside)   # measured: 32 inside, 13 outside
