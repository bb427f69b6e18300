"""Fit of candidate gemm36's split-K L2 operand floor (issue #12 session 23).

``gemm_l2_operand_bytes_per_flop`` (simulator.compute.l2_operand_s: a split-K tiling takes at least
its tile-splits' operand bytes over that rate x the datasheet dense bf16 peak) and
``gemm_split_k_fixed_s`` (the split-K reduction's fixed cost, refitted with it) are fitted per GPU,
every other parameter kept at the committed profile's value, by coordinate descent (golden-section
search per parameter) of the pooled MAPE
over the development GEMM records: the GPU's kernel suite (``h{200,100}_kernels.json``, ``gemm``
records) and every random draw through seed 35 (H200 seeds 24-26, 28, 30, 32, 34; H100 seeds 12,
21-23, 27, 29, 31, 33, 35), each draw's records reduced to their faster pass median
(validation.gemm_regimes.reproduced_times). Draws 36 and later are not read.

    python -m validation.gemm36_fit            prints both GPUs' fitted values and pooled MAPE
    python -m validation.gemm36_fit --write    also writes validation/candidates/<profile>-gemm36.yaml
                                               (not once a profile has adopted it, as both have since session 23)
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
REPEAT = MEAS / "repeat"
# development files and the draws taken from each (nothing past seed 35)
DEV = {
    "h200-sxm": {MEAS / "h200_kernels.json": None, MEAS / "h200_gemm_random.json": (24,),
                 **{REPEAT / f"h200_gemm_random{s}.json": (s,) for s in (25, 26, 28, 30, 32, 34)}},
    "h100-sxm": {MEAS / "h100_kernels.json": None, MEAS / "h100_gemm_random2.json": (21, 22, 12),
                 MEAS / "h100_gemm_random3.json": (23,),
                 **{REPEAT / f"h100_gemm_random{s}.json": (s,) for s in (27, 29, 31, 33, 35)}},
}
# the candidate's new parameters and the range each is searched over
BOUNDS = {
    "gemm_l2_operand_bytes_per_flop": (0.002, 0.020),   # bytes per datasheet FLOP (0.0117: a 128x256 bf16 tile at peak)
    # refitted with it: the fixed cost of a split-K reduction (traced splitKreduce launch ~1.5 us of device time)
    "gemm_split_k_fixed_s": (0.5e-6, 6.0e-6),
}
NEW = ("gemm_l2_operand_bytes_per_flop",)   # added by this candidate (0 in the committed profiles: off)
PARAMETERS = tuple(BOUNDS)
ROUNDS = 3         # coordinate-descent rounds, each a golden-section search per parameter in turn


def dev_records(profile: str, files: dict | None = None) -> list[tuple[dict, object]]:
    """(record, hardware) of every development GEMM record of ``profile``'s GPU: the kernel suite's
    ``gemm`` records as they are, each random draw's reduced to one record per shape; ``files``:
    {path: seeds or None} instead of ``DEV[profile]`` (validation/gemm40_fit.py's later draws)."""
    from validation.gemm_regimes import reproduced_times
    from validation.hardware import hardware_for
    from validation.records import load_measurements
    out = []
    for path, seeds in (DEV[profile] if files is None else files).items():
        mf = load_measurements(path)
        hw = hardware_for(mf)
        recs = [r for r in mf.records if r.get("kind") == "gemm"]
        if seeds is not None:
            recs = reproduced_times([r for r in recs if r.get("seed") in seeds])
        out += [(r, hw) for r in recs]
    return out


def pooled_mape(rows, cal) -> float:
    """Mean |predicted / measured − 1| of ``rows`` under calibration ``cal``."""
    from validation.predict import predict_record
    return sum(abs(predict_record(r, hw, cal).time_s / r["time_s"] - 1.0) for r, hw in rows) / len(rows)


def mape_by_set(profile: str, cal, dev: dict) -> dict:
    """{data set: MAPE} of ``cal`` on the development records ``dev`` ({path: seeds or None}) of ``profile``: the
    kernel suite, the random draws pooled, the real training GEMMs (files named ``*kernels*``, ``*random*``,
    ``*real*``)."""
    out = {}
    for name, keep in (("kernel suite", lambda p: "kernels" in p.name), ("random draws", lambda p: "random" in p.name),
                       ("real training GEMMs", lambda p: "real" in p.name)):
        out[name] = pooled_mape(dev_records(profile, {p: s for p, s in dev.items() if keep(p)}), cal)
    return out


def print_fit(profile: str, name: str, values: dict, mape: float, mape0: float, committed, fitted, dev: dict) -> None:
    """Print a candidate fit's values and pooled MAPE, then :func:`mape_by_set` of the ``committed`` and ``fitted``
    calibrations on the development records ``dev``."""
    print(f"{profile}: " + ", ".join(f"{p} = {x:.6g}" for p, x in values.items())
          + f"  pooled MAPE {100 * mape:.2f}% (committed {100 * mape0:.2f}%)", flush=True)
    before, after = mape_by_set(profile, committed, dev), mape_by_set(profile, fitted, dev)
    for label in before:
        print(f"    {label:22s} committed {100 * before[label]:5.2f}%   {name} {100 * after[label]:5.2f}%")


def golden(f, lo: float, hi: float, iters: int = 25) -> float:
    """Minimiser of the unimodal ``f`` over [lo, hi] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


# the values the committed profiles held before session 23 adopted this fit (the floor off)
BEFORE = {"h200-sxm": {"gemm_l2_operand_bytes_per_flop": 0.0, "gemm_split_k_fixed_s": 3.4829379434666116e-06},
          "h100-sxm": {"gemm_l2_operand_bytes_per_flop": 0.0, "gemm_split_k_fixed_s": 3.703606514695956e-06}}


def fit(profile: str, start: dict | None = None) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE at the start): coordinate descent
    from the committed profile with ``start`` written over it (:data:`BEFORE` reproduces the adopted
    fit: the floor off, the split-K fixed cost it replaced), :data:`ROUNDS` rounds of a golden-section
    search per parameter over its :data:`BOUNDS`, on :func:`dev_records`."""
    from simulator.calibration import load_calibration
    base = replace(load_calibration(profile), **(BEFORE[profile] if start is None else start))
    return coordinate_descent(base, dev_records(profile), BOUNDS, ROUNDS)


def coordinate_descent(base, rows, bounds: dict, rounds: int, iters: int = 25) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE of ``base``): ``rounds`` rounds of a
    golden-section search (:func:`golden`, ``iters`` steps) per parameter of ``bounds`` in turn over its
    range, from ``base``'s values, minimising :func:`pooled_mape` of ``rows``; every other parameter kept."""
    values = {p: value_of(base, p) for p in bounds}
    for _ in range(rounds):
        for p in bounds:
            values[p] = golden(lambda v: pooled_mape(rows, with_values(base, {**values, p: v})), *bounds[p], iters)
    return values, pooled_mape(rows, with_values(base, values)), pooled_mape(rows, base)


def value_of(cal, name: str) -> float:
    """A calibration parameter's value; ``dict_parameter.key`` (e.g. ``gemm_peak_fraction.bf16``) names
    one entry of a per-dtype table."""
    table, _, key = name.partition(".")
    return getattr(cal, table)[key] if key else getattr(cal, name)


def with_values(cal, values: dict):
    """``cal`` with each parameter of ``values`` set (dotted names: one entry of a per-dtype table,
    :func:`value_of`)."""
    tables: dict = {}
    plain = {}
    for name, v in values.items():
        table, _, key = name.partition(".")
        if key:
            tables.setdefault(table, dict(getattr(cal, table)))[key] = v
        else:
            plain[name] = v
    return replace(cal, **plain, **tables)


CANDIDATES = ROOT / "validation" / "candidates"


def candidate_text(profile: str, values: dict, mape: float, mape0: float) -> str:
    """The committed profile's YAML with a top-level ``candidate:`` line, a ``gemm36[...]`` block in
    ``fits`` (provenance) and each fitted parameter of ``values`` after ``gemm_split_k_per_split_s``."""
    return fit_candidate_text(
        profile, values, mape, mape0, name="gemm36", session=23, dev=DEV[profile], bounds=BOUNDS, new=NEW,
        rounds=ROUNDS, anchor="gemm_split_k_per_split_s", start="floor off", last_seed=35,
        mechanism="the split-K L2 operand floor (simulator.compute.l2_operand_s), with the split-K reduction fixed cost refitted")


def fit_candidate_text(profile: str, values: dict, mape: float, mape0: float, *, name: str, session: int, dev: dict,
                       bounds: dict, new: tuple, rounds: int, anchor: str, start: str, last_seed: int,
                       mechanism: str) -> str:
    """The committed ``profile``'s YAML as a GEMM candidate ``name`` fitted by validation/<name>_fit.py:
    a top-level ``candidate:`` line naming ``mechanism`` and the fitted ``values``, a ``<name>[...]``
    block in ``fits`` (the ``dev`` files and draws through ``last_seed``, the search's ``bounds`` and
    ``rounds``, the pooled MAPE ``mape`` fitted and ``mape0`` committed), the ``new`` parameters added
    after the ``anchor`` parameter and the refitted ones replaced in place."""
    text = (ROOT / "hardware_specs" / "profiles" / f"{profile}.yaml").read_text()
    files = "".join(f"    - {p.relative_to(ROOT)}\n" for p in dev)
    draws = "".join(f"      {p.relative_to(ROOT)}:\n" + "".join(f"      - {s}\n" for s in seeds)
                    for p, seeds in dev.items() if seeds)
    block = (f"  {name}[{'+'.join(bounds)}]:\n    fitted_on:\n{files}    fitted_random_draws:\n{draws}"
             f"    method: 'validation/{name}_fit.py: {rounds} rounds of golden-section search per parameter from the committed values ({start}), ranges\n"
             f"      {', '.join(f'{p} {list(b)}' for p, b in bounds.items())}, on the pooled\n"
             f"      MAPE of every development GEMM record (kernel suite gemm records, random draws through seed {last_seed} at their\n"
             f"      faster pass median); every other parameter kept at the committed {profile} value'\n"
             f"    fitted:\n" + "".join(f"    - {p}\n" for p in bounds) + f"    pooled_mape: {mape:.4f}\n    pooled_mape_committed: {mape0:.4f}\n")
    mechanism = mechanism.replace("'", "''")          # inside a single-quoted YAML scalar
    head = (f"candidate: '{name} (issue #12 session {session}): the committed {profile} profile plus {mechanism}, "
            + ", ".join(f"{p} = {v:.6g}" for p, v in values.items())
            + f", fitted by validation/{name}_fit.py on the development GEMM records through seed {last_seed}'\n")
    assert text.count("\nfits:\n") == 1 and text.count(f"  {anchor}:") == 1
    text = text.replace("\nfits:\n", "\nfits:\n" + block, 1)
    lines = text.splitlines(keepends=True)
    i = next(j for j, line in enumerate(lines) if line.startswith(f"  {anchor}:"))
    for p in reversed(new):
        lines.insert(i + 1, f"  {p}: {values[p]!r}   # candidate {name}: validation/{name}_fit.py\n")
    for p in bounds:
        if p in new:
            continue
        table, _, key = p.partition(".")
        j = next(j for j, line in enumerate(lines) if line.startswith(f"  {table}:"))
        if key:
            j = next(i for i in range(j + 1, len(lines)) if lines[i].startswith(f"    {key}:"))
        indent, label = ("    ", key) if key else ("  ", p)
        lines[j] = f"{indent}{label}: {values[p]!r}   # candidate {name} refit: validation/{name}_fit.py\n"
    return head + "".join(lines)


def main(argv=None) -> int:
    import sys
    argv = sys.argv[1:] if argv is None else argv
    for profile in DEV:
        v, m, m0 = fit(profile)
        print(f"{profile}: " + ", ".join(f"{p} = {x:.6g}" for p, x in v.items())
              + f"  pooled MAPE {100 * m:.2f}% (at the start values, gemm36_fit.BEFORE: {100 * m0:.2f}%)")
        if "--write" in argv:
            committed = (ROOT / "hardware_specs" / "profiles" / f"{profile}.yaml").read_text()
            if "\n  gemm36[" in committed:      # adopted in session 23: the committed profile is the candidate
                print(f"{profile}: gemm36 is adopted (its fit block is in the committed profile); candidate not rewritten")
                continue
            (CANDIDATES / f"{profile}-gemm36.yaml").write_text(candidate_text(profile, v, m, m0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
