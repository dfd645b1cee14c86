"""Transformer specs: the shapes that decide a large model's FLOPs, bytes and memory, each with its source.

A :class:`TransformerSpec` is a decoder-only transformer: ``layers`` blocks of attention (``heads`` query
heads, ``kv_heads`` key/value heads: fewer than ``heads`` is grouped-query attention) and an MLP (``ffn``
wide, gated as SwiGLU or not as GPT's GeLU MLP), a vocabulary, a training sequence length and a dtype.
A mixture-of-experts spec replaces the MLP of ``moe_layers`` blocks (the last ones) by ``experts``
routed experts of width ``expert_ffn`` of which ``top_k`` run per token, plus ``shared_experts``
that every token runs. ``LLM_SPECS`` holds the shipped ones; :func:`llm` looks one up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import CommscopeError
from ..registry import Registry

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer's shape (see the module docstring); ``source`` says where it comes from.

    ``attention_params`` overrides the attention weights per layer where they are not 2h(h + kv) (e.g.
    DeepSeek's multi-head latent attention); ``qk_head_dim``/``v_head_dim`` override h/heads in the score
    and value products. ``global_batch`` is the default number of sequences per iteration (its source in
    ``source``); ``tied_embeddings``: one matrix for the input embedding and the output logits.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    gated: bool
    seq_len: int
    vocab: int
    global_batch: int
    dtype: str = "bf16"
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    moe_layers: int = 0
    attention_params: int | None = None
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    tied_embeddings: bool = False
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "seq_len", "vocab", "global_batch"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CommscopeError(f"{key} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads:
            raise CommscopeError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.dtype not in DTYPE_BYTES:
            raise CommscopeError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.experts:
            if not 1 <= self.top_k <= self.experts or self.expert_ffn < 1 or not 1 <= self.moe_layers <= self.layers:
                raise CommscopeError(f"{self.name}: a mixture of experts needs 1 <= top_k <= experts, expert_ffn >= 1 "
                                     "and 1 <= moe_layers <= layers")
        elif self.top_k or self.moe_layers or self.shared_experts:
            raise CommscopeError(f"{self.name}: top_k, moe_layers and shared_experts need experts > 0")

    # ------------------------------------------------------------------ shape
    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def dense_layers(self) -> int:
        """Blocks with a dense MLP (all of them without experts)."""
        return self.layers - self.moe_layers

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads x head dim."""
        return self.kv_heads * self.head_dim

    @property
    def bytes_per_value(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of h x ffn in one MLP: 3 gated (gate, up, down), 2 not (up, down)."""
        return 3 if self.gated else 2

    # ----------------------------------------------------------------- params
    @property
    def attention_weights(self) -> int:
        """Attention weights of one block: Q and output h x h, K and V h x kv (derived here), or the override."""
        if self.attention_params is not None:
            return self.attention_params
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_dim

    @property
    def dense_mlp_weights(self) -> int:
        return self.mlp_matrices * self.hidden * self.ffn

    @property
    def expert_weights(self) -> int:
        """Weights of one routed expert."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    @property
    def moe_block_weights(self) -> int:
        """The MLP weights of one mixture-of-experts block: routed and shared experts and the router."""
        return (self.experts + self.shared_experts) * self.expert_weights + self.hidden * self.experts

    @property
    def norm_weights(self) -> int:
        """Two layer norms per block (scale and bias: 4h, as Narayanan et al. 2021 eq. (2) counts 13h/12h)."""
        return 4 * self.hidden

    @property
    def embedding_weights(self) -> int:
        """Input embedding (and the output matrix unless tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        """All weights (derived here; for GPT-3 175B within 0.3% of the 175.0B of Brown et al. 2020 Table 2.1)."""
        per_block = self.attention_weights + self.norm_weights
        return (self.layers * per_block + self.dense_layers * self.dense_mlp_weights
                + self.moe_layers * self.moe_block_weights + self.embedding_weights)

    @property
    def expert_params(self) -> int:
        """Weights of the routed experts (those that expert parallelism shards)."""
        return self.moe_layers * self.experts * self.expert_weights

    @property
    def active_params(self) -> int:
        """Weights one token runs through (the routed experts counted top_k times, not all)."""
        return self.params - self.expert_params + self.moe_layers * self.top_k * self.expert_weights

    def with_(self, **changes: Any) -> TransformerSpec:
        """A copy with some fields changed (validated again), e.g. another sequence length."""
        return replace(self, **changes)


LLM_SPECS: Registry[TransformerSpec] = Registry("transformer spec")


def llm(name: str | TransformerSpec) -> TransformerSpec:
    """A shipped transformer spec by name (``llms()`` lists them), or the spec itself."""
    return name if isinstance(name, TransformerSpec) else LLM_SPECS.get(name)


def llms() -> list[str]:
    """Names of the shipped transformer specs."""
    return LLM_SPECS.names()


LLM_SPECS.register(TransformerSpec(
    name="gpt3-175b", layers=96, hidden=12288, heads=96, kv_heads=96, ffn=4 * 12288, gated=False, seq_len=2048,
    vocab=50257, global_batch=1536, dtype="fp16", tied_embeddings=True,
    description="GPT-3 175B",
    source="Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1 (n_layers 96, d_model 12288, "
           "n_heads 96, d_head 128, batch 3.2M tokens = 1536 x 2048, context 2048); GPT-2 BPE vocabulary 50257; "
           "FFN 4 d_model (Section 2.1: the GPT-2 architecture)"))
LLM_SPECS.register(TransformerSpec(
    name="llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, gated=True, seq_len=8192,
    vocab=128256, global_batch=512,
    description="Llama 3 8B",
    source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3 (32 layers, model dim 4096, FFN 14336, "
           "32 heads, 8 KV heads, vocabulary 128,000 (128,256 in the released config), SwiGLU); sequence 8192 "
           "(Section 3.4.1); batch 512 x 8192 = 4M tokens: the initial batch of Section 3.4.1, chosen here"))
LLM_SPECS.register(TransformerSpec(
    name="llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, gated=True, seq_len=8192,
    vocab=128256, global_batch=512,
    description="Llama 3 70B",
    source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3 (80 layers, model dim 8192, FFN 28672, "
           "64 heads, 8 KV heads, SwiGLU); sequence 8192 and batch 4M tokens as for llama3-8b"))
LLM_SPECS.register(TransformerSpec(
    name="llama3-405b", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, gated=True, seq_len=8192,
    vocab=128256, global_batch=2048,
    description="Llama 3 405B",
    source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3 (126 layers, model dim 16384, FFN 53248, "
           "128 heads, 8 KV heads, SwiGLU, vocabulary 128K); sequence 8192 and batch 2048 x 8192 = 16M tokens: the "
           "first rows of Table 4"))
LLM_SPECS.register(TransformerSpec(
    name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, gated=True, seq_len=32768,
    vocab=32000, global_batch=128, experts=8, top_k=2, expert_ffn=14336, moe_layers=32,
    description="Mixtral 8x7B (sparse mixture of experts)",
    source="Jiang et al. 2024, 'Mixtral of Experts', Table 1 (dim 4096, 32 layers, head_dim 128, hidden_dim "
           "14336, 32 heads, 8 KV heads, context 32768, vocabulary 32000, 8 experts, top-2); every block's MLP is "
           "a mixture (Section 2); batch 128 x 32768 = 4M tokens chosen here (not published)"))
LLM_SPECS.register(TransformerSpec(
    name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn=18432, gated=True, seq_len=4096,
    vocab=129280, global_batch=3840, experts=256, top_k=8, expert_ffn=2048, shared_experts=1, moe_layers=58,
    attention_params=187_105_280, qk_head_dim=192, v_head_dim=128,
    description="DeepSeek-V3 671B (fine-grained MoE, multi-head latent attention)",
    source="DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', Section 4.2 Hyper-Parameters (61 layers, hidden "
           "7168, 128 heads of 128, MLA with KV compression 512 and query compression 1536, decoupled RoPE 64; "
           "all FFNs but the first 3 are MoE: 1 shared + 256 routed experts of 2048, 8 routed per token; "
           "sequence 4096; batch size up to 15360 (3840 at the start); vocabulary 128K (129280 in the released "
           "config, with the dense FFN width 18432)); MLA's weights per block (187,105,280) summed here from those "
           "widths; its attention is otherwise priced as multi-head attention with q/k dim 192 and v dim 128"))
