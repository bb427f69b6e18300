"""Real training GEMMs as a registered set (issue #12, session 32).

validation/real_gemms.py lists every unbatched GEMM the simulator costs for one layer of each kind and the output
head of every catalog model under tensor parallelism 1, 2, 4 and 8 (2,146 distinct shapes, 137 with n or k off the
64-grid: output heads over tp-split vocabularies, tp-split FFN widths, MoE routers). Seed 60 of the ``real`` suite
(gemm_cases.real_cases: all 137 off-grid shapes and 63 round ones) was registered by the committed model of
0c24860 in commit 26e156b, with the residual-correction candidates knnskip and knnnear beside it, then timed on one
H200 and one H100 (sustained.py --suite real --passes 2). It asks whether the correction, which improves every random
draw, carries over to the shapes it would change in training. It does not: both candidates are worse than the
committed model on both GPUs. Figures: docs/validation.md, "Session 32"."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from validation.gemm_regimes import mape_by_regime, registered_pairs
from validation.records import load_measurements

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
LOGS = MEAS / "logs"
sys.path.insert(0, str(MEAS.parent / "harness"))
import gemm_cases  # noqa: E402

GPUS = ("h200", "h100")
AS_REGISTERED = {   # gpu: tag: MAPE over the 200 shapes ("" the committed model)
    "h200": {"": 0.0583, "_knnskip": 0.0601, "_knnnear": 0.0619},
    "h100": {"": 0.0712, "_knnskip": 0.0746, "_knnnear": 0.0742},
}
OFFGRID_FP8 = {   # gpu: tag: MAPE over the 30 off-grid fp8 shapes, where the candidates lose most
    "h200": {"": 0.0737, "_knnskip": 0.0837, "_knnnear": 0.0937},
    "h100": {"": 0.1078, "_knnskip": 0.1189, "_knnnear": 0.1244},
}


def _errors(gpu: str, tag: str, keep=lambda r: True) -> list[float]:
    pairs = registered_pairs(LOGS / f"prereg_gemm_real60_{gpu}{tag}.txt", MEAS / f"{gpu}_gemm_real60.json")
    return [t / r["time_s"] - 1 for r, t in pairs if keep(r)]


def _mape(errs: list[float]) -> float:
    return sum(abs(e) for e in errs) / len(errs)


def test_the_set_is_every_off_grid_pool_shape_and_a_seeded_round_sample():
    cases = gemm_cases.real_cases(60)
    assert len(cases) == len({c[:4] for c in cases}) == 200
    off = [c for c in cases if c[4].startswith("offgrid")]
    assert len(off) == 137 and all(c[1] % 64 or c[2] % 64 for c in off)
    assert all(c[1] % 64 == 0 and c[2] % 64 == 0 for c in cases if c[4].startswith("round"))
    assert gemm_cases.real_cases(60) == cases and gemm_cases.real_cases(61)[137:] != cases[137:]


@pytest.mark.parametrize("source", ["llama2-7b tp8", "gpt3-175b tp8", "mixtral-8x7b tp1",
                                    "nemotron-3-nano-30b-a3b tp4"])
def test_pool_shapes_are_the_simulators_gemms(source):
    """Every off-grid pool entry named after ``source`` is a GEMM the simulator costs for that model and degree
    (in bf16 or fp8), e.g. llama2-7b's 11008-wide FFN over tp 8 (n or k = 1376) and its 32000-token head (4000)."""
    import json
    from validation.real_gemms import POOL, PRECISIONS, TORCH_NAMES, step_gemms
    name, tp = source.split(" tp")
    shapes = {(m, n, k, TORCH_NAMES[dt]) for p in PRECISIONS for m, n, k, dt in step_gemms(name, int(tp), p)}
    entries = [e for e in json.loads(POOL.read_text())["entries"] if e["source"] == source and not e["round"]]
    assert entries and all((e["m"], e["n"], e["k"], e["dtype"]) in shapes for e in entries)


@pytest.mark.parametrize("gpu", GPUS)
def test_registered_and_measured_cover_the_same_200_shapes(gpu):
    mf = load_measurements(MEAS / f"{gpu}_gemm_real60.json")
    assert mf.info["seed"] == [60] and mf.info["passes"] == 2 and mf.info["suite"] == "gemm_real"
    assert {(r["m"], r["n"], r["k"], r["dtype"]) for r in mf.records} == {c[:4] for c in gemm_cases.real_cases(60)}
    for tag in AS_REGISTERED[gpu]:
        assert len(_errors(gpu, tag)) == 200


@pytest.mark.parametrize("gpu", GPUS)
def test_as_registered(gpu):
    """The committed model: H200 5.83%, H100 7.12% over the 200 real training GEMMs (off-grid bf16 6.2% / 7.1%,
    off-grid fp8 7.4% / 10.8%, round 4.4-5.4%), biased slow by a median 1-4%."""
    for tag, mape in AS_REGISTERED[gpu].items():
        assert _mape(_errors(gpu, tag)) == pytest.approx(mape, abs=1e-4), tag
        fp8 = _errors(gpu, tag, lambda r: r["dtype"] == "float8_e4m3fn" and r["group"].startswith("offgrid"))
        assert len(fp8) == 30 and _mape(fp8) == pytest.approx(OFFGRID_FP8[gpu][tag], abs=1e-4), tag


@pytest.mark.parametrize("gpu", GPUS)
def test_the_correction_does_not_carry_over_to_real_shapes(gpu):
    """Why no shipped profile turns the residual correction on: on the shapes it changes in training, both forms
    are worse than the committed model on both GPUs, while on the random draws beside them (seeds 58 / 59) both are
    better. The round shapes take no correction, so the candidates' figures there equal the committed model's."""
    committed = _mape(_errors(gpu, ""))
    assert all(_mape(_errors(gpu, tag)) > committed for tag in ("_knnskip", "_knnnear"))
    is_round = lambda r: r["group"].startswith("round")  # noqa: E731
    assert _errors(gpu, "_knnskip", is_round) == _errors(gpu, "", is_round) == _errors(gpu, "_knnnear", is_round)


def test_h200_real_set_within_the_gemm_target():
    """Issue #12's 7% on a fresh run, met by the committed model on the H200's real training GEMMs (5.83%)."""
    assert _mape(_errors("h200", "")) <= 0.07


@pytest.mark.xfail(strict=True, reason="issue #12 target 7% on a fresh run: the H100's real training GEMMs are 7.12% "
                                       "as registered (off-grid fp8 10.8%); H200 5.83% meets it")
def test_h100_real_set_within_the_gemm_target():
    assert _mape(_errors("h100", "")) <= 0.07


def test_pool_writer_reports_an_unwritable_path_in_one_line(tmp_path, capsys):
    from validation.real_gemms import main
    assert main(["--out", str(tmp_path / "missing" / "pool.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: cannot write") and "Traceback" not in err


def test_mbs2_pool_is_micro_batch_2_without_the_first_pools_shapes():
    """Session 33's pool (suite ``real_mbs2``): the simulator's GEMMs at micro-batch 2, none a shape of the first pool,
    so its registered set (seed 62) is shapes never timed before; real_cases draws it as it draws the first."""
    import json
    from validation.real_gemms import POOL, shape, step_gemms
    first = {shape(e) for e in json.loads(POOL.read_text())["entries"]}
    doc = json.loads((POOL.parent / gemm_cases.REAL_POOLS["real_mbs2"]).read_text())
    assert "--mbs 2" in doc["generated_by"] and not first & {shape(e) for e in doc["entries"]}
    llama = {(m, n, k) for m, n, k, dt in step_gemms("llama2-7b", 8, "bf16", mbs=2)}
    assert {(e["m"], e["n"], e["k"]) for e in doc["entries"] if e["source"] == "llama2-7b tp8"} <= llama
    assert (8192, 1376, 4096) in llama and (8192, 1376, 4096) not in {(m, n, k) for m, n, k, _ in step_gemms("llama2-7b", 8, "bf16")}
    cases = gemm_cases.suite_cases("real_mbs2", 62)
    off = [c for c in cases if c[4].startswith("offgrid")]
    assert len(cases) == len(off) + 63 and all(c[1] % 64 or c[2] % 64 for c in off)
    assert not first & {c[:4] for c in cases}


def test_mbs4_pool_is_micro_batch_4_without_either_earlier_pools_shapes():
    """Session 34's pool (suite ``real_mbs4``, written with ``--exclude`` given twice): micro-batch 4, none a shape
    of the micro-batch-1 or micro-batch-2 pools, so its registered set (seed 64) is shapes never timed before."""
    import json
    from validation.real_gemms import POOL, shape, step_gemms
    earlier = set()
    for suite in ("real", "real_mbs2"):
        earlier |= {shape(e) for e in json.loads((POOL.parent / gemm_cases.REAL_POOLS[suite]).read_text())["entries"]}
    doc = json.loads((POOL.parent / gemm_cases.REAL_POOLS["real_mbs4"]).read_text())
    assert doc["generated_by"].count("--exclude") == 2 and "--mbs 4" in doc["generated_by"]
    assert not earlier & {shape(e) for e in doc["entries"]}
    assert (16384, 1376, 4096) in {(m, n, k) for m, n, k, _ in step_gemms("llama2-7b", 8, "bf16", mbs=4)}
    cases = gemm_cases.suite_cases("real_mbs4", 64)
    assert len(cases) == sum(1 for e in doc["entries"] if not e["round"]) + 63
    assert not earlier & {c[:4] for c in cases}


def test_pool_writer_excludes_every_pool_given(tmp_path):
    from validation.real_gemms import main
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "p.json"
    a.write_text('{"entries": [{"m": 8192, "n": 1376, "k": 4096, "dtype": "bfloat16"}]}')
    b.write_text('{"entries": [{"m": 8192, "n": 4096, "k": 1376, "dtype": "bfloat16"}]}')
    assert main(["--mbs", "2", "--exclude", str(a), "--exclude", str(b), "--out", str(out)]) == 0
    import json
    shapes = {(e["m"], e["n"], e["k"], e["dtype"]) for e in json.loads(out.read_text())["entries"]}
    assert shapes and (8192, 1376, 4096, "bfloat16") not in shapes and (8192, 4096, 1376, "bfloat16") not in shapes
    assert main(["--mbs", "2", "--out", str(out)]) == 0
    assert (8192, 1376, 4096, "bfloat16") in {(e["m"], e["n"], e["k"], e["dtype"]) for e in json.loads(out.read_text())["entries"]}


def test_pool_writer_rejects_an_unreadable_exclude_in_one_line(tmp_path, capsys):
    from validation.real_gemms import main
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(SystemExit) as exc:
        main(["--exclude", str(bad), "--out", str(tmp_path / "p.json")])
    assert exc.value.code == 2 and "--exclude: cannot read a pool" in capsys.readouterr().err


# registered sets of later pools: {suite: (seed, shapes, {gpu: MAPE as registered}, {gpu: off-grid fp8 MAPE})}.
# session 33: the micro-batch-2 pool's seed 62 (135 off-grid + 63 round shapes, none measured before), registered
# in commit 73a5909 by the committed model and candidate gemm60 (tests/test_gemm_floor.py); session 34: the
# micro-batch-4 pool's seed 64 (140 off-grid + 63 round, none a shape of either earlier pool), registered in
# commit a4ba274 by the committed model and candidate gemm62 (tests/test_gemm_overlap.py), its second pass cut
# short by the budget (54 H200 / 8 H100 shapes timed once)
LATER_SETS = {
    "real_mbs2": (62, 198, {"h200": 0.0704, "h100": 0.0702}, {"h200": 0.0844, "h100": 0.1139}),
    "real_mbs4": (64, 203, {"h200": 0.0523, "h100": 0.0736}, {"h200": 0.0709, "h100": 0.1176}),
}


def _later_errors(suite: str, gpu: str, keep=lambda r: True) -> list[float]:
    seed = LATER_SETS[suite][0]
    pairs = registered_pairs(LOGS / f"prereg_gemm_{suite}_{seed}_{gpu}.txt", MEAS / f"{gpu}_gemm_{suite}_{seed}.json")
    return [t / r["time_s"] - 1 for r, t in pairs if keep(r)]


@pytest.mark.parametrize("suite", sorted(LATER_SETS))
@pytest.mark.parametrize("gpu", GPUS)
def test_later_set_as_registered(suite, gpu):
    """The committed model on the training GEMMs at micro-batch 2 (198 shapes): H200 7.04%, H100 7.02%, off-grid fp8
    8.4% / 11.4%; at micro-batch 4 (203 shapes): H200 5.23%, H100 7.36%, off-grid fp8 7.1% / 11.8%."""
    seed, shapes, mape, fp8_mape = LATER_SETS[suite]
    mf = load_measurements(MEAS / f"{gpu}_gemm_{suite}_{seed}.json")
    assert mf.info["suite"] == f"gemm_{suite}" and mf.info["seed"] == [seed]
    assert {(r["m"], r["n"], r["k"], r["dtype"]) for r in mf.records} == {c[:4] for c in gemm_cases.suite_cases(suite, seed)}
    errs = _later_errors(suite, gpu)
    assert len(errs) == shapes and _mape(errs) == pytest.approx(mape[gpu], abs=1e-4)
    fp8 = _later_errors(suite, gpu, lambda r: r["dtype"] == "float8_e4m3fn" and r["group"].startswith("offgrid"))
    assert len(fp8) == 31 and _mape(fp8) == pytest.approx(fp8_mape[gpu], abs=1e-4)


# (suite, gpu) of the later sets within issue #12's 7% as registered
LATER_TARGET_MET = {("real_mbs4", "h200")}


@pytest.mark.parametrize("suite,gpu", sorted(LATER_TARGET_MET))
def test_later_set_within_the_gemm_target(suite, gpu):
    assert _mape(_later_errors(suite, gpu)) <= 0.07


@pytest.mark.parametrize("suite,gpu", sorted({(s, g) for s in LATER_SETS for g in GPUS} - LATER_TARGET_MET))
@pytest.mark.xfail(strict=True, reason="issue #12 target 7% on a fresh run: the micro-batch-2 training GEMMs are 7.04% "
                                       "(H200) and 7.02% (H100) as registered by the committed model (candidate gemm60: "
                                       "7.08% / 6.20%); at micro-batch 4 the H100's are 7.36% (off-grid fp8 11.8%; "
                                       "candidate gemm62 7.12%), the H200's 5.23% meet it")
def test_later_set_misses_the_gemm_target(suite, gpu):
    assert _mape(_later_errors(suite, gpu)) <= 0.07
