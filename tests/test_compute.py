import pytest


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


def _norm_device(**norm_forward):
    from dataclasses import replace
    from hardware_specs import load_accelerator
    from simulator.calibration import DEFAULT
    from simulator.compute import DeviceModel
    return DeviceModel(load_accelerator("h200-sxm"), replace(DEFAULT, kernel_launch_s=0.0, norm_forward=norm_forward))


def test_norm_forward_without_parameters_is_bytes_at_the_op_fraction():
    # a profile without norm_forward keeps the bytes model: 2 passes at memory_op_fraction[op]
    from simulator.compute import elementwise_time, memory_time
    dev = _norm_device()
    assert elementwise_time(dev, "rmsnorm", 8192, 4096) == memory_time(dev, 8192 * 4096 * 2 * 2, op="rmsnorm")


def test_norm_forward_second_read_from_hbm_past_the_row_size():
    # bandwidth-bound (loads in flight without latency): rows past reread_from_bytes + span read the
    # row three times, rows below it twice; in between a linear share of the second read
    from simulator.compute import norm_forward_time
    dev = _norm_device(fraction=0.5, reread_from_bytes=8192.0, reread_span_bytes=8192.0,
                       rmsnorm_row_s=0.0, rmsnorm_load_latency_s=1e-30)
    per_element = {row: norm_forward_time(dev, "rmsnorm", 1 << 16, row, "bf16") / (row << 16) for row in (2048, 6144, 16384)}
    assert per_element[16384] / per_element[2048] == pytest.approx(1.5)       # 3 passes vs 2
    assert per_element[6144] / per_element[2048] == pytest.approx(1.25)       # 12 KiB: half of the second read
    assert per_element[2048] == pytest.approx(2 * 2 / (0.5 * 4.8e12), rel=0.01)


def test_norm_forward_few_rows_are_bound_by_the_loads_in_flight():
    # latency-bound (HBM infinitely fast): fewer rows than resident blocks move their bytes at
    # rows x 128 threads x one 4-element vector per load latency (Little's law); once the GPU is full
    # of blocks the rate stops growing; fp32 rows carry twice the bytes per load at the same latency
    from simulator.compute import NORM_BLOCKS_PER_SM, norm_forward_time
    dev = _norm_device(fraction=1e9, reread_from_bytes=1e9, layernorm_row_s=0.0, layernorm_load_latency_s=1e-6)
    slots = dev.accelerator.sm_count * NORM_BLOCKS_PER_SM
    t = norm_forward_time(dev, "layernorm", 10, 4096, "bf16")
    assert t == pytest.approx(10 * 4096 * 2 * 2 * 1e-6 / (10 * 128 * 4 * 2), rel=1e-6)   # 16 loads of each row
    assert norm_forward_time(dev, "layernorm", 100, 4096, "bf16") == pytest.approx(t, rel=1e-6)
    full = norm_forward_time(dev, "layernorm", slots, 4096, "bf16")
    assert norm_forward_time(dev, "layernorm", 4 * slots, 4096, "bf16") == pytest.approx(4 * full, rel=1e-6)
    assert norm_forward_time(dev, "layernorm", 10, 4096, "fp32") == pytest.approx(t, rel=1e-6)


def test_norm_forward_row_cost_per_wave_of_blocks():
    from simulator.compute import NORM_BLOCKS_PER_SM, norm_forward_time
    dev = _norm_device(fraction=1e9, layernorm_row_s=2e-6, layernorm_load_latency_s=1e-30)
    slots = dev.accelerator.sm_count * NORM_BLOCKS_PER_SM
    assert norm_forward_time(dev, "layernorm", 10, 1024, "bf16") == pytest.approx(2e-6, rel=1e-6)
    assert norm_forward_time(dev, "layernorm", 3 * slots, 1024, "bf16") == pytest.approx(6e-6, rel=1e-6)


def test_profile_norm_forward_keys_are_checked():
    from simulator.calibration import calibration_from_dict
    from hardware_specs.errors import SpecError
    with pytest.raises(SpecError, match="norm_forward"):
        calibration_from_dict({"parameters": {"norm_forward": {"rows_per_block": 1.0}}}, "test.yaml")


def test_blackwell_ultra_doubles_the_exponential_rate_and_speeds_exp_bound_attention_only():
    """Blackwell Ultra (B300, GB300) issues 32 MUFU.EX2 per SM per clock against 16 on B200/GB200 and
    Hopper (NVIDIA, "Making Softmax More Efficient with NVIDIA Blackwell Ultra"; FlashAttention-4 §1): the
    catalog states it and DeviceModel.exp_per_s uses it. Attention forward, which is exponential-bound on
    Blackwell, gets faster; a GEMM does not move."""
    from hardware_specs.catalog import load_hardware
    from simulator.calibration import calibration_for
    from simulator.compute import SFU_PER_SM, DeviceModel, attention_time, gemm_time
    gb300 = load_hardware("gb300-nvl72", 8).accelerator
    gb200 = load_hardware("gb200-nvl72", 8).accelerator
    assert gb300.sfu_exp_per_clk_per_sm == 32 and load_hardware("dgx-b300", 8).accelerator.sfu_exp_per_clk_per_sm == 32
    assert gb200.sfu_exp_per_clk_per_sm is None and SFU_PER_SM == 16
    cal, _ = calibration_for(gb300, None)
    ultra, plain = DeviceModel(gb300, cal), DeviceModel(gb300.model_copy(update={"sfu_exp_per_clk_per_sm": None}), cal)
    assert ultra.exp_per_s == pytest.approx(2 * plain.exp_per_s)
    assert ultra.exp_per_s == pytest.approx(160 * 32 * 1.907e9 * cal.attention_softmax_fraction)
    args = (4, 64, 4096, 4096, 64, True, 8, "cudnn")
    fwd_u, fwd_p = attention_time(ultra, *args, "fwd"), attention_time(plain, *args, "fwd")
    assert fwd_u < 0.85 * fwd_p          # head_dim 64: the forward is bound by its exponentials
    assert attention_time(ultra, *args, "bwd") < attention_time(plain, *args, "bwd")
    assert gemm_time(ultra, 8192, 8192, 8192, "bf16") == gemm_time(plain, 8192, 8192, 8192, "bf16")


def test_flash_attention_bytes_count_each_tensor_once_per_head():
    # Q and O per query head, K and V per key/value head (re-reads across query blocks come from
    # L2): 2 x bf16 bytes each; heads = 1 costs what any other split of batch x heads does, and an
    # MQA / GQA launch reads its shared K and V once, not once per query block (session 28: the
    # formula divided the query blocks by kv_heads, so heads = 1 and kv_heads = 1 read K and V
    # ceil(s / 64) / 2 times, and FlashAttention-2 came out IO-bound there, up to 46% slow)
    from simulator.compute import flash_attention_bytes
    b, s, d = 4, 4096, 128
    mha = flash_attention_bytes(b, 32, 32, s, s, d)
    assert mha == 4 * b * 32 * s * d * 2
    assert flash_attention_bytes(b * 32, 1, 1, s, s, d) == mha == flash_attention_bytes(1, b * 32, b * 32, s, s, d)
    assert flash_attention_bytes(b, 32, 1, s, s, d) == (2 * 32 + 2) * b * s * d * 2


def test_fa2_forward_depends_on_batch_times_heads_only():
    # the grid is (query blocks, batch, heads): the same blocks whichever way batch x heads splits
    from hardware_specs import load_accelerator
    from simulator.calibration import load_calibration
    from simulator.compute import DeviceModel, attention_time
    dev = DeviceModel(load_accelerator("h200-sxm"), load_calibration("h200-sxm"))
    one_head = attention_time(dev, 825, 1, 1408, 1408, 64, True, 1, "flash", "fwd_bwd")
    assert one_head == pytest.approx(attention_time(dev, 25, 33, 1408, 1408, 64, True, 33, "flash", "fwd_bwd"), rel=1e-9)
