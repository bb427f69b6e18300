"""Fit the memory-bound candidate membound47 (issue #12 session 24) and write it as a candidate profile.

    python -m validation.membound47_fit --gpu h200 --out validation/candidates/h200-sxm-membound47.yaml
    python -m validation.membound47_fit --gpu h100 --out validation/candidates/h100-sxm-membound47.yaml
    python -m validation.membound47_fit --gpu h200            # fit and report only

Two mechanisms of PyTorch's softmax forward on top of the committed profile (membound46, adopted in
session 24), each gated on a parameter the committed profiles do not carry (so those predict exactly
as before):

* ``softmax_warp_cycles["latency"]``: softmax_warp_forward (PersistentSoftmax.cuh, rows of <= 2048
  elements, one warp per row) pays one warp's pass over its own row, ``latency`` SM cycles per
  element of the row, once on top of the SMs' throughput (simulator.compute.softmax_warp_time); it
  stands in for the constant ``kernel`` term, which the fit takes to ~0 (few-row grids of long rows
  were 15-25% short, of short rows 10-23% long).
* ``softmax_elements_per_cycle["scalar"]``: cunn_SoftMaxForward (SoftMax.cu; bf16 rows of >= 24512
  elements, which do not fit the 48 KiB of shared memory a block may take) steps over its row in
  16-byte vectors, ILP x threads elements at a time, and leaves ``row % (ILP x threads)`` elements to a
  scalar epilogue in each of its three passes (simulator.compute.softmax_scalar_tail); those run at
  this rate, the rest at the shared-memory kernel's (the draws' rows of 25-32K elements were 10-27%
  short).

Fitted (:data:`NARROW`: the warp kernel's cycles with the new latency, and the scalar rate) by
validation.fit.fit (soft-L1 least squares on log(predicted / measured)) on every memory-bound burst
record of the files membound_fit.py uses plus the registered draws 42-46 (46 was judged in session 24
and is fit data now; seed 47 is to judge this candidate). Every other parameter keeps the committed
profile's value.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from simulator.calibration import calibration_for
from validation import membound_fit as mb
from validation.fit import Param, fit

DRAWS = (40, 41, 42, 43, 44, 45, 46)
FIT_FILES = mb.FIT_FILES + tuple(f"membound_random{s}" for s in (42, 43, 44, 45, 46))
# starting values of the new parameters: ~5 ns per element of a row on both GPUs (the few-row grids), and
# a scalar epilogue ~2.5x slower per element than the vectors (the draws' rows of 25-32K elements)
LATENCY_START = 7.0
SCALAR_START_RATIO = 0.4
NEW = [Param("softmax_warp_cycles.latency", 0.0, 100.0), Param("softmax_elements_per_cycle.scalar", 0.01, 16.0)]
NARROW = [p for p in mb.PARAMS if p.path.startswith("softmax_warp_cycles.")] + NEW
VARIANTS = {"narrow": NARROW, "softmax": [p for p in mb.PARAMS if p.path.startswith("softmax")] + NEW}


def fit_samples(gpu: str, root: Path = Path("validation/measurements"), files=FIT_FILES) -> list:
    """(record, hardware) of every memory-bound burst record of ``files`` of ``gpu``."""
    return mb.fit_samples(gpu, root, files)


def candidate_start(cal):
    """``cal`` with the new parameters at their starting values."""
    epc = cal.softmax_elements_per_cycle
    return replace(cal, softmax_warp_cycles={**cal.softmax_warp_cycles, "latency": LATENCY_START},
                   softmax_elements_per_cycle={**epc, "scalar": epc["smem"] * SCALAR_START_RATIO})


def run(gpu: str, params=None):
    """The fit of ``gpu``: (FitResult, samples); ``params`` defaults to :data:`NARROW`."""
    samples = fit_samples(gpu)
    start = candidate_start(calibration_for(samples[0][1].accelerator)[0])
    return fit(samples, params or NARROW, start, name=f"{mb.PROFILES[gpu]}-membound47"), samples


def write_profile(gpu: str, res, samples, out: Path) -> None:
    """The committed profile of ``gpu`` with the fitted values and a ``fits`` entry, to ``out``."""
    files = [f"validation/measurements/{gpu}_{n}.json" for n in FIT_FILES]
    method = ("validation/membound47_fit.py (issue #12 session 24): one warp's pass over its row in PyTorch's "
              "softmax_warp_forward (softmax_warp_cycles.latency, SM cycles per element of the row, once per kernel) "
              "fitted with the warp kernel's other cycles, and the scalar epilogue of cunn_SoftMaxForward "
              "(softmax_elements_per_cycle.scalar, row % (ILP x threads) elements), soft-L1 least squares on "
              "log(predicted/measured) over every memory-bound burst record of these files (the membound_random "
              "draws 40-46 as development data; no record held out; draw 47 to judge); every other parameter kept "
              f"at profile {mb.PROFILES[gpu]}'s value")
    mb.write_candidate(gpu, res, samples, out, "membound47", method, files, session=24, seed=47)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", choices=sorted(mb.PROFILES), required=True)
    ap.add_argument("--out", type=Path, help="write the candidate profile here")
    ap.add_argument("--params", choices=sorted(VARIANTS), default="narrow",
                    help="which parameters to fit (softmax: every softmax parameter as well)")
    a = ap.parse_args(argv)
    res, samples = run(a.gpu, params=VARIANTS[a.params])
    committed = calibration_for(samples[0][1].accelerator)[0]
    mb.report_and_write(a.gpu, res, samples, committed, DRAWS, a.out, write_profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
