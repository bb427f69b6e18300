"""The kernels cuBLAS ran for every development GEMM draw (sustained.py --kernel-names, session 22;
docs/measurements.md "Which kernels cuBLAS runs"): the facts the docs quote, read from the traces."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

REPEAT = Path(__file__).resolve().parent.parent / "validation" / "measurements" / "repeat"
TRACES = {"h200": ("h200_gemm_trace_dev.json", {24, 25, 26, 28, 30}),
          "h100": ("h100_gemm_trace_dev.json", {21, 22, 23, 27, 29, 31})}


def traced(gpu: str) -> list[dict]:
    return json.loads((REPEAT / TRACES[gpu][0]).read_text())["records"]


def odd_leading_dim(r: dict) -> bool:
    return r["n"] % 2 == 1 or r["k"] % 2 == 1


@pytest.mark.parametrize("gpu", TRACES)
def test_every_development_shape_traced(gpu):
    recs = traced(gpu)
    assert {r["seed"] for r in recs} == TRACES[gpu][1] and len(recs) == 156 * len(TRACES[gpu][1])
    assert all(r["kernels"] and all(k["device_s"] > 0 and k["grid"] for k in r["kernels"]) for r in recs)


@pytest.mark.parametrize("gpu", TRACES)
def test_fallback_kernels_by_alignment(gpu):
    """Aligned shapes run nvjet (SM90) kernels; an odd leading dimension an SM75 align1 CUTLASS
    kernel; an even unaligned one (a multiple of 4 included) an SM80 align2 one: no align4."""
    for r in traced(gpu):
        mains = [k["name"] for k in r["kernels"] if "splitKreduce" not in k["name"]]
        assert len(mains) == 1, mains
        if r["n"] % 8 == 0 and r["k"] % 8 == 0 or r["dtype"] != "bfloat16":
            assert mains[0].startswith("nvjet_sm90_"), (r["m"], r["n"], r["k"], mains)
        elif odd_leading_dim(r):
            assert "cutlass_75_" in mains[0] and mains[0].split("(")[0].endswith("align1>"), mains
        else:
            assert "cutlass_80_" in mains[0] and "align2>" in mains[0], mains


@pytest.mark.parametrize("gpu", TRACES)
def test_split_k_runs_a_separate_reduce_launch(gpu):
    """A third or more of the shapes run split-K: the main kernel then a splitKreduce launch."""
    recs = traced(gpu)
    split = [r for r in recs if any("splitKreduce" in k["name"] for k in r["kernels"])]
    assert 0.3 < len(split) / len(recs) < 0.6
    assert all(k["launches_per_call"] == 1 for r in split for k in r["kernels"])
