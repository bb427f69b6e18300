"""The grid of (model, GPUs, plan) the launch-config tests run: every framework that exports,
catalog models (dense GPT, Llama GQA, Mixtral MoE, DeepSeek-V3 MLA + MoE + MTP), uneven splits,
virtual stages, ep, cp and every ZeRO stage each framework offers. Plans are unresolved."""
from simulator.plan import ParallelPlan

P = ParallelPlan
GRID = [
    # Megatron-Core (TE)
    ("gpt3-175b", 1024, P(tp=8, pp=8, mbs=1, gbs=1024, recompute="selective")),
    ("llama3-8b", 64, P(tp=2, pp=4, vp=2, mbs=1, gbs=256, recompute="full")),
    ("llama3-70b", 512, P(tp=8, pp=4, vp=5, mbs=1, gbs=512, recompute="full", recompute_layers=10)),
    ("llama3-405b", 2048, P(tp=8, pp=16, mbs=1, gbs=2048, seq=8192)),                    # automatic split
    ("llama3-70b", 256, P(tp=8, pp=4, mbs=1, gbs=256, layers_per_stage=(18, 22, 22, 18))),  # first/last
    ("llama3-70b", 256, P(tp=8, pp=4, vp=2, mbs=1, gbs=256, layers_per_stage=(18, 22, 22, 18))),
    ("llama3-70b", 256, P(tp=8, pp=4, vp=2, mbs=1, gbs=256, layers_per_stage=(19, 20, 21, 20))),  # layout
    ("llama3-8b", 64, P(tp=2, cp=2, zero_stage=0, mbs=1, gbs=64, tp_comm_overlap=True)),
    ("llama3-8b", 64, P(tp=1, zero_stage=2, mbs=1, gbs=128)),
    ("llama3-8b", 64, P(tp=2, zero_stage=3, mbs=1, gbs=128, recompute="selective")),
    ("llama3-8b", 16, P(tp=2, pp=2, mbs=2, gbs=64, precision="fp8", offload_optimizer=True)),
    ("mixtral-8x7b", 64, P(tp=2, pp=2, ep=4, etp=1, mbs=1, gbs=64)),
    ("mixtral-8x7b", 128, P(tp=4, pp=4, vp=2, ep=8, mbs=1, gbs=256, ep_comm_overlap=True)),
    ("deepseek-v3", 1024, P(tp=2, pp=8, ep=32, etp=1, mbs=1, gbs=1024, recompute="full",
                            layers_per_stage=(7, 8, 8, 8, 8, 8, 8, 6))),
    # Megatron-Core, local layer spec
    ("gpt3-175b", 1024, P(tp=8, pp=16, mbs=1, gbs=1536, framework="megatron-core-local")),
    ("gpt3-175b", 1024, P(tp=8, pp=8, vp=3, mbs=1, gbs=1024, zero_stage=0, framework="megatron-core-local")),
    # torchtitan
    ("llama3-8b", 64, P(tp=1, zero_stage=3, mbs=2, gbs=256, framework="torchtitan")),
    ("llama3-8b", 8, P(tp=1, zero_stage=0, mbs=2, gbs=64, framework="torchtitan")),
    # (torchtitan's rules: pipelines without data parallelism, meshcast models no FSDP with pp)
    ("llama3-70b", 32, P(tp=8, pp=4, zero_stage=0, mbs=1, gbs=32, framework="torchtitan", recompute="full")),
    ("llama3-70b", 32, P(tp=8, pp=4, vp=2, zero_stage=0, mbs=1, gbs=64, framework="torchtitan")),
    ("llama3-70b", 32, P(tp=8, pp=4, zero_stage=0, mbs=1, gbs=32, schedule="gpipe", framework="torchtitan",
                         recompute="full", recompute_layers=10)),
    ("llama3-8b", 64, P(tp=2, cp=4, zero_stage=3, mbs=1, gbs=64, seq=32768, framework="torchtitan",
                        recompute="selective")),
    ("mixtral-8x7b", 64, P(tp=2, ep=8, etp=1, zero_stage=3, mbs=1, gbs=64, framework="torchtitan")),
    # DeepSpeed
    ("llama3-8b", 64, P(zero_stage=3, mbs=1, gbs=128, framework="deepspeed", recompute="full")),
    ("llama3-8b", 64, P(zero_stage=2, mbs=2, gbs=256, framework="deepspeed")),
    ("llama3-8b", 16, P(zero_stage=3, mbs=1, gbs=32, framework="deepspeed", offload_optimizer=True,
                        offload_params=True)),
    ("llama3-70b", 64, P(pp=8, zero_stage=1, mbs=1, gbs=128, framework="deepspeed", recompute="full")),
    ("gpt3-175b", 64, P(pp=8, zero_stage=0, mbs=1, gbs=64, framework="deepspeed", precision="fp16")),
]
