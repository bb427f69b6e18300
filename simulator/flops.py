"""Closed-form FLOP counts of a training step, for MFU and HFU.

Model FLOPs (Megatron convention, Narayanan et al. 2021 App. / Korthikanti et al. 2022 §6):
every GEMM of forward and backward (backward = 2x forward) plus the attention score and
value products counted for the *full* s x s matrix (no causal halving), e.g. for GPT with a 4h
MLP: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)). The same count is written here for any ModelSpec
(GQA, SwiGLU, MoE with top-k experts, MLA). Hardware FLOPs (HFU) add the recomputed forward.
"""
from __future__ import annotations

from models.schema import ModelSpec
from simulator.identity_cache import IdentityCache


def _moe_ffn_flops(m: ModelSpec) -> float:
    """Forward FLOPs per token of a MoE FFN: routed top-k experts (at the latent width under
    LatentMoE, with its two projections), shared experts, the router."""
    h, e = m.hidden, m.moe
    mats = 3 if m.gated_mlp else 2
    shared = (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) * e.shared_experts
    width = e.latent_size or h
    latent = 2 * h * e.latent_size if e.latent_size else 0
    return 2 * (mats * width * e.expert_ffn_hidden * e.top_k + mats * h * shared + h * e.num_experts + latent)


def mamba_forward_flops_per_token(m: ModelSpec, seq: int) -> float:
    """Forward FLOPs per token of a Mamba-2 mixer: in_proj and out_proj GEMMs and the SSD scan's
    five steps (simulator/ssm.py: 2·Q·N·G + 2·Q·P·H + 4·N·P·H + 2·N·P·H/Q per token). The conv1d
    (2·kernel MACs per channel) and the gated norm are memory-bound and not counted."""
    from simulator.ssm import ssd_flops_parts

    s = m.mamba
    scan = sum(ssd_flops_parts(seq, s.num_heads, s.head_dim, s.n_groups, s.state_size, s.chunk_size).values()) / seq
    return 2 * m.hidden * (s.in_proj_dim + s.d_inner) + scan


def layer_forward_flops_per_token(m: ModelSpec, index: int, seq: int) -> float:
    """Forward FLOPs per token of layer ``index``: GEMMs (2 per weight) + attention (4·s·d·heads);
    in a hybrid model, of its one block (Mamba-2 mixer, attention, MLP or MoE)."""
    h = m.hidden
    if m.hybrid:
        kind = m.layer_kind(index)
        if kind == "mamba":
            return mamba_forward_flops_per_token(m, seq)
        if kind == "attention":
            d = m.dim_head
            return 2 * (h * (m.num_heads + 2 * m.kv_heads) * d + m.num_heads * d * h) + 4 * seq * m.num_heads * d
        if kind == "mlp":
            return 2 * (3 if m.gated_mlp else 2) * h * m.ffn_hidden
        return _moe_ffn_flops(m)
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (h * a.q_lora_rank + a.q_lora_rank * m.num_heads * qk) if a.q_lora_rank else h * m.num_heads * qk
        proj = q + h * (a.kv_lora_rank + a.qk_rope_head_dim) \
            + a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim) + m.num_heads * a.v_head_dim * h
        attn_core = 2 * seq * m.num_heads * (qk + a.v_head_dim)
    else:
        d = m.dim_head
        proj = h * (m.num_heads + 2 * m.kv_heads) * d + m.num_heads * d * h
        attn_core = 4 * seq * m.num_heads * d
    mats = 3 if m.gated_mlp else 2
    if m.is_moe_layer(index):
        e = m.moe
        shared = (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) * e.shared_experts
        ffn = mats * h * (e.expert_ffn_hidden * e.top_k + shared) + h * e.num_experts
    else:
        ffn = mats * h * m.ffn_hidden
    return 2 * (proj + ffn) + attn_core


_LAYER_FLOPS = IdentityCache()


def layers_forward_flops_per_token(m: ModelSpec, seq: int) -> float:
    """Forward FLOPs per token of all layers together (cached by model identity and seq)."""
    return _LAYER_FLOPS.get((m,), (seq,), lambda: sum(layer_forward_flops_per_token(m, i, seq)
                                                     for i in range(m.num_layers)))


def model_flops_per_token(m: ModelSpec, seq: int) -> float:
    """Forward + backward model FLOPs per token: 3 x (layers + logits GEMM)."""
    fwd = layers_forward_flops_per_token(m, seq)
    fwd += 2 * m.hidden * m.vocab
    return 3 * fwd


def step_model_flops(m: ModelSpec, seq: int, global_batch: int) -> float:
    """Model FLOPs of one optimizer step of ``global_batch`` sequences of ``seq`` tokens."""
    return model_flops_per_token(m, seq) * seq * global_batch


def step_hardware_flops(m: ModelSpec, seq: int, global_batch: int, recompute: str,
                        recompute_fraction: float = 1.0) -> float:
    """Model FLOPs plus the recomputed forward: all layers (full) or attention core (selective)."""
    tokens = seq * global_batch
    base = step_model_flops(m, seq, global_batch)
    if recompute == "full":
        fwd_layers = layers_forward_flops_per_token(m, seq)
        return base + recompute_fraction * fwd_layers * tokens
    if recompute == "selective":
        core = 4 * seq * m.num_heads * (m.dim_head if m.mla is None else
                                        (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / 2)
        layers = m.hybrid_pattern.count("*") if m.hybrid else m.num_layers
        return base + core * layers * tokens
    return base


def megatron_gpt_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. (3) without recompute: 72·B·s·l·h²(1 + s/6h + V/12lh)."""
    return 72 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))
