"""The cuBLAS kernel trace of the random GEMM development draws (validation/gemm_kernels.py) and the
mechanisms it motivates (session 22: align2 fallback loads, fallback split-K, per-split reduce cost),
on in the candidate ``validation/candidates/h*-sxm-gemm32.yaml`` and, since session 23 adopted it after
the pre-registered seeds 32 / 33, in the committed profiles."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from simulator.compute import (DeviceModel, gemm_load_vector, gemm_time, split_k_reduction_s,
                               unaligned_split_k_factors)
from validation.gemm_kernels import joined, parse_kernel, reduce_fit, trace_splits
from validation.gemm_regimes import mape_by_regime

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = {g: ROOT / "validation" / "candidates" / f"{g}-sxm-gemm32.yaml" for g in ("h200", "h100")}
NEW = ("gemm_unaligned_max_vector", "gemm_unaligned_split_waves", "gemm_split_k_per_split_s")
# the profiles before the adoption: the mechanisms off, the unaligned rate and fixed costs of their earlier fits
BEFORE_GEMM32 = {
    "h200": dict(gemm_unaligned_fraction=0.1759797037776373, gemm_unaligned_fixed_s=1.3954092572537717e-06,
                 gemm_split_k_fixed_s=3.998074362825777e-06, **dict.fromkeys(NEW, 0.0)),
    "h100": dict(gemm_unaligned_fraction=0.17529567089237388, gemm_unaligned_fixed_s=9.227548195118593e-07,
                 **dict.fromkeys(NEW, 0.0)),
}


def test_kernel_names_parse():
    k = parse_kernel("nvjet_sm90_tst_128x216_64x4_2x1_v_bz_coopA_NNT", (2, 66, 1))
    assert (k["family"], k["tile"], k["bk"], k["stages"], k["cluster"], k["coop"], k["split_k"], k["ctas"]) == \
        ("nvjet", (128, 216), 64, 4, (2, 1), "coopA", False, 132)
    k = parse_kernel("nvjet_sm90_qqtst_64x24_128x16_4x2_h_bz_algo2_splitK_TNT", (8, 15, 1))
    assert k["family"] == "nvjet_fp8" and k["split_k"] and k["tile"] == (64, 24)
    k = parse_kernel("void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_bf16_64x64_nn_align1>(Params)", (2, 1, 41))
    assert (k["family"], k["tile"], k["align"], k["split_k"]) == ("cutlass75", (64, 64), 1, True)
    assert trace_splits(k, 26, 112) == 41
    k = parse_kernel("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_nn_align2>(P)")
    assert (k["family"], k["tile"], k["align"], k["bk"], k["stages"]) == ("wmma80", (32, 32), 2, 128, 2)
    assert parse_kernel("void cublasLt::splitKreduce_kernel<32, 16, int, float>(...)")["family"] == "reduce"


@pytest.mark.parametrize("gpu,shapes", [("h200", 780), ("h100", 936)])
def test_every_traced_shape_joins_a_clean_timing_and_no_align4_kernel(gpu, shapes):
    rows = joined(gpu)
    assert len(rows) == shapes
    assert all(r["main"]["family"] != "other" for r in rows)
    aligns = {r["main"].get("align") for r in rows} - {None}
    assert aligns == {1, 2}                     # SM75 align1, SM80 align2: no align4 kernel exists
    # every unaligned bf16 shape with a % 8 == 4 leading dimension (model's vector 4) runs align2
    assert all(r["main"].get("align") == 2 for r in rows if gemm_load_vector(r["n"], r["k"], r["dtype"]) == 4)


@pytest.mark.parametrize("gpu,per_split", [("h200", 3.19e-8), ("h100", 3.16e-8)])
def test_reduce_kernel_costs_about_32_ns_per_split(gpu, per_split):
    a, b, count = reduce_fit(gpu)
    assert count > 300 and b == pytest.approx(per_split, abs=1e-10) and 1e-6 < a < 2e-6


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_committed_profiles_are_the_gemm32_candidates(gpu):
    cal, cand = load_calibration(f"{gpu}-sxm"), load_calibration(str(CANDIDATES[gpu]))
    assert cal.gemm_unaligned_max_vector == cal.gemm_unaligned_split_waves == 2.0
    # gemm_split_k_fixed_s was refitted again with the split-K L2 operand floor (gemm36, also adopted in session 23)
    assert all(getattr(cal, p) == getattr(cand, p) for p in NEW + ("gemm_unaligned_fraction", "gemm_unaligned_fixed_s"))


def test_mechanisms():
    assert gemm_load_vector(4096, 4100, "bf16") == 4 and gemm_load_vector(4096, 4100, "bf16", 2.0) == 2
    assert gemm_load_vector(4097, 4100, "bf16", 2.0) == 1 and gemm_load_vector(4096, 4096, "bf16", 2.0) is None
    assert unaligned_split_k_factors(1, 45185, 132, 2.0)[-1] == 256        # up to 256 splits
    assert unaligned_split_k_factors(2, 45185, 132, 2.0)[-1] == 132        # tiles * s <= 2 waves
    assert unaligned_split_k_factors(1, 640, 132, 2.0)[-1] == 10           # >= 64 of k per split
    assert unaligned_split_k_factors(300, 45185, 132, 2.0) == [1]
    h100 = load_calibration("h100-sxm")
    from hardware_specs.catalog import load_accelerator
    acc = load_accelerator("h100-sxm")
    h100 = replace(h100, **BEFORE_GEMM32["h100"])                         # every mechanism off
    off, on = DeviceModel(acc, h100), DeviceModel(acc, replace(h100, gemm_split_k_per_split_s=3e-8))
    assert split_k_reduction_s(on, 64, 64, 10) - split_k_reduction_s(off, 64, 64, 10) == pytest.approx(3e-7)
    # an unaligned GEMM with the fallback split-K on is never slower: the factors include today's
    waves = DeviceModel(acc, replace(h100, gemm_unaligned_split_waves=2.0))
    assert gemm_time(waves, 35, 19, 45185) < gemm_time(off, 35, 19, 45185)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_candidate_improves_the_misaligned_development_draws(gpu):
    cand = load_calibration(str(CANDIDATES[gpu]))
    assert cand.gemm_unaligned_max_vector == 2.0 and cand.gemm_unaligned_split_waves == 2.0
    before = mape_by_regime([(r["rec"], r["pred"]) for r in joined(gpu, replace(cand, **BEFORE_GEMM32[gpu]))])
    after = mape_by_regime([(r["rec"], r["pred"]) for r in joined(gpu, cand)])
    assert after["misaligned"][1] < before["misaligned"][1] - 0.02
    assert after["all"][1] < before["all"][1]
