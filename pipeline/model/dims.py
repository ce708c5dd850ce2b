"""The model's dimensions in the house letters, read once from its config.

L layers, H query heads, Hkv key/value heads, Dh head width, D model width, V vocabulary.
SmolLM2-135M: L=30, H=9, Hkv=3, Dh=64, D=576, V=49,152, context 8,192, RoPE base 100,000.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import integer, number


BYTES_PER_VALUE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}


@dataclass(frozen=True)
class ModelDims:
    name: str
    L: int  # transformer blocks
    H: int  # query heads
    Hkv: int  # key/value heads (grouped-query attention: H // Hkv query heads share one)
    Dh: int  # width of one head
    D: int  # model width (residual stream)
    D_mlp: int | None  # MLP hidden width
    V: int  # vocabulary size
    context_window: int  # most positions the model was trained for
    rope_base: float  # RoPE's theta
    dtype: str  # weights and cache, e.g. 'float32'
    device: str
    bytes_per_value: int  # of the KV cache entries

    @property
    def group(self) -> int:
        """Query heads per key/value head: 9 // 3 = 3."""
        return self.H // self.Hkv

    def kv_head(self, h: int) -> int:
        """The key/value head query head h reads: head 7 of 9 with Hkv = 3 -> 7 // 3 = 2."""
        return h // self.group

    def kv_bytes(self, tokens: int, bytes_per_value: int | None = None) -> int:
        """2 (K and V) * L * Hkv * Dh * tokens * bytes: 2*30*3*64*4 = 46,080 B per token here."""
        return kv_bytes_formula(self.L, self.Hkv, self.Dh, tokens, bytes_per_value or self.bytes_per_value)

    @classmethod
    def from_config(cls, config, name: str, dtype, device) -> "ModelDims":
        """config: an HF config (or any object with its attribute names); dtype: torch.float32 or 'float32'."""
        dtype = str(dtype).replace("torch.", "")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rope = getattr(config, "rope_parameters", None) or {}
        return cls(
            name=name, L=config.num_hidden_layers, H=config.num_attention_heads,
            Hkv=config.num_key_value_heads, Dh=head_dim, D=config.hidden_size,
            D_mlp=getattr(config, "intermediate_size", None), V=config.vocab_size,
            context_window=config.max_position_embeddings,
            rope_base=float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))),
            dtype=dtype, device=str(device), bytes_per_value=BYTES_PER_VALUE[dtype],
        )

    def to_json(self) -> dict:
        """The trace JSON's `model` object (its keys are a public format: see the README)."""
        return {"name": self.name, "layers": self.L, "heads": self.H, "kv_heads": self.Hkv, "head_dim": self.Dh,
                "hidden": self.D, "mlp_hidden": self.D_mlp, "vocab": self.V, "dtype": self.dtype,
                "context_window": self.context_window, "rope_theta": self.rope_base, "device": self.device,
                "bytes_per_value": self.bytes_per_value}


def kv_bytes_formula(layers: int, kv_heads: int, head_dim: int, tokens: int, bytes_per_value: float) -> int:
    """2 (K and V) * L * Hkv * Dh * tokens * bytes. Qwen3-8B, 16-bit: 2*36*8*128*2 = 147,456 B/token."""
    n = 2 * integer("layers", layers, 0, 10**5) * integer("kv_heads", kv_heads, 0, 10**5) \
        * integer("head_dim", head_dim, 0, 10**5) * integer("tokens", tokens, 0, 10**12)
    return int(n * number("bytes_per_value", bytes_per_value, 0, 64))
