"""Parameter counts of a :class:`ModelSpec`, per component (counts, not bytes)."""
from __future__ import annotations

from dataclasses import dataclass

from models.schema import HYBRID_SYMBOLS, ModelSpec


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer, split the way parallelism shards them."""

    attention: int        # QKV (or MLA down/up projections) + output projection, with biases
    norms: int            # the layer's norm weights (and biases for LayerNorm)
    dense_mlp: int        # dense FFN (0 in a MoE layer)
    router: int           # MoE gate
    expert: int           # ONE routed expert
    num_experts: int      # routed experts in the layer (0 if dense)
    shared_experts: int   # all shared experts together
    mamba: int = 0        # a Mamba-2 mixer: in_proj, conv1d, A, D, dt bias, gated norm, out_proj
    latent: int = 0       # LatentMoE's hidden -> latent and latent -> hidden projections

    @property
    def total(self) -> int:
        return (self.attention + self.norms + self.dense_mlp + self.router
                + self.expert * self.num_experts + self.shared_experts + self.mamba + self.latent)

    @property
    def active(self) -> int:
        """Parameters touched by one token (top-k routed experts)."""
        return self.total - self.expert * self.num_experts


def attention_params(m: ModelSpec) -> int:
    """QKV + output projection weights (and biases), or the MLA projections (DeepSeek-V2 §2.1)."""
    h, d = m.hidden, m.dim_head
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk_head
        else:
            q = h * m.num_heads * qk_head
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank  # down-proj + its norm
        kv += a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        out = m.num_heads * a.v_head_dim * h
        return q + kv + out
    qkv_out = (m.num_heads + 2 * m.kv_heads) * d
    qkv_bias = m.qkv_bias if m.qkv_bias is not None else m.linear_bias
    params = h * qkv_out + (qkv_out if qkv_bias else 0)
    params += m.num_heads * d * h + (h if m.linear_bias else 0)
    return params


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP of intermediate size ``ffn``: 2 (plain) or 3 (gated) matrices, plus biases."""
    mats = 3 if m.gated_mlp else 2
    bias = (ffn * (mats - 1) + m.hidden) if m.linear_bias else 0
    return mats * m.hidden * ffn + bias


def norm_params(m: ModelSpec) -> int:
    """One norm over ``hidden``: weight (+ bias for LayerNorm)."""
    return m.hidden * (2 if m.norm == "layernorm" else 1)


def mamba_params(m: ModelSpec) -> int:
    """One Mamba-2 mixer as Megatron-Core's MambaMixer holds it (no linear biases, as Nemotron-H):
    in_proj h x (2·d_inner + 2·G·N + H), the depthwise conv1d over x, B, C (kernel + bias per
    channel), A_log, D and dt_bias (H each), the gated RMSNorm's weight (d_inner), out_proj
    d_inner x h. The block's pre-norm is counted with the norms."""
    s = m.mamba
    return (m.hidden * s.in_proj_dim + s.conv_dim * (s.conv_kernel + 1) + 3 * s.num_heads + s.d_inner
            + s.d_inner * m.hidden)


def _moe_block(m: ModelSpec) -> tuple[int, int, int, int]:
    """(router, one routed expert, all shared experts, latent projections) of a MoE FFN. Under
    LatentMoE the routed experts run at ``moe.latent_size`` (input and output width) behind a
    hidden -> latent and a latent -> hidden projection; shared experts stay at hidden."""
    e = m.moe
    shared_ffn = e.shared_expert_ffn_hidden or e.expert_ffn_hidden
    shared = e.shared_experts * mlp_params(m, shared_ffn)
    if e.latent_size:
        mats = 3 if m.gated_mlp else 2
        return m.hidden * e.num_experts, mats * e.latent_size * e.expert_ffn_hidden, shared, 2 * m.hidden * e.latent_size
    return m.hidden * e.num_experts, mlp_params(m, e.expert_ffn_hidden), shared, 0


def kind_params(m: ModelSpec, kind: str) -> LayerParams:
    """Parameters of one layer of ``kind`` (ModelSpec.layer_kind): a transformer layer (``dense``,
    ``moe``: attention + FFN and two norms) or, in a hybrid model, one block with its pre-norm."""
    if m.hybrid:
        norm = norm_params(m)
        if kind == "mamba":
            return LayerParams(0, norm, 0, 0, 0, 0, 0, mamba=mamba_params(m))
        if kind == "attention":
            return LayerParams(attention_params(m), norm, 0, 0, 0, 0, 0)
        if kind == "mlp":
            return LayerParams(0, norm, mlp_params(m, m.ffn_hidden), 0, 0, 0, 0)
        router, expert, shared, latent = _moe_block(m)
        return LayerParams(0, norm, 0, router, expert, m.moe.num_experts, shared, latent=latent)
    attn = attention_params(m)
    norms = 2 * norm_params(m)
    if kind == "dense":
        return LayerParams(attn, norms, mlp_params(m, m.ffn_hidden), 0, 0, 0, 0)
    router, expert, shared, _ = _moe_block(m)
    return LayerParams(attn, norms, 0, router, expert, m.moe.num_experts, shared)


def layer_params(m: ModelSpec, index: int) -> LayerParams:
    """Parameters of layer ``index`` (0-based)."""
    if m.hybrid:
        return kind_params(m, m.layer_kind(index))
    attn = attention_params(m)
    norms = 2 * norm_params(m)
    if not m.is_moe_layer(index):
        return LayerParams(attn, norms, mlp_params(m, m.ffn_hidden), 0, 0, 0, 0)
    e = m.moe
    shared_ffn = e.shared_expert_ffn_hidden or e.expert_ffn_hidden
    return LayerParams(attn, norms, 0, m.hidden * e.num_experts, mlp_params(m, e.expert_ffn_hidden),
                       e.num_experts, e.shared_experts * mlp_params(m, shared_ffn))


def layer_param_tensors(m: ModelSpec, index: int, biases: bool = True) -> int:
    """Parameter tensors of layer ``index`` as Megatron-LM and the reference GPT hold them (fused
    QKV, one tensor per weight and per bias, one per routed expert matrix): what an optimizer
    step or a per-parameter hook visits, so its host time is per tensor, not per parameter.
    ``biases=False`` counts weights only: one per module (linear or norm) holding parameters."""
    return kind_param_tensors(m, m.layer_kind(index), biases)


def kind_param_tensors(m: ModelSpec, moe: bool | str, biases: bool = True) -> int:
    """Parameter tensors of one layer of a kind (ModelSpec.layer_kind; True/False stand for
    ``moe``/``dense``), as layer_param_tensors counts them. A Mamba-2 block holds 9: pre-norm,
    in_proj, conv weight and bias, A_log, D, dt_bias, gated-norm weight, out_proj."""
    kind = moe if isinstance(moe, str) else ("moe" if moe else "dense")
    bias = 1 if m.linear_bias and biases else 0
    per_norm = 2 if m.norm == "layernorm" and biases else 1
    if m.mla is not None:
        a = m.mla
        attn = (3 if a.q_lora_rank else 1) + 3 + 1      # q (down, norm, up), kv (down, norm, up), out
    else:
        qkv_bias = m.qkv_bias if m.qkv_bias is not None else m.linear_bias
        attn = 2 + (1 if qkv_bias and biases else 0) + bias
    mats = 3 if m.gated_mlp else 2
    mlp = mats + bias * mats
    if m.hybrid:
        e = m.moe
        return {"mamba": per_norm + 8, "attention": per_norm + attn, "mlp": per_norm + mlp,
                "moe": (per_norm + 1 + e.num_experts * mats + e.shared_experts * mlp
                        + (2 if e.latent_size else 0)) if e else 0}[kind]
    if kind == "dense":
        return attn + 2 * per_norm + mlp
    e = m.moe
    return attn + 2 * per_norm + 1 + e.num_experts * mats + e.shared_experts * mlp


def largest_layer_matrix(m: ModelSpec, index: int) -> int:
    """Parameters of the largest single weight matrix of layer ``index`` (fused QKV, one MLP
    matrix, one routed expert's matrix, an MLA projection): the unit a per-module gather holds."""
    h, d = m.hidden, m.dim_head
    if m.hybrid:
        kind = m.layer_kind(index)
        if kind == "mamba":
            return h * m.mamba.in_proj_dim
        if kind == "attention":
            return h * (m.num_heads + 2 * m.kv_heads) * d
        if kind == "mlp":
            return h * m.ffn_hidden
        e = m.moe
        return max(h * (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) if e.shared_experts else 0,
                   (e.latent_size or h) * e.expert_ffn_hidden, h * (e.latent_size or 0))
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        attn = max((a.q_lora_rank or h) * m.num_heads * qk, a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim),
                   m.num_heads * a.v_head_dim * h)
    else:
        attn = h * (m.num_heads + 2 * m.kv_heads) * d
    if m.is_moe_layer(index):
        e = m.moe
        ffn = max(e.expert_ffn_hidden, (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) if e.shared_experts else 0)
    else:
        ffn = m.ffn_hidden
    return max(attn, h * ffn)


def embedding_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of the first pipeline stage's extras: token (and learned position) embedding."""
    return 1 + (1 if m.position == "learned" else 0)


def head_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of the last pipeline stage's extras: final norm and an untied head."""
    return (2 if m.norm == "layernorm" else 1) + (0 if m.tied_embeddings else 1)


def model_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of the whole model: layers, embedding, final norm, untied head."""
    layers = sum(layer_param_tensors(m, i) for i in range(m.num_layers))
    return layers + embedding_param_tensors(m) + head_param_tensors(m)


def embedding_params(m: ModelSpec) -> int:
    """Token embedding, plus the output head when untied, plus learned positions."""
    emb = m.vocab * m.hidden
    head = 0 if m.tied_embeddings else m.vocab * m.hidden
    pos = m.seq_len * m.hidden if m.position == "learned" else 0
    return emb + head + pos


def mtp_layer_kinds(m: ModelSpec, module: int) -> list[str]:
    """The layer kinds (ModelSpec.layer_kind) of MTP module ``module`` (0-based): the blocks of
    ``mtp_pattern`` in a hybrid model (default '*E': attention, MoE), else the kind main-model
    layer ``num_layers + module`` would have (DeepSeek-V3: an MoE layer)."""
    if m.hybrid:
        return [HYBRID_SYMBOLS[sym] for sym in (m.mtp_pattern or "*E")]
    return [m.layer_kind(m.num_layers + module)]


def mtp_params(m: ModelSpec, active: bool = False) -> int:
    """Parameters of the ``m.mtp_layers`` multi-token-prediction modules (DeepSeek-V3 Sec. 2.2).

    Module k is one transformer layer (built like main-model layer ``num_layers + k``), the
    projection M_k of the concatenated [norm(h); norm(emb)] (2h -> h, no bias) and three norms
    (enorm, hnorm, and the final norm before the shared head). The embedding and the output head
    are shared with the main model and not counted again. ``active``: routed experts counted
    top_k times instead of num_experts times. In a hybrid model a module's layer is the blocks of
    ``mtp_pattern`` (Nemotron 3 Super/Ultra: '*E', one attention and one MoE block). A module
    repeated over several depths (``mtp_depths``) is counted once.
    """
    total = 0
    for k in range(m.mtp_layers):
        for kind in mtp_layer_kinds(m, k):
            lp = kind_params(m, kind)
            total += (lp.active + lp.expert * m.moe.top_k) if active and lp.num_experts else lp.total
        total += 2 * m.hidden * m.hidden + 3 * norm_params(m)
    return total


def total_params(m: ModelSpec, include_mtp: bool = True) -> int:
    """All parameters: layers, embeddings, output head, the final norm and any MTP modules."""
    layers = sum(layer_params(m, i).total for i in range(m.num_layers))
    mtp = mtp_params(m) if include_mtp else 0
    return layers + embedding_params(m) + norm_params(m) + mtp


def active_params(m: ModelSpec, include_mtp: bool = True) -> int:
    """Parameters used per token (routed experts counted top_k times, not num_experts)."""
    total = embedding_params(m) + norm_params(m)
    for i in range(m.num_layers):
        lp = layer_params(m, i)
        total += lp.active + (lp.expert * m.moe.top_k if lp.num_experts else 0)
    return total + (mtp_params(m, active=True) if include_mtp else 0)


def published_params_error(m: ModelSpec) -> float | None:
    """Relative gap between :func:`total_params` and ``m.published_params``, or None if unpublished.

    The gap left after allowing for the figure's printed rounding (half of
    ``published_params_precision``), divided by the figure: 0.0 means consistent.
    """
    if m.published_params is None:
        return None
    half_step = (m.published_params_precision or 0.0) / 2
    gap = max(0.0, abs(total_params(m, m.published_params_includes_mtp) - m.published_params) - half_step)
    return gap / m.published_params
