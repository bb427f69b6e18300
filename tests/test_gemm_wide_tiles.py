"""Issue #12 session 43: cuBLAS's wide nvjet tiles in the GEMM tile search (simulator.compute.gemm_tiles,
profile switch ``gemm_tile_granularity``; candidate gemm72, validation/gemm72_fit.py)."""
import math
from dataclasses import replace

import pytest

from hardware_specs.catalog import load_accelerator
from hardware_specs.errors import SpecError
from simulator.calibration import calibration_from_dict, load_calibration
from simulator.compute import GEMM_TILES, DeviceModel, gemm_plan, gemm_tiles, nvjet_wide_tiles


@pytest.fixture(scope="module")
def cal():
    return load_calibration("h100-sxm")


def test_switch_off_keeps_the_coarse_tiles(cal):
    assert cal.gemm_tile_granularity == 0
    assert gemm_tiles(cal, aligned=True) == GEMM_TILES


def test_wide_tiles_only_for_aligned_unbatched_gemms(cal):
    wide = replace(cal, gemm_tile_granularity=8.0)
    tiles = gemm_tiles(wide, aligned=True)
    assert tiles[:len(GEMM_TILES)] == GEMM_TILES
    # traced nvjet tiles (validation/gemm_kernels.py), in either orientation
    for traced in ((192, 192), (176, 192), (152, 256), (272, 128), (128, 288), (304, 128)):
        assert traced in tiles
    assert (64, 8) not in tiles and (320, 192) not in tiles      # narrow tiles and widths never traced
    assert gemm_tiles(wide, aligned=False) == GEMM_TILES          # CUTLASS fallback kernels
    assert gemm_tiles(wide, aligned=True, batch=4) == GEMM_TILES  # batched GEMMs keep their own fit's tiles
    assert len(set(tiles)) == len(tiles)
    assert all(w % 8 == 0 and h % 8 == 0 for w, h in nvjet_wide_tiles(8))


def test_a_wide_tile_covers_the_shape_in_one_wave(cal):
    """1504 x 2896 x 9600: the coarse tiles need 276 128x128 tiles (three waves of 132 SMs); cuBLAS ran 128
    tiles of 192 x 192 in one wave (H100 seed 65). The search finds a one-wave wide tiling and it is faster."""
    acc = load_accelerator("h100-sxm")
    coarse = gemm_plan(DeviceModel(acc, cal), 1504, 2896, 9600)
    wide = gemm_plan(DeviceModel(acc, replace(cal, gemm_tile_granularity=8.0)), 1504, 2896, 9600)
    tiles = math.ceil(1504 / wide[1]) * math.ceil(2896 / wide[2])
    assert tiles <= acc.sm_count and wide[3] == 1
    assert math.ceil(1504 / coarse[1]) * math.ceil(2896 / coarse[2]) > acc.sm_count
    assert wide[0] < 0.8 * coarse[0]


@pytest.mark.parametrize("bad", [12, 0.5, -8, "8"])
def test_granularity_must_be_a_traced_step(bad):
    with pytest.raises(SpecError, match="gemm_tile_granularity"):
        calibration_from_dict({"parameters": {"gemm_tile_granularity": bad}}, "p.yaml")
