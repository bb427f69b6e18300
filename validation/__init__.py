"""Calibration and validation: measurement records, per-record predictions through the
simulator's own per-op path, accuracy reports, parameter fitting, published-run comparison."""
