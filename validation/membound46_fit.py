"""Fit the memory-bound candidate membound46 (issue #12 session 23) and write it as a candidate profile.

    python -m validation.membound46_fit --gpu h200 --out validation/candidates/h200-sxm-membound46.yaml
    python -m validation.membound46_fit --gpu h100 --out validation/candidates/h100-sxm-membound46.yaml
    python -m validation.membound46_fit --gpu h200            # fit and report only

Two mechanisms on top of the profile of session 23 (membound42 adopted), each gated on a parameter
that profile did not carry (adopted into the committed profiles in session 24; the fit starts from the
values it replaced, :data:`BEFORE`):

* ``memory_op_fixed_s["copy"]``: a contiguous same-dtype ``copy_`` is one cudaMemcpyAsync
  device-to-device (aten/src/ATen/native/cuda/Copy.cu, copy_device_to_device, ``memcpy_eligible``),
  not a TensorIterator kernel; it gets its own fixed cost (simulator.compute.memcpy_time) in place of
  ``memory_kernel_fixed_s``. Casts and strided copies keep the TensorIterator fixed cost.
* ``norm_forward["whole_waves"]`` = 1: PyTorch's vectorized LayerNorm / RMSNorm forward launches one
  128-thread block per row (layer_norm_kernel.cu, launch_vectorized_layer_norm_kernel: grid = M
  rows); past one wave of resident blocks (SMs x 16) the grid runs as whole waves and a tail, and the
  tail keeps only its own blocks' loads in flight, so by Little's law it takes about as long as a
  full wave of latency-bound blocks (simulator.compute.norm_forward_time). The switch is a model
  structure, not fitted; the fit refits the norm parameters (load latencies, per-wave time) under it.

Fitted (:data:`NARROW`: the memcpy fixed cost and the norm forward's ``<kind>_row_s`` and
``<kind>_load_latency_s``, which held the tail wave's time before) by validation.fit.fit (soft-L1 least
squares on log(predicted / measured)) on every memory-bound burst record of the files membound_fit.py
uses plus the registered draws 42-45 (development data since session 23; draw 46 is to judge it).
Every other parameter keeps the committed profile's value. ``--params all`` refits every
memory-bound parameter of validation/membound_fit.py as well (not the candidate).
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from simulator.calibration import calibration_for
from validation import membound_fit as mb
from validation.fit import Param, fit

FIT_FILES = mb.FIT_FILES + tuple(f"membound_random{s}" for s in (42, 43, 44, 45))
DRAWS = (42, 43, 44, 45)
PARAMS = mb.PARAMS + [Param("memory_op_fixed_s.copy", 1e-6, 30e-6)]
COPY_START = 4.5e-6   # the smallest copies of the draws (4.3-4.9 us)


def fit_samples(gpu: str, root: Path = Path("validation/measurements"), files=FIT_FILES) -> list:
    """(record, hardware) of every memory-bound burst record of ``files`` of ``gpu``."""
    return mb.fit_samples(gpu, root, files)


# the values the fit replaced: the profiles of session 23 (before membound46 was adopted in session 24),
# which had no memcpy fixed cost and no whole-wave norm model; the fit starts from them and the report
# compares with them
BEFORE = {"h200": {"rmsnorm_row_s": 6.826629183040318e-07, "layernorm_row_s": 2.6769684323305578e-06,
                   "rmsnorm_load_latency_s": 2.651025200972658e-07, "layernorm_load_latency_s": 3.174312503591773e-07},
          "h100": {"rmsnorm_row_s": 4.682331675633353e-07, "layernorm_row_s": 1.9540967268045494e-06,
                   "rmsnorm_load_latency_s": 2.602612644671283e-07, "layernorm_load_latency_s": 3.083560723036416e-07}}


def profile_before(gpu: str, cal):
    """``cal`` (the committed profile of ``gpu``) as it was before membound46 was adopted: no memcpy fixed
    cost, fractional waves, the norm forward's per-wave times and load latencies of :data:`BEFORE`."""
    nf = {k: v for k, v in cal.norm_forward.items() if k != "whole_waves"}
    return replace(cal, memory_op_fixed_s={}, norm_forward={**nf, **BEFORE[gpu]})


def candidate_start(cal, whole_waves: bool = True):
    """``cal`` with the new parameters at their starting values."""
    nf = {**cal.norm_forward, "whole_waves": 1.0} if whole_waves else dict(cal.norm_forward)
    return replace(cal, memory_op_fixed_s={**cal.memory_op_fixed_s, "copy": COPY_START}, norm_forward=nf)


# the parameters the mechanisms touch: the memcpy's fixed cost, and the norm forward's per-wave time and load
# latencies (refitted under whole waves: the tail wave's time was folded into them); the norm's bandwidth
# fraction and reread, the TensorIterator kernels' fixed cost, the elementwise rates and the softmax terms keep
# the committed values (refitting the norm's fraction and reread as well, or every memory-bound parameter,
# fits the draws a little closer and moves the steps' fp32 LayerNorms further from their measurements:
# session 23's report)
NARROW = [p for p in PARAMS if p.path.startswith("memory_op_fixed_s.")
          or p.path.startswith("norm_forward.") and p.path.endswith(("_row_s", "_load_latency_s"))]
VARIANTS = {"narrow": NARROW, "all": PARAMS,
            "norm": [p for p in PARAMS if p.path.startswith(("memory_op_fixed_s.", "norm_forward."))]}


def run(gpu: str, whole_waves: bool = True, params=None):
    """The fit of ``gpu``: (FitResult, samples); ``params`` defaults to :data:`NARROW`."""
    samples = fit_samples(gpu)
    start = candidate_start(profile_before(gpu, calibration_for(samples[0][1].accelerator)[0]), whole_waves)
    return fit(samples, params or NARROW, start, name=f"{mb.PROFILES[gpu]}-membound46"), samples


def write_profile(gpu: str, res, samples, out: Path) -> None:
    """The committed profile of ``gpu`` with the fitted values, the whole-wave switch and a ``fits`` entry."""
    files = [f"validation/measurements/{gpu}_{n}.json" for n in FIT_FILES]
    method = ("validation/membound46_fit.py (issue #12 session 23): the memcpy fixed cost of a contiguous "
              "same-dtype copy_ (memory_op_fixed_s.copy) and whole waves of the norm forward's blocks "
              "(norm_forward.whole_waves = 1, not fitted), fitted with the norm forward's per-wave times and load "
              "latencies (refitted under whole waves), soft-L1 least squares on log(predicted/measured) over every "
              "memory-bound burst record of these files (the membound_random draws 40-45 as development data; "
              f"no record held out; draw 46 to judge); every other parameter kept at profile {mb.PROFILES[gpu]}'s value")
    whole = {"norm_forward.whole_waves": float(res.calibration.norm_forward.get("whole_waves", 0.0))}
    mb.write_candidate(gpu, res, samples, out, "membound46", method, files, session=23, seed=46, fixed=whole)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", choices=sorted(mb.PROFILES), required=True)
    ap.add_argument("--out", type=Path, help="write the candidate profile here")
    ap.add_argument("--fractional-waves", action="store_true", help="fit without the whole-wave norm model")
    ap.add_argument("--params", choices=sorted(VARIANTS), default="narrow",
                    help="which parameters to fit (all: every memory-bound parameter, PARAMS)")
    a = ap.parse_args(argv)
    res, samples = run(a.gpu, whole_waves=not a.fractional_waves, params=VARIANTS[a.params])
    committed = profile_before(a.gpu, calibration_for(samples[0][1].accelerator)[0])
    mb.report_and_write(a.gpu, res, samples, committed, DRAWS, a.out, write_profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
