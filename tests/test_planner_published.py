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


def _published_gain_over(row, rows) -> float:
    """The source's own measured gain over a ZeRO-3 row: the best throughput it publishes for the
    same model on the same GPU count without ZeRO-3 (Narayanan et al. 2021 Table 2's PTD-P rows),
    over this row's; 0 where it publishes none."""
    same = [r for r in rows if r["source"] == row["source"] and r["model"] == row["model"]
            and r["num_gpus"] == row["num_gpus"] and not r["zero_stage"].startswith("3")
            and r["measured_tflops_per_gpu"]]
    if not same or not row["zero_stage"].startswith("3"):
        return 0.0
    return max(float(r["measured_tflops_per_gpu"]) for r in same) / float(row["measured_tflops_per_gpu"])


# Claims beyond the planner's band that are neither full-recompute plans nor within a gain their source
# measured, each named with its cap (docs/planner.md, "Replaying published plans"): both NeMo 24.07 rows whose
# plans the planner replaces by tp 1 Megatron FSDP. GPT3-20B (x1.311) sat inside the ZeRO-3 band while
# Narayanan's DeepSpeed rows widened it to x1.40, and lies just outside since their per-rank gather copies are
# costed (x1.309). Nemotron-22B (x1.45, tp 2 pp 4 vp 10 -> tp 1 pp 1, 4 layers recomputed) since it is read with
# its 256,000-token vocabulary: the published plan carries that head (about 3.5 layers' GEMM work) on the last
# of its 4 stages, which a pp 1 plan does not have. LLAMA2-70B (x1.186: tp 4 pp 4 vp 20 -> tp 2 pp 16 vp 5)
# sat inside the calibrated multi-GPU band (x1.218) until session 26, when modelling llm-foundry's Triton
# attention brought that band's H100 rows in and narrowed it to x1.186, the same gain to three digits.
# The model's claims, to be checked by a run, not hidden.
CLAIMS_BEYOND_THE_BAND = {("GPT3-20B", 64): 1.3107, ("Nemotron-22B", 64): 1.452, ("LLAMA2-70B", 64): 1.19}


@pytest.mark.skipif(not PUBLISHED.exists(), reason="shared/validation not beside the checkout")
def test_claimed_gains_lie_in_the_band_or_are_the_documented_full_recompute_plans():
    """docs/planner.md 'Replaying published plans': the planner's gain over a published plan that
    fits lies inside its own 80% band, except on the 2021-22 Megatron plans with full recompute,
    which Korthikanti et al. 2022 measured to leave ~30% on the table (selective recompute + SP),
    and on a ZeRO-3 plan whose source itself published a faster plan for the same model and GPU
    count (Narayanan et al. 2021 Table 2: PTD-P at 141 against ZeRO-3's 44 TFLOP/s on 1,536 GPUs):
    there the claimed gain must not exceed the measured one."""
    from plan_vs_published import compare_row
    from hardware_specs.errors import MeshcastError
    rows = list(csv.DictReader(PUBLISHED.open()))
    inside = outside = measured_elsewhere = edge = 0
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
        if 1.0 < c["speedup"] <= _published_gain_over(row, rows):
            measured_elsewhere += 1       # the 174.6B ZeRO-3 row on 1,536 GPUs since its gathers' per-rank copies
            continue
        cap = CLAIMS_BEYOND_THE_BAND.get((row["model"], c["gpus"]))
        if cap is not None:
            assert c["speedup"] <= cap, c     # named, pinned claims the band does not cover (docs/planner.md)
            edge += 1
            continue
        outside += 1
        assert row["recompute"].startswith("full"), (row["model"], c)
        assert "recompute: full -> selective" in c["differences"] or "recompute: full -> none" in c["differences"] \
            or any(d.startswith("recompute_layers") for d in c["differences"]), c
        assert c["speedup"] < 1.75, c        # ratchet: 1.70 at most today
    # measured: 32 inside, 13 outside; since the 2021 ZeRO-3 gather's per-rank copies are costed
    # (zero3_2021.gather_buffer_s) and NeMo's Nemotron rows read with their 256k vocabulary: 29 inside, 13
    # outside, 1 within its source's own measured gain (174.6B ZeRO-3 on 1,536 GPUs: x1.40 against the paper's
    # x3.20 for PTD-P there) and the 2 named claims of CLAIMS_BEYOND_THE_BAND
    # (session 26: LLAMA2-70B at the narrowed band's edge joined them: 28 inside, 3 named)
    # (session 29, signed bands compared by half-width: GPT3-20B and LLAMA2-70B back inside: 32 inside, 12 full-
    # recompute plans outside, 1 within its source's gain, 1 named)
    assert inside >= 32 and outside <= 12 and measured_elsewhere <= 1 and edge <= 3, (inside, outside, measured_elsewhere, edge)
