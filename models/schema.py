"""Pydantic schema of a decoder-only language model: dense, GQA/MQA, MoE, DeepSeek MLA, and
hybrid Mamba-2 / attention stacks (Nemotron-H, Nemotron 3).

Sizes are counts (no units). Derived defaults: ``num_kv_heads = num_heads`` (MHA),
``head_dim = hidden / num_heads``. A layer is MoE when ``moe`` is set, its index is at least
``moe.first_dense_layers`` and ``(index - first_dense_layers) % moe.layer_frequency == 0``.

A hybrid model (``hybrid_pattern`` set) is a stack of single blocks, one per character of
Megatron-Core's hybrid override pattern (``--hybrid-override-pattern``,
megatron/core/ssm/mamba_hybrid_layer_allocation.py): ``M`` a Mamba-2 mixer, ``*`` self-attention,
``-`` a dense MLP, ``E`` a MoE FFN; each block is pre-norm with its own residual add. There
``num_layers`` is the pattern's length (Nemotron 3 Nano: 52 = 23 M + 23 E + 6 *).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoEConfig(_Strict):
    """Mixture-of-experts FFN (Switch/GShard style routing, Mixtral/DeepSeek/Qwen-MoE layouts)."""

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_ffn_hidden: PositiveInt = Field(description="intermediate size of one routed expert")
    shared_experts: int = Field(0, ge=0)
    shared_expert_ffn_hidden: Optional[PositiveInt] = Field(
        None, description="intermediate size of ONE shared expert (default expert_ffn_hidden)")
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN (ffn_hidden)")
    layer_frequency: PositiveInt = Field(1, description="every k-th layer after the dense ones is MoE")
    capacity_factor: Optional[PositiveFloat] = Field(None, description="token capacity per expert; None = dropless")
    latent_size: Optional[PositiveInt] = Field(
        None, description="LatentMoE (Nemotron 3 Super/Ultra, HF moe_latent_size): tokens are projected "
        "hidden -> latent before routing, the routed experts run on latent (their input and output width), "
        "and the combined result is projected back latent -> hidden; shared experts stay at hidden")

    @model_validator(mode="after")
    def _topk(self):
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        return self


class MLAConfig(_Strict):
    """DeepSeek-V2/V3 multi-head latent attention (low-rank compressed Q and KV)."""

    q_lora_rank: Optional[PositiveInt] = Field(None, description="None: Q is a plain projection")
    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    qk_nope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class MambaConfig(_Strict):
    """A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", the SSD layer) as Megatron-Core's
    MambaMixer and the HF NemotronH config give it: d_inner = num_heads x head_dim; in_proj makes
    z and x (d_inner each), B and C (n_groups x state_size each) and dt (num_heads)."""

    num_heads: PositiveInt = Field(description="SSM heads (HF mamba_num_heads)")
    head_dim: PositiveInt = Field(description="channels per head, P (HF mamba_head_dim)")
    state_size: PositiveInt = Field(description="SSM state dimension, N (HF ssm_state_size)")
    n_groups: PositiveInt = Field(1, description="B/C groups shared by heads (HF n_groups)")
    conv_kernel: PositiveInt = Field(4, description="depthwise causal conv1d width (HF conv_kernel)")
    chunk_size: PositiveInt = Field(128, description="SSD chunk length Q (HF chunk_size)")

    @model_validator(mode="after")
    def _groups(self):
        if self.num_heads % self.n_groups:
            raise ValueError(f"n_groups {self.n_groups} must divide num_heads {self.num_heads}")
        return self

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise conv: x, B and C."""
        return self.d_inner + 2 * self.n_groups * self.state_size

    @property
    def in_proj_dim(self) -> int:
        """Output width of in_proj: z, x, B, C, dt."""
        return 2 * self.d_inner + 2 * self.n_groups * self.state_size + self.num_heads


HYBRID_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
"""Megatron-Core's hybrid-pattern symbols and the block each stands for."""


class ModelSpec(_Strict):
    """A decoder-only transformer language model."""

    name: str
    family: str = Field("gpt", description="gpt, llama, mixtral, qwen2-moe, deepseek, nemotron, ...")
    num_layers: PositiveInt
    hidden: PositiveInt
    ffn_hidden: PositiveInt = Field(description="intermediate size of the dense MLP")
    num_heads: PositiveInt
    num_kv_heads: Optional[PositiveInt] = None
    head_dim: Optional[PositiveInt] = None
    vocab: PositiveInt
    seq_len: PositiveInt = Field(description="default training sequence length")
    activation: Literal["gelu", "swiglu", "relu", "squared_relu", "geglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    tied_embeddings: bool = False
    linear_bias: bool = Field(False, description="biases on the attention and MLP linears")
    qkv_bias: Optional[bool] = Field(None, description="bias on QKV only (Qwen2); default linear_bias")
    position: Literal["rope", "learned", "none", "alibi"] = "rope"
    rope_base: Optional[PositiveFloat] = Field(
        None, description="RoPE base frequency theta (HF rope_theta); does not change the cost, but a launch "
        "config must state it to train the same model")
    moe: Optional[MoEConfig] = None
    mla: Optional[MLAConfig] = None
    mamba: Optional[MambaConfig] = None
    hybrid_pattern: Optional[str] = Field(
        None, description="hybrid stack, one character per layer: M Mamba-2, * attention, - MLP, E MoE "
        "(Megatron-Core --hybrid-override-pattern, HF hybrid_override_pattern)")
    mtp_pattern: Optional[str] = Field(
        None, description="hybrid models: the blocks of one multi-token-prediction module (Nemotron 3 "
        "Super/Ultra: '*E', HF mtp_hybrid_override_pattern); default one attention + FFN layer")
    mtp_layers: int = Field(
        0, ge=0, description="DeepSeek-V3 multi-token-prediction modules trained beside the main model; "
        "each is one more transformer layer plus a 2h->h projection and three norms, sharing the "
        "embedding and output head (DeepSeek-V3 report, Sec. 2.2)")
    mtp_depths: Optional[int] = Field(
        None, ge=1, description="MTP prediction depths run per step when more than the modules: Megatron-Core's "
        "--mtp-num-layers with --mtp-use-repeated-layer applies its one MTP module this many times (weights "
        "once, compute per depth; Megatron-Bridge's Nemotron 3 Super recipe: 2); default mtp_layers")
    mtp_bf16: bool = Field(
        False, description="the MTP modules run in bf16 whatever the plan's precision (Megatron-Bridge "
        "keep_mtp_spec_in_bf16, set by its Nemotron-H bridge and Nemotron 3 Super recipe)")
    published_params: Optional[PositiveFloat] = Field(None, description="published parameter count")
    published_params_precision: Optional[PositiveFloat] = Field(
        None, description="rounding step of published_params as the source prints it (1e8 for "
        "'1.7B'); a count within half a step of the figure is consistent with it")
    published_params_includes_mtp: bool = Field(
        True, description="published_params counts the MTP modules (DeepSeek-V3's 685B does; NVIDIA's "
        "Nemotron 3 figures are the main model's)")
    source: str = ""
    notes: str = ""

    @model_validator(mode="after")
    def _shapes(self):
        if self.kv_heads > self.num_heads or self.num_heads % self.kv_heads:
            raise ValueError(f"num_kv_heads {self.kv_heads} must divide num_heads {self.num_heads}")
        if self.head_dim is None and self.mla is None and self.hidden % self.num_heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by num_heads {self.num_heads}; set head_dim")
        if self.moe and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("moe.first_dense_layers exceeds num_layers")
        for label, pattern in (("hybrid_pattern", self.hybrid_pattern), ("mtp_pattern", self.mtp_pattern)):
            if pattern is None:
                continue
            bad = sorted(set(pattern) - set(HYBRID_SYMBOLS))
            if bad or not pattern:
                raise ValueError(f"{label} {pattern!r}: symbols are M (Mamba-2), * (attention), - (MLP), "
                                 f"E (MoE); got {''.join(bad) or 'an empty pattern'}")
            if "M" in pattern and self.mamba is None:
                raise ValueError(f"{label} has Mamba layers (M) but no mamba config")
            if "E" in pattern and self.moe is None:
                raise ValueError(f"{label} has MoE layers (E) but no moe config")
        if self.hybrid_pattern is not None and len(self.hybrid_pattern) != self.num_layers:
            raise ValueError(f"hybrid_pattern has {len(self.hybrid_pattern)} layers, num_layers is {self.num_layers}")
        if self.mtp_pattern is not None and self.hybrid_pattern is None:
            raise ValueError("mtp_pattern applies to hybrid models only")
        if self.mtp_depths is not None and self.mtp_depths != self.mtp_layers and self.mtp_layers != 1:
            raise ValueError(f"mtp_depths {self.mtp_depths} differs from mtp_layers {self.mtp_layers}: only one "
                             "MTP module can be repeated (Megatron-Core mtp_use_repeated_layer)")
        if self.mamba is not None and self.hybrid_pattern is None:
            raise ValueError("a mamba config needs a hybrid_pattern saying which layers are Mamba-2")
        if self.moe and self.moe.latent_size and self.hybrid_pattern is None:
            raise ValueError("moe.latent_size (LatentMoE) is modelled for hybrid models only")
        return self

    @property
    def mtp_forward_depths(self) -> int:
        """MTP depths computed per step (``mtp_depths``, else one per module; 0 without MTP)."""
        return (self.mtp_depths or self.mtp_layers) if self.mtp_layers else 0

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.num_heads

    @property
    def gated_mlp(self) -> bool:
        """True for SwiGLU/GEGLU: three weight matrices (gate, up, down) instead of two."""
        return self.activation in ("swiglu", "geglu")

    @property
    def hybrid(self) -> bool:
        """A hybrid stack of single blocks (``hybrid_pattern``), not attention + FFN layers."""
        return self.hybrid_pattern is not None

    def layer_kind(self, index: int) -> str:
        """The kind of layer ``index``: ``dense`` or ``moe`` (attention + FFN) for a transformer;
        ``mamba``, ``attention``, ``mlp`` or ``moe`` (one block each) for a hybrid model. Layers
        past ``num_layers`` (MTP modules) are built like the last transformer layer, or from
        ``mtp_pattern`` in a hybrid model (see models.params.mtp_params)."""
        if self.hybrid_pattern is not None:
            return HYBRID_SYMBOLS[self.hybrid_pattern[index]]
        return "moe" if self.is_moe_layer(index) else "dense"

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a routed-expert FFN."""
        if self.hybrid_pattern is not None:
            return index < len(self.hybrid_pattern) and self.hybrid_pattern[index] == "E"
        m = self.moe
        if m is None or index < m.first_dense_layers:
            return False
        return (index - m.first_dense_layers) % m.layer_frequency == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))
