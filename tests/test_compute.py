

def test_softmax_kernel_follows_pytorch_dispatch():
    # aten/src/ATen/native/cuda/SoftMax.cu: warp per row up to 2048 elements and 8 KiB; then a
    # 1024-thread block per row, registers while ceil(row / 1024) < 10, shared memory while the
    # row fits 48 KiB (less the block's reduction buffer), else the global-memory kernel
    from simulator.compute import torch_softmax_kernel
    assert torch_softmax_kernel(2048, "bf16") == "warp" and torch_softmax_kernel(2048, "fp32") == "warp"
    assert torch_softmax_kernel(2049, "bf16") == "reg"
    assert torch_softmax_kernel(9216, "fp32") == "reg_wide"        # ceil(9216/1024) = 9 registers
    assert torch_softmax_kernel(6144, "fp32") == "reg"             # 6 registers: two blocks per SM
    assert torch_softmax_kernel(9224, "bf16") == "smem"            # 10 registers: shared memory
    assert torch_softmax_kernel(9220, "bf16") == "plain"           # not whole 16-byte vectors
    assert torch_softmax_kernel(12288, "bf16") == "smem"           # 24 KiB
    assert torch_softmax_kernel(12288, "fp32") == "plain"          # 48 KiB: too large
    assert torch_softmax_kernel(24576, "bf16") == "plain"


def test_block_softmax_is_bound_by_the_sms_not_hbm():
    # the block kernels run at SMs x clock x elements per cycle: the same on H100 and H200 (same
    # SMs and clocks, 3.35 vs 4.8 TB/s), per element whatever the dtype
    from dataclasses import replace
    from hardware_specs import load_accelerator
    from simulator.calibration import DEFAULT
    from simulator.compute import DeviceModel, elementwise_time
    cal = replace(DEFAULT, softmax_elements_per_cycle={"reg": 1.0, "smem": 2.0})
    h100, h200 = (DeviceModel(load_accelerator(n), cal) for n in ("h100-sxm", "h200-sxm"))
    t = {(d.name, row, dt): elementwise_time(d, "softmax", (1 << 25) // row, row, dt)
         for d in (h100, h200) for row in (4096, 16384) for dt in ("bf16", "fp32")}
    assert t[("h100-sxm", 4096, "bf16")] == t[("h200-sxm", 4096, "bf16")]
    assert t[("h100-sxm", 4096, "fp32")] == t[("h100-sxm", 4096, "bf16")]
    # the shared-memory kernel at twice the register kernel's rate per element
    ratio = t[("h100-sxm", 4096, "bf16")] / t[("h100-sxm", 16384, "bf16")]
    assert 1.8 < ratio < 2.0
