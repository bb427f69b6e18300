"""The schema of a framework profile (one YAML file per framework beside this module).

A profile is data: which parallel dimensions the framework offers, what each ZeRO stage means
in it (which model-state recipe of simulator.memory, and whether gradients are reduced once
per step or after every micro-batch), which kernels it launches, which precisions and overlap
features it has, and which launch-config format it exports. The rules data cannot say live in
simulator.frameworks.rules.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

# every attention kernel meshcast costs (simulator/compute.py attention_time); simulator.plan re-exports it
ATTENTION_BACKENDS = ("flash", "cudnn", "fa3", "efficient", "triton_fa", "unfused", "math", "unfused_torch")

RECIPE_NAMES = ("megatron", "zero", "torch_amp", "torch_fsdp")
FEATURES = ("tp_comm_overlap", "ep_comm_overlap", "offload_optimizer", "offload_params")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZeroStage(_Strict):
    """What one ZeRO stage is in this framework."""

    recipe: Literal["megatron", "zero", "torch_amp", "torch_fsdp"]
    grad_reduce: Literal["step", "microbatch"]   # microbatch: gradients sharded, reduced per micro-batch
    means: str


class Kernels(_Strict):
    """The kernels the framework launches (the first attention backend is its default)."""

    attention: tuple[Literal[ATTENTION_BACKENDS], ...] = Field(min_length=1)
    elementwise: Literal["fused", "unfused"]
    optimizer: str
    optimizer_temp_bytes: float = Field(0.0, ge=0)   # per shard parameter, live only during the step
    # HBM bytes per (shard) parameter of one optimizer step where the framework's optimizer is not
    # its recipe's default (simulator.engine.OPTIMIZER_BYTES); None: the recipe's
    optimizer_bytes: float | None = Field(None, gt=0)
    # how a micro-batch's weight gradients reach the fp32 gradient buffer: "fused" (written or
    # accumulated by the weight-gradient GEMM / autograd, no separate kernel) or "unfused_fp32"
    # (Megatron DDP without gradient-accumulation fusion: param.main_grad.add_(param.grad), a
    # separate mixed-dtype add per parameter tensor and micro-batch) or "autograd_fp32" (fp32
    # parameters under autocast: autograd's AccumulateGrad adds each micro-batch's fp32 gradient
    # into ``param.grad`` in place from the second micro-batch on, torch/csrc/autograd/functions/
    # accumulate_grad.h; DDP's no_sync does not change that)
    grad_accumulation: Literal["fused", "unfused_fp32", "autograd_fp32"] = "fused"
    # rotary embeddings: "none" (no separate kernels modelled: fused into attention or a fused RoPE
    # kernel, or not yet modelled for this framework) or "megatron_unfused" (Megatron-Core's
    # apply_rotary_pos_emb without apply_rope_fusion: separate PyTorch kernels on Q and K) or
    # "torch_fp32" (eager RoPE of bf16 Q and K against fp32 cos/sin tables: the products, their
    # difference and sum and the interleaving run in fp32, cast back with type_as)
    rope: Literal["none", "megatron_unfused", "torch_fp32"] = "none"
    # SwiGLU: "fused" (one kernel, or the kernel-suite silu_mul rate) or "megatron_eager" (Megatron-Core's
    # mlp.py glu without a fused bias_swiglu: silu on a chunk half, then the product, as separate
    # PyTorch kernels; simulator.compute.eager_swiglu_time)
    swiglu: Literal["fused", "megatron_eager"] = "fused"
    # which casts autocast costs (recipe torch_amp only): "block" (one cast of each block's weights
    # and of its normed input forward, the weight and two activation gradients back) or
    # "torch_eager" (what torch's autocast and autograd run, simulator.lowering._autocast_ops: a
    # cast of the normed input per consuming linear, fp32 gradient sums, each kernel class at its
    # own rate)
    autocast: Literal["block", "torch_eager"] = "block"
    # how the framework's model code projects and gates, which sets what autograd saves for backward
    # (simulator.memory): "fused" (one QKV GEMM, one w1|w3 GEMM, a SwiGLU kernel that saves only its
    # input) or "separate" (torchtitan's llama3 model: wq, wk, wv and w1, w3 separate nn.Linear
    # modules, SwiGLU as the eager F.silu(w1(x)) * w3(x))
    projections: Literal["fused", "separate"] = "fused"
    # what a column-parallel linear saves of its input under sequence parallelism: "shard" (Megatron-
    # Core: its sequence shard, all-gathered again for the weight gradient in backward; Korthikanti et
    # al. 2022 section 4.2.2) or "gathered" (DTensor's PrepareModuleInput Shard(1) -> Replicate, as
    # torchtitan's TP plan uses it: the linear's input is the all-gathered full-sequence tensor, which
    # autograd saves as is)
    sequence_parallel_saves: Literal["shard", "gathered"] = "shard"
    # the loss over vocabulary-parallel logits under tp: "vocab_parallel" (Megatron-Core's fused
    # vocab-parallel cross-entropy, or the recipe's own loss) or "dtensor_loss_parallel" (torch's
    # loss_parallel, which torchtitan turns on with tp: log-softmax and NLL decomposed into eager ops,
    # torch/distributed/tensor/parallel/loss.py; simulator.memory.LOSS_PARALLEL_BYTES_PER_LOGIT)
    tp_loss: Literal["vocab_parallel", "dtensor_loss_parallel"] = "vocab_parallel"
    # MoE token routing (simulator/moe_dispatch.py): the token dispatcher ("none": no routing work
    # beyond the router GEMM and the all-to-alls, "alltoall": Megatron-Core's MoEAlltoAllTokenDispatcher,
    # "hybridep": its MoEFlexTokenDispatcher with the HybridEP backend) and whether Transformer
    # Engine's fused permute and router kernels run (--moe-permute-fusion, --moe-router-fusion)
    moe_dispatcher: Literal["none", "alltoall", "hybridep"] = "none"
    moe_permute_fusion: bool = False
    moe_router_fusion: bool = False
    # how the local experts' GEMMs run (simulator.lowering.expert_gemm_time): "grouped" (one grouped or
    # batched kernel over every expert: torch._grouped_mm, the grouped_gemm package's CUTLASS kernel) or
    # "per_expert" (Transformer Engine's GroupedLinear through general_grouped_gemm ->
    # nvte_multi_tensor_gemm -> multi_stream_cublas_gemm: one cuBLAS GEMM per expert, TE <= 2.16 on
    # Blackwell, and on Hopper unless NVTE_USE_CUTLASS_GROUPED_GEMM is set)
    # "sequential": Megatron-Core's SequentialMLP (the local spec without the grouped_gemm package:
    # megatron/core/transformer/moe/experts.py), a Python loop over the local experts, each an MLP
    # module of its own: its GEMMs, its activation and the probability scaling (per_token_scale) as
    # separate kernels issued one by one (simulator.lowering._sequential_experts)
    expert_gemm: Literal["grouped", "per_expert", "sequential"] = "grouped"
    # where the router's probabilities weight the expert outputs: "unpermute" (moe_utils.unpermute
    # with probs, the combine's scatter-add) or "experts" (Megatron-Core 0.19's alltoall dispatcher
    # calls unpermute without probs and hands them to the experts, MLP.forward's per_token_scale)
    moe_probs: Literal["unpermute", "experts"] = "unpermute"
    # the same choices for a build without its fused extensions (apex, Transformer Engine),
    # which a plan marks by running the attention backend ``unfused_torch``; None: as above
    without_extensions: "KernelChoices | None" = None

    def choices(self, attention: str | None) -> "KernelChoices":
        """Optimizer bytes, gradient accumulation, RoPE and SwiGLU kernels for a plan running ``attention``."""
        if attention == "unfused_torch" and self.without_extensions is not None:
            return self.without_extensions
        return KernelChoices(optimizer_bytes=self.optimizer_bytes, grad_accumulation=self.grad_accumulation,
                             rope=self.rope, swiglu=self.swiglu)


class KernelChoices(_Strict):
    """Kernel choices that differ between builds of one framework."""

    optimizer_bytes: float | None = Field(None, gt=0)
    grad_accumulation: Literal["fused", "unfused_fp32", "autograd_fp32"] = "fused"
    rope: Literal["none", "megatron_unfused", "torch_fp32"] = "none"
    swiglu: Literal["fused", "megatron_eager"] = "fused"


Kernels.model_rebuild()


class HostCosts(_Strict):
    """What the framework's Python costs on the host that issues its kernels, beyond plain PyTorch
    eager (``host_op_s`` per modelled op, from the calibration profile). Measured on host-bound
    steps of tiny models (validation/harness/plan_step.py --grid host) beside torch-native steps
    on the same machine, so that the ratios transfer to another host CPU (validation/host_fit.py)."""

    op_scale: float = Field(1.0, gt=0)        # host seconds per modelled op, relative to plain eager
    tp_op_scale: float = Field(1.0, gt=0)     # further factor on a layer's ops when tp > 1
    cp_op_scale: float = Field(1.0, gt=0)     # further factor on a layer's ops when cp > 1 (context parallel's dispatch)
    microbatch_ops: float = Field(0.0, ge=0)  # op-equivalents per micro-batch and model chunk (schedule, loss)
    pp_microbatch_ops: float = Field(0.0, ge=0)  # further op-equivalents per micro-batch and chunk under pp > 1
    recompute_call_ops: float = Field(0.0, ge=0)  # op-equivalents per checkpointed region per micro-batch
    # host cost of each modelled op of a Python loop over local experts (Megatron-Core's SequentialMLP,
    # Kernels.expert_gemm "sequential"), relative to a layer's other ops: one iteration issues its
    # kernels through bare module calls, without the block's own Python around them
    expert_loop_op_scale: float = Field(1.0, gt=0)
    p2p_sync: bool = False                    # pipeline exchanges synchronize the device (no overlap_p2p)
    measured_on: str = "not measured: plain PyTorch eager assumed"


class Parallelism(_Strict):
    """Which parallel dimensions exist and how they combine."""

    tp: bool
    sequence_parallel: Literal["optional", "always", "never"]
    pp: bool
    schedules: tuple[Literal["gpipe", "1f1b", "interleaved"], ...]
    cp: bool
    ep: bool
    max_zero_with_pp: int = 3
    arbitrary_split: bool = True      # any layers per stage (else only even splits and its own default)
    sharded_data_parallel_with_pp: bool = False


class FrameworkProfile(_Strict):
    """One framework: its plan space, memory semantics, kernels and export format."""

    name: str
    title: str
    export: Literal["megatron", "torchtitan", "deepspeed", "none"]
    host_class: Literal["eager", "compiled"]
    host: HostCosts = HostCosts()
    kernels: Kernels
    zero: dict[int, ZeroStage]
    default_zero: int                # the stage a plan gets when it names none
    parallelism: Parallelism
    precision: tuple[Literal["bf16", "fp16", "fp8", "nvfp4"], ...]
    features: tuple[Literal["tp_comm_overlap", "ep_comm_overlap", "offload_optimizer", "offload_params"], ...]
    # how ZeRO-3 gathers parameters: "prefetched" (coalesced per module or block, prefetched under the
    # layer's compute: simulator.engine._zero3_exposed) or "per_param_sync" (DeepSpeed v0.3.13-v0.5.x,
    # 2021: each parameter tensor in its own all_gather after torch.cuda.synchronize(), prefetching one
    # bucket only when nothing is in flight, gradients all-reduced in reduce_bucket_size buckets:
    # simulator.zero3_2021)
    zero3_gather: Literal["prefetched", "per_param_sync"] = "prefetched"
    # device bytes one rank's process holds outside PyTorch's caching allocator (CUDA context, library
    # handles, communicator buffers), measured for this framework; None: the planning allowance
    # simulator.memory.WORKSPACE_BYTES (simulator.memory.process_bytes)
    process_memory_bytes: Optional[float] = None
    sources: tuple[str, ...] = ()

    @property
    def zero_stages(self) -> tuple[int, ...]:
        """The ZeRO stages this framework offers, in increasing order."""
        return tuple(sorted(self.zero))

    @property
    def default_attention(self) -> str:
        """The attention backend the framework runs unless told otherwise."""
        return self.kernels.attention[0]

    def recipe(self, zero_stage: int) -> str:
        """The model-state recipe (simulator.memory.STATE_BYTES key) of a ZeRO stage (None where
        the framework has no such stage; framework_violation says so)."""
        stage = self.zero.get(zero_stage)
        return stage.recipe if stage is not None else None

    def grads_per_microbatch(self, zero_stage: int) -> bool:
        """True where gradients are sharded and so reduced after every micro-batch."""
        return self.zero[zero_stage].grad_reduce == "microbatch"
