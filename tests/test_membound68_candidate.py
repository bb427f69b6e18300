"""Candidate membound68 (issue #12 session 36, validation/membound68_fit.py): fp32 softmax rows at rates of
their own (``softmax_elements_per_cycle["reg_fp32" | "reg_wide_fp32" | "smem_fp32"]``, a factor
``softmax_warp_cycles["fp32"]`` on the warp kernel's per-element cycles), absent from the committed profiles."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from simulator.compute import softmax_forward_time, softmax_rate_key, softmax_warp_time, torch_softmax_kernel
from tests.kernel_profiles import committed_before_39, candidate, kernel_device

ROOT = Path(__file__).resolve().parent.parent
GPUS = ("h200", "h100")
FP32_KEYS = ("reg_fp32", "reg_wide_fp32", "smem_fp32")


def test_rate_key_takes_an_fp32_entry_only_where_the_profile_has_one():
    rates = {"reg": 1.0, "reg_wide": 0.9, "smem": 2.0}
    assert [softmax_rate_key(rates, k, "fp32") for k in ("reg", "reg_wide", "smem", "plain")] == ["reg", "reg_wide", "smem", "smem"]
    rates.update(reg_fp32=0.8, smem_fp32=1.5)
    assert softmax_rate_key(rates, "plain", "fp32") == "smem_fp32" and softmax_rate_key(rates, "reg", "fp32") == "reg_fp32"
    assert softmax_rate_key(rates, "reg_wide", "fp32") == "reg_wide"           # no entry of its own: the bf16 rate
    assert softmax_rate_key(rates, "smem", "bf16") == "smem"


@pytest.mark.parametrize("gpu", GPUS)
def test_committed_profiles_have_no_fp32_entries(gpu):
    cal = committed_before_39(gpu)
    assert not set(FP32_KEYS) & set(cal.softmax_elements_per_cycle) and "fp32" not in cal.softmax_warp_cycles


@pytest.mark.parametrize("gpu", GPUS)
def test_fp32_entries_change_fp32_rows_only(gpu):
    cal = committed_before_39(gpu)
    base, cand = kernel_device(gpu, cal), kernel_device(gpu, candidate(gpu, "membound68"))
    for rows, row in ((4096, 1536), (2000, 3000), (2000, 8000), (3000, 10240), (3000, 16384)):
        assert softmax_forward_time(cand, rows, row, "bf16") == softmax_forward_time(base, rows, row, "bf16")
        assert softmax_forward_time(cand, rows, row, "fp32") != softmax_forward_time(base, rows, row, "fp32")


@pytest.mark.parametrize("gpu", GPUS)
def test_warp_factor_scales_the_per_element_cycles(gpu):
    cal = committed_before_39(gpu)
    one = kernel_device(gpu, replace(cal, softmax_warp_cycles={**cal.softmax_warp_cycles, "fp32": 1.0}))
    two = kernel_device(gpu, replace(cal, softmax_warp_cycles={**cal.softmax_warp_cycles, "fp32": 2.0}))
    c, clock = cal.softmax_warp_cycles, one.accelerator.boost_clock_hz
    rows, row = 5000, 600
    assert softmax_warp_time(one, rows, row, dtype="fp32") == pytest.approx(softmax_warp_time(one, rows, row))
    per_element = (rows / one.accelerator.sm_count * c["element"] + c["latency"]) * row
    assert softmax_warp_time(two, rows, row, dtype="fp32") - softmax_warp_time(one, rows, row, dtype="fp32") == \
        pytest.approx(per_element / clock)


@pytest.mark.parametrize("gpu", GPUS)
def test_candidate_file_reproduces_its_fit_on_earlier_data_only(gpu):
    """The fit read row_kernels, torch_paths and the one registered draw with fp32 rows (68 / 69), not the draws
    it is registered for (70 / 71); only the four fp32 entries (and the H200's mask cost, refitted on top) differ
    from the committed profile; its recorded fp32 softmax MAPE is what it predicts on the fit records (H200 11.5 ->
    5.8%, H100 10.1 -> 4.5%)."""
    import yaml
    from validation import membound68_fit as m
    from validation.membound_fit import kind_errors
    path = ROOT / "validation" / "candidates" / f"{gpu}-sxm-membound68.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["candidate"].startswith("membound68") and f"seed-{m.DRAW[gpu] + 2}" in doc["candidate"]
    fit = next(v for k, v in doc["fits"].items() if k.startswith("compute[membound68"))
    assert fit["converged"] and fit["fitted_on"] == [f"validation/measurements/{gpu}_{n}.json" for n in m.fit_files(gpu)]
    assert not any(f"membound_random{s}" in f for f in doc["fitted_on"] for s in (70, 71))
    cand, committed = candidate(gpu, "membound68"), committed_before_39(gpu)
    same = replace(cand, name=committed.name, softmax_masked_cost=committed.softmax_masked_cost,
                   softmax_warp_cycles={k: v for k, v in cand.softmax_warp_cycles.items() if k != "fp32"},
                   softmax_elements_per_cycle={k: v for k, v in cand.softmax_elements_per_cycle.items() if k not in FP32_KEYS})
    assert same == committed
    assert (cand.softmax_masked_cost != committed.softmax_masked_cost) == (gpu == "h200")
    samples = m.fp32_softmax_samples(gpu)
    assert len(samples) == 63
    got, before = kind_errors(samples, cand)["softmax"], kind_errors(samples, committed)["softmax"]
    assert got[1] == pytest.approx(fit["fitted_error"]["softmax"]["mape"], abs=1e-4)
    assert got[1] < 0.06 < 0.10 < before[1]
    # the shared- and global-memory kernels' fp32 rate is the slowest change: 28-39% under the bf16 rate
    assert cand.softmax_elements_per_cycle["smem_fp32"] < 0.75 * cand.softmax_elements_per_cycle["smem"]


def test_draw_68_has_fp32_rows_of_every_kernel_but_reg_wide():
    from validation.prereg import harness
    kernels = {torch_softmax_kernel(c["hidden"], "fp32") for c in harness("membound_random").cases(seed=68)
               if c.get("dtype") == "float32"}
    assert kernels == {"warp", "reg", "smem", "plain"}


@pytest.mark.parametrize("seed,gpu,cases,min_changed,min_causal_changed", [
    (70, "h200", 192, 18, 0), (71, "h100", 192, 18, 0),      # code of 424c641: 24 fp32 rows per draw
    (72, "h200", 208, 0, 8), (73, "h100", 208, 0, 8),        # d582d03: 16 causal grids too (H200 12 change, H100 9)
    (74, "h200", 224, 0, 0), (75, "h100", 224, 0, 0)])       # afc5bde: the grids' N(0, 1) twins too
def test_later_seeds_registered_by_the_committed_model_and_by_the_candidate(seed, gpu, cases, min_changed,
                                                                            min_causal_changed):
    """Registered before either ran (session 36): every case once in each log, and the candidate changes fp32 softmax
    rows (plain and causal) and nothing else (not every one: some many-row grids sit on the copy floor)."""
    from tests.test_membound_random import registered
    from validation.prereg import harness
    h = harness("membound_random")
    today, cand = registered(gpu, seed), registered(gpu, seed, "_cand")
    assert list(today) == list(cand) == [h.label(c) for c in h.cases(seed=seed)] and len(today) == cases
    changed = {k for k in today if today[k] != cand[k]}
    assert changed <= {h.label(c) for c in h.cases(seed=seed) if c.get("dtype") == "float32"}
    assert len(changed) >= min_changed and sum(k.endswith("causal") for k in changed) >= min_causal_changed


# as registered beside the committed model (commit c0d9b12): {seed: {gpu: (pooled, fp32 softmax)}}
AS_REGISTERED_CAND = {70: {"h200": (0.0446, 0.0745)}, 71: {"h100": (0.0611, 0.0622)}}
# the third pair (commit 3d4e850): {seed: {gpu: (pooled, fp32 softmax, causal fp32 softmax)}}
AS_REGISTERED_CAND_CAUSAL = {72: {"h200": (0.0454, 0.0617, 0.1026)}, 73: {"h100": (0.0449, 0.0623, 0.0896)}}


@pytest.mark.parametrize("seed,gpu", [(70, "h200"), (71, "h100")])
def test_candidate_as_registered_on_seeds_70_71(seed, gpu):
    """fp32 softmax H200 14.45 -> 7.45%, H100 13.2 -> 6.2% (pooled 5.34 -> 4.46%, 6.98 -> 6.11%); every other kind as
    the committed model. With it every kind of the H200 draw is within 8%, and of the H100 draw without the 14 records
    whose calls spread over 3x (rmsnorm 10.2% with them). Not adopted in session 36: Megatron-Core local attention's
    composite records get 1-1.5 points worse (its batched GEMMs are costed slow by about what its memory-bound parts
    were costed fast: docs/validation.md, "Session 36")."""
    from tests.test_membound_random import AS_REGISTERED_SINCE_ADOPTION, assert_as_quoted, scored
    cand, _ = scored(gpu, seed, "_cand")
    pooled, fp32 = AS_REGISTERED_CAND[seed][gpu]
    assert_as_quoted(cand, {**AS_REGISTERED_SINCE_ADOPTION[seed][gpu], "all": pooled, "softmax_fp32": fp32})
    today, _ = scored(gpu, seed)
    assert cand["softmax_fp32"] < today["softmax_fp32"] - 0.06
    clean, _ = scored(gpu, seed, "_cand", drop_interference=True)
    assert max(clean.values()) <= 0.08


@pytest.mark.parametrize("seed,gpu", [(72, "h200"), (73, "h100")])
def test_candidate_as_registered_on_seeds_72_73(seed, gpu):
    """fp32 softmax H200 17.2 -> 6.2%, H100 10.9 -> 6.2%: within 8% on its second registered pair too; the causal fp32
    grids 20.1 -> 10.3% and 13.6 -> 9.0%, still over 8%: one mask multiplier (H200 1.569 refitted on four instep pairs,
    H100 none) does not follow the kernels. The warp kernel's causal rows need a mask cost (H100, none: -7..-23%), the
    register kernel's little (H200 with 1.569: +11..+25%; H100 with none: -2..-10%)."""
    from tests.test_membound_random import AS_REGISTERED_SINCE_ADOPTION, assert_as_quoted, scored
    cand, _ = scored(gpu, seed, "_cand")
    pooled, fp32, causal = AS_REGISTERED_CAND_CAUSAL[seed][gpu]
    assert_as_quoted(cand, {**AS_REGISTERED_SINCE_ADOPTION[seed][gpu], "all": pooled, "softmax_fp32": fp32,
                            "softmax_fp32_causal": causal})
    today, _ = scored(gpu, seed)
    assert cand["softmax_fp32"] <= 0.08 < today["softmax_fp32"]
    assert 0.08 < cand["softmax_fp32_causal"] < today["softmax_fp32_causal"]
    assert max(v for k, v in cand.items() if k != "softmax_fp32_causal") <= 0.08


def test_the_mask_costs_every_kernel_on_h200_seed_74():
    """The causal grids of seed 74 (H200) beside their N(0, 1) twins, same shape, timed back to back: the mask costs
    16-27% in every kernel (warp 17-27%, register 16-19%, wide register 16%), the size the four instep pairs showed
    (17-23%). Development data for a mask model per kernel; no model is judged here."""
    import json
    recs = json.loads((ROOT / "validation" / "measurements" / "h200_membound_random74.json").read_text())["records"]
    pairs: dict = {}
    for r in recs:
        if r.get("data"):
            pairs.setdefault((r["tokens"], r["hidden"]), {})[r["data"]] = r["time_s"]
    ratios = {k: v["causal_scores"] / v["randn"] for k, v in pairs.items()}
    assert len(ratios) == 16 and all(1.15 <= x <= 1.28 for x in ratios.values())


@pytest.mark.parametrize("seed,gpu,pooled,fp32,causal,grid", [(74, "h200", 0.0448, 0.0547, 0.1184, 0.0614),
                                                              (75, "h100", 0.0557, 0.0526, 0.1127, 0.0421)])
def test_candidate_as_registered_on_seeds_74_75(seed, gpu, pooled, fp32, causal, grid):
    """fp32 softmax H200 13.2 -> 5.5%, H100 10.7 -> 5.3% (its third registered pair within 8%), the unmasked grids
    8.3 -> 6.1% and 8.0 -> 4.2%; the causal grids H200 10.1 -> 11.8% (worse: its mask multiplier 1.569 charges ~28%
    where the mask costs 16-27%), H100 16.4 -> 11.3% (no mask cost there)."""
    from tests.test_membound_random import AS_REGISTERED_SINCE_ADOPTION, assert_as_quoted, scored
    cand, _ = scored(gpu, seed, "_cand")
    assert_as_quoted(cand, {**AS_REGISTERED_SINCE_ADOPTION[seed][gpu], "all": pooled, "softmax_fp32": fp32,
                            "softmax_fp32_causal": causal, "softmax_fp32_grid": grid})
