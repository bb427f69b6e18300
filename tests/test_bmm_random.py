"""The bmm_random suite (issue #12): the batched GEMMs of Megatron-Core's local attention at seeded
random shapes (validation/harness/bmm_cases.py, timed by sustained.py ``--suite bmm_random``), their
mapping onto the simulator's calls, their prediction and their pre-registration."""
from __future__ import annotations

import math
import py_compile
from collections import Counter
from pathlib import Path

import pytest

import simulator.compute as compute
from simulator.calibration import calibration_for
from simulator.engine import device_model
from tests.harness_loader import HARNESS_DIR, load_harness
from validation import prereg
from validation.gemm_regimes import reproduced_times
from validation.hardware import hardware_for
from validation.predict import kernel_device, kernel_time, predict_record
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
LIKE = ROOT / "validation/measurements/h200_gemm_random.json"
bmm = load_harness("bmm_cases")


@pytest.fixture(scope="module")
def h200():
    """(hardware, committed calibration) of the H200 random-GEMM file."""
    hw = hardware_for(load_measurements(LIKE))
    return hw, calibration_for(hw.accelerator)[0]


def test_draw_is_deterministic_per_seed_and_differs_between_seeds():
    a, b = bmm.cases(78), bmm.cases(78)
    assert a == b and len(a) == 48
    assert bmm.cases(79) != a
    assert Counter(c["gemm"] for c in a) == {g: 8 for g in bmm.GEMMS}
    assert len({(c["gemm"], c["bh"], c["seq"], c["head_dim"]) for c in a}) == 48


@pytest.mark.parametrize("seed", [78, 79, 80])
def test_draw_ranges(seed):
    """s in 256..8192 in multiples of 8, bh 1..128 with the bf16 score matrix within 1 GiB, head
    dims of the set, bf16; the torch call's layout letters follow its strides."""
    for c in bmm.cases(seed):
        assert 256 <= c["seq"] <= 8192 and c["seq"] % 8 == 0
        assert 1 <= c["bh"] <= 128 and c["bh"] * c["seq"] ** 2 * 2 <= 1 << 30
        assert c["head_dim"] in (64, 80, 96, 128, 256) and c["dtype"] == "bfloat16"
        assert c["layout"] == "".join("N" if st[-1] == 1 else "T" for st in c["strides"])
        assert c["op"] == ("baddbmm" if c["gemm"] == "qk_baddbmm" else "bmm")


@pytest.fixture(scope="module")
def dev(h200):
    """The H200 device model (committed profile) the composite is costed on."""
    hw, cal = h200
    return device_model(hw.accelerator, cal)


def _spied_calls(monkeypatch, dev, bh, sq, skv, d, direction):
    """The (m, n, k, dtype, batch) of every score_gemm_time call (the batched GEMMs of unfused attention, costed
    as gemm_time unless the profile has a floor law of their own) whose seconds unfused_torch_attention_parts
    charges to its ``gemm`` family at batch 1, ``bh`` heads (no GQA), ``sq`` x ``skv``, head dim
    ``d``: the spy answers call i with 2**i seconds, so the family's sum names its calls."""
    calls = []

    def spy(dev, m, n, k, dtype="bf16", batch=1):
        calls.append((m, n, k, dtype, batch))
        return float(2 ** (len(calls) - 1))
    monkeypatch.setattr(compute, "score_gemm_time", spy)
    parts = dict(compute.unfused_torch_attention_parts(dev, 1, bh, bh, sq, skv, d, direction))
    used = int(parts["gemm"])
    return [c for i, c in enumerate(calls) if used >> i & 1]


def test_mapping_is_the_simulators_calls(monkeypatch, dev):
    """At sq != skv every GEMM's (m, n, k) is distinct: forward calls are exactly QK^T's and PV's,
    backward calls exactly dP, dV, dQ, dK's, each with batch b*heads and bf16."""
    bh, sq, skv, d = 6, 256, 512, 80
    fwd = _spied_calls(monkeypatch, dev, bh, sq, skv, d, "fwd")
    bwd = _spied_calls(monkeypatch, dev, bh, sq, skv, d, "bwd")
    want = {g: (*bmm.sim_call(g, sq, skv, d), "bf16", bh) for g in bmm.GEMMS}
    assert Counter(fwd) == Counter([want["qk_baddbmm"], want["pv"]])
    assert Counter(bwd) == Counter([want[g] for g in ("dp", "dv", "dq", "dk")])


@pytest.mark.parametrize("seed", [78, 79])
def test_every_case_is_a_call_of_the_composite(monkeypatch, dev, seed):
    """Each case's (m, n, k, batch) is among the calls unfused_torch_attention_parts makes at its
    shape (batch 1, heads bh, sq = skv = s) in its direction."""
    for c in bmm.cases(seed):
        direction = "fwd" if c["gemm"] in ("qk_baddbmm", "pv") else "bwd"
        calls = _spied_calls(monkeypatch, dev, c["bh"], c["seq"], c["seq"], c["head_dim"], direction)
        assert (c["m"], c["n"], c["k"], "bf16", c["batch"]) in calls


@pytest.mark.parametrize("gemm", bmm.GEMMS)
def test_torch_call_has_the_simulators_work(gemm):
    """The torch operands [bh, r, q] x [bh, q, p] chain, and 2·bh·r·q·p equals 2·batch·m·n·k of the
    simulator's call with {r, p} = {m, n} and q = k (dK^T comes out as [bh, d, skv])."""
    c = bmm.make_case(gemm, 5, 264, 96)
    (ba, r, q), (bb, q2, p) = c["shapes"]
    assert ba == bb == c["batch"] and q == q2 == c["k"]
    assert sorted((r, p)) == sorted((c["m"], c["n"]))
    rec = bmm.record_of(c, 78)
    assert rec["flops"] == 2.0 * ba * r * q * p and rec["batch"] == 5 and rec["kind"] == "gemm"
    if gemm == "qk_baddbmm":
        assert rec["alpha"] == pytest.approx(1 / math.sqrt(96)) and rec["beta"] == 0.0


def test_batched_record_predicts_with_its_batch(h200):
    hw, cal = h200
    c = bmm.cases(78)[0]
    rec = bmm.record_of(c, 78)
    dev = kernel_device(rec, hw, cal)
    t = kernel_time(rec, hw, cal)
    assert t == compute.gemm_time(dev, c["m"], c["n"], c["k"], "bf16", batch=c["batch"])
    assert c["batch"] > 1 and t > compute.gemm_time(dev, c["m"], c["n"], c["k"], "bf16")
    assert predict_record({**rec, "time_s": 1e-3}, hw, cal).time_s == t


def test_unbatched_record_is_unchanged(h200):
    """A gemm record without ``batch`` (every file before bmm_random) predicts one GEMM, as before,
    and ``batch: 1`` the same."""
    hw, cal = h200
    for r in load_measurements(LIKE).records[:40]:
        dev = kernel_device(r, hw, cal)
        one = compute.gemm_time(dev, r["m"], r["n"], r["k"], compute.TORCH_DTYPES[r["dtype"]])
        assert kernel_time(r, hw, cal) == one == kernel_time({**r, "batch": 1}, hw, cal)


def test_passes_of_cases_sharing_mnk_stay_apart():
    """PV and dQ share (m, n, k, batch) at sq = skv, and so do dV and dK: reproduced_times keeps them
    apart and pairs each with its own second pass."""
    recs = [{**bmm.record_of(bmm.make_case(g, 4, 512, 128), 78), "time_s": t, "pass_no": p}
            for p in (1, 2) for g, t in (("pv", 1.0), ("dq", 2.0), ("dv", 3.0), ("dk", 4.0))]
    out = reproduced_times(recs)
    assert [r["gemm"] for r in out] == ["pv", "dq", "dv", "dk"] and all(r["passes"] == 2 for r in out)


def test_prereg_predicts_every_case(h200, capsys):
    hw, cal = h200
    rows = prereg.gemm_draw_rows(78, str(LIKE), suite="bmm_random")
    cases = bmm.cases(78)
    assert len(rows) == len(cases) == 48
    for (label, _regime, t), c in zip(rows, cases):
        assert label == bmm.label(c)
        assert t == kernel_time(bmm.record_of(c, 78), hw, cal)
    assert prereg.main(["--gemm-seed", "78", "--gemm-suite", "bmm_random", "--like", str(LIKE)]) == 0
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert len(printed) == 48 and all(ln.endswith(" us") for ln in printed)


def test_prereg_of_the_random_draw_is_unchanged():
    """--gemm-suite random still predicts gemm_cases' draw: the committed seed-71 log's rows."""
    log = ROOT / "validation/measurements/logs/prereg_gemm_random71_h100.txt"
    rows = prereg.gemm_draw_rows(71, str(ROOT / "validation/measurements/h100_gemm_random3.json"))
    printed = [f"{label:<64} {regime:<18} {t * 1e6:10.2f} us" for label, regime, t in rows]
    assert printed == [ln for ln in log.read_text().splitlines() if not ln.startswith("#")]


def test_harness_compiles():
    for name in ("sustained.py", "bmm_cases.py"):
        py_compile.compile(str(HARNESS_DIR / name), doraise=True, cfile=None)


def test_layouts_are_autograd_s():
    """Megatron-Core's local attention forward (dot_product_attention.py: sbhd q, k, v; baddbmm with
    beta 0; bmm with the probs) and autograd's backward dispatch exactly the six cases' (op, shapes,
    strides) (needs torch; CPU suffices)."""
    torch = pytest.importorskip("torch")
    trace = load_harness("gemm_trace")
    b, heads, s, d = 2, 3, 16, 8
    bh = b * heads

    def step():
        q, k, v = (torch.randn(s, b, heads, d, requires_grad=True) for _ in range(3))
        scores = torch.baddbmm(torch.empty(bh, s, s), q.reshape(s, bh, -1).transpose(0, 1),
                               k.view(s, bh, -1).transpose(0, 1).transpose(1, 2), beta=0.0, alpha=1 / math.sqrt(d))
        probs = torch.softmax(scores.view(b, heads, s, s).float(), dim=-1).view(bh, s, -1)
        ctx = torch.bmm(probs, v.view(s, bh, -1).transpose(0, 1))
        ctx = ctx.view(b, heads, s, d).permute(2, 0, 1, 3).contiguous()
        ctx.backward(torch.randn_like(ctx))
    got = {(c["op"], str(c["shapes"][-2:]), str(c["strides"][-2:])) for c in trace.capture_calls(step)}
    for g in bmm.GEMMS:
        c = bmm.make_case(g, bh, s, d)
        assert (c["op"], str(c["shapes"]), str(c["strides"])) in got, g


# ----------------------------------------------------------------------------- the first draws, as registered
# session 37: registered in commit 960db25 by the code of e17fabd (the committed GEMM model), measured after it
BMM_DRAWS = {("h200", 78): (0.0907, {"pv": 0.0599, "qk_baddbmm": 0.1487, "dk": 0.1383, "dp": 0.0984, "dv": 0.0638,
                                     "dq": 0.0353}),
             ("h100", 79): (0.1095, {"dq": 0.1058, "pv": 0.1122, "dk": 0.0629, "dv": 0.1139, "qk_baddbmm": 0.1231,
                                     "dp": 0.1391})}


# session 38: the second draws, registered in commit 6d48275 by the code of 5ebb162 (the committed model and
# candidate bmm78), measured after it on newly lent machines (H100 seed 81 in session 37, H200 seed 80 in 38)
SECOND_BMM_DRAWS = {("h200", 80): (0.1167, {"dk": 0.0938, "dp": 0.1856, "dq": 0.0638, "dv": 0.1084, "pv": 0.1129,
                                            "qk_baddbmm": 0.1359}),
                    ("h100", 81): (0.1070, {"dk": 0.0731, "dp": 0.1507, "dq": 0.0548, "dv": 0.0798, "pv": 0.1377,
                                            "qk_baddbmm": 0.1458})}


def _bmm_pairs(gpu: str, seed: int, registration: str = "") -> list:
    from validation.gemm_regimes import registered_bmm_pairs
    return registered_bmm_pairs(ROOT / "validation" / "measurements" / "logs" /
                                f"prereg_bmm_random{seed}_{gpu}{registration}.txt",
                                ROOT / "validation" / "measurements" / "repeat" / f"{gpu}_bmm_random{seed}.json")


@pytest.mark.parametrize("gpu,seed", sorted(BMM_DRAWS) + sorted(SECOND_BMM_DRAWS))
def test_bmm_draws_as_registered(gpu, seed):
    """Every case measured in both passes and registered; MAPE by the committed model as registered: first draws
    H200 seed 78 9.07%, H100 seed 79 10.95% (per GEMM H200 3.5% (dQ) to 14.9% (QK^T), H100 6.3% (dK) to 13.9%
    (dP)); second draws H200 seed 80 11.67%, H100 seed 81 10.70% (H200 6.4% (dQ) to 18.6% (dP), H100 5.5% (dQ) to
    15.1% (dP)). Ratchets at the registered figures."""
    pairs = _bmm_pairs(gpu, seed)
    assert len(pairs) == 48 and all(r["passes"] == 2 for r, _ in pairs)
    errs: dict = {}
    for r, p in pairs:
        errs.setdefault(r["gemm"], []).append(abs(p / r["time_s"] - 1))
    pooled, per_gemm = {**BMM_DRAWS, **SECOND_BMM_DRAWS}[(gpu, seed)]
    assert sum(sum(v) for v in errs.values()) / 48 == pytest.approx(pooled, abs=5e-4)
    assert {k: sum(v) / len(v) for k, v in errs.items()} == pytest.approx(per_gemm, abs=5e-4)


@pytest.mark.parametrize("gpu,seed", sorted(BMM_DRAWS))
def test_large_batched_gemms_stream_faster_than_the_floor_gives(gpu, seed):
    """The cases over 100 us (attention at long sequences, what a step spends its bmm time on) mostly stream at
    0.71-0.83 of the datasheet HBM rate, where the committed floor (hbm_fraction, 0.65-0.66) costs them: those are
    predicted 13-28% slow (the in-step figure, +21% summed, says the same); the exceptions run slower than the
    model (the H100 kernels named ..._TNT below, H200 QK^T at 20 x 3848^2 and 120 x 2040^2: 0.39-0.48 of the
    datasheet; H200 dK at 7 x 4304^2 0.54)."""
    from simulator.compute import gemm_bytes
    from validation.hardware import hardware_for
    from validation.records import load_measurements
    hw = hardware_for(load_measurements(ROOT / "validation" / "measurements" / "repeat" / f"{gpu}_bmm_random{seed}.json"))
    peak = hw.accelerator.hbm_bandwidth_Bps
    big = [(r, p) for r, p in _bmm_pairs(gpu, seed) if r["time_s"] > 100e-6]
    rate = {id(r): gemm_bytes(r["m"], r["n"], r["k"], "bf16", r["batch"]) / r["time_s"] / peak for r, _ in big}
    slow = [(r, p) for r, p in big if p / r["time_s"] - 1 > 0.13]
    assert len(big) == {"h200": 9, "h100": 13}[gpu] and len(slow) >= len(big) // 2
    assert all(0.71 <= rate[id(r)] <= 0.83 for r, _ in slow)
    assert all(rate[id(r)] < 0.55 for r, p in big if p / r["time_s"] - 1 < -0.11)


def test_h100_output_heavy_kernels_writing_transposed_tiles_run_slow():
    """H100 seed 79's QK^T / dP cases (an s x s output from k = head_dim) of at least 10 us: cuBLAS's nvjet kernels
    whose names end in T (TNT) stream at 0.36-0.49 of the datasheet rate, those ending in N (TNN) at 0.73-0.83.
    Which one cuBLAS picks is its heuristic's choice, not a function of size here (2120^2, 3176^2, 3896^2, 4440^2
    TNT; 2384^2, 3008^2, 6240^2, 8128^2 TNN): the model cannot know it, so these cases carry the draw's largest
    errors both ways."""
    from simulator.compute import gemm_bytes
    out = {}
    for r, _ in _bmm_pairs("h100", 79):
        if r["gemm"] in ("qk_baddbmm", "dp") and r["time_s"] >= 10e-6 and r["m"] > 1000:
            out.setdefault(r["kernels"][0]["name"][-1], []).append(
                gemm_bytes(r["m"], r["n"], r["k"], "bf16", r["batch"]) / r["time_s"] / 3.35e12)
    assert sorted(out) == ["N", "T"] and len(out["N"]) == 4 and len(out["T"]) == 4
    assert max(out["T"]) < 0.50 < 0.72 < min(out["N"])


@pytest.mark.xfail(strict=True, reason="issue #12: GEMMs <= 7% MAPE on a fresh run; the batched-GEMM draws are "
                                       "9.07% / 11.67% (H200) and 10.95% / 10.70% (H100) as registered")
@pytest.mark.parametrize("gpu,seed", sorted(BMM_DRAWS) + sorted(SECOND_BMM_DRAWS))
def test_bmm_draws_within_the_gemm_target(gpu, seed):
    pairs = _bmm_pairs(gpu, seed)
    assert sum(abs(p / r["time_s"] - 1) for r, p in pairs) / len(pairs) <= 0.07
