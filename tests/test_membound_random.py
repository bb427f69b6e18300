"""The memory-bound random draw (validation/harness/membound_random.py, session 21): every kind the
kernel suite fits, at 24 seeded random shapes each, predicted before it was measured
(validation/measurements/logs/prereg_membound40_{h200,h100}.txt)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.calibration import profile_fitted_on
from validation.prereg import harness

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "validation" / "measurements" / "logs"
GPUS = ("h200", "h100")


def registered(gpu: str) -> dict[str, float]:
    """{case label: registered seconds} of a registration log (``#`` lines are comments)."""
    out = {}
    for line in (LOGS / f"prereg_membound40_{gpu}.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"(.*\S)\s+([0-9.]+) us$", line)
        out[m.group(1)] = float(m.group(2)) * 1e-6
    return out


def test_draw_is_seeded_and_covers_every_kind():
    h = harness("membound_random")
    cs = h.cases()
    assert cs == h.cases(seed=h.SEED) and cs != h.cases(seed=h.SEED + 1)
    kinds = [c["kind"] for c in cs]
    assert len(cs) == 168 and {k: kinds.count(k) for k in set(kinds)} == {k: 24 for k in ("copy",) + h.KINDS}
    rows = [c for c in cs if c["kind"] != "copy"]
    assert all(c["hidden"] % 8 == 0 and 512 <= c["hidden"] <= 32768 and 256 <= c["tokens"] <= 65536
               and c["tokens"] * c["hidden"] <= h.MAX_ELEMENTS for c in rows)
    # most row lengths are no power of two (the kernel suite's grid is powers of two and 12288)
    assert sum(c["hidden"] & (c["hidden"] - 1) != 0 for c in rows) > 0.9 * len(rows)
    assert all(c["nbytes"] % 4096 == 0 and (1 << 18) <= c["nbytes"] + 4096 for c in cs if c["kind"] == "copy")


@pytest.mark.parametrize("gpu", GPUS)
def test_registration_holds_every_case_once(gpu):
    h = harness("membound_random")
    reg = registered(gpu)
    assert list(reg) == [h.label(c) for c in h.cases()] and all(t > 0 for t in reg.values())
    assert "seed 40" in (LOGS / f"prereg_membound40_{gpu}.txt").read_text()


def test_suite_never_fitted():
    for profile in ("h200-sxm", "h100-sxm"):
        assert not any("membound" in f for f in profile_fitted_on(profile))
