"""The memory-bound random draw (validation/harness/membound_random.py, session 21): every kind the
kernel suite fits, at 24 seeded random shapes each, predicted before it was measured
(validation/measurements/logs/prereg_membound40_{h200,h100}.txt)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.kernel_profiles import with_later_fits_of

from simulator.calibration import profile_fitted_on
from validation.prereg import harness

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "validation" / "measurements" / "logs"
GPUS = ("h200", "h100")


def registered(gpu: str, seed: int = 40, suffix: str = "") -> dict[str, float]:
    """{case label: registered seconds} of a registration log (``#`` lines are comments)."""
    out = {}
    for line in (LOGS / f"prereg_membound{seed}_{gpu}{suffix}.txt").read_text().splitlines():
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


def test_fp32_softmax_rows_from_seed_68_leave_the_bf16_cases_as_they_were():
    """From seed 68 (session 36) a draw adds 24 fp32 softmax rows from a generator of their own: the 168 bf16
    cases of every seed are what they were, and earlier seeds have no fp32 row (their files stay comparable)."""
    h = harness("membound_random")
    assert h.fp32_softmax_cases(67) == [] and len(h.cases(seed=67)) == 168
    cs = h.cases(seed=68)
    fp32 = [c for c in cs if c.get("dtype") == "float32"]
    assert len(cs) == 192 and cs[-24:] == fp32 and all(c["kind"] == "softmax" for c in fp32)
    assert h.fp32_softmax_cases(68) != h.fp32_softmax_cases(69)
    assert all(c["tokens"] * c["hidden"] <= h.MAX_ELEMENTS and c["hidden"] % 8 == 0 for c in fp32)
    assert h.bytes_min(fp32[0]) == 2 * fp32[0]["tokens"] * fp32[0]["hidden"] * 4
    # PyTorch's kernel choice spans the warp, register, shared-memory and global-memory kernels in fp32 too
    from simulator.compute import torch_softmax_kernel
    assert {torch_softmax_kernel(c["hidden"], "fp32").split("_")[0] for c in fp32} >= {"warp", "reg", "plain"}


def test_causal_softmax_grids_from_seed_72():
    """From seed 72 a draw adds 16 causally masked fp32 softmax grids (bh blocks of s x s scores), after the bf16
    and fp32 rows, from a generator of their own; the model reads their masked fraction (s - 1) / 2s."""
    from validation.predict import record_masked
    h = harness("membound_random")
    assert h.causal_softmax_cases(71) == [] and len(h.cases(seed=71)) == 192
    cs = h.cases(seed=72)
    causal = [c for c in cs if c.get("data") == "causal_scores"]
    assert len(cs) == 208 and cs[-16:] == causal and cs[:192] == [c for c in cs if c.get("data") is None]
    assert all(c["dtype"] == "float32" and c["tokens"] % c["hidden"] == 0 and 512 <= c["hidden"] <= 8192
               and c["tokens"] * c["hidden"] <= h.MAX_ELEMENTS for c in causal)
    assert len({h.label(c) for c in cs}) == len(cs) and h.label(causal[0]).endswith("float32 causal")
    s = causal[0]["hidden"]
    assert record_masked(h.record_of(causal[0])) == pytest.approx((s - 1) / (2 * s))


def test_causal_grids_have_randn_twins_from_seed_74():
    """From seed 74 each causal grid is followed by a twin of the same shape holding N(0, 1) scores (unmasked: the
    model reads no mask in it); seeds 72 and 73 keep their 16 causal grids alone."""
    from validation.predict import record_masked
    h = harness("membound_random")
    assert len(h.cases(seed=73)) == 208 and len(h.cases(seed=74)) == 224
    grids = [c for c in h.cases(seed=74) if c.get("data")]
    assert [c["data"] for c in grids] == ["causal_scores", "randn"] * 16
    assert all(a["tokens"] == b["tokens"] and a["hidden"] == b["hidden"] for a, b in zip(grids[::2], grids[1::2]))
    assert all(record_masked(h.record_of(c)) == 0.0 for c in grids[1::2])
    assert h.label(grids[1]).endswith("float32 grid") and len({h.label(c) for c in h.cases(seed=74)}) == 224


@pytest.mark.parametrize("seed,gpu", [(68, "h200"), (69, "h100")])
def test_seeds_68_69_registered_with_every_case_once(seed, gpu):
    """Registered in session 36 by the model that adopted membound66 (commit 6fd69f0), before either ran."""
    h = harness("membound_random")
    reg = registered(gpu, seed)
    assert list(reg) == [h.label(c) for c in h.cases(seed=seed)] and len(reg) == 192 and all(t > 0 for t in reg.values())
    assert "commit 6fd69f0" in (LOGS / f"prereg_membound{seed}_{gpu}.txt").read_text()


@pytest.mark.parametrize("gpu", GPUS)
def test_registration_holds_every_case_once(gpu):
    h = harness("membound_random")
    reg = registered(gpu)
    assert list(reg) == [h.label(c) for c in h.cases()] and all(t > 0 for t in reg.values())
    assert "seed 40" in (LOGS / f"prereg_membound40_{gpu}.txt").read_text()


@pytest.mark.parametrize("gpu", GPUS)
def test_seed_41_registered_with_the_softmax_wave_candidate(gpu):
    """Seed 41 is registered twice per GPU before it runs: by the committed model and by the candidate
    that costs PyTorch's shared-memory / global-memory softmax kernels per wave
    (validation/candidates/*-sxm-softmax-wave.yaml). The two differ only in those kernels' cases."""
    from simulator.compute import torch_softmax_kernel
    h = harness("membound_random")
    cs = h.cases(seed=41)
    today, cand = registered(gpu, 41), registered(gpu, 41, "_softwave")
    assert list(today) == list(cand) == [h.label(c) for c in cs]
    block = {h.label(c) for c in cs if c["kind"] == "softmax" and torch_softmax_kernel(c["hidden"], "bf16") in ("smem", "plain")}
    assert {k for k in today if today[k] != cand[k]} == block and len(block) >= 4


@pytest.mark.parametrize("gpu", GPUS)
def test_seed_42_registered_with_the_membound42_candidate(gpu):
    """Seed 42 is registered twice per GPU before it runs: by the committed model and by the candidate
    validation/candidates/*-sxm-membound42.yaml (session 22: memory_kernel_fixed_s for every memory-bound
    kernel, the eager silu_mul as two kernels, the warp softmax in SM cycles; validation/membound_fit.py).
    Its fixed cost applies to every case, so nearly every case's prediction differs (a refitted rate can
    cancel the lower fixed cost to the registered digit): every copy, add or GELU the committed model puts
    under 8 us, where the fixed cost dominates, the candidate predicts shorter, every silu_mul under 10 us
    (two kernels) longer."""
    from simulator.calibration import load_calibration
    from validation.prereg import kernel_rows
    h = harness("membound_random")
    cs = h.cases(seed=42)
    today, cand = registered(gpu, 42), registered(gpu, 42, "_cand")
    assert list(today) == list(cand) == [h.label(c) for c in cs] and len(set(today)) == len(cs)
    assert sum(today[k] != cand[k] for k in today) >= 0.95 * len(today)
    small = [k for k in today if today[k] < 8e-6 and k.split()[0] in ("copy", "add", "gelu")]
    assert len(small) >= 8 and all(cand[k] < today[k] for k in small)          # the lower fixed cost
    eager = [k for k in today if today[k] < 10e-6 and k.startswith("silu_mul")]
    assert eager and all(cand[k] > today[k] for k in eager)                    # two kernels, not one
    like = str(ROOT / "validation" / "measurements" / f"{gpu}_kernels.json")
    profile = str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-membound42.yaml")
    # the candidate's log is what the candidate predicts (from session 23's adoption until session 24 adopted
    # membound46, also what the committed profile predicted; the committed model's log is what the profile of
    # session 22 predicted)
    rows = kernel_rows("membound_random", like, 42, profile)
    assert all(cand[label] == pytest.approx(t, abs=0.006e-6) for label, t in rows)
    # adopted in session 23 (after it won this draw): the committed profile carries the candidate's values
    # (the softmax values as they were until session 36 adopted membound66's)
    from validation.membound66_fit import profile_before
    committed, candidate = profile_before(gpu, load_calibration(f"{gpu}-sxm")), load_calibration(profile)
    assert committed.memory_kernel_fixed_s == candidate.memory_kernel_fixed_s > 4e-6
    assert committed.softmax_warp_cycles == candidate.softmax_warp_cycles
    # the norm forward's per-wave times and load latencies were refitted under whole waves by membound46 (session 24)
    refit = ("_row_s", "_load_latency_s", "whole_waves")
    assert ({k: v for k, v in committed.norm_forward.items() if not k.endswith(refit)}
            == {k: v for k, v in candidate.norm_forward.items() if not k.endswith(refit)})
    assert committed.memory_op_fraction["silu"] == candidate.memory_op_fraction["silu"]


@pytest.mark.parametrize("argv,field", [(["--kernels", "row_kernels", "--seed", "3"], "--seed"),
                                        (["--kernels", "no_such_suite"], "--kernels"),
                                        (["--grid", "moe2", "--seed", "3"], "--seed")])
def test_prereg_refuses_bad_kernel_options_in_one_line(argv, field, capsys):
    from validation.prereg import main
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--like", str(ROOT / "validation" / "measurements" / "h200_kernels.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"error: {field}:" in err and "Traceback" not in err


def test_draws_fitted_and_never_fitted():
    """Draws 40 and 41 are fit data since session 23 adopted the membound42 fit (development data from
    session 22); 42-45, registered before they ran and never fitted then, are fit data since session 24
    adopted the membound46 fit; 46 through 64 (H200) / 65 (H100), each registered before it ran, are fit data
    for the softmax parameters since session 36 adopted the membound66 fit (the profile before session 39,
    frozen as candidate pre39); 66-76 / 67-77 since session 39 adopted m78copy; 78 / 79 never fitted."""
    common = ["40", "41", "42", "43", "44", "45", "46", "47", "48", "49"]
    expect = {"h200-sxm": common + ["51", "52", "54", "56", "58", "60", "62", "64"],
              "h100-sxm": common + ["50", "53", "55", "57", "59", "61", "63", "65"]}
    for profile in ("h200-sxm", "h100-sxm"):
        import yaml
        pre39 = yaml.safe_load((ROOT / "validation" / "candidates" / f"{profile}-pre39.yaml").read_text())
        fitted = [f for f in pre39["fitted_on"] if "membound" in f]
        assert sorted(f[-7:-5] for f in fitted) == expect[profile]
    # session 39 adopted m78copy, whose softmax fits (membound68, 76, 78) read every draw through 76 / 77; 78 / 79, the
    # draws it was registered for, and later ones never fitted
    later = {"h200-sxm": ["66", "68", "70", "72", "74", "76"], "h100-sxm": ["67", "69", "71", "73", "75", "77"]}
    for profile in ("h200-sxm", "h100-sxm"):
        fitted = [f for f in profile_fitted_on(profile) if "membound" in f]
        assert sorted(f[-7:-5] for f in fitted) == sorted(expect[profile] + later[profile])


# ---- session 21's runs (one H200, one H100, machines lent after the registration) ------------------------
AS_REGISTERED = {  # pooled and per-kind MAPE of every timed case against its registered prediction
    "h200": {"all": 0.0880, "copy": 0.1590, "add": 0.0774, "gelu": 0.1056, "silu_mul": 0.0421, "softmax": 0.0867,
             "layernorm": 0.0648, "rmsnorm": 0.0805},
    "h100": {"all": 0.0794, "copy": 0.0923, "add": 0.0536, "gelu": 0.0320, "silu_mul": 0.0933, "softmax": 0.1084,
             "layernorm": 0.0816, "rmsnorm": 0.0945},
}


def scored(gpu: str, seed: int = 40, suffix: str = "", drop_interference: bool = False
           ) -> tuple[dict[str, float], list[float]]:
    """({kind: MAPE, 'all': pooled}, signed errors of the block-softmax cases) of the committed run of
    draw ``seed`` against its registration ``suffix``; ``drop_interference`` leaves out records whose
    slowest call took over 3x the fastest. The fp32 softmax rows of draws from seed 68 are kind
    ``softmax_fp32`` (``softmax`` stays the bf16 rows every draw has), the causal grids from seed 72
    ``softmax_fp32_causal``, their N(0, 1) twins from seed 74 ``softmax_fp32_grid``, the long fp32 rows from seed 78
    ``softmax_fp32_long``."""
    import json
    from simulator.compute import torch_softmax_kernel
    from validation.gemm_regimes import interference_suspect
    h = harness("membound_random")
    reg = registered(gpu, seed, suffix)
    recs = json.loads((ROOT / "validation" / "measurements" / f"{gpu}_membound_random{seed}.json").read_text())["records"]
    assert len(recs) == len(h.cases(seed=seed)) and all(r["seed"] == seed for r in recs)
    errs: dict[str, list[float]] = {}
    block = []
    for r in recs:
        if drop_interference and interference_suspect(r):
            continue
        c = (dict(kind="copy", nbytes=round(r["buffer_mb"] * 2**20)) if r["kind"] == "copy" else
             dict(kind=r["kind"], tokens=r["tokens"], hidden=r["hidden"], dtype=r["dtype"], data=r.get("data"),
                  group=r.get("group")))
        e = reg[h.label(c)] / r["time_s"] - 1
        kind = (r["kind"] + ("_fp32" if r.get("dtype") == "float32" else "")
                + {"causal_scores": "_causal", "randn": "_grid"}.get(r.get("data"), "") + ("_long" if r.get("group") else ""))
        errs.setdefault(kind, []).append(abs(e))
        if r["kind"] == "softmax" and torch_softmax_kernel(r["hidden"], "bf16") in ("smem", "plain"):
            block.append(e)
    out = {k: sum(v) / len(v) for k, v in errs.items()}
    out["all"] = sum(sum(v) for v in errs.values()) / sum(len(v) for v in errs.values())
    return out, block


def assert_as_quoted(got: dict[str, float], quoted: dict[str, float]) -> None:
    """Every kind's MAPE of a scored draw (and the pooled 'all') equals the figure quoted for it."""
    for kind, figure in quoted.items():
        assert got[kind] == pytest.approx(figure, abs=5e-4), kind


@pytest.mark.parametrize("gpu", GPUS)
def test_runs_as_registered(gpu):
    """168 cases per GPU, every one timed and registered. H200: 8.8% pooled (copy 15.9%: copies under
    ~6 us predicted 24-49% slow, the fixed cost of a tiny kernel on this machine below the fit
    machine's; gelu 10.6%; softmax 8.7%: rows of ~9.2-9.3k bf16 elements, PyTorch's shared-memory kernel, -22..-24%). H100: 7.9% pooled
    (softmax 10.8%, the same rows -27..-29%; rmsnorm 9.5%, silu_mul 9.3%, copy 9.2%, layernorm 8.2%);
    ratchets at the registered figures."""
    got, _ = scored(gpu)
    assert set(got) == set(AS_REGISTERED[gpu])
    assert_as_quoted(got, AS_REGISTERED[gpu])


def test_h100_run_without_interference():
    """Six H100 records whose slowest call took over 3x their fastest (another tenant or a clock dip:
    a 348 KB copy 41-247 us, silu_mul 9194x928 64-262 us, rmsnorm 591x20128 82-482 us, ...): without
    them 6.3% pooled (162 records; the H200 run has none)."""
    assert scored("h100", drop_interference=True)[0]["all"] == pytest.approx(0.0630, abs=5e-4)
    assert scored("h200", drop_interference=True) == scored("h200")


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.xfail(strict=True, reason="issue #12: memory-bound ops <= 8% on a fresh run, per kind: as registered "
                                       "H200 copy 15.9%, gelu 10.6%, softmax 8.7%, rmsnorm 8.05% (pooled 8.8%); H100 "
                                       "softmax 10.8%, rmsnorm 9.5%, silu_mul 9.3%, copy 9.2%, layernorm 8.2%")
def test_every_kind_within_the_target(gpu):
    assert max(scored(gpu)[0].values()) <= 0.08


# ---- seed 41 (session 21, after the softmax-wave candidate was registered beside the committed model) ------
AS_REGISTERED_41 = {   # pooled and per-kind MAPE as registered by the model of the time (no wave form)
    "h200": {"all": 0.0823, "copy": 0.1317, "add": 0.0405, "gelu": 0.0649, "silu_mul": 0.0416, "softmax": 0.1304,
             "layernorm": 0.0837, "rmsnorm": 0.0837},
    "h100": {"all": 0.0689, "copy": 0.0554, "add": 0.0247, "gelu": 0.0280, "silu_mul": 0.0473, "softmax": 0.1561,
             "layernorm": 0.0945, "rmsnorm": 0.0764},
}


@pytest.mark.parametrize("gpu", GPUS)
def test_seed_41_as_registered(gpu):
    """The second draw, on other machines: H200 8.2% pooled (softmax 13.0%, copy 13.2%), H100 6.9%
    (softmax 15.6%), as registered by the committed model of the time."""
    got, _ = scored(gpu, 41)
    assert_as_quoted(got, AS_REGISTERED_41[gpu])


@pytest.mark.parametrize("gpu", GPUS)
def test_softmax_wave_candidate_beat_the_model_on_seed_41(gpu):
    """The per-wave softmax candidate, registered beside the model before seed 41 ran, on the five
    block-kernel softmax cases of the draw per GPU: mean |error| H200 11.3% -> 5.0%, H100 14.6% -> 6.3%
    (every one too fast under the element rate; both signs under the candidate); softmax pooled 13.0 ->
    11.7% and 15.6 -> 13.9%; no other kind moved. Adopted on this evidence (session 21)."""
    (today, old), (cand, new) = scored(gpu, 41), scored(gpu, 41, "_softwave")
    assert len(old) == len(new) == 5 and all(e < 0.02 for e in old)
    assert sum(map(abs, new)) / 5 < 0.065 < 0.09 < sum(map(abs, old)) / 5
    assert cand["softmax"] < today["softmax"] - 0.01
    assert all(cand[k] == pytest.approx(today[k]) for k in today if k not in ("softmax", "all"))


@pytest.mark.parametrize("gpu", GPUS)
def test_committed_profiles_keep_the_softmax_wave_form(gpu):
    """Adopted in session 21 (the per-wave form), refitted in session 23 with the membound42 parameters and in
    session 36 with membound66's: the committed per-wave cycles and rates are membound66's; the per-wave cycles
    within 12% of membound42's and within 20% of the softmax-wave candidate's (H200 1%, H100 20%: the H100 fit
    moved cycles into the new scalar epilogue)."""
    from simulator.calibration import load_calibration
    cands = ROOT / "validation" / "candidates"
    committed = load_calibration(str(cands / f"{gpu}-sxm-pre39.yaml"))     # session 39 added fp32 rates on top
    wave, mb42, mb66 = (load_calibration(str(cands / f"{gpu}-sxm-{c}.yaml"))
                        for c in ("softmax-wave", "membound42", "membound66"))
    today = load_calibration(f"{gpu}-sxm")
    assert today.softmax_wave_cycles == committed.softmax_wave_cycles
    assert {k: v for k, v in today.softmax_elements_per_cycle.items() if not k.endswith("_fp32")} == \
        committed.softmax_elements_per_cycle
    assert committed.softmax_wave_cycles == mb66.softmax_wave_cycles > 3000
    assert committed.softmax_wave_cycles == pytest.approx(mb42.softmax_wave_cycles, rel=0.14)
    assert committed.softmax_wave_cycles == pytest.approx(wave.softmax_wave_cycles, rel=0.2)
    assert committed.softmax_elements_per_cycle == mb66.softmax_elements_per_cycle


# ---- seed 42 (session 22, registered with the committed model and the membound42 candidate) --------------
AS_REGISTERED_42 = {   # pooled and per-kind MAPE of every timed case: (committed model, membound42 candidate)
    "h200": {"all": (0.1029, 0.0500), "copy": (0.1915, 0.0650), "add": (0.0748, 0.0316), "gelu": (0.1207, 0.0347),
             "silu_mul": (0.0387, 0.0204), "softmax": (0.1330, 0.0734), "layernorm": (0.0707, 0.0685),
             "rmsnorm": (0.0909, 0.0562)},
    "h100": {"all": (0.0826, 0.0521), "copy": (0.0887, 0.0555), "add": (0.0293, 0.0242), "gelu": (0.0438, 0.0260),
             "silu_mul": (0.0591, 0.0243), "softmax": (0.1762, 0.1005), "layernorm": (0.1052, 0.0883),
             "rmsnorm": (0.0758, 0.0460)},
}


@pytest.mark.parametrize("gpu", GPUS)
def test_seed_42_as_registered(gpu):
    """The third draw, on two newly lent machines, scored against both registrations: the candidate
    halves the error (H200 10.3% -> 5.0% pooled, H100 8.3% -> 5.2%) and is better in every kind on
    both GPUs; on H200 every kind is within 8% (softmax 7.3% the worst), on H100 softmax 10.0% and
    layernorm 8.8% are not (each holds one record whose calls spread 15-26x: below)."""
    committed, _ = scored(gpu, 42)
    cand, _ = scored(gpu, 42, "_cand")
    for kind, (quoted, quoted_cand) in AS_REGISTERED_42[gpu].items():
        assert committed[kind] == pytest.approx(quoted, abs=5e-4), kind
        assert cand[kind] == pytest.approx(quoted_cand, abs=5e-4), kind
        assert cand[kind] < committed[kind], kind
    assert (max(v for k, v in cand.items() if k != "all") <= 0.08) == (gpu == "h200")


def test_seed_42_h100_without_interference():
    """Five H100 records' calls spread over 3x (a 399x1112 softmax 15x, a 539x824 layernorm 26x: both
    -79..-87% under either model); without them the candidate's worst kind is softmax 7.0%, every
    kind within 8%, 4.2% pooled (the committed model: 7.2% pooled, softmax 14.7%)."""
    cand, _ = scored("h100", 42, "_cand", drop_interference=True)
    committed, _ = scored("h100", 42, drop_interference=True)
    worst = max(v for k, v in cand.items() if k != "all")
    assert worst == cand["softmax"] and worst <= 0.0705 + 5e-5 and cand["all"] == pytest.approx(0.0423, abs=5e-4)
    assert committed["softmax"] > 0.14


# ---- seeds 43-48: 43 registered by profile adopt23 (membound42 and gemm32 adopted), 44 by the committed model of
# 4711a01, 45 by a0864ba, 46 by d2c033c (with candidate membound46 beside it; session 23), 47 by 02a236d (session 24,
# membound46 adopted, candidate membound47 beside it), 48 by 989d851 and 49 by 5e9b868 (session 25; the same model),
# 50 / 51 (session 27), 52 / 53 (session 28, eea90da), 54 / 55 (session 29, a913dcd), 56 / 57 (session 30,
# cd7f481), 58 / 59 (session 31, 161615c) and 60 / 61 (session 32, 0c24860) likewise;
# all on newly lent machines;
# 43-45 fit data since session 24
AS_REGISTERED_SINCE_ADOPTION = {   # seed: gpu: pooled and per-kind MAPE of every timed case against its registration
    43: {"h200": {"all": 0.0395, "copy": 0.0373, "add": 0.0332, "gelu": 0.0199, "silu_mul": 0.0151, "softmax": 0.0548,
                  "layernorm": 0.0565, "rmsnorm": 0.0596},
         "h100": {"all": 0.0403, "copy": 0.0402, "add": 0.0272, "gelu": 0.0177, "silu_mul": 0.0290, "softmax": 0.0634,
                  "layernorm": 0.0517, "rmsnorm": 0.0532}},
    44: {"h200": {"all": 0.0584, "copy": 0.0830, "add": 0.0383, "gelu": 0.0341, "silu_mul": 0.0198, "softmax": 0.0882,
                  "layernorm": 0.0916, "rmsnorm": 0.0541},
         "h100": {"all": 0.0505, "copy": 0.0677, "add": 0.0244, "gelu": 0.0261, "silu_mul": 0.0249, "softmax": 0.0972,
                  "layernorm": 0.0716, "rmsnorm": 0.0416}},
    45: {"h200": {"all": 0.0567, "copy": 0.0864, "add": 0.0349, "gelu": 0.0334, "silu_mul": 0.0191, "softmax": 0.0633,
                  "layernorm": 0.0919, "rmsnorm": 0.0676},
         "h100": {"all": 0.0524, "copy": 0.0662, "add": 0.0331, "gelu": 0.0223, "silu_mul": 0.0309, "softmax": 0.0696,
                  "layernorm": 0.0826, "rmsnorm": 0.0620}},
    46: {"h200": {"all": 0.0466, "copy": 0.0450, "add": 0.0305, "gelu": 0.0289, "silu_mul": 0.0162, "softmax": 0.0728,
                  "layernorm": 0.0699, "rmsnorm": 0.0628},
         "h100": {"all": 0.0608, "copy": 0.0465, "add": 0.0273, "gelu": 0.0594, "silu_mul": 0.0809, "softmax": 0.0908,
                  "layernorm": 0.0713, "rmsnorm": 0.0491}},
    47: {"h200": {"all": 0.0404, "copy": 0.0333, "add": 0.0272, "gelu": 0.0397, "silu_mul": 0.0213, "softmax": 0.0642,
                  "layernorm": 0.0584, "rmsnorm": 0.0388},
         "h100": {"all": 0.0392, "copy": 0.0422, "add": 0.0197, "gelu": 0.0296, "silu_mul": 0.0294, "softmax": 0.0668,
                  "layernorm": 0.0473, "rmsnorm": 0.0393}},
    48: {"h200": {"all": 0.0407, "copy": 0.0335, "add": 0.0339, "gelu": 0.0349, "silu_mul": 0.0222, "softmax": 0.0771,
                  "layernorm": 0.0377, "rmsnorm": 0.0457},
         "h100": {"all": 0.0340, "copy": 0.0309, "add": 0.0259, "gelu": 0.0202, "silu_mul": 0.0204, "softmax": 0.0727,
                  "layernorm": 0.0296, "rmsnorm": 0.0382}},
    49: {"h200": {"all": 0.0388, "copy": 0.0279, "add": 0.0372, "gelu": 0.0223, "silu_mul": 0.0215, "softmax": 0.0773,
                  "layernorm": 0.0515, "rmsnorm": 0.0335},
         "h100": {"all": 0.0367, "copy": 0.0278, "add": 0.0249, "gelu": 0.0185, "silu_mul": 0.0303, "softmax": 0.0756,
                  "layernorm": 0.0506, "rmsnorm": 0.0288}},
    # session 27, registered by a8fb492 (H100) and 88770b0 (H200), the same memory-bound model: one GPU each
    50: {"h100": {"all": 0.0403, "copy": 0.0264, "add": 0.0280, "gelu": 0.0262, "silu_mul": 0.0248, "softmax": 0.0813,
                  "layernorm": 0.0533, "rmsnorm": 0.0419}},
    51: {"h200": {"all": 0.0375, "copy": 0.0277, "add": 0.0216, "gelu": 0.0212, "silu_mul": 0.0158, "softmax": 0.0673,
                  "layernorm": 0.0631, "rmsnorm": 0.0458}},
    # session 28, registered by eea90da, the same memory-bound model: one GPU each
    52: {"h200": {"all": 0.0430, "copy": 0.0321, "add": 0.0435, "gelu": 0.0267, "silu_mul": 0.0239, "softmax": 0.0719,
                  "layernorm": 0.0520, "rmsnorm": 0.0509}},
    53: {"h100": {"all": 0.0373, "copy": 0.0339, "add": 0.0302, "gelu": 0.0213, "silu_mul": 0.0184, "softmax": 0.0372,
                  "layernorm": 0.0676, "rmsnorm": 0.0525}},
    # session 29, registered by a913dcd, the same memory-bound model: one GPU each
    54: {"h200": {"all": 0.0407, "copy": 0.0309, "add": 0.0259, "gelu": 0.0251, "silu_mul": 0.0157, "softmax": 0.0666,
                  "layernorm": 0.0667, "rmsnorm": 0.0537}},
    55: {"h100": {"all": 0.0543, "copy": 0.0574, "add": 0.0427, "gelu": 0.0212, "silu_mul": 0.0248, "softmax": 0.0824,
                  "layernorm": 0.0735, "rmsnorm": 0.0779}},
    # session 30, registered by cd7f481, the same memory-bound model: one GPU each
    56: {"h200": {"all": 0.0376, "copy": 0.0275, "add": 0.0184, "gelu": 0.0187, "silu_mul": 0.0202, "softmax": 0.0705,
                  "layernorm": 0.0535, "rmsnorm": 0.0546}},
    57: {"h100": {"all": 0.0359, "copy": 0.0375, "add": 0.0301, "gelu": 0.0229, "silu_mul": 0.0259, "softmax": 0.0485,
                  "layernorm": 0.0472, "rmsnorm": 0.0390}},
    # session 31, registered by 161615c, the same memory-bound model: one GPU each
    58: {"h200": {"all": 0.0414, "copy": 0.0226, "add": 0.0284, "gelu": 0.0226, "silu_mul": 0.0232, "softmax": 0.0769,
                  "layernorm": 0.0657, "rmsnorm": 0.0505}},
    59: {"h100": {"all": 0.0371, "copy": 0.0247, "add": 0.0320, "gelu": 0.0178, "silu_mul": 0.0239, "softmax": 0.0645,
                  "layernorm": 0.0415, "rmsnorm": 0.0552}},
    # session 32, registered by 0c24860, the same memory-bound model: one GPU each
    60: {"h200": {"all": 0.0364, "copy": 0.0211, "add": 0.0244, "gelu": 0.0247, "silu_mul": 0.0174, "softmax": 0.0691,
                  "layernorm": 0.0516, "rmsnorm": 0.0461}},
    61: {"h100": {"all": 0.0409, "copy": 0.0195, "add": 0.0244, "gelu": 0.0244, "silu_mul": 0.0314, "softmax": 0.0781,
                  "layernorm": 0.0512, "rmsnorm": 0.0575}},
    # session 33, registered by 4c570f5, the same memory-bound model: one GPU each
    62: {"h200": {"all": 0.0421, "copy": 0.0333, "add": 0.0354, "gelu": 0.0195, "silu_mul": 0.0169, "softmax": 0.0838,
                  "layernorm": 0.0483, "rmsnorm": 0.0576}},
    63: {"h100": {"all": 0.0546, "copy": 0.0326, "add": 0.0281, "gelu": 0.0517, "silu_mul": 0.0329, "softmax": 0.0536,
                  "layernorm": 0.1310, "rmsnorm": 0.0520}},
    # session 34, registered by 0fce87d, the same memory-bound model: one GPU each
    64: {"h200": {"all": 0.0434, "copy": 0.0320, "add": 0.0274, "gelu": 0.0354, "silu_mul": 0.0142, "softmax": 0.0767,
                  "layernorm": 0.0678, "rmsnorm": 0.0506}},
    65: {"h100": {"all": 0.0409, "copy": 0.0236, "add": 0.0275, "gelu": 0.0258, "silu_mul": 0.0262, "softmax": 0.0892,
                  "layernorm": 0.0415, "rmsnorm": 0.0527}},
    # session 35, registered in commit 26b0352 by the code of 490d35e (the same memory-bound model): one GPU each
    66: {"h200": {"all": 0.0360, "copy": 0.0291, "add": 0.0323, "gelu": 0.0321, "silu_mul": 0.0148, "softmax": 0.0558,
                  "layernorm": 0.0406, "rmsnorm": 0.0472}},
    67: {"h100": {"all": 0.0500, "copy": 0.0393, "add": 0.0471, "gelu": 0.0214, "silu_mul": 0.0496, "softmax": 0.0980,
                  "layernorm": 0.0530, "rmsnorm": 0.0414}},
    # session 36, registered in commit 40b6163 by the code of 6fd69f0 (membound66's softmax adopted), each draw with
    # 24 fp32 softmax rows (softmax_fp32) beside its 168 bf16 cases: one GPU each
    68: {"h200": {"all": 0.0496, "copy": 0.0211, "add": 0.0315, "gelu": 0.0220, "silu_mul": 0.0229, "softmax": 0.0519,
                  "layernorm": 0.0472, "rmsnorm": 0.0625, "softmax_fp32": 0.1378}},
    69: {"h100": {"all": 0.0481, "copy": 0.0209, "add": 0.0283, "gelu": 0.0215, "silu_mul": 0.0228, "softmax": 0.0482,
                  "layernorm": 0.0425, "rmsnorm": 0.0953, "softmax_fp32": 0.1051}},
    # session 36 again, registered in commit c0d9b12 by the code of 424c641 (the same memory-bound model), candidate
    # membound68 beside it (tests/test_membound68_candidate.py)
    70: {"h200": {"all": 0.0534, "copy": 0.0304, "add": 0.0266, "gelu": 0.0277, "silu_mul": 0.0312, "softmax": 0.0700,
                  "layernorm": 0.0547, "rmsnorm": 0.0418, "softmax_fp32": 0.1445}},
    71: {"h100": {"all": 0.0698, "copy": 0.0673, "add": 0.0550, "gelu": 0.0211, "silu_mul": 0.0536, "softmax": 0.0521,
                  "layernorm": 0.0751, "rmsnorm": 0.1024, "softmax_fp32": 0.1322}},
    # session 36, third pair, registered in commit 3d4e850 by the code of d582d03 (the same model), each draw with 16
    # causal fp32 softmax grids (softmax_fp32_causal) as well; candidate membound68 beside it
    72: {"h200": {"all": 0.0656, "copy": 0.0276, "add": 0.0313, "gelu": 0.0230, "silu_mul": 0.0246, "softmax": 0.0631,
                  "layernorm": 0.0494, "rmsnorm": 0.0441, "softmax_fp32": 0.1715, "softmax_fp32_causal": 0.2012}},
    73: {"h100": {"all": 0.0539, "copy": 0.0318, "add": 0.0398, "gelu": 0.0205, "silu_mul": 0.0206, "softmax": 0.0531,
                  "layernorm": 0.0464, "rmsnorm": 0.0551, "softmax_fp32": 0.1092, "softmax_fp32_causal": 0.1362}},
    # session 36, fourth pair, registered in commit 7c6ce01 by the code of afc5bde (the same model), the causal grids with
    # N(0, 1) twins (softmax_fp32_grid)
    74: {"h200": {"all": 0.0535, "copy": 0.0322, "add": 0.0203, "gelu": 0.0228, "silu_mul": 0.0179, "softmax": 0.0490,
                  "layernorm": 0.0605, "rmsnorm": 0.0409, "softmax_fp32": 0.1323, "softmax_fp32_causal": 0.1011,
                  "softmax_fp32_grid": 0.0833}},
    75: {"h100": {"all": 0.0678, "copy": 0.0400, "add": 0.0305, "gelu": 0.0244, "silu_mul": 0.0437, "softmax": 0.0473,
                  "layernorm": 0.1437, "rmsnorm": 0.0346, "softmax_fp32": 0.1066, "softmax_fp32_causal": 0.1638,
                  "softmax_fp32_grid": 0.0798}},
    # session 37, fifth pair, registered in commit 108397a by the code of 5c5d02a (the same model; candidates membound68
    # and membound76 beside it: tests/test_membound76_candidate.py)
    76: {"h200": {"all": 0.0574, "copy": 0.0328, "add": 0.0330, "gelu": 0.0177, "silu_mul": 0.0248, "softmax": 0.0364,
                  "layernorm": 0.0577, "rmsnorm": 0.0464, "softmax_fp32": 0.1245, "softmax_fp32_causal": 0.1483,
                  "softmax_fp32_grid": 0.0961}},
    77: {"h100": {"all": 0.0598, "copy": 0.0244, "add": 0.0265, "gelu": 0.0247, "silu_mul": 0.0181, "softmax": 0.0509,
                  "layernorm": 0.0490, "rmsnorm": 0.0433, "softmax_fp32": 0.1583, "softmax_fp32_causal": 0.1714,
                  "softmax_fp32_grid": 0.0733}},
    # session 39, sixth pair, registered in dfaf03f by the code of 157d98b (the same model; candidates membound76 and
    # membound78 beside it, tests/test_membound78_candidate.py), each draw with 12 long fp32 rows (softmax_fp32_long)
    78: {"h200": {"all": 0.0667, "copy": 0.0222, "add": 0.0287, "gelu": 0.0240, "silu_mul": 0.0252, "softmax": 0.0383,
                  "layernorm": 0.0691, "rmsnorm": 0.0388, "softmax_fp32": 0.1444, "softmax_fp32_causal": 0.1382,
                  "softmax_fp32_grid": 0.0935, "softmax_fp32_long": 0.2219}},
    79: {"h100": {"all": 0.0647, "copy": 0.0289, "add": 0.0221, "gelu": 0.0210, "silu_mul": 0.0368, "softmax": 0.0444,
                  "layernorm": 0.0522, "rmsnorm": 0.0532, "softmax_fp32": 0.1446, "softmax_fp32_causal": 0.1130,
                  "softmax_fp32_grid": 0.0470, "softmax_fp32_long": 0.2516}},
    # session 39, seventh pair, registered in 44bdefb by the code of 1f1a57a: the profiles adopted in session 39 (m78copy)
    80: {"h200": {"all": 0.0420, "copy": 0.0291, "add": 0.0329, "gelu": 0.0150, "silu_mul": 0.0288, "softmax": 0.0359,
                  "layernorm": 0.0670, "rmsnorm": 0.0495, "softmax_fp32": 0.0577, "softmax_fp32_causal": 0.0582,
                  "softmax_fp32_grid": 0.0510, "softmax_fp32_long": 0.0477}},
    81: {"h100": {"all": 0.0518, "copy": 0.0261, "add": 0.0548, "gelu": 0.0508, "silu_mul": 0.0298, "softmax": 0.0749,
                  "layernorm": 0.0411, "rmsnorm": 0.0709, "softmax_fp32": 0.0418, "softmax_fp32_causal": 0.0396,
                  "softmax_fp32_grid": 0.0956, "softmax_fp32_long": 0.0578}},
    # session 43, eighth pair, registered in e7c1ed6 by the code of 30af92f (the same memory-bound model)
    82: {"h200": {"all": 0.0341, "copy": 0.0272, "add": 0.0331, "gelu": 0.0233, "silu_mul": 0.0176, "softmax": 0.0249,
                  "layernorm": 0.0467, "rmsnorm": 0.0487, "softmax_fp32": 0.0423, "softmax_fp32_causal": 0.0505,
                  "softmax_fp32_grid": 0.0378, "softmax_fp32_long": 0.0259}},
    83: {"h100": {"all": 0.0343, "copy": 0.0281, "add": 0.0238, "gelu": 0.0204, "silu_mul": 0.0223, "softmax": 0.0426,
                  "layernorm": 0.0462, "rmsnorm": 0.0360, "softmax_fp32": 0.0622, "softmax_fp32_causal": 0.0347,
                  "softmax_fp32_grid": 0.0231, "softmax_fp32_long": 0.0337}},
    # session 44, ninth pair, registered in b24ca15 by the code of 655db6c (the same memory-bound model)
    84: {"h200": {"all": 0.0333, "copy": 0.0223, "add": 0.0349, "gelu": 0.0205, "silu_mul": 0.0230, "softmax": 0.0333,
                  "layernorm": 0.0416, "rmsnorm": 0.0362, "softmax_fp32": 0.0430, "softmax_fp32_causal": 0.0459,
                  "softmax_fp32_grid": 0.0477, "softmax_fp32_long": 0.0205}},
    85: {"h100": {"all": 0.0352, "copy": 0.0253, "add": 0.0218, "gelu": 0.0300, "silu_mul": 0.0272, "softmax": 0.0485,
                  "layernorm": 0.0425, "rmsnorm": 0.0392, "softmax_fp32": 0.0412, "softmax_fp32_causal": 0.0435,
                  "softmax_fp32_grid": 0.0259, "softmax_fp32_long": 0.0487}},
}
# the kinds over the 8% per draw and GPU (none on seeds 43, 47 and 48)
OVER_8_PERCENT = {(43, "h200"): set(), (43, "h100"): set(), (44, "h200"): {"layernorm", "softmax", "copy"},
                  (44, "h100"): {"softmax"}, (45, "h200"): {"layernorm", "copy"}, (45, "h100"): {"layernorm"},
                  (46, "h200"): set(), (46, "h100"): {"silu_mul", "softmax"}, (47, "h200"): set(), (47, "h100"): set(),
                  (48, "h200"): set(), (48, "h100"): set(), (49, "h200"): set(), (49, "h100"): set(),
                  (50, "h100"): {"softmax"}, (51, "h200"): set(), (52, "h200"): set(), (53, "h100"): set(),
                  (54, "h200"): set(), (55, "h100"): {"softmax"}, (56, "h200"): set(), (57, "h100"): set(),
                  (58, "h200"): set(), (59, "h100"): set(), (60, "h200"): set(), (61, "h100"): set(),
                  (62, "h200"): {"softmax"}, (63, "h100"): {"layernorm"}, (64, "h200"): set(), (65, "h100"): {"softmax"},
                  (66, "h200"): set(), (67, "h100"): {"softmax"}, (68, "h200"): {"softmax_fp32"},
                  (69, "h100"): {"rmsnorm", "softmax_fp32"}, (70, "h200"): {"softmax_fp32"},
                  (71, "h100"): {"rmsnorm", "softmax_fp32"}, (72, "h200"): {"softmax_fp32", "softmax_fp32_causal"},
                  (73, "h100"): {"softmax_fp32", "softmax_fp32_causal"},
                  (74, "h200"): {"softmax_fp32", "softmax_fp32_causal", "softmax_fp32_grid"},
                  (75, "h100"): {"layernorm", "softmax_fp32", "softmax_fp32_causal"},
                  (76, "h200"): {"softmax_fp32", "softmax_fp32_causal", "softmax_fp32_grid"},
                  (77, "h100"): {"softmax_fp32", "softmax_fp32_causal"},
                  (78, "h200"): {"softmax_fp32", "softmax_fp32_causal", "softmax_fp32_grid", "softmax_fp32_long"},
                  (79, "h100"): {"softmax_fp32", "softmax_fp32_causal", "softmax_fp32_long"},
                  (80, "h200"): set(), (81, "h100"): {"softmax_fp32_grid"}, (82, "h200"): set(), (83, "h100"): set(),
                  (84, "h200"): set(), (85, "h100"): set()}
# draws whose records include calls that spread over 3x (validation.gemm_regimes.interference_suspect)
INTERFERENCE = {(44, "h200"), (44, "h100"), (46, "h100"), (47, "h100"), (48, "h200"), (48, "h100"), (49, "h100"),
                (50, "h100"), (55, "h100"), (57, "h100"), (61, "h100"), (63, "h100"), (64, "h200"),
                (67, "h100"), (68, "h200"), (69, "h100"), (70, "h200"), (71, "h100"), (72, "h200"), (73, "h100"),
                (75, "h100"), (77, "h100"), (78, "h200"), (79, "h100"), (80, "h200"), (81, "h100"), (82, "h200"),
                (85, "h100")}


@pytest.mark.parametrize("gpu", GPUS)
def test_seed_43_registered_by_the_adopted_profile(gpu):
    """Seed 43's registration names profile adopt23 and holds every case once, as that profile predicts
    it; adopt23 is the committed profile (it became it in session 23) except the H200 masked-softmax cost
    refitted afterwards, the GEMM candidate gemm36 adopted later, which no case of this draw uses, and the
    memory-bound candidate membound46 adopted in session 24 (the draw's copies and norms predict differently now)."""
    from simulator.calibration import load_calibration
    from validation.prereg import kernel_rows
    h = harness("membound_random")
    reg = registered(gpu, 43)
    assert list(reg) == [h.label(c) for c in h.cases(seed=43)]
    profile = str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-adopt23.yaml")
    assert f"--profile validation/candidates/{gpu}-sxm-adopt23.yaml" in (LOGS / f"prereg_membound43_{gpu}.txt").read_text()
    like = str(ROOT / "validation" / "measurements" / f"{gpu}_kernels.json")
    assert all(reg[label] == pytest.approx(t, abs=0.006e-6) for label, t in kernel_rows("membound_random", like, 43, profile))
    committed, adopted = load_calibration(str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-pre39.yaml")), \
        load_calibration(profile)       # the profile before session 39's adoption (m78copy: softmax, batched GEMMs)
    from dataclasses import replace
    gemm36 = ("gemm_l2_operand_bytes_per_flop", "gemm_split_k_fixed_s")      # the GEMM floor adopted after seed 43
    membound46 = ("memory_op_fixed_s", "norm_forward")                       # adopted in session 24
    assert replace(with_later_fits_of(adopted, committed), name=committed.name, softmax_masked_cost=committed.softmax_masked_cost,
                   **{p: getattr(committed, p) for p in gemm36 + membound46}) == committed


@pytest.mark.parametrize("seed,gpu", sorted(OVER_8_PERCENT))
def test_draws_since_the_adoption_as_registered(seed, gpu):
    """Seed 43: H200 3.95%, H100 4.03% pooled, every kind within the issue's 8% (worst H200 rmsnorm 6.0%,
    H100 softmax 6.3%). Seed 44: H200 5.8%, H100 5.05% pooled; H200 layernorm 9.2%, softmax 8.8%, copy
    8.3%, H100 softmax 9.7% over 8%. Seed 45: H200 5.7%, H100 5.2%; H200 layernorm 9.2% and copy 8.6%, H100
    layernorm 8.3% over. Seed 46: H200 4.7%, every kind within 8% (softmax 7.3% the worst); H100 6.1%,
    silu_mul 8.1% and softmax 9.1% over. Seed 47 (session 24, membound46 adopted): H200 4.04%, H100 3.92% pooled,
    every kind within 8% on both (worst: softmax 6.4% / 6.7%). Seed 48 (session 24, the same model): H200 4.07%,
    H100 3.40%, every kind within 8% on both (worst: softmax 7.7% / 7.3%). Seed 49 (session 25, registered by
    5e9b868, the same model): H200 3.88%, H100 3.67%, every kind within 8% on both (worst: softmax 7.7% / 7.6%).
    Seed 50 (session 27, H100 only): 4.03%, softmax 8.1% over (7.9% without the records whose calls spread over
    3x). Seed 51 (session 27, H200 only): 3.75%, every kind within 8% (softmax 6.7%, layernorm 6.3%).
    Seed 52 (session 28, H200): 4.3%, every kind within 8% (softmax 7.2%); seed 53 (session 28, H100): 3.7%,
    every kind within 8% (layernorm 6.8%). Seed 54 (session 29, H200): 4.07%, every kind within 8% (layernorm
    6.7%, softmax 6.7%); seed 55 (session 29, H100): 5.4%, softmax 8.2% over (four records whose calls spread over
    3x, among them a 373x552 layernorm at 111 us: without them 3.8% pooled, softmax 7.4%). Seed 56 (session 30,
    H200, registered by cd7f481): 3.76%, every kind within 8% (softmax 7.05%, rmsnorm 5.5%); seed 57 (session 30,
    H100): 3.59%, every kind within 8% (softmax 4.85%, layernorm 4.7%; two records whose calls spread over 3x, an
    add and an rmsnorm, 3.59% without them too). Seed 58 (session 31, H200, registered by 161615c): 4.14%, every
    kind within 8% (softmax 7.7%, layernorm 6.6%); seed 59 (session 31, H100): 3.71%, every kind within 8%
    (softmax 6.45%, rmsnorm 5.5%). Seed 60 (session 32, H200, registered by 0c24860): 3.64%, every kind within 8%
    (softmax 6.9%, layernorm 5.2%); seed 61 (session 32, H100): 4.09%, every kind within 8% (softmax 7.8%, rmsnorm
    5.75%). Seed 62 (session 33, H200, registered by 4c570f5): 4.21%, softmax 8.4% over (short rows of 1.1-2k
    elements in few rows predicted 12-33% fast, no interference); seed 63 (session 33, H100): 5.46%, layernorm 13.1%
    over (two records whose calls spread 70x and 26x, measured 171 us and 128 us against fastest calls of 21 and
    52 us: without the records over 3x, 4.0% pooled and every kind within 8%). Seed 64 (session 34, H200,
    registered by 0fce87d): 4.34%, every kind within 8% (softmax 7.7%, layernorm 6.8%; one record whose calls spread
    over 3x, 4.35% without it); seed 65 (session 34, H100): 4.09%, softmax 8.9% over (no interference). Seed 66
    (session 35, H200, registered in 26b0352): 3.60%, every kind within 8% (softmax 5.6%); seed 67 (session 35,
    H100): 5.00%, softmax 9.8% over (13 records whose calls spread over 3x: 3.96% without them, softmax 9.8% still).
    Seed 68 (session 36, H200, registered in 40b6163 with membound66 adopted): 4.96% with its 24 new fp32 softmax
    rows, every bf16 kind within 8% (softmax 5.2%), fp32 softmax 13.8% over (every fp32 kernel predicted fast: the
    global-memory kernel -16..-34%, the warp kernel over few rows -12..-41%); seed 69 (session 36, H100): 4.81%,
    softmax 4.8%, rmsnorm 9.5% and fp32 softmax 10.5% over. Seed 70 (session 36, H200, registered in c0d9b12):
    5.34%, every bf16 kind within 8% (softmax 7.0%), fp32 softmax 14.45% over; seed 71 (session 36, H100, a noisy
    machine: 14 records whose calls spread over 3x): 6.98%, rmsnorm 10.2% and fp32 softmax 13.2% over (4.91% without
    those records, every bf16 kind within 8%). Seeds 72 / 73 (session 36, registered in 3d4e850, with 16 causal fp32
    grids each): H200 6.56%, H100 5.39%, every bf16 kind within 8% on both (softmax 6.3% / 5.3%), fp32 softmax
    17.2% / 10.9% and causal fp32 softmax 20.1% / 13.6% over. Seeds 74 / 75 (session 36, registered in 7c6ce01, the
    causal grids with N(0, 1) twins): H200 5.35%, H100 6.78% (25 records whose calls spread over 3x; layernorm 14.4%
    with them, 4.8% without), fp32 softmax 13.2% / 10.7%, causal 10.1% / 16.4%, their twins 8.3% / 8.0% over.
    Seeds 76 / 77 (session 37, registered in 108397a, the same form): H200 5.74%, H100 5.98%, every bf16 kind within
    8% on both (clean machines: two H100 records whose calls spread over 3x); fp32 softmax 12.45% / 15.8%, causal
    14.8% / 17.1% over, twins 9.6% over / 7.3%. Seeds 78 / 79 (session 39, registered in dfaf03f, the same form, 12
    long fp32 rows each): H200 6.67%, H100 6.47%, every bf16 kind within 8%; fp32 softmax 14.4% / 14.5%, causal 13.8% /
    11.3%, long rows 22.2% / 25.2%, H200 twins 9.35% over (the committed model of that time: session 39 then adopted
    m78copy, whose softmax, candidate membound78, was registered beside it: tests/test_membound78_candidate.py).
    Seeds 80 / 81 (session 39, registered in 44bdefb by the adopted profiles): **H200 4.20%, every kind within 8%**
    (layernorm 6.7%, fp32 rows 4.8-5.8%); H100 5.18% on a noisy machine (12 records whose calls spread over 3x),
    the twins 9.6% over with them, every kind within 8% and 3.64% pooled without them (next test).
    Seeds 82 / 83 (session 43, registered in e7c1ed6 by the committed profiles): **H200 3.41%, H100 3.43%, every kind
    within 8% on both** (H100 fp32 softmax 6.2% the worst; one H200 record whose calls spread over 3x).
    Seeds 84 / 85 (session 44, registered in b24ca15 by the committed profiles): **H200 3.33%, H100 3.52%, every kind
    within 8% on both** (H100 long fp32 softmax rows 4.9% and bf16 softmax 4.85% the worst; 14 H100 records whose
    calls spread over 3x, kept).
    Pooled within 8% on every draw."""
    if seed == 44:
        assert "seed 44" in (LOGS / "prereg_membound44_h200.txt").read_text()
    got, _ = scored(gpu, seed)
    assert_as_quoted(got, AS_REGISTERED_SINCE_ADOPTION[seed][gpu])
    assert got["all"] <= 0.08
    assert {k for k, v in got.items() if v > 0.08} == OVER_8_PERCENT[(seed, gpu)]
    if (seed, gpu) not in INTERFERENCE:
        assert scored(gpu, seed, drop_interference=True) == scored(gpu, seed)


def test_seed_81_h100_without_interference():
    """Seed 81 (H100, session 39, the first draw registered by the adopted m78copy profile): twelve records' calls spread
    over 3x; without them every kind is within 8% (long fp32 rows 5.8%, softmax 4.8%, fp32 twins 4.4%) and 3.64%
    pooled."""
    got, _ = scored("h100", 81, drop_interference=True)
    assert_as_quoted(got, {"all": 0.0364, "softmax": 0.0476, "softmax_fp32_grid": 0.0444, "softmax_fp32_long": 0.0578})
    assert max(got.values()) <= 0.08


def test_seed_63_h100_without_interference():
    """Seed 63 (H100, session 33): fifteen records' calls spread over 3x, among them a 486x7440 and a 13543x808
    layernorm whose medians (171 and 128 us) are 8x and 2.5x their fastest calls; without them every kind is within
    8% (softmax 5.4%, gelu 5.2%, layernorm 5.0% the worst) and 4.0% pooled."""
    got, _ = scored("h100", 63, drop_interference=True)
    assert_as_quoted(got, {"all": 0.0401, "softmax": 0.0536, "gelu": 0.0517, "layernorm": 0.0496, "rmsnorm": 0.0357})
    assert max(got.values()) <= 0.08


def test_seed_55_h100_without_interference():
    """Seed 55 (H100, session 29): four records' calls spread over 3x (a 3.8 MiB copy, a 29699x920 softmax, a
    373x552 layernorm measured 111 us, a 940x12088 rmsnorm); without them every kind is within 8% (softmax 7.4%
    the worst) and 3.8% pooled, as registered."""
    got, _ = scored("h100", 55, drop_interference=True)
    assert_as_quoted(got, {"all": 0.0383, "copy": 0.0283, "softmax": 0.0737, "layernorm": 0.0362, "rmsnorm": 0.0425})
    assert max(got.values()) <= 0.08


@pytest.mark.parametrize("seed,gpu", sorted(k for k, v in OVER_8_PERCENT.items() if v))
@pytest.mark.xfail(strict=True, reason="issue #12: memory-bound ops <= 8% per kind, registered draws since the "
                                       "membound42 adoption: seed 44 H200 layernorm 9.2%, softmax 8.8%, copy 8.3%, "
                                       "H100 softmax 9.7%; seed 45 H200 layernorm 9.2%, copy 8.6%, H100 layernorm 8.3%; "
                                       "seed 46 H100 silu_mul 8.1%, softmax 9.1%; seed 50 H100 softmax 8.1%; "
                                       "seed 55 H100 softmax 8.2%; seed 62 H200 softmax 8.4%; seed 63 H100 layernorm "
                                       "13.1%; seed 65 H100 softmax 8.9%; seed 67 H100 softmax 9.8%; the fp32 softmax kinds "
                                       "of seeds 68-79 by the profiles of their time (met on 78 / 79 by membound78, "
                                       "adopted in session 39 with m78copy)")
def test_draws_since_the_adoption_every_kind_within_the_target(seed, gpu):
    assert max(scored(gpu, seed)[0].values()) <= 0.08


# the membound46 candidate (copies' own cudaMemcpyAsync fixed cost, norms in whole waves; validation/membound46_fit.py
# on draws 40-45) registered beside seed 46
AS_REGISTERED_46_CAND = {
    "h200": {"all": 0.0402, "copy": 0.0272, "add": 0.0305, "gelu": 0.0289, "silu_mul": 0.0162, "softmax": 0.0728,
             "layernorm": 0.0612, "rmsnorm": 0.0445},
    "h100": {"all": 0.0551, "copy": 0.0370, "add": 0.0273, "gelu": 0.0594, "silu_mul": 0.0809, "softmax": 0.0908,
             "layernorm": 0.0530, "rmsnorm": 0.0374},
}


@pytest.mark.parametrize("gpu", GPUS)
def test_membound46_candidate_as_registered_on_seed_46(gpu):
    """Registered beside the committed model before seed 46 ran: H200 4.66 -> 4.02% pooled (copy 4.5 -> 2.7%,
    layernorm 7.0 -> 6.1%, rmsnorm 6.3 -> 4.45%), H100 6.08 -> 5.51% (copy 4.65 -> 3.7%, layernorm 7.1 -> 5.3%,
    rmsnorm 4.9 -> 3.7%); the kinds it does not touch are unchanged. Adopted in session 24 (the one-GPU
    step figure 5.73 -> 5.75%); from then until session 36 refitted the softmax its log was what the committed
    profiles predicted, and it is what the candidate file predicts."""
    cand, _ = scored(gpu, 46, "_cand")
    today, _ = scored(gpu, 46)
    assert_as_quoted(cand, AS_REGISTERED_46_CAND[gpu])
    changed = {"copy", "layernorm", "rmsnorm", "all"}
    assert all(cand[k] < today[k] - 0.005 for k in changed)
    assert all(cand[k] == pytest.approx(today[k]) for k in today if k not in changed)
    from validation.prereg import kernel_rows
    like = str(ROOT / "validation" / "measurements" / f"{gpu}_kernels.json")
    reg = registered(gpu, 46, "_cand")
    profile = str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-membound46.yaml")
    assert all(reg[label] == pytest.approx(t, abs=0.006e-6) for label, t in kernel_rows("membound_random", like, 46, profile))


# the membound47 candidate (one warp's pass over its row in the warp softmax, the global-memory softmax's scalar
# epilogue; validation/membound47_fit.py on draws 40-46) registered beside seeds 47 and 48 (not adopted: worse on
# the torch_paths softmax, tests/test_membound47_candidate.py)
AS_REGISTERED_47_CAND = {   # seed: gpu: (pooled, softmax)
    47: {"h200": (0.0399, 0.0607), "h100": (0.0386, 0.0629)},
    48: {"h200": (0.0394, 0.0680), "h100": (0.0327, 0.0638)},
}


@pytest.mark.parametrize("seed,gpu", [(s, g) for s in (47, 48) for g in GPUS])
def test_membound47_candidate_as_registered(seed, gpu):
    """Registered beside the committed model before seeds 47 and 48 ran: softmax H200 6.42 -> 6.07% and 7.71 ->
    6.80%, H100 6.68 -> 6.29% and 7.27 -> 6.38% (pooled 4.04 -> 3.99%, 3.92 -> 3.86%; 4.07 -> 3.94%, 3.40 -> 3.27%);
    it touches softmax only, every other kind as the committed model."""
    cand, _ = scored(gpu, seed, "_cand")
    today, _ = scored(gpu, seed)
    pooled, softmax = AS_REGISTERED_47_CAND[seed][gpu]
    assert_as_quoted(cand, {**AS_REGISTERED_SINCE_ADOPTION[seed][gpu], "all": pooled, "softmax": softmax})
    assert cand["softmax"] < today["softmax"] - 0.003
    assert all(cand[k] == pytest.approx(today[k]) for k in today if k not in ("softmax", "all"))


# candidate membound66 (membound47's warp latency and scalar epilogue fitted with every softmax parameter on the
# softmax records of every draw through seed 65; validation/membound66_fit.py) registered beside seeds 66 / 67:
# (pooled, softmax) as registered
AS_REGISTERED_66_CAND = {66: {"h200": (0.0324, 0.0309)}, 67: {"h100": (0.0450, 0.0630)}}


@pytest.mark.parametrize("seed,gpu", [(66, "h200"), (67, "h100")])
def test_membound66_candidate_as_registered(seed, gpu):
    """Registered beside the committed model before seeds 66 and 67 ran (commit 26b0352): softmax H200 5.58 ->
    3.09%, H100 9.80 -> 6.30% (pooled 3.60 -> 3.24%, 5.00 -> 4.50%): with it every kind of both draws is within
    the issue's 8%. It touches softmax only. Adopted in session 36, after the step, attention and published sets
    were checked under it (docs/validation.md, "Session 36"); the fp32 rows that share the block kernels' rates
    got worse, within 8% (validation/membound66_fit.py)."""
    cand, _ = scored(gpu, seed, "_cand")
    today, _ = scored(gpu, seed)
    pooled, softmax = AS_REGISTERED_66_CAND[seed][gpu]
    assert_as_quoted(cand, {**AS_REGISTERED_SINCE_ADOPTION[seed][gpu], "all": pooled, "softmax": softmax})
    assert cand["softmax"] < today["softmax"] - 0.02
    assert max(cand.values()) <= 0.08
    assert all(cand[k] == pytest.approx(today[k]) for k in today if k not in ("softmax", "all"))


@pytest.mark.parametrize("gpu", GPUS)
def test_membound66_candidate_fitted_only_on_earlier_draws(gpu):
    """The candidate's fit read every committed draw up to the session-34 ones and neither draw it was registered
    for. Adopted in session 36: the committed profile holds its values (only softmax parameters differed from the
    profile before), with the H200's causal-mask softmax cost refitted on top of them."""
    import yaml
    doc = yaml.safe_load((ROOT / "validation" / "candidates" / f"{gpu}-sxm-membound66.yaml").read_text())
    fit = next(v for k, v in doc["fits"].items() if k.startswith("compute[membound66"))
    seeds = {int(f.rsplit("random", 1)[1].split(".")[0]) for f in fit["fitted_on"] if "membound_random" in f}
    assert max(seeds) == {"h200": 64, "h100": 65}[gpu] and not seeds & {66, 67}
    # the committed profile before session 39 adopted m78copy (frozen as candidate pre39)
    committed = yaml.safe_load((ROOT / "validation" / "candidates" / f"{gpu}-sxm-pre39.yaml").read_text())["parameters"]
    changed = {k for k in set(committed) | set(doc["parameters"]) if committed.get(k) != doc["parameters"].get(k)}
    assert changed == ({"softmax_masked_cost"} if gpu == "h200" else set())
    from validation.membound66_fit import BEFORE
    assert all(BEFORE[gpu][k] != doc["parameters"][k] for k in ("softmax_elements_per_cycle", "softmax_wave_cycles",
                                                                "softmax_warp_cycles"))
