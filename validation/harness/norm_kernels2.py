"""LayerNorm and RMSNorm forward, a second set of shapes no fit or model choice has seen (session 16).

    PYTHONUNBUFFERED=1 python3 validation/harness/norm_kernels2.py --out FILE --budget-s 150
    python3 validation/harness/norm_kernels2.py --dry-run      # list the cases; no torch, no GPU

norm_kernels.py's shapes were predicted before they ran and then used to choose the norm model's form
(simulator.compute.norm_forward_time: Little's law over the loads in flight in place of a block
lifetime per wave), so they no longer test that form cleanly. This suite measures other hidden sizes
(1280 ... 20480 in bf16; 1536, 3072, 6144, 7168 in fp32) at other row counts (400 ... 50000), the same
way (row_kernels.run_case), with its predictions committed before it runs
(``python -m validation.prereg --kernels norm_kernels2 --like FILE``). Records as norm_kernels.py's,
``suite: norm_kernels2`` in the file's info.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from norm_kernels import norm_cases  # noqa: E402  (one case grid for norm suites)
from row_kernels import label, run_row_suite  # noqa: E402,F401  (validation.prereg reads a suite's label)

BF16_HIDDEN = (1280, 3200, 6400, 7680, 9216, 12800, 15360, 20480)
BF16_ROWS = (400, 1200, 5000, 15000, 50000)
FP32_HIDDEN = (1536, 3072, 6144, 7168)
FP32_ROWS = (1000, 6000, 30000)


def cases(small: bool = False) -> list[dict]:
    """Every case of this suite."""
    return norm_cases(BF16_HIDDEN, BF16_ROWS, FP32_HIDDEN, FP32_ROWS, small)


if __name__ == "__main__":
    run_row_suite(__doc__, "norm_kernels2", cases)
