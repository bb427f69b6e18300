"""Candidate membound46 (issue #12 session 23, validation/membound46_fit.py): two mechanisms, each off
in the profiles of session 23 and on in the candidate profiles, adopted into the committed profiles in
session 24 after the draw registered beside the committed model (seed 46).

* ``memory_op_fixed_s["copy"]``: a contiguous same-dtype ``copy_`` is one cudaMemcpyAsync device-to-device
  (aten/src/ATen/native/cuda/Copy.cu, copy_device_to_device, ``memcpy_eligible``), costed by
  simulator.compute.memcpy_time with its own fixed cost in place of the TensorIterator kernels'
  ``memory_kernel_fixed_s``; casts and other copies through memory_time(op="copy") keep the latter.
* ``norm_forward["whole_waves"]`` = 1: the norm forward's grid of one block per row runs as whole waves of
  resident blocks and a tail; the tail's Little's-law rate is that of its own blocks in flight
  (simulator.compute.norm_forward_time).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from simulator.compute import (NORM_BLOCKS_PER_SM, memcpy_time, memory_fixed_s, memory_time,
                               norm_forward_time)
from tests.kernel_profiles import committed_before_39, candidate, kernel_device, with_later_fits_of

ROOT = Path(__file__).resolve().parent.parent
GPUS = ("h200", "h100")


_device = kernel_device


def _candidate(gpu: str):
    return candidate(gpu, "membound46")


@pytest.mark.parametrize("gpu", GPUS)
def test_without_the_parameters_both_mechanisms_are_off(gpu):
    """The profile of session 23 (membound46_fit.profile_before): a copy record costs exactly
    memory_time(op="copy"), and a norm forward without ``whole_waves`` its fractional-wave time."""
    from validation.membound46_fit import profile_before
    cal = profile_before(gpu, committed_before_39(gpu))
    assert cal.memory_op_fixed_s == {} and "whole_waves" not in cal.norm_forward
    dev = _device(gpu, cal)
    for nbytes in (2.0**19, 3e6, 1e9):
        assert memcpy_time(dev, nbytes) == memory_time(dev, nbytes, op="copy")
    off = _device(gpu, replace(cal, norm_forward={**cal.norm_forward, "whole_waves": 0.0}))
    for rows, row in ((300, 536), (2500, 24000), (50000, 4096)):
        assert norm_forward_time(off, "layernorm", rows, row, "bf16") == norm_forward_time(dev, "layernorm", rows, row, "bf16")


@pytest.mark.parametrize("gpu", GPUS)
def test_committed_profiles_are_the_candidate(gpu):
    """Adopted in session 24: the committed profile predicts as the candidate does (but for the SSD scan's
    parameters, refitted in session 25)."""
    committed, cand = committed_before_39(gpu), _candidate(gpu)
    assert replace(with_later_fits_of(cand, committed), name=committed.name) == committed
    assert committed.norm_forward["whole_waves"] == 1.0 and committed.memory_op_fixed_s["copy"] > 0


@pytest.mark.parametrize("gpu", GPUS)
def test_memcpy_fixed_cost_replaces_the_kernel_fixed_cost_for_copies_only(gpu):
    cal = committed_before_39(gpu)
    dev = _device(gpu, replace(cal, memory_op_fixed_s={"copy": 4.0e-6}))
    base = _device(gpu, cal)
    n = 1e6
    assert memcpy_time(dev, n) - memory_time(base, n, op="copy") == pytest.approx(4.0e-6 - memory_fixed_s(cal), abs=1e-15)
    assert memory_time(dev, n, op="copy") == memory_time(base, n, op="copy")   # casts: a TensorIterator kernel
    assert memcpy_time(dev, 0.0) == 0.0


@pytest.mark.parametrize("gpu", GPUS)
def test_whole_waves_changes_only_a_partial_tail_wave(gpu):
    cal = committed_before_39(gpu)
    off, on = (_device(gpu, replace(cal, norm_forward={**cal.norm_forward, "whole_waves": w})) for w in (0.0, 1.0))
    slots = off.accelerator.sm_count * NORM_BLOCKS_PER_SM
    t = lambda dev, rows, row: norm_forward_time(dev, "layernorm", rows, row, "bf16")
    for row in (1024, 8192, 24576):
        assert t(on, slots // 3, row) == t(off, slots // 3, row)                       # one wave or less
        assert t(on, 3 * slots, row) == pytest.approx(t(off, 3 * slots, row), rel=1e-12)  # whole waves
        # one wave and a small tail: the tail costs nearly a whole latency-bound wave, not its share
        assert t(on, slots + slots // 8, row) > t(off, slots + slots // 8, row)
        assert t(on, slots + slots // 8, row) < 2 * t(off, slots, row)


@pytest.mark.parametrize("gpu", GPUS)
def test_candidate_loads_and_turns_both_on(gpu):
    import yaml
    path = ROOT / "validation" / "candidates" / f"{gpu}-sxm-membound46.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["candidate"].startswith("membound46")
    fit = next(v for k, v in data["fits"].items() if "membound46" in k)
    assert fit["converged"] and all(f"validation/measurements/{gpu}_membound_random{s}.json" in fit["fitted_on"]
                                    for s in (40, 41, 42, 43, 44, 45))
    assert not any("membound_random46" in f for f in data["fitted_on"])   # the judging draw
    from validation.membound46_fit import profile_before
    cand, committed = _candidate(gpu), profile_before(gpu, committed_before_39(gpu))
    assert cand.norm_forward["whole_waves"] == 1.0
    assert 3e-6 < cand.memory_op_fixed_s["copy"] < memory_fixed_s(committed)
    # only the memcpy fixed cost and the norm forward's per-wave times and load latencies were fitted
    same = {k: v for k, v in committed.norm_forward.items() if not k.endswith(("_row_s", "_load_latency_s"))}
    assert {k: cand.norm_forward[k] for k in same} == same
    assert replace(with_later_fits_of(cand, committed), name=committed.name, memory_op_fixed_s={},
                   norm_forward=committed.norm_forward) == committed      # the profile of session 23 otherwise


def test_candidate_is_better_on_its_development_draws_h200():
    """Fit data (draws 42-45): copy and layernorm closer on every draw; no kind worse by over 0.1 point."""
    from simulator.calibration import calibration_for
    from validation import membound46_fit as m
    from validation.membound_fit import kind_errors
    from validation.membound66_fit import profile_before as before_softmax66
    cand = _candidate("h200")
    for s in m.DRAWS:
        samples = m.fit_samples("h200", files=(f"membound_random{s}",))
        today = committed_before_39("h200")       # session 39's softmax changes are not membound46's
        before = kind_errors(samples, m.profile_before("h200", before_softmax66("h200", today)))
        after = kind_errors(samples, cand)
        assert after["copy"][1] < before["copy"][1] and after["layernorm"][1] < before["layernorm"][1]
        assert all(after[k][1] <= before[k][1] + 1e-3 for k in before)
