"""Pydantic schema of a decoder-only transformer: dense, GQA/MQA, MoE and DeepSeek MLA.

Sizes are counts (no units). Derived defaults: ``num_kv_heads = num_heads`` (MHA),
``head_dim = hidden / num_heads``. A layer is MoE when ``moe`` is set, its index is at least
``moe.first_dense_layers`` and ``(index - first_dense_layers) % moe.layer_frequency == 0``.
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
    mtp_layers: int = Field(
        0, ge=0, description="DeepSeek-V3 multi-token-prediction modules trained beside the main model; "
        "each is one more transformer layer plus a 2h->h projection and three norms, sharing the "
        "embedding and output head (DeepSeek-V3 report, Sec. 2.2)")
    published_params: Optional[PositiveFloat] = Field(None, description="published parameter count")
    published_params_precision: Optional[PositiveFloat] = Field(
        None, description="rounding step of published_params as the source prints it (1e8 for "
        "'1.7B'); a count within half a step of the figure is consistent with it")
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
        return self

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

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a routed-expert FFN."""
        m = self.moe
        if m is None or index < m.first_dense_layers:
            return False
        return (index - m.first_dense_layers) % m.layer_frequency == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))
