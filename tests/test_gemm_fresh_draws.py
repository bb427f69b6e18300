"""Random GEMM draws predicted before they were measured (issue #12, session 17).

Seed 26 on one H200 and seed 27 on one H100 (validation/harness/gemm_cases.py through sustained.py
``--suite random --passes 2``), each on a machine lent after the profile was fitted. Their predictions
were committed first (validation/measurements/logs/prereg_gemm_random{26_h200,27_h100}.txt, commit
557db44: the H200 profile with the GEMM fixed costs refitted on seed 24, the H100 profile unchanged
since session 8). Session 20 looked at both shape by shape: development data since. Seeds 28 (H200)
and 29 (H100) were registered in session 20 (commit 222e72a's successor, the same model) and measured in
session 21 on newly lent machines: 9.0% and 9.5% as registered; the H200 operand-load-cap candidate,
registered beside them, 8.0%. Session 21 then looked at seeds 28 and 29 shape by shape (development data
since) and kept the model: the candidate and three cuBLAS tile / stream-K mechanisms each improved the
random draws but made the never-fitted in-step, grouped and per-expert GEMMs worse. Seeds 30 (H200) and 31
(H100) are registered with the same model (NEXT). Figures: docs/validation.md, "GEMMs beyond the fitted
shapes"."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration import profile_fitted_on
from validation.gemm_regimes import mape_by_regime, random_set_pairs, registered_pairs
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
REPEAT = ROOT / "validation" / "measurements" / "repeat"
LOGS = ROOT / "validation" / "measurements" / "logs"
DRAWS = {  # seed: (profile, measured file, registered predictions)
    26: ("h200-sxm", REPEAT / "h200_gemm_random26.json", LOGS / "prereg_gemm_random26_h200.txt"),
    27: ("h100-sxm", REPEAT / "h100_gemm_random27.json", LOGS / "prereg_gemm_random27_h100.txt"),
    28: ("h200-sxm", REPEAT / "h200_gemm_random28.json", LOGS / "prereg_gemm_random28_h200.txt"),
    29: ("h100-sxm", REPEAT / "h100_gemm_random29.json", LOGS / "prereg_gemm_random29_h100.txt"),
    30: ("h200-sxm", REPEAT / "h200_gemm_random30.json", LOGS / "prereg_gemm_random30_h200.txt"),
    31: ("h100-sxm", REPEAT / "h100_gemm_random31.json", LOGS / "prereg_gemm_random31_h100.txt"),
    32: ("h200-sxm", REPEAT / "h200_gemm_random32.json", LOGS / "prereg_gemm_random32_h200.txt"),
    33: ("h100-sxm", REPEAT / "h100_gemm_random33.json", LOGS / "prereg_gemm_random33_h100.txt"),
    34: ("h200-sxm", REPEAT / "h200_gemm_random34.json", LOGS / "prereg_gemm_random34_h200.txt"),
    35: ("h100-sxm", REPEAT / "h100_gemm_random35.json", LOGS / "prereg_gemm_random35_h100.txt"),
    36: ("h200-sxm", REPEAT / "h200_gemm_random36.json", LOGS / "prereg_gemm_random36_h200.txt"),
    37: ("h100-sxm", REPEAT / "h100_gemm_random37.json", LOGS / "prereg_gemm_random37_h100.txt"),
    38: ("h200-sxm", REPEAT / "h200_gemm_random38.json", LOGS / "prereg_gemm_random38_h200.txt"),
    39: ("h100-sxm", REPEAT / "h100_gemm_random39.json", LOGS / "prereg_gemm_random39_h100.txt"),
    40: ("h200-sxm", REPEAT / "h200_gemm_random40.json", LOGS / "prereg_gemm_random40_h200.txt"),
    41: ("h100-sxm", REPEAT / "h100_gemm_random41.json", LOGS / "prereg_gemm_random41_h100.txt"),
    42: ("h200-sxm", REPEAT / "h200_gemm_random42.json", LOGS / "prereg_gemm_random42_h200.txt"),
    43: ("h100-sxm", REPEAT / "h100_gemm_random43.json", LOGS / "prereg_gemm_random43_h100.txt"),
    44: ("h200-sxm", REPEAT / "h200_gemm_random44.json", LOGS / "prereg_gemm_random44_h200.txt"),
    45: ("h100-sxm", REPEAT / "h100_gemm_random45.json", LOGS / "prereg_gemm_random45_h100.txt"),
    46: ("h200-sxm", REPEAT / "h200_gemm_random46.json", LOGS / "prereg_gemm_random46_h200.txt"),
    47: ("h100-sxm", REPEAT / "h100_gemm_random47.json", LOGS / "prereg_gemm_random47_h100.txt"),
    48: ("h200-sxm", REPEAT / "h200_gemm_random48.json", LOGS / "prereg_gemm_random48_h200.txt"),
    49: ("h100-sxm", REPEAT / "h100_gemm_random49.json", LOGS / "prereg_gemm_random49_h100.txt"),
    50: ("h200-sxm", REPEAT / "h200_gemm_random50.json", LOGS / "prereg_gemm_random50_h200.txt"),
    51: ("h100-sxm", REPEAT / "h100_gemm_random51.json", LOGS / "prereg_gemm_random51_h100.txt"),
    52: ("h200-sxm", REPEAT / "h200_gemm_random52.json", LOGS / "prereg_gemm_random52_h200.txt"),
    53: ("h100-sxm", REPEAT / "h100_gemm_random53.json", LOGS / "prereg_gemm_random53_h100.txt"),
    54: ("h200-sxm", REPEAT / "h200_gemm_random54.json", LOGS / "prereg_gemm_random54_h200.txt"),
    55: ("h100-sxm", REPEAT / "h100_gemm_random55.json", LOGS / "prereg_gemm_random55_h100.txt"),
    56: ("h200-sxm", REPEAT / "h200_gemm_random56.json", LOGS / "prereg_gemm_random56_h200.txt"),
    57: ("h100-sxm", REPEAT / "h100_gemm_random57.json", LOGS / "prereg_gemm_random57_h100.txt"),
    58: ("h200-sxm", REPEAT / "h200_gemm_random58.json", LOGS / "prereg_gemm_random58_h200.txt"),
    59: ("h100-sxm", REPEAT / "h100_gemm_random59.json", LOGS / "prereg_gemm_random59_h100.txt"),
    60: ("h200-sxm", REPEAT / "h200_gemm_random60.json", LOGS / "prereg_gemm_random60_h200.txt"),
    61: ("h100-sxm", REPEAT / "h100_gemm_random61.json", LOGS / "prereg_gemm_random61_h100.txt"),
    62: ("h200-sxm", REPEAT / "h200_gemm_random62.json", LOGS / "prereg_gemm_random62_h200.txt"),
    63: ("h100-sxm", REPEAT / "h100_gemm_random63.json", LOGS / "prereg_gemm_random63_h100.txt"),
    64: ("h200-sxm", REPEAT / "h200_gemm_random64.json", LOGS / "prereg_gemm_random64_h200.txt"),
    65: ("h100-sxm", REPEAT / "h100_gemm_random65.json", LOGS / "prereg_gemm_random65_h100.txt"),
    66: ("h200-sxm", REPEAT / "h200_gemm_random66.json", LOGS / "prereg_gemm_random66_h200.txt"),
    67: ("h100-sxm", REPEAT / "h100_gemm_random67.json", LOGS / "prereg_gemm_random67_h100.txt"),
    68: ("h200-sxm", REPEAT / "h200_gemm_random68.json", LOGS / "prereg_gemm_random68_h200.txt"),
    69: ("h100-sxm", REPEAT / "h100_gemm_random69.json", LOGS / "prereg_gemm_random69_h100.txt"),
    70: ("h200-sxm", REPEAT / "h200_gemm_random70.json", LOGS / "prereg_gemm_random70_h200.txt"),
    71: ("h100-sxm", REPEAT / "h100_gemm_random71.json", LOGS / "prereg_gemm_random71_h100.txt"),
    72: ("h200-sxm", REPEAT / "h200_gemm_random72.json", LOGS / "prereg_gemm_random72_h200.txt"),
    73: ("h100-sxm", REPEAT / "h100_gemm_random73.json", LOGS / "prereg_gemm_random73_h100.txt"),
}
# the draws session 23's adoption of the gemm32 candidate made fit data (its restricted fits of the unaligned
# rate and fixed costs ran on H200 seeds 24-30 and H100 seeds 21-31; fit blocks of the committed profiles)
FITTED_SINCE_23 = {26, 27, 28, 29, 30, 31, 32, 33, 34, 35}   # 32-35: the gemm36 fit (validation/gemm36_fit.py)
# MAPE per regime as registered (the same figures the model gives today: nothing changed since)
REGISTERED = {
    26: {"all": 0.1011, "small_mn_large_k": 0.1037, "fp8_small": 0.0686, "misaligned": 0.1925, "large": 0.1032,
         "other": 0.0707},
    27: {"all": 0.0857, "small_mn_large_k": 0.0964, "fp8_small": 0.0334, "misaligned": 0.0921, "large": 0.1388,
         "other": 0.0724},
    # session 21, registered in session 20 (model unchanged since session 17's H200 refit)
    28: {"all": 0.0904, "small_mn_large_k": 0.1218, "fp8_small": 0.0379, "misaligned": 0.1026, "large": 0.1062,
         "other": 0.0553},
    29: {"all": 0.0955, "small_mn_large_k": 0.1020, "fp8_small": 0.0493, "misaligned": 0.1827, "large": 0.1197,
         "other": 0.0714},
    # session 21 again, registered that session after the model was kept (ff3be27's successor)
    30: {"all": 0.0885, "small_mn_large_k": 0.1044, "fp8_small": 0.0402, "misaligned": 0.1384, "large": 0.1010,
         "other": 0.0677},
    31: {"all": 0.1052, "small_mn_large_k": 0.1152, "fp8_small": 0.0559, "misaligned": 0.1763, "large": 0.1144,
         "other": 0.0734},
    # session 22, registered that session from the cuBLAS traces' branch (the committed model, unchanged)
    32: {"all": 0.1122, "small_mn_large_k": 0.1421, "fp8_small": 0.0614, "misaligned": 0.1614, "large": 0.1069,
         "other": 0.0673},
    33: {"all": 0.0999, "small_mn_large_k": 0.1153, "fp8_small": 0.0575, "misaligned": 0.1483, "large": 0.1477,
         "other": 0.0550},
    # session 23, registered that session by profile adopt23 (the committed profiles with membound42 and gemm32
    # adopted: validation/candidates/*-sxm-adopt23.yaml) and measured on newly lent machines
    34: {"all": 0.0914, "small_mn_large_k": 0.1233, "fp8_small": 0.0542, "misaligned": 0.0830, "large": 0.0555,
         "other": 0.0751},
    35: {"all": 0.0950, "small_mn_large_k": 0.1094, "fp8_small": 0.0535, "misaligned": 0.1122, "large": 0.1278,
         "other": 0.0672},
    # session 23 again, registered by the committed model of 5c6afe4 with candidate gemm36 beside it
    36: {"all": 0.1097, "small_mn_large_k": 0.1551, "fp8_small": 0.0495, "misaligned": 0.1079, "large": 0.1222,
         "other": 0.0700},
    37: {"all": 0.0974, "small_mn_large_k": 0.1196, "fp8_small": 0.0345, "misaligned": 0.1188, "large": 0.1225,
         "other": 0.0822},
    # session 23, third pair, registered by the committed model of a0864ba (gemm36 adopted)
    38: {"all": 0.0753, "small_mn_large_k": 0.0751, "fp8_small": 0.0317, "misaligned": 0.0970, "large": 0.1074,
         "other": 0.0760},
    39: {"all": 0.0895, "small_mn_large_k": 0.1032, "fp8_small": 0.0873, "misaligned": 0.0992, "large": 0.0876,
         "other": 0.0693},
    # session 24, registered by the committed model of 989d851 (GEMM model as for 38 / 39), candidate gemm40 beside
    40: {"all": 0.0604, "small_mn_large_k": 0.0502, "fp8_small": 0.0284, "misaligned": 0.0720, "large": 0.0997,
         "other": 0.0745},
    41: {"all": 0.0849, "small_mn_large_k": 0.0850, "fp8_small": 0.0451, "misaligned": 0.1291, "large": 0.1287,
         "other": 0.0683},
    # session 24 again, by the committed model of 989d851's successor d0cf3f7 (the same GEMM model): a second check of seed 40
    42: {"all": 0.0876, "small_mn_large_k": 0.0809, "fp8_small": 0.0661, "misaligned": 0.1291, "large": 0.0471,
         "other": 0.0956},
    43: {"all": 0.0757, "small_mn_large_k": 0.0841, "fp8_small": 0.0328, "misaligned": 0.1095, "large": 0.1660,
         "other": 0.0445},
    # session 25, by the committed model of 5e9b868 (the same GEMM model as for 38-43)
    44: {"all": 0.0734, "small_mn_large_k": 0.0818, "fp8_small": 0.0449, "misaligned": 0.0861, "large": 0.1221,
         "other": 0.0561},
    45: {"all": 0.0985, "small_mn_large_k": 0.0916, "fp8_small": 0.0762, "misaligned": 0.1340, "large": 0.1285,
         "other": 0.0819},
    # session 27, by the committed model of 861d2e9 (the same GEMM model as for 38-45)
    46: {"all": 0.0673, "small_mn_large_k": 0.0580, "fp8_small": 0.0516, "misaligned": 0.0854, "large": 0.0877,
         "other": 0.0719},
    47: {"all": 0.0888, "small_mn_large_k": 0.1005, "fp8_small": 0.0615, "misaligned": 0.0949, "large": 0.1197,
         "other": 0.0701},
    # session 28, by the committed model of eea90da (the same GEMM model as for 38-47)
    48: {"all": 0.0847, "small_mn_large_k": 0.0874, "fp8_small": 0.0566, "misaligned": 0.1019, "large": 0.1195,
         "other": 0.0779},
    49: {"all": 0.0767, "small_mn_large_k": 0.0793, "fp8_small": 0.0386, "misaligned": 0.0998, "large": 0.1105,
         "other": 0.0771},
    # session 29, by the committed model of a913dcd (the same GEMM model as for 38-49)
    50: {"all": 0.0784, "small_mn_large_k": 0.0763, "fp8_small": 0.0703, "misaligned": 0.1108, "large": 0.0774,
         "other": 0.0735},
    51: {"all": 0.0976, "small_mn_large_k": 0.1143, "fp8_small": 0.0511, "misaligned": 0.1660, "large": 0.1195,
         "other": 0.0731},
    # session 30, by the committed model of cd7f481 (the same GEMM model as for 38-51)
    52: {"all": 0.0919, "small_mn_large_k": 0.0728, "fp8_small": 0.0949, "misaligned": 0.1383, "large": 0.0941,
         "other": 0.0976},
    53: {"all": 0.0913, "small_mn_large_k": 0.1025, "fp8_small": 0.0497, "misaligned": 0.1082, "large": 0.1144,
         "other": 0.0716},
    # session 30, second pair, by the committed model of 87b03f2 (the same GEMM model), candidate knn53 beside it
    # (tests/test_gemm_knn_candidate.py)
    54: {"all": 0.0744, "small_mn_large_k": 0.0690, "fp8_small": 0.0532, "misaligned": 0.0831, "large": 0.0988,
         "other": 0.0822},
    55: {"all": 0.0922, "small_mn_large_k": 0.1118, "fp8_small": 0.0719, "misaligned": 0.0837, "large": 0.1079,
         "other": 0.0743},
    # session 31, by the committed model of 161615c (the same GEMM model), candidate knnskip beside it
    # (tests/test_gemm_knn_candidate.py)
    56: {"all": 0.0751, "small_mn_large_k": 0.0782, "fp8_small": 0.0554, "misaligned": 0.1234, "large": 0.0751,
         "other": 0.0621},
    57: {"all": 0.0845, "small_mn_large_k": 0.0890, "fp8_small": 0.0379, "misaligned": 0.0972, "large": 0.1571,
         "other": 0.0802},
    # session 32, by the committed model of 0c24860 (the same GEMM model), candidates knnskip and knnnear beside it
    58: {"all": 0.0725, "small_mn_large_k": 0.0741, "fp8_small": 0.0337, "misaligned": 0.0571, "large": 0.1045,
         "other": 0.0806},
    59: {"all": 0.0888, "small_mn_large_k": 0.1059, "fp8_small": 0.0566, "misaligned": 0.0743, "large": 0.1314,
         "other": 0.0752},
    # session 33, by the committed model of 4c570f5 (the same GEMM model), candidate gemm60 beside it
    # (tests/test_gemm_floor.py)
    60: {"all": 0.0756, "small_mn_large_k": 0.0745, "fp8_small": 0.0523, "misaligned": 0.0915, "large": 0.0925,
         "other": 0.0807},
    61: {"all": 0.0851, "small_mn_large_k": 0.0881, "fp8_small": 0.0509, "misaligned": 0.1063, "large": 0.1293,
         "other": 0.0761},
    # session 34, by the committed model of 0fce87d (the same GEMM model), candidate gemm62 beside it
    # (tests/test_gemm_overlap.py)
    62: {"all": 0.0664, "small_mn_large_k": 0.0645, "fp8_small": 0.0443, "misaligned": 0.0800, "large": 0.1224,
         "other": 0.0614},
    63: {"all": 0.0886, "small_mn_large_k": 0.1016, "fp8_small": 0.0416, "misaligned": 0.1168, "large": 0.1773,
         "other": 0.0640},
    # session 35, registered in commit 26b0352 by the code of 490d35e (the same GEMM model), no candidate
    64: {"all": 0.0903, "small_mn_large_k": 0.0838, "fp8_small": 0.1015, "misaligned": 0.1517, "large": 0.0748,
         "other": 0.0731},
    65: {"all": 0.0844, "small_mn_large_k": 0.0841, "fp8_small": 0.0443, "misaligned": 0.1198, "large": 0.1181,
         "other": 0.0734},
    # session 36, registered in commit 40b6163 by the code of 6fd69f0 (the same GEMM model), no candidate; the H100
    # machine was noisy (69 of 156 records with calls spread over 3x, median max/min call 2.7 against 1.3 on seed 65's)
    66: {"all": 0.0743, "small_mn_large_k": 0.0699, "fp8_small": 0.0554, "misaligned": 0.1324, "large": 0.0757,
         "other": 0.0615},
    67: {"all": 0.1070, "small_mn_large_k": 0.1101, "fp8_small": 0.1086, "misaligned": 0.0926, "large": 0.1252,
         "other": 0.0969},
    # session 36 again, registered in commit c0d9b12 by the code of 424c641 (the same GEMM model)
    68: {"all": 0.0828, "small_mn_large_k": 0.0754, "fp8_small": 0.0680, "misaligned": 0.0973, "large": 0.1182,
         "other": 0.0801},
    69: {"all": 0.0807, "small_mn_large_k": 0.0752, "fp8_small": 0.0452, "misaligned": 0.0939, "large": 0.1496,
         "other": 0.0640},
    # session 36, third pair, registered in commit 3d4e850 by the code of d582d03 (the same GEMM model)
    70: {"all": 0.0821, "small_mn_large_k": 0.0838, "fp8_small": 0.0795, "misaligned": 0.1144, "large": 0.0677,
         "other": 0.0757},
    71: {"all": 0.0824, "small_mn_large_k": 0.0947, "fp8_small": 0.0638, "misaligned": 0.1135, "large": 0.1018,
         "other": 0.0582},
    # session 43, registered in commit 2a1f722 by the code of 5b722fc (the same GEMM model), candidate gemm72 beside it
    72: {"all": 0.0751, "small_mn_large_k": 0.0765, "fp8_small": 0.0373, "misaligned": 0.1294, "large": 0.0868,
         "other": 0.0710},
    73: {"all": 0.0909, "small_mn_large_k": 0.0815, "fp8_small": 0.0433, "misaligned": 0.1011, "large": 0.1664,
         "other": 0.0909},
}
# the gemm40 candidate (the unaligned fallback kernels' serial C store and small-tile load factor;
# validation/gemm40_fit.py on every draw through seed 39) registered beside seeds 40 / 41
REGISTERED_GEMM40 = {
    40: {"all": 0.0620, "small_mn_large_k": 0.0500, "fp8_small": 0.0284, "misaligned": 0.0867, "large": 0.0997,
         "other": 0.0745},
    41: {"all": 0.0833, "small_mn_large_k": 0.0854, "fp8_small": 0.0451, "misaligned": 0.1129, "large": 0.1287,
         "other": 0.0683},
}
# the gemm36 candidate (split-K L2 operand floor) registered beside seeds 36 / 37
REGISTERED_GEMM36 = {
    36: {"all": 0.0825, "small_mn_large_k": 0.0882, "fp8_small": 0.0495, "misaligned": 0.0962, "large": 0.1222,
         "other": 0.0707},
    37: {"all": 0.0858, "small_mn_large_k": 0.0924, "fp8_small": 0.0345, "misaligned": 0.1108, "large": 0.1225,
         "other": 0.0817},
}
# today's model (gemm32 and gemm36 adopted, session 23) on each draw, every one fit data but 36 and 37 (seeds 32-35
# since the gemm36 fit): every draw's pooled figure better than registered (seed 34 6.6%, fit data; 36 / 37 8.3% /
# 8.6%, never fitted: their candidate registrations); misaligned worse than registered on seeds 27 and 28 (9.2 -> 9.65%,
# 10.3 -> 10.4%)
TODAY_23 = {
    26: {"all": 0.0783, "small_mn_large_k": 0.0654, "fp8_small": 0.0689, "misaligned": 0.1222, "large": 0.1031, "other": 0.0725},
    27: {"all": 0.0834, "small_mn_large_k": 0.0927, "fp8_small": 0.0334, "misaligned": 0.0965, "large": 0.1388, "other": 0.0679},
    28: {"all": 0.0750, "small_mn_large_k": 0.0814, "fp8_small": 0.0380, "misaligned": 0.1043, "large": 0.1062, "other": 0.0551},
    29: {"all": 0.0849, "small_mn_large_k": 0.0894, "fp8_small": 0.0491, "misaligned": 0.1206, "large": 0.1197, "other": 0.0726},
    30: {"all": 0.0753, "small_mn_large_k": 0.0849, "fp8_small": 0.0405, "misaligned": 0.0714, "large": 0.1010, "other": 0.0660},
    31: {"all": 0.0961, "small_mn_large_k": 0.0998, "fp8_small": 0.0558, "misaligned": 0.1564, "large": 0.1144, "other": 0.0721},
    32: {"all": 0.0913, "small_mn_large_k": 0.1071, "fp8_small": 0.0617, "misaligned": 0.1088, "large": 0.1069, "other": 0.0674},
    33: {"all": 0.0865, "small_mn_large_k": 0.0931, "fp8_small": 0.0575, "misaligned": 0.1133, "large": 0.1477, "other": 0.0549},
    34: {"all": 0.0658, "small_mn_large_k": 0.0671, "fp8_small": 0.0544, "misaligned": 0.0708, "large": 0.0555, "other": 0.0752},
    35: {"all": 0.0854, "small_mn_large_k": 0.0874, "fp8_small": 0.0535, "misaligned": 0.1053, "large": 0.1279, "other": 0.0657},
    36: {"all": 0.0826, "small_mn_large_k": 0.0881, "fp8_small": 0.0498, "misaligned": 0.0963, "large": 0.1222, "other": 0.0707},
    37: {"all": 0.0858, "small_mn_large_k": 0.0925, "fp8_small": 0.0345, "misaligned": 0.1107, "large": 0.1225, "other": 0.0818},
    38: {"all": 0.0753, "small_mn_large_k": 0.0751, "fp8_small": 0.0317, "misaligned": 0.0970, "large": 0.1074, "other": 0.0760},
    39: {"all": 0.0895, "small_mn_large_k": 0.1032, "fp8_small": 0.0873, "misaligned": 0.0992, "large": 0.0876, "other": 0.0693},
    40: {"all": 0.0604, "small_mn_large_k": 0.0502, "fp8_small": 0.0286, "misaligned": 0.0720, "large": 0.0997, "other": 0.0745},
    41: {"all": 0.0849, "small_mn_large_k": 0.0850, "fp8_small": 0.0450, "misaligned": 0.1290, "large": 0.1287, "other": 0.0682},
    42: {"all": 0.0876, "small_mn_large_k": 0.0809, "fp8_small": 0.0663, "misaligned": 0.1290, "large": 0.0471, "other": 0.0957},
    43: {"all": 0.0757, "small_mn_large_k": 0.0841, "fp8_small": 0.0328, "misaligned": 0.1096, "large": 0.1661, "other": 0.0445},
    44: {"all": 0.0734, "small_mn_large_k": 0.0818, "fp8_small": 0.0449, "misaligned": 0.0861, "large": 0.1221, "other": 0.0561},
    45: {"all": 0.0985, "small_mn_large_k": 0.0916, "fp8_small": 0.0762, "misaligned": 0.1340, "large": 0.1285, "other": 0.0819},
    46: {"all": 0.0673, "small_mn_large_k": 0.0580, "fp8_small": 0.0518, "misaligned": 0.0853, "large": 0.0877, "other": 0.0718},
    47: {"all": 0.0888, "small_mn_large_k": 0.1004, "fp8_small": 0.0615, "misaligned": 0.0949, "large": 0.1197, "other": 0.0701},
    48: {"all": 0.0847, "small_mn_large_k": 0.0874, "fp8_small": 0.0568, "misaligned": 0.1020, "large": 0.1195, "other": 0.0778},
    49: {"all": 0.0767, "small_mn_large_k": 0.0793, "fp8_small": 0.0386, "misaligned": 0.0998, "large": 0.1105, "other": 0.0771},
    50: {"all": 0.0783, "small_mn_large_k": 0.0764, "fp8_small": 0.0703, "misaligned": 0.1107, "large": 0.0774, "other": 0.0735},
    51: {"all": 0.0976, "small_mn_large_k": 0.1143, "fp8_small": 0.0510, "misaligned": 0.1659, "large": 0.1195, "other": 0.0731},
    52: {"all": 0.0919, "small_mn_large_k": 0.0728, "fp8_small": 0.0949, "misaligned": 0.1383, "large": 0.0941, "other": 0.0975},
    53: {"all": 0.0913, "small_mn_large_k": 0.1025, "fp8_small": 0.0496, "misaligned": 0.1082, "large": 0.1144, "other": 0.0716},
    54: {"all": 0.0744, "small_mn_large_k": 0.0690, "fp8_small": 0.0532, "misaligned": 0.0831, "large": 0.0988, "other": 0.0822},
    55: {"all": 0.0922, "small_mn_large_k": 0.1118, "fp8_small": 0.0719, "misaligned": 0.0837, "large": 0.1079, "other": 0.0743},
    56: {"all": 0.0751, "small_mn_large_k": 0.0782, "fp8_small": 0.0554, "misaligned": 0.1234, "large": 0.0751, "other": 0.0621},
    57: {"all": 0.0845, "small_mn_large_k": 0.0890, "fp8_small": 0.0379, "misaligned": 0.0972, "large": 0.1571, "other": 0.0802},
    58: {"all": 0.0725, "small_mn_large_k": 0.0741, "fp8_small": 0.0339, "misaligned": 0.0571, "large": 0.1045, "other": 0.0805},
    59: {"all": 0.0887, "small_mn_large_k": 0.1058, "fp8_small": 0.0564, "misaligned": 0.0742, "large": 0.1313, "other": 0.0752},
    60: {"all": 0.0756, "small_mn_large_k": 0.0745, "fp8_small": 0.0524, "misaligned": 0.0914, "large": 0.0924, "other": 0.0808},
    61: {"all": 0.0851, "small_mn_large_k": 0.0881, "fp8_small": 0.0510, "misaligned": 0.1063, "large": 0.1293, "other": 0.0761},
    62: {"all": 0.0665, "small_mn_large_k": 0.0645, "fp8_small": 0.0446, "misaligned": 0.0801, "large": 0.1224, "other": 0.0614},
    63: {"all": 0.0886, "small_mn_large_k": 0.1016, "fp8_small": 0.0415, "misaligned": 0.1168, "large": 0.1773, "other": 0.0639},
    64: {"all": 0.0903, "small_mn_large_k": 0.0839, "fp8_small": 0.1018, "misaligned": 0.1515, "large": 0.0748, "other": 0.0730},
    65: {"all": 0.0844, "small_mn_large_k": 0.0841, "fp8_small": 0.0442, "misaligned": 0.1198, "large": 0.1181, "other": 0.0734},
    66: {"all": 0.0743, "small_mn_large_k": 0.0699, "fp8_small": 0.0556, "misaligned": 0.1324, "large": 0.0757, "other": 0.0614},
    67: {"all": 0.1070, "small_mn_large_k": 0.1101, "fp8_small": 0.1085, "misaligned": 0.0925, "large": 0.1253, "other": 0.0969},
    68: {"all": 0.0828, "small_mn_large_k": 0.0754, "fp8_small": 0.0682, "misaligned": 0.0972, "large": 0.1182, "other": 0.0799},
    69: {"all": 0.0807, "small_mn_large_k": 0.0752, "fp8_small": 0.0452, "misaligned": 0.0939, "large": 0.1496, "other": 0.0639},
    70: {"all": 0.0821, "small_mn_large_k": 0.0838, "fp8_small": 0.0797, "misaligned": 0.1144, "large": 0.0677, "other": 0.0758},
    71: {"all": 0.0824, "small_mn_large_k": 0.0947, "fp8_small": 0.0638, "misaligned": 0.1134, "large": 0.1019, "other": 0.0582},
    72: {"all": 0.0751, "small_mn_large_k": 0.0765, "fp8_small": 0.0377, "misaligned": 0.1295, "large": 0.0868, "other": 0.0710},
    73: {"all": 0.0910, "small_mn_large_k": 0.0814, "fp8_small": 0.0434, "misaligned": 0.1013, "large": 0.1664, "other": 0.0910},
}
# the gemm32 candidate registered beside seeds 32 / 33 (validation/candidates/*-sxm-gemm32.yaml)
REGISTERED_GEMM32 = {
    32: {"all": 0.1044, "small_mn_large_k": 0.1390, "fp8_small": 0.0614, "misaligned": 0.1160, "large": 0.1069,
         "other": 0.0673},
    33: {"all": 0.0963, "small_mn_large_k": 0.1149, "fp8_small": 0.0575, "misaligned": 0.1215, "large": 0.1477,
         "other": 0.0550},
}
# the H200 values session 17's refit replaced (launch = the compute fit's kernel_launch_s + gemm_setup_s;
# the fixed costs copied from H100; the fraction fitted on h200_kernels.json alone)
H200_BEFORE_REFIT = dict(gemm_launch_s=7.066626659680828e-06, gemm_unaligned_fixed_s=9.227548195118593e-07,
                         gemm_split_k_fixed_s=3.7036089287493766e-06, gemm_fp8_fixed_s=0.0,
                         gemm_unaligned_fraction=0.1687521515540927)


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_draw_is_new_and_fitted_only_since_session_23(seed):
    """Each draw was measured after its registration on a newly lent machine; none was fit data then.
    Seeds 26-31 are since session 23's gemm32 fit, 32-35 since its gemm36 fit; 36 and 37 never were."""
    profile, path, _ = DRAWS[seed]
    mf = load_measurements(path)
    assert mf.info["seed"] == [seed] and mf.info["passes"] == 2 and mf.info["date"] >= "2026-11-23"
    assert (path.name in {Path(f).name for f in profile_fitted_on(profile)}) == (seed in FITTED_SINCE_23)
    assert len(random_set_pairs(path, seed=seed)) == 156


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_registered_predictions_cover_the_draw(seed):
    """Every measured shape was registered, and the log holds nothing else."""
    _, path, log = DRAWS[seed]
    pairs = registered_pairs(log, path)
    assert len(pairs) == 156
    assert sum(1 for line in log.read_text().splitlines() if line and not line.startswith("#")) == 156


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_registered_figures(seed):
    _, path, log = DRAWS[seed]
    got = mape_by_regime(registered_pairs(log, path))
    assert {k: round(v[1], 4) for k, v in got.items()} == pytest.approx(REGISTERED[seed], abs=1e-4)


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_todays_model_ratchet(seed):
    """Today's figures per draw and regime (TODAY_23) cannot slip back; pooled, today's model is no worse
    than the registered one by more than 0.05 points on any draw (seed 31: +0.04)."""
    _, path, _ = DRAWS[seed]
    got = mape_by_regime(random_set_pairs(path, seed=seed))
    for regime, today in TODAY_23[seed].items():
        assert got[regime][1] <= today + 5e-4, regime
    assert got["all"][1] <= REGISTERED[seed]["all"] + 5e-4


def test_h200_refit_beats_the_profile_it_replaced():
    """The same H200 draw under the profile before session 17's refit (gemm_launch_s 7.07 us, the
    fixed costs copied from H100): 14.2%, fp8 small 20.6%, other 14.4%."""
    from dataclasses import replace

    from simulator.calibration import load_calibration
    old = replace(load_calibration("h200-sxm"), **H200_BEFORE_REFIT)
    before = mape_by_regime(random_set_pairs(DRAWS[26][1], cal=old, seed=26))
    assert before["all"][1] > 0.14 and before["fp8_small"][1] > 0.20
    assert REGISTERED[26]["all"] < before["all"][1] - 0.04


# never-fitted draws on which the 7% target holds as registered
TARGET_MET = {40, 46, 62}


@pytest.mark.parametrize("seed", sorted(set(DRAWS) - FITTED_SINCE_23 - TARGET_MET))
@pytest.mark.xfail(strict=True, reason="issue #12 target 7% on random shapes, as pre-registered (today only the draws no fit "
                                       "has used, 36 and 37, count: 8.3% / 8.6% under today's model, their gemm36 "
                                       "registrations): H200 seed 26 10.1% "
                                       "(misaligned 19.3%), seed 28 9.0% (small-mn large-k 12.2%; the load-cap "
                                       "candidate 8.0%, not adopted: it costs the in-step and expert GEMMs); H100 "
                                       "seed 27 8.6% (large 13.9%), seed 29 9.5% (misaligned 18.3%); seed 30 (H200) "
                                       "8.85%, seed 31 (H100) 10.5%; seed 32 (H200) 11.2%, seed 33 (H100) 10.0% (the "
                                       "gemm32 candidate registered beside them 10.4% / 9.6%, adopted); seed 34 (H200) "
                                       "9.1%, seed 35 (H100) 9.5% as registered by it (small-mn large-k 12.3% / 10.9%); seed 36 (H200) "
                                       "11.0%, seed 37 (H100) 9.7% (the gemm36 candidate beside them 8.25% / 8.6%, adopted); seed 38 (H200) "
                                       "7.5%, seed 39 (H100) 8.95% as registered by it; seed 41 (H100) 8.5%, seed 42 (H200) "
                                       "8.8%, seed 43 (H100) 7.6% (session 24); seed 44 (H200) 7.3%, seed 45 (H100) 9.85% "
                                       "(session 25); seed 47 (H100) 8.9% (session 27); seed 48 (H200) 8.5%, "
                                       "seed 49 (H100) 7.7% (session 28); seed 50 (H200) 7.8%, seed 51 (H100) "
                                       "9.8% (session 29); seed 52 (H200) 9.2%, seed 53 (H100) 9.1%, seed 54 (H200) 7.4%, "
                                       "seed 55 (H100) 9.2% (session 30; candidate knn53 4.6% / 5.8%); seed 56 (H200) "
                                       "7.5%, seed 57 (H100) 8.45% (session 31; candidate knnskip 5.2% / 6.2%); seed 58 "
                                       "(H200) 7.25%, seed 59 (H100) 8.9% (session 32; knnskip 5.2% / 7.4%, knnnear "
                                       "5.15% / 7.5%); seed 60 (H200) 7.56%, seed 61 (H100) 8.5% (session 33; "
                                       "candidate gemm60 7.08% / 8.12%); seed 63 (H100) 8.9% (session 34; "
                                       "candidate gemm62 8.2%); seed 64 (H200) 9.0% (misaligned 15.2%), seed 65 "
                                       "(H100) 8.4% (session 35); seed 66 (H200) 7.4% (misaligned 13.2%), seed 67 "
                                       "(H100) 10.7% on a noisy machine (8.95% without the records whose calls "
                                       "spread over 3x; session 36); seed 68 (H200) 8.3% (large 11.8%), "
                                       "seed 69 (H100) 8.1% (large 15.0%), seed 70 (H200) 8.2% (misaligned "
                                       "11.4%), seed 71 (H100) 8.2% (misaligned 11.35%; session 36); seed 72 "
                                       "(H200) 7.5% (misaligned 12.9%), seed 73 (H100) 9.1% (large 16.6%; session "
                                       "43, candidate gemm72 7.1% / 9.35%)")
def test_fresh_draw_target(seed):
    _, path, log = DRAWS[seed]
    adopted = LOGS / log.name.replace(".txt", "_cand.txt") if seed in (36, 37) else log     # gemm36's registration
    assert mape_by_regime(registered_pairs(adopted, path))["all"][1] <= 0.07


@pytest.mark.parametrize("seed", sorted(TARGET_MET))
def test_fresh_draw_target_met(seed):
    """Seed 40 (H200, session 24, registered by the committed model before it ran on a newly lent machine):
    6.04% pooled, within the issue's 7% (misaligned 7.2%, large 10.0%, other 7.45%); seed 46 (H200, session 27,
    likewise): 6.73% (large 8.8%, misaligned 8.5%, other 7.2%); seed 62 (H200, session 34, likewise): 6.64%
    (large 12.2%, misaligned 8.0%). Three draws of the H200 draws registered by the models since gemm36
    (seed 36 8.25% by its candidate, 38 7.5%, 42 8.8%, 44 7.3%, 48 8.5%, 50 7.8%, 52 9.2%, 54 7.4%, 56 7.5%,
    58 7.25%, 60 7.56%, 64 9.0%, 66 7.4%, 68 8.3%, 70 8.2%, 72 7.5% after it: three of nineteen); on H100 none of
    nineteen (37 8.6%, 39 8.95%, 41 8.5%, 43 7.6%, 45 9.85%, 47 8.9%, 49 7.7%, 51 9.8%, 53 9.1%, 55 9.2%, 57 8.45%,
    59 8.9%, 61 8.5%, 63 8.9%, 65 8.4%, 67 10.7%, 69 8.1%, 71 8.2%, 73 9.1%)."""
    _, path, log = DRAWS[seed]
    assert mape_by_regime(registered_pairs(log, path))["all"][1] <= 0.07


# the H200 values the gemm32 fit replaced (session 17's refit on seed 24)
H200_BEFORE_GEMM32 = dict(gemm_unaligned_fraction=0.1759797037776373, gemm_unaligned_fixed_s=1.3954092572537717e-06,
                          gemm_split_k_fixed_s=3.998074362825777e-06)


def test_h200_fixed_costs_are_what_calibrate_fits_on_seeds_24_to_30():
    """The committed H200 unaligned rate and fixed costs are reproduced by the restricted fit the profile
    names (h200_kernels.json + seeds 24, 25, 26, 28, 30; the gemm32 block), started from the values it
    replaced; session 17's launch (gemm_launch_s, fp8 fixed cost) stays what it fitted on seed 24."""
    from dataclasses import replace

    from simulator.calibration import load_calibration
    from validation.calibrate import calibrate
    from validation.hardware import hardware_for
    meas = ROOT / "validation" / "measurements"
    names = ["h200_kernels.json", "h200_gemm_random.json"] + [f"repeat/h200_gemm_random{s}.json" for s in (25, 26, 28, 30)]
    files = [(mf, hardware_for(mf)) for mf in (load_measurements(meas / n) for n in names)]
    cal = load_calibration("h200-sxm")
    start = replace(cal, **H200_BEFORE_GEMM32, gemm_l2_operand_bytes_per_flop=0.0)      # as before gemm36
    got = calibrate(files, "h200-sxm", start=start, only=tuple(H200_BEFORE_GEMM32),
                    fit_seeds=(24, 25, 26, 28, 30)).calibration
    gemm32 = dict(gemm_unaligned_fraction=cal.gemm_unaligned_fraction, gemm_unaligned_fixed_s=cal.gemm_unaligned_fixed_s,
                  gemm_split_k_fixed_s=3.4829379434666116e-06)        # the split-K fixed cost gemm36 refitted since
    for name in H200_BEFORE_GEMM32:
        assert getattr(got, name) == pytest.approx(gemm32[name], rel=0.01, abs=1e-9), name
        assert getattr(got, name) != pytest.approx(H200_BEFORE_GEMM32[name], rel=0.05), name


def test_prereg_says_a_bad_like_file_in_one_line(capsys):
    from validation.prereg import main
    assert main(["--gemm-seed", "26", "--like", str(ROOT / "no-such-file.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no-such-file.json" in err and "Traceback" not in err


# Session 20: the next draws, registered before they were measured (the committed model, unchanged, and
# beside it for H200 a candidate profile: the restricted `--only gemm` refit that gives H200 the per-SM
# operand-load cap H100 has; docs/validation.md, "GEMMs beyond the fitted shapes").
NEXT = {  # log: (seed, --like file, --profile or None)
    "prereg_gemm_random28_h200.txt": (28, "h200_gemm_random.json", None),
    "prereg_gemm_random29_h100.txt": (29, "h100_gemm_random3.json", None),
    "prereg_gemm_random28_h200_loadcap.txt": (28, "h200_gemm_random.json",
                                              str(ROOT / "validation" / "candidates" / "h200-sxm-gemm-loadcap.yaml")),
    # Session 21: the next draws, registered with the same model (kept, docs/validation.md) and, beside seed 30,
    # the H200 load-cap candidate again (better on random shapes, worse on the in-step and expert GEMMs)
    "prereg_gemm_random30_h200.txt": (30, "h200_gemm_random.json", None),
    "prereg_gemm_random31_h100.txt": (31, "h100_gemm_random3.json", None),
    "prereg_gemm_random30_h200_loadcap.txt": (30, "h200_gemm_random.json",
                                              str(ROOT / "validation" / "candidates" / "h200-sxm-gemm-loadcap.yaml")),
    # Session 22: seed 32 (H200) and 33 (H100), the committed model (unchanged) and beside each the gemm32
    # candidate from the cuBLAS kernel trace (validation/gemm_kernels.py; docs/cost_model.md)
    "prereg_gemm_random32_h200.txt": (32, "h200_gemm_random.json", None),
    "prereg_gemm_random33_h100.txt": (33, "h100_gemm_random3.json", None),
    "prereg_gemm_random32_h200_cand.txt": (32, "h200_gemm_random.json", "validation/candidates/h200-sxm-gemm32.yaml"),
    "prereg_gemm_random33_h100_cand.txt": (33, "h100_gemm_random3.json", "validation/candidates/h100-sxm-gemm32.yaml"),
    # Session 23: seeds 34 (H200) and 35 (H100), registered by profile adopt23 (the committed profiles with the
    # membound42 and gemm32 candidates adopted) before the adoption commit and before they ran
    "prereg_gemm_random34_h200.txt": (34, "h200_gemm_random.json", "validation/candidates/h200-sxm-adopt23.yaml"),
    "prereg_gemm_random35_h100.txt": (35, "h100_gemm_random3.json", "validation/candidates/h100-sxm-adopt23.yaml"),
    # Session 23 again: seeds 36 (H200) and 37 (H100), the committed model and beside each candidate gemm36
    "prereg_gemm_random36_h200.txt": (36, "h200_gemm_random.json", None),
    "prereg_gemm_random37_h100.txt": (37, "h100_gemm_random3.json", None),
    "prereg_gemm_random36_h200_cand.txt": (36, "h200_gemm_random.json", "validation/candidates/h200-sxm-gemm36.yaml"),
    "prereg_gemm_random37_h100_cand.txt": (37, "h100_gemm_random3.json", "validation/candidates/h100-sxm-gemm36.yaml"),
    # and seeds 38 (H200) / 39 (H100), registered by the committed model once gemm36 was adopted
    "prereg_gemm_random38_h200.txt": (38, "h200_gemm_random.json", None),
    "prereg_gemm_random39_h100.txt": (39, "h100_gemm_random3.json", None),
    # Session 24: seeds 40 (H200) and 41 (H100), the committed model and beside each candidate gemm40
    "prereg_gemm_random40_h200.txt": (40, "h200_gemm_random.json", None),
    "prereg_gemm_random41_h100.txt": (41, "h100_gemm_random3.json", None),
    "prereg_gemm_random40_h200_cand.txt": (40, "h200_gemm_random.json", "validation/candidates/h200-sxm-gemm40.yaml"),
    "prereg_gemm_random41_h100_cand.txt": (41, "h100_gemm_random3.json", "validation/candidates/h100-sxm-gemm40.yaml"),
    # and seeds 42 (H200) / 43 (H100), the committed model alone
    "prereg_gemm_random42_h200.txt": (42, "h200_gemm_random.json", None),
    "prereg_gemm_random43_h100.txt": (43, "h100_gemm_random3.json", None),
    # Session 25: seeds 44 (H200) / 45 (H100), the committed model alone
    "prereg_gemm_random44_h200.txt": (44, "h200_gemm_random.json", None),
    "prereg_gemm_random45_h100.txt": (45, "h100_gemm_random3.json", None),
    # Session 27: seeds 46 (H200) / 47 (H100), the committed model alone
    "prereg_gemm_random46_h200.txt": (46, "h200_gemm_random.json", None),
    "prereg_gemm_random47_h100.txt": (47, "h100_gemm_random3.json", None),
    # Session 29: seeds 50 (H200) / 51 (H100), the committed model alone (a913dcd)
    "prereg_gemm_random50_h200.txt": (50, "h200_gemm_random.json", None),
    "prereg_gemm_random51_h100.txt": (51, "h100_gemm_random3.json", None),
    # Session 30: seeds 52 (H200) / 53 (H100), the committed model alone (cd7f481)
    "prereg_gemm_random52_h200.txt": (52, "h200_gemm_random.json", None),
    "prereg_gemm_random53_h100.txt": (53, "h100_gemm_random3.json", None),
    # Session 30, second pair: seeds 54 (H200) / 55 (H100), the committed model (87b03f2); knn53 beside it
    "prereg_gemm_random54_h200.txt": (54, "h200_gemm_random.json", None),
    "prereg_gemm_random55_h100.txt": (55, "h100_gemm_random3.json", None),
    "prereg_gemm_random54_h200_knn.txt": (54, "h200_gemm_random.json", None),
    "prereg_gemm_random55_h100_knn.txt": (55, "h100_gemm_random3.json", None),
    # Session 31: seeds 56 (H200) / 57 (H100), the committed model (161615c); knnskip beside it
    "prereg_gemm_random56_h200.txt": (56, "h200_gemm_random.json", None),
    "prereg_gemm_random57_h100.txt": (57, "h100_gemm_random3.json", None),
    "prereg_gemm_random56_h200_knnskip.txt": (56, "h200_gemm_random.json", None),
    "prereg_gemm_random57_h100_knnskip.txt": (57, "h100_gemm_random3.json", None),
    # Session 32: seeds 58 (H200) / 59 (H100), the committed model (0c24860); knnskip and knnnear beside it
    "prereg_gemm_random58_h200.txt": (58, "h200_gemm_random.json", None),
    "prereg_gemm_random59_h100.txt": (59, "h100_gemm_random3.json", None),
    "prereg_gemm_random58_h200_knnskip.txt": (58, "h200_gemm_random.json", None),
    "prereg_gemm_random59_h100_knnskip.txt": (59, "h100_gemm_random3.json", None),
    "prereg_gemm_random58_h200_knnnear.txt": (58, "h200_gemm_random.json", None),
    "prereg_gemm_random59_h100_knnnear.txt": (59, "h100_gemm_random3.json", None),
    # Session 33: seeds 60 (H200) / 61 (H100), the committed model (4c570f5); candidate gemm60 beside it
    "prereg_gemm_random60_h200.txt": (60, "h200_gemm_random.json", None),
    "prereg_gemm_random61_h100.txt": (61, "h100_gemm_random3.json", None),
    "prereg_gemm_random60_h200_gemm60.txt": (60, "h200_gemm_random.json", "validation/candidates/h200-sxm-gemm60.yaml"),
    "prereg_gemm_random61_h100_gemm60.txt": (61, "h100_gemm_random3.json", "validation/candidates/h100-sxm-gemm60.yaml"),
    # Session 34: seeds 62 (H200) / 63 (H100), the committed model (0fce87d); candidate gemm62 beside it
    "prereg_gemm_random62_h200.txt": (62, "h200_gemm_random.json", None),
    "prereg_gemm_random63_h100.txt": (63, "h100_gemm_random3.json", None),
    "prereg_gemm_random62_h200_gemm62.txt": (62, "h200_gemm_random.json", "validation/candidates/h200-sxm-gemm62.yaml"),
    "prereg_gemm_random63_h100_gemm62.txt": (63, "h100_gemm_random3.json", "validation/candidates/h100-sxm-gemm62.yaml"),
    # Session 35: seeds 64 (H200) / 65 (H100), the committed model (490d35e), no candidate
    "prereg_gemm_random64_h200.txt": (64, "h200_gemm_random.json", None),
    "prereg_gemm_random65_h100.txt": (65, "h100_gemm_random3.json", None),
    # Session 36: seeds 66 (H200) / 67 (H100), the committed model (6fd69f0: GEMM model as for seeds 38-65), no candidate
    "prereg_gemm_random66_h200.txt": (66, "h200_gemm_random.json", None),
    "prereg_gemm_random67_h100.txt": (67, "h100_gemm_random3.json", None),
    # Session 36 again: seeds 68 (H200) / 69 (H100), the committed model (424c641: GEMM model as for seeds 38-67)
    "prereg_gemm_random68_h200.txt": (68, "h200_gemm_random.json", None),
    "prereg_gemm_random69_h100.txt": (69, "h100_gemm_random3.json", None),
    # Session 36, third: seeds 70 (H200) / 71 (H100), the committed model (d582d03: GEMM model as for seeds 38-69)
    "prereg_gemm_random70_h200.txt": (70, "h200_gemm_random.json", None),
    "prereg_gemm_random71_h100.txt": (71, "h100_gemm_random3.json", None),
}
GEMM32_PAIRS = {32: ("prereg_gemm_random32_h200.txt", "prereg_gemm_random32_h200_cand.txt"),
                33: ("prereg_gemm_random33_h100.txt", "prereg_gemm_random33_h100_cand.txt")}


@pytest.mark.parametrize("seed", sorted(GEMM32_PAIRS))
def test_gemm32_candidate_registered_beside_the_committed_model(seed):
    """Seeds 32 / 33 are registered twice, before they were measured: the committed model and the
    gemm32 candidate. Each log's first line is the command that wrote it (the candidate's names its
    profile, which exists), the second says what produced it; both cover the same cases once each,
    and the candidate changes some predictions (the unaligned shapes) but not all."""
    base, cand = (LOGS / name for name in GEMM32_PAIRS[seed])
    _, like, profile = NEXT[cand.name]
    first = cand.read_text().splitlines()[0]
    assert first == f"# python -m validation.prereg --gemm-seed {seed} --like validation/measurements/{like} --profile {profile}"
    assert (ROOT / profile).exists() and "CANDIDATE" in cand.read_text().splitlines()[1]
    assert base.read_text().splitlines()[0] == f"# python -m validation.prereg --gemm-seed {seed} --like validation/measurements/{like}"
    rows = [[line for line in p.read_text().splitlines() if line and not line.startswith("#")] for p in (base, cand)]
    assert [r.rsplit(None, 2)[0] for r in rows[0]] == [r.rsplit(None, 2)[0] for r in rows[1]]
    assert len(set(rows[0])) == len(rows[0]) == 156
    changed = sum(a != b for a, b in zip(*rows))
    assert 0 < changed < 156


@pytest.mark.parametrize("seed", sorted(GEMM32_PAIRS))
def test_gemm32_draws_never_measured_or_fitted(seed):
    from validation.gemm_kernels import CLEAN
    assert all(seed not in seeds for gpu in CLEAN.values() for seeds in gpu.values())
    import yaml
    for gpu in ("h200", "h100"):
        doc = yaml.safe_load((ROOT / "validation" / "candidates" / f"{gpu}-sxm-gemm32.yaml").read_text())
        fitted = {s for fit in doc["fits"].values() for v in (fit.get("fitted_random_draws") or {}).values() for s in v}
        assert fitted and seed not in fitted


@pytest.mark.parametrize("log", sorted(NEXT))
def test_next_draws_registered(log):
    """Each registration holds one line per case of its draw, in the harness's order (what
    registered_pairs will match the measured records against). The predictions themselves are
    the commit's (222e72a and its successor for seeds 28/29; ff3be27's successor for seeds 30/31); a later
    model need not reproduce them."""
    from validation.gemm_regimes import _dims
    from validation.prereg import harness
    seed, _, _ = NEXT[log]
    lines = [line for line in (LOGS / log).read_text().splitlines() if line and not line.startswith("#")]
    cases = harness("gemm_cases").random_cases(seed)
    assert len(lines) == len(cases) == 156
    assert [(line.split()[0], *_dims(line)) for line in lines] == [(c[3], c[0], c[1], c[2]) for c in cases]


def test_prereg_profile_option_predicts_with_that_profile():
    """``--profile`` swaps the calibration: the candidate's first H200 row differs from the committed one's."""
    from validation.prereg import gemm_draw_rows
    like = str(ROOT / "validation" / "measurements" / "h200_gemm_random.json")
    cand = NEXT["prereg_gemm_random28_h200_loadcap.txt"][2]
    base, other = gemm_draw_rows(28, like)[0], gemm_draw_rows(28, like, cand)[0]
    assert base[:2] == other[:2] and base[2] != other[2]


def test_h200_operand_load_cap_candidate_as_registered_on_seed_28():
    """The candidate profile registered beside seed 28 (the per-SM operand-load cap fitted for H200
    with ``--only gemm``) against the committed model, both written before the run: all 9.0% -> 8.0%,
    small-mn large-k 12.2% -> 10.3%, large 10.6% -> 8.6%, misaligned 10.3% -> 10.0%; fp8 small 3.8%
    and 3.9%, other 5.5% both. Better in the two regimes it was meant for, equal elsewhere."""
    path = DRAWS[28][1]
    today = mape_by_regime(registered_pairs(LOGS / "prereg_gemm_random28_h200.txt", path))
    cand = mape_by_regime(registered_pairs(LOGS / "prereg_gemm_random28_h200_loadcap.txt", path))
    assert cand["all"][1] <= 0.0801 + 5e-5 < today["all"][1] - 0.009
    for regime in ("small_mn_large_k", "large"):
        assert cand[regime][1] < today[regime][1] - 0.015, regime
    for regime in ("fp8_small", "other", "misaligned"):
        assert abs(cand[regime][1] - today[regime][1]) < 0.005, regime


def test_h200_operand_load_cap_candidate_as_registered_on_seed_30():
    """The same candidate registered again beside seed 30 (not adopted in session 21: it costs the
    never-fitted in-step and expert GEMMs): 8.85% -> 8.26%; small-mn large-k 10.4% -> 8.5% and fp8 small
    4.0% -> 3.4% better, large 10.1% -> 11.4% and other 6.8% -> 7.05% worse. On seed 28 it was better
    in large shapes too: the gain is in the small-mn large-k regime it was meant for."""
    path = DRAWS[30][1]
    today = mape_by_regime(registered_pairs(LOGS / "prereg_gemm_random30_h200.txt", path))
    cand = mape_by_regime(registered_pairs(LOGS / "prereg_gemm_random30_h200_loadcap.txt", path))
    assert cand["all"][1] <= 0.0826 + 5e-5 < today["all"][1] - 0.005
    assert cand["small_mn_large_k"][1] < today["small_mn_large_k"][1] - 0.015
    assert cand["large"][1] > today["large"][1] + 0.01


@pytest.mark.parametrize("seed", sorted(REGISTERED_GEMM32))
def test_gemm32_candidate_as_registered(seed):
    """The gemm32 candidate (align2 fallback loads, misaligned split-K over up to two waves, H200's
    per-split reduce cost) against the committed model on the fresh draws it was registered beside:
    H200 seed 32 11.2% -> 10.4% (misaligned 16.1% -> 11.6%), H100 seed 33 10.0% -> 9.6% (misaligned
    14.8% -> 12.2%); the regimes it does not touch are unchanged, none worse. Target 7%: not met."""
    _, path, log = DRAWS[seed]
    cand = mape_by_regime(registered_pairs(LOGS / log.name.replace(".txt", "_cand.txt"), path))
    today = mape_by_regime(registered_pairs(log, path))
    assert {k: round(v[1], 4) for k, v in cand.items()} == pytest.approx(REGISTERED_GEMM32[seed], abs=1e-4)
    assert cand["misaligned"][1] < today["misaligned"][1] - 0.025
    assert all(cand[k][1] <= today[k][1] + 1e-9 for k in today)


@pytest.mark.parametrize("seed", sorted(REGISTERED_GEMM36))
def test_gemm36_candidate_as_registered(seed):
    """The gemm36 candidate (a split-K tiling's compute time floored by streaming its tiles' operands
    from L2; validation/gemm36_fit.py on every draw through seed 35) against the committed model on the
    fresh draws it was registered beside, newly lent machines: H200 seed 36 11.0% -> 8.25% (small-mn
    large-k 15.5% -> 8.8%), H100 seed 37 9.7% -> 8.6% (small-mn large-k 12.0% -> 9.2%, misaligned 11.9% ->
    11.1%); other regimes within 0.1 point (H200 other 7.00 -> 7.07%). Target 7%: not met."""
    _, path, log = DRAWS[seed]
    cand = mape_by_regime(registered_pairs(LOGS / log.name.replace(".txt", "_cand.txt"), path))
    today = mape_by_regime(registered_pairs(log, path))
    assert {k: round(v[1], 4) for k, v in cand.items()} == pytest.approx(REGISTERED_GEMM36[seed], abs=1e-4)
    assert cand["all"][1] < today["all"][1] - 0.01 and cand["small_mn_large_k"][1] < today["small_mn_large_k"][1] - 0.025
    assert all(cand[k][1] <= today[k][1] + 0.001 for k in today)


@pytest.mark.parametrize("seed", sorted(REGISTERED_GEMM40))
def test_gemm40_candidate_as_registered(seed):
    """The gemm40 candidate (cuBLAS's unaligned fallback kernels store C after their main loop, and their small
    tiles load slower; validation/gemm40_fit.py on every draw through seed 39) against the committed model on the
    fresh draws it was registered beside, newly lent machines: H100 seed 41 8.49 -> 8.33% (misaligned 12.9 ->
    11.3%), but H200 seed 40 6.04 -> 6.20% (misaligned 7.2 -> 8.7%): worse on one GPU in the regime it was built
    for, so not adopted; aligned regimes unchanged (small-mn large-k within 0.05 point)."""
    _, path, log = DRAWS[seed]
    cand = mape_by_regime(registered_pairs(LOGS / log.name.replace(".txt", "_cand.txt"), path))
    today = mape_by_regime(registered_pairs(log, path))
    assert {k: round(v[1], 4) for k, v in cand.items()} == pytest.approx(REGISTERED_GEMM40[seed], abs=1e-4)
    assert (cand["misaligned"][1] < today["misaligned"][1]) == (seed == 41)
    assert all(cand[k][1] == pytest.approx(today[k][1], abs=1e-9) for k in ("fp8_small", "large", "other"))
