

def test_block_softmax_is_latency_bound_by_rows_in_flight():
    # PyTorch runs rows > 2048 one block per row: the rate is SMs x resident rows x row bytes
    # over the per-row latency (Little's law), the same on H100 and H200 (same SMs and clocks)
    from dataclasses import replace
    from hardware_specs import load_accelerator
    from simulator.calibration import DEFAULT
    from simulator.compute import DeviceModel, block_softmax_rate
    cal = replace(DEFAULT, softmax_row_latency_s=7e-6)
    h100, h200 = (DeviceModel(load_accelerator(n), cal) for n in ("h100-sxm", "h200-sxm"))
    assert block_softmax_rate(h100, 2048, "bf16") == float("inf")       # warp per row: HBM-bound
    assert block_softmax_rate(h100, 8192, "bf16") == block_softmax_rate(h200, 8192, "bf16")
    # 4096 and 8192 keep the same bytes in flight (block = row / 8 threads); past 8192 the block
    # is capped at 1024 threads, so longer rows put more bytes in flight
    assert block_softmax_rate(h100, 4096, "bf16") == block_softmax_rate(h100, 8192, "bf16")
    assert block_softmax_rate(h100, 16384, "bf16") == 2 * block_softmax_rate(h100, 8192, "bf16")
