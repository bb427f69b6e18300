"""Accuracy against repeated measurements: runs of one case grouped, prediction vs their mean."""
import pytest

from validation.accuracy import RecordResult, case_key, repeat_stats
from validation.predict import Prediction


def _result(time_s: float, predicted: float, **case) -> RecordResult:
    rec = dict(kind="train_step", layers=4, hidden=1024, world=2, strategy="ddp", **case, time_s=time_s,
               time_min_s=time_s * 0.9, reps=5, host_fwd_s=0.001, peak_memory_bytes=1e9)
    return RecordResult(0, rec, Prediction(predicted), predicted / time_s - 1)


def test_case_key_ignores_what_was_measured():
    a, b = _result(0.010, 0.01), _result(0.012, 0.01)
    assert case_key(a.record) == case_key(b.record)
    assert case_key(_result(0.010, 0.01, seq=2048).record) != case_key(a.record)


def test_prediction_is_judged_against_the_mean_of_the_runs():
    # runs at 8, 10 and 12 ms of one case, predicted 10 ms: 0% against the mean, 13.3% per run
    runs = [_result(t, 0.010) for t in (0.008, 0.010, 0.012)]
    single = _result(0.020, 0.010, seq=4096)          # a case measured once is not a repeat
    [s] = repeat_stats(runs + [single])
    assert (s.cases, s.runs) == (1, 3)
    assert s.mape_vs_mean == pytest.approx(0.0)
    assert s.per_run_mape == pytest.approx((0.25 + 0.0 + 1 / 6) / 3)
    assert s.mean_cv == pytest.approx((2 / 3) ** 0.5 * 0.002 / 0.010)
