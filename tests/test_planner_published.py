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
