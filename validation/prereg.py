"""Pre-registration: meshcast's predictions for the cases of a plan_step.py grid, before they run.

    python -m validation.prereg --grid native2 --like validation/measurements/h200x2_plan_torchtitan.json
    python -m validation.prereg --kernels row_kernels --like validation/measurements/h200_kernels.json
    python -m validation.prereg --gemm-seed 26 --like validation/measurements/h200_gemm_random.json
    python -m validation.prereg --gemm-seed 78 --gemm-suite bmm_random --like validation/measurements/h200_gemm_random.json

With ``--kernels SUITE`` the cases are those of validation/harness/SUITE.py (a single-GPU kernel
suite with ``cases()``), each predicted as its record would be (time only). With ``--gemm-seed
SEED`` the cases are the random GEMM draw of that seed (validation/harness/gemm_cases.py, what
sustained.py ``--suite random --seed SEED`` times; ``--gemm-suite`` another draw: real training GEMMs,
or ``bmm_random``, the batched GEMMs of Megatron-Core's local attention of validation/harness/bmm_cases.py,
each predicted with its ``batch``), each with its regime (validation.gemm_regimes.gemm_regime); ``--profile`` predicts them with another calibration profile
(a candidate registered beside the committed model, e.g. validation/candidates/*.yaml).

Each case becomes the record the harness would write, without any measured field, and is
predicted as ``meshcast validate`` would predict it (validation.predict.predict_record) on the
hardware of the ``--like`` file (its ``info.gpu`` and ``world``); the fit verdict compares with that
file's ``info.total_memory_bytes`` as validation.accuracy does. Prints one row per case: time,
peak allocated GiB (the largest stage), fit verdict and the host's seconds to issue the step.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from hardware_specs.errors import MeshcastError
from simulator.calibration import calibration_for
from simulator.memory import fits_in
from validation.hardware import hardware_for
from validation.predict import Unsupported, kernel_time, predict_record
from validation.records import load_measurements

HARNESS = Path(__file__).resolve().parent / "harness" / "plan_step.py"
BMM_SUITE = "bmm_random"        # validation/harness/bmm_cases.py: batched GEMMs, not a gemm_cases suite


def harness(name: str = "plan_step"):
    """validation/harness/<name>.py as a module (its case lists need no torch)."""
    spec = importlib.util.spec_from_file_location(name, HARNESS.with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def skeleton(h, c: dict, attention: dict | None = None) -> dict:
    """The plan_step record the harness writes for case ``c``, without measured fields. The
    attention kernel is the one the harness records: torch-native runs SDPA flash; Megatron-Core's
    depends on whether apex/TE import on the machine, so it comes from ``attention`` (framework ->
    backend, read from earlier records of that machine type), else the profile's default. FSDP2's
    gradient sync as the harness records it (plan_step.fsdp_grad_sync)."""
    backend = h.NativeRunner.attention_backend() if c["framework"] == "torchtitan" else (attention or {}).get(c["framework"])
    return dict(kind="plan_step", framework=c["framework"], name=c["name"], **c["model"], **c["plan"],
                dtype="bfloat16", attention=backend, fsdp_grad_sync=h.fsdp_grad_sync(c))


def recorded_attention(files) -> dict:
    """{framework: attention backend} of the first plan_step record of each framework in ``files``."""
    out = {}
    for f in files:
        for r in load_measurements(f).records:
            if r.get("kind") == "plan_step" and r.get("attention"):
                out.setdefault(r["framework"], r["attention"])
    return out


def rows(grid: str, like: str, world: int | None = None, attention_from: tuple = ()) -> list[tuple[str, dict]]:
    """(case label, prediction fields or an ``error``) for every case of ``grid`` (of ``world`` GPUs);
    Megatron's attention kernel as recorded in ``attention_from`` (and ``like``)."""
    h = harness()
    attention = recorded_attention((like, *attention_from))
    mf = load_measurements(like)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    usable = float(mf.info.get("total_memory_bytes") or hw.accelerator.hbm_capacity_bytes)
    out = []
    for c in h.grid(grid):
        if world and c["plan"]["world"] != world:
            continue
        why = h.unsupported_reason(c)
        if why:     # the harness cannot run it: registered as such, not predicted
            out.append((h.case_label(c), {"error": f"cannot run: {why}"}))
            continue
        rec = {k: v for k, v in skeleton(h, c, attention).items() if v is not None}
        try:
            p = predict_record(rec, hw, cal)
        except Unsupported as exc:
            out.append((h.case_label(c), {"error": str(exc)}))
            continue
        host = (p.host_issue_s or 0.0) + (p.host_optimizer_s or 0.0)
        out.append((h.case_label(c) + (" (risky)" if c.get("risky") else ""),
                    dict(time_ms=p.time_s * 1e3, peak_gib=p.peak_memory_bytes / 2**30,
                         fits=fits_in(p.total_memory_bytes, usable), host_ms=host * 1e3,
                         clock=p.clock_fraction or 1.0)))
    return out


def kernel_rows(suite: str, like: str, seed: int | None = None, profile: str | None = None,
                random_n: int | None = None) -> list[tuple[str, float]]:
    """(case label, predicted seconds) for every case of the kernel suite ``suite`` on the
    hardware of the measurement file ``like``, through validation.predict.kernel_time; ``seed``:
    the draw of a seeded suite (its ``cases(seed=...)``); ``profile``: a calibration profile (name or
    path) instead of the accelerator's own (a candidate registered beside the committed model);
    ``random_n``: the size of the suite's random draw (ssd_scan.py's --random-n)."""
    from simulator.calibration import load_calibration
    h = harness(suite)
    hw = hardware_for(load_measurements(like))
    cal = load_calibration(profile) if profile else calibration_for(hw.accelerator)[0]
    record = getattr(h, "record_of", lambda c: c)     # a suite whose cases are not yet its records
    extra = {} if random_n is None else {"random_n": random_n}
    cases = h.cases(**extra) if seed is None else h.cases(seed=seed, **extra)
    return [(h.label(c), kernel_time(record(c), hw, cal)) for c in cases]


def gemm_draw_rows(seed: int, like: str, profile: str | None = None,
                   suite: str = "random") -> list[tuple[str, str, float]]:
    """(case label, regime, predicted seconds) for every GEMM of the draw ``seed`` of ``suite`` (random:
    gemm_cases.random_cases; real: gemm_cases.real_cases, real training GEMMs; bmm_random:
    bmm_cases.cases, the batched GEMMs of Megatron-Core's local attention) on the hardware of the
    measurement file ``like`` (the record sustained.py writes, kind ``gemm``, with ``batch`` for
    bmm_random); ``profile``: a calibration profile (name or path) instead of the accelerator's own,
    to register a candidate beside the committed model."""
    from simulator.calibration import load_calibration
    from validation.gemm_regimes import gemm_regime
    hw = hardware_for(load_measurements(like))
    cal = load_calibration(profile) if profile else calibration_for(hw.accelerator)[0]
    out = []
    for label, rec in gemm_draw_records(suite, seed):
        out.append((label, gemm_regime(rec), kernel_time(rec, hw, cal)))
    return out


def gemm_draw_records(suite: str, seed: int) -> list[tuple[str, dict]]:
    """(case label, the ``gemm`` record sustained.py writes without measured fields) of every case of
    the draw ``seed`` of ``suite``."""
    if suite == BMM_SUITE:
        b = harness("bmm_cases")
        return [(b.label(c), b.record_of(c, seed)) for c in b.cases(seed)]
    h = harness("gemm_cases")
    return [(h.label(case), dict(kind="gemm", m=case[0], n=case[1], k=case[2], dtype=case[3]))
            for case in h.suite_cases(suite, seed)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", help="a plan_step.py grid")
    ap.add_argument("--kernels", metavar="SUITE", help="a single-GPU kernel suite of validation/harness instead")
    ap.add_argument("--gemm-seed", type=int, metavar="SEED", help="the random GEMM draw of this seed instead")
    ap.add_argument("--gemm-suite", choices=harness("gemm_cases").SUITES + (BMM_SUITE,), default="random",
                    help="--gemm-seed: the random draw (default), a pool of real training GEMMs (real, real_mbs2, "
                         "real_mbs4, real_mbs3: micro-batch 1, 2, 4, 3; gemm_cases.REAL_POOLS, sustained.py --suite) or "
                         "bmm_random (the batched GEMMs of Megatron-Core's local attention, bmm_cases.py)")
    ap.add_argument("--like", required=True, help="a measurement file of the machine the grid will run on")
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--profile", help="--gemm-seed or --kernels: a calibration profile (name or path) instead of "
                                      "the accelerator's own (a candidate registered beside the committed model)")
    ap.add_argument("--seed", type=int, default=None,
                    help="--kernels only: the draw of a seeded suite (membound_random.py's --seed)")
    ap.add_argument("--random-n", type=int, default=None,
                    help="--kernels only: the size of the suite's random draw (ssd_scan.py's --random-n)")
    ap.add_argument("--attention-from", nargs="*", default=[],
                    help="earlier plan_step files of the machine type: the attention kernel each framework recorded "
                         "there (Megatron-Core: apex's fused softmax or its PyTorch fallback) is assumed again")
    a = ap.parse_args(argv)
    if sum(x is not None for x in (a.grid, a.kernels, a.gemm_seed)) != 1:
        ap.error("give one of --grid, --kernels or --gemm-seed")
    if a.kernels and not HARNESS.with_name(f"{a.kernels}.py").exists():
        ap.error(f"--kernels: no suite {a.kernels!r} in validation/harness")
    if a.seed is not None and not (a.kernels and _seeded(a.kernels)):
        ap.error("--seed: only for a seeded kernel suite (--kernels membound_random)")
    if a.random_n is not None and not (a.kernels and "random_n" in _case_parameters(a.kernels)):
        ap.error("--random-n: only for a kernel suite with a sized random draw (--kernels ssd_scan)")
    try:
        return _print_predictions(a)
    except MeshcastError as exc:        # an unreadable --like file, an unknown GPU: one line, as the CLI says it
        print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
        return 2


def _case_parameters(suite: str) -> set[str]:
    """The parameters of the kernel suite ``suite``'s ``cases``."""
    import inspect
    return set(inspect.signature(harness(suite).cases).parameters)


def _seeded(suite: str) -> bool:
    """Whether the kernel suite ``suite`` draws its cases from a seed (its ``cases`` takes ``seed``)."""
    return "seed" in _case_parameters(suite)


def _print_predictions(a) -> int:
    """Print the registered predictions the parsed arguments ask for; 1 when a grid case has none."""
    if a.gemm_seed is not None:
        for label, regime, t in gemm_draw_rows(a.gemm_seed, a.like, a.profile, a.gemm_suite):
            print(f"{label:<64} {regime:<18} {t * 1e6:10.2f} us")
        return 0
    if a.kernels:
        for label, t in kernel_rows(a.kernels, a.like, a.seed, a.profile, a.random_n):
            print(f"{label:<48} {t * 1e6:10.2f} us")
        return 0
    bad = 0
    print(f"{'case':<82} time_ms  peak_GiB  fits  host_ms  clock")
    for label, r in rows(a.grid, a.like, a.world, tuple(a.attention_from)):
        if "error" in r:
            bad += 1
            print(f"{label:<82} ERROR {r['error']}")
        else:
            print(f"{label:<82} {r['time_ms']:8.1f}  {r['peak_gib']:8.2f}  {str(r['fits']):<5} {r['host_ms']:7.1f}  "
                  f"{r['clock']:.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    import signal
    if hasattr(signal, "SIGPIPE"):       # `... | head`: stop quietly when the reader closes the pipe
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    raise SystemExit(main())
