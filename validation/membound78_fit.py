"""Fit the register-softmax candidate membound78 (issue #12 session 39) and write it as a candidate profile.

    python -m validation.membound78_fit --gpu h200 --out validation/candidates/h200-sxm-membound78.yaml
    python -m validation.membound78_fit --gpu h100 --out validation/candidates/h100-sxm-membound78.yaml
    python -m validation.membound78_fit --gpu h100            # fit and report only

Why. PyTorch's register softmax forward (``reg`` / ``reg_wide``: rows of 1025 to ~9k elements, one block
of 1024 threads per row, ceil(row / 1024) values of the row per thread) is costed by the committed
profiles and by candidate membound76 as the row padded to whole register slots at one element rate. On
the development draws (membound_random40-76 / 41-77, bf16 and fp32 alike) that leaves rows whose last
slot is 15-25% empty 10-23% slow (H100 fp32 3112-4648 elements +12..+23%, H200 +11..+15%) and rows
just under a slot boundary a few percent fast: per SM, rows of 10k+ take ~1250 ns at 2.2k elements,
~0.16-0.25 ns more per element within one slot count and ~100 ns more per slot across a boundary, and
~500 ns per row at zero elements. The mechanism read from it: a row pays its load latency and two
block reductions once, its elements' loads, exponentials and stores per element, and each register
slot's unrolled, predicated instructions whether or not the slot holds an element.

What. ``softmax_reg_cycles`` (simulator.compute.softmax_reg_time): per wave of resident blocks a fixed
``<kernel>_wave``, per block ``<kernel>_element`` cycles per element and ``<kernel>_slot`` per slot, for
``reg`` and ``reg_wide``, and ``fp32`` a factor on fp32 rows' element cycles; seven numbers per GPU,
fitted (validation.fit.fit, soft-L1 least squares on log(predicted / measured)) on every unmasked
register-softmax burst record of the development files (FILES and every memory-bound draw through seed
76 / 77). Everything else is candidate membound76's; its per-kernel causal-mask costs are refitted on
top on its own twin pairs (validation.membound76_fit.fit_costs: the factor now scales the element and
slot work, not the per-wave latency). The next draws (H200 seed 78, H100 seed 79) judge it.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from simulator.calibration import load_calibration
from simulator.compute import torch_softmax_kernel
from validation import membound76_fit as m76
from validation import membound_fit as mb
from validation.fit import Param, fit

MEASUREMENTS = Path(__file__).resolve().parent / "measurements"
CANDIDATES = Path(__file__).resolve().parent / "candidates"
DRAW = {"h200": 78, "h100": 79}              # the draws it is registered for (session 39)
FILES = ("kernels", "row_kernels", "torch_paths")
KEYS = ("reg_wave", "reg_element", "reg_slot", "reg_wide_wave", "reg_wide_element", "reg_wide_slot", "fp32")
PARAMS = [Param(f"softmax_reg_cycles.{k}", lo, hi) for k, lo, hi in (
    ("reg_wave", 0.0, 20000.0), ("reg_element", 0.01, 5.0), ("reg_slot", 0.0, 5000.0),
    ("reg_wide_wave", 0.0, 20000.0), ("reg_wide_element", 0.01, 5.0), ("reg_wide_slot", 0.0, 5000.0),
    ("fp32", 0.3, 3.0))]
REREAD_PARAMS = [Param("softmax_plain_reread.reread_from_bytes", 16384.0, 262144.0),
                 Param("softmax_plain_reread.reread_span_bytes", 1024.0, 262144.0),
                 Param("softmax_plain_reread.passes", 0.0, 2.0)]
REREAD_START = {"reread_from_bytes": 81920.0, "reread_span_bytes": 40960.0, "passes": 1.0}
# starts read off the development draws' many-row grids (ns per row per SM x 1.98 GHz, two blocks per SM)
START = {"reg_wave": 2000.0, "reg_element": 0.38, "reg_slot": 200.0, "reg_wide_wave": 2000.0,
         "reg_wide_element": 0.6, "reg_wide_slot": 600.0, "fp32": 1.0}


def draw_files(gpu: str) -> tuple[str, ...]:
    """The memory-bound random draws of ``gpu`` committed before this candidate (development data)."""
    seeds = sorted(int(p.stem.rsplit("random", 1)[1]) for p in MEASUREMENTS.glob(f"{gpu}_membound_random*.json"))
    return tuple(f"membound_random{s}" for s in seeds if s < DRAW[gpu])


def fit_files(gpu: str) -> tuple[str, ...]:
    """Every file whose register-softmax records the fit reads."""
    return FILES + draw_files(gpu)


def reg_softmax_samples(gpu: str) -> list:
    """(record, hardware) of every unmasked register-softmax burst record of :func:`fit_files`."""
    out = []
    for r, hw in mb.fit_samples(gpu, MEASUREMENTS, fit_files(gpu)):
        dtype = "fp32" if r.get("dtype") == "float32" else "bf16"
        if r["kind"] == "softmax" and r.get("data") != "causal_scores" \
                and torch_softmax_kernel(int(r["hidden"]), dtype).startswith("reg"):
            out.append((r, hw))
    return out


def plain_softmax_samples(gpu: str) -> list:
    """(record, hardware) of every unmasked global-memory-softmax burst record of :func:`fit_files`."""
    out = []
    for r, hw in mb.fit_samples(gpu, MEASUREMENTS, fit_files(gpu)):
        dtype = "fp32" if r.get("dtype") == "float32" else "bf16"
        if r["kind"] == "softmax" and r.get("data") != "causal_scores" \
                and torch_softmax_kernel(int(r["hidden"]), dtype) == "plain":
            out.append((r, hw))
    return out


def base_calibration(gpu: str):
    """Candidate membound76 of ``gpu``: what this candidate changes nothing else of."""
    return load_calibration(str(CANDIDATES / f"{mb.PROFILES[gpu]}-membound76.yaml"))


def run(gpu: str):
    """The fit of ``gpu``: (register FitResult, register samples, re-read FitResult, global-memory samples,
    refitted mask costs, candidate calibration). The two kernels' parameters are fitted apart (no record
    of one kernel moves the other's), the re-read on top of the register fit."""
    samples = reg_softmax_samples(gpu)
    start = dataclasses.replace(base_calibration(gpu), softmax_reg_cycles=dict(START))
    res = fit(samples, PARAMS, start, name=f"{mb.PROFILES[gpu]}-membound78")
    plain = plain_softmax_samples(gpu)
    reread = fit(plain, REREAD_PARAMS, dataclasses.replace(res.calibration, softmax_plain_reread=dict(REREAD_START)),
                 name=f"{mb.PROFILES[gpu]}-membound78")
    costs = m76.fit_costs(m76.twin_pairs(gpu), reread.calibration)
    cand = m76.with_costs(reread.calibration, costs)
    return res, samples, reread, plain, costs, dataclasses.replace(cand, softmax_masked_cost=costs["reg_wide"])


def write_profile(gpu: str, res, samples, reread, plain, costs: dict, out: Path) -> None:
    """Candidate membound76 of ``gpu`` with the fitted cycles and mask costs, a ``fits`` entry and a
    ``candidate`` line, to ``out``."""
    import yaml

    from validation.candidate_io import write_candidate_profile
    data = yaml.safe_load((CANDIDATES / f"{mb.PROFILES[gpu]}-membound76.yaml").read_text())
    data.pop("candidate", None)
    p = data["parameters"]
    p["softmax_reg_cycles"] = {x.path.split(".")[1]: round(float(v), 6) for x, v in zip(res.params, res.values)}
    p["softmax_plain_reread"] = {x.path.split(".")[1]: round(float(v), 6) for x, v in zip(reread.params, reread.values)}
    p["softmax_masked_cost_by_kernel"] = {k: round(v, 6) for k, v in costs.items()}
    p["softmax_masked_cost"] = round(costs["reg_wide"], 6)
    files = [f"validation/measurements/{gpu}_{n}.json" for n in fit_files(gpu)]
    pair_files = [f"validation/measurements/{gpu}_{n}.json" for n in m76.PAIR_FILES[gpu]]
    write_candidate_profile(data, files, "compute[membound78: softmax_reg_cycles softmax_plain_reread softmax_masked_cost_by_kernel]", {
        "fitted_on": files, "method": (
            "validation/membound78_fit.py (issue #12 session 39): the register softmax kernels in SM cycles per wave, "
            "element and register slot (softmax_reg_cycles), soft-L1 least squares on log(predicted / measured) over "
            "every unmasked register-softmax burst record of these files (development data), then the global-memory "
            "kernel's HBM re-reads (softmax_plain_reread) the same way on their global-memory-softmax records; the causal mask's "
            "per-kernel costs refitted on top on the twin pairs of " + ", ".join(pair_files)
            + " (validation.membound76_fit.fit_costs); every other parameter candidate membound76's"),
        "records": res.n_records + reread.n_records,
        "residual_rms_log": {"softmax_reg": round(res.residual_rms, 4), "softmax_plain": round(reread.residual_rms, 4)},
        "converged": res.success and reread.success, "fitted": [x.path for x in res.params + reread.params],
        "kept_from_start": [x.path for x in res.unconstrained + reread.unconstrained],
        "fitted_error": {"softmax_reg": {"count": res.n_records, "mape": round(sample_mape(samples, res.calibration), 4)},
                         "softmax_plain": {"count": reread.n_records,
                                           "mape": round(sample_mape(plain, reread.calibration), 4)}},
    }, f"membound78 (issue #12 session 39, {{date}}): registered beside {mb.PROFILES[gpu]} and membound76 for the "
       f"seed-{DRAW[gpu]} memory-bound draw; not adopted unless it wins there and on the attention and step sets", out)


SOFTMAX_KEYS = ("softmax_reg_cycles", "softmax_plain_reread", "softmax_masked_cost_by_kernel", "softmax_masked_cost")


def write_composite(gpu: str, out: Path) -> None:
    """Candidate m78copy of ``gpu`` to ``out``: candidate m76copy (membound76, bmm78's batched-GEMM streaming law and
    the local attention's layout copies, session 38) with membound78's softmax parameters (SOFTMAX_KEYS, read from
    its candidate file): every kernel of Megatron-Core's local attention at its own best model, nothing fitted here."""
    import yaml

    from validation.candidate_io import write_candidate_profile
    data = yaml.safe_load((CANDIDATES / f"{mb.PROFILES[gpu]}-m76copy.yaml").read_text())
    m78 = yaml.safe_load((CANDIDATES / f"{mb.PROFILES[gpu]}-membound78.yaml").read_text())
    data["parameters"].update({k: m78["parameters"][k] for k in SOFTMAX_KEYS})
    files = [f for f in m78["fitted_on"] if f not in data["fitted_on"]]
    write_candidate_profile(data, files, "compute[m78copy: softmax parameters of membound78]", {
        "fitted_on": files, "method": f"membound78's {', '.join(SOFTMAX_KEYS)} copied onto candidate m76copy; nothing fitted"},
        f"m78copy (issue #12 session 39, {{date}}): m76copy with membound78's softmax, registered beside {mb.PROFILES[gpu]} "
        "for fresh attention draws; not adopted unless the whole composite wins there and on the step sets", out)


def sample_mape(samples, cal) -> float:
    """MAPE of ``samples`` under ``cal``."""
    from validation.predict import predict_record
    errs = [abs(predict_record(r, hw, cal).time_s / r["time_s"] - 1) for r, hw in samples]
    return sum(errs) / len(errs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", choices=sorted(mb.PROFILES), required=True)
    ap.add_argument("--out", type=Path, help="write the candidate profile here")
    ap.add_argument("--composite-out", type=Path,
                    help="write candidate m78copy (m76copy with membound78's softmax, read from its committed file) here")
    a = ap.parse_args(argv)
    if a.composite_out:
        write_composite(a.gpu, a.composite_out)
        print(f"wrote {a.composite_out}")
        return 0
    res, samples, reread, plain, costs, cand = run(a.gpu)
    base = base_calibration(a.gpu)
    for fitted, recs, what in ((res, samples, "register"), (reread, plain, "global-memory")):
        print(f"{a.gpu}: {fitted.n_records} {what}-softmax records, residual rms log {fitted.residual_rms:.4f}, "
              f"converged {fitted.success}; MAPE membound76 {100 * sample_mape(recs, base):.2f}% -> "
              f"membound78 {100 * sample_mape(recs, cand):.2f}%")
        for param, v in zip(fitted.params, fitted.values):
            print(f"  {param.path:40s} {v:.6g}")
    pairs = m76.twin_pairs(a.gpu)
    print(f"  mask costs {costs}; ratio MAPE {100 * m76.ratio_mape(pairs, cand):.2f}%")
    for s in draw_files(a.gpu)[-4:]:
        draw = mb.fit_samples(a.gpu, MEASUREMENTS, (s,))
        before, after = mb.kind_errors(draw, base), mb.kind_errors(draw, cand)
        print(f"  {s}: softmax {100 * before['softmax'][1]:.1f} -> {100 * after['softmax'][1]:.1f}%")
    if a.out:
        write_profile(a.gpu, res, samples, reread, plain, costs, a.out)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
