"""The model's dimensions in the house letters, read once from its config.

L layers, H query heads, Hkv key/value heads, Dh head width, D model width, V vocabulary.
SmolLM2-135M: L=30, H=9, Hkv=3, Dh=64, D=576, V=49,152, context 8,192, RoPE base 100,000, every layer full.
Gemma-3-270M: L=18, H=4, Hkv=1, Dh=256, D=640, V=262,144, context 32,768; 15 sliding-window layers (512
positions, RoPE base 10,000) and a full one every sixth (RoPE base 1,000,000); embeddings scaled by sqrt(D).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.checks import integer, number

FULL, SLIDING = "full_attention", "sliding_attention"  # HF's names for a layer's kind (config.layer_types)
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
    architecture: str = "llama"  # the HF config's model_type: 'llama', 'gemma3_text', ...
    layer_types: tuple[str, ...] = ()  # (L,) FULL or SLIDING per layer; () = every layer FULL
    sliding_window: int | None = None  # positions a SLIDING layer attends to (itself included)
    rope_bases: tuple[tuple[str, float], ...] = ()  # (layer type, RoPE theta) where the bases differ by type
    embedding_scale: float = 1.0  # what the embedding rows are multiplied by (Gemma: sqrt(D))
    qk_norm: bool = False  # an RMSNorm on every query and key head before RoPE (Gemma 3, Qwen3)
    weights: str = "fp32"  # the weight format the numbers were computed in (pipeline.model.weight_formats)

    def layer_type(self, i: int) -> str:
        """FULL or SLIDING: the kind of layer i."""
        return self.layer_types[i] if self.layer_types else FULL

    def window(self, i: int) -> int | None:
        """Most positions layer i's attention reaches back over (itself included); None: all of them."""
        return self.sliding_window if self.layer_type(i) == SLIDING else None

    def rope_base_of(self, i: int) -> float:
        """Layer i's RoPE theta (Gemma: 10,000 in sliding layers, 1,000,000 in full ones)."""
        return dict(self.rope_bases).get(self.layer_type(i), self.rope_base)

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
    def from_config(cls, config, name: str, dtype, device, weights: str = "fp32") -> "ModelDims":
        """config: an HF config (or any object with its attribute names); dtype: torch.float32 or 'float32'."""
        dtype = str(dtype).replace("torch.", "")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rope = getattr(config, "rope_parameters", None) or {}
        per_type = {k: v for k, v in rope.items() if isinstance(v, dict)}  # Gemma 3: {layer type: {rope_theta}}
        bases = tuple((k, float(v["rope_theta"])) for k, v in sorted(per_type.items()) if "rope_theta" in v)
        types = tuple(getattr(config, "layer_types", None) or ())
        base = (dict(bases).get(types[0] if types else FULL) if bases else None) or rope.get(
            "rope_theta", getattr(config, "rope_theta", 10000.0))
        model_type = getattr(config, "model_type", "llama")
        return cls(
            name=name, L=config.num_hidden_layers, H=config.num_attention_heads,
            Hkv=config.num_key_value_heads, Dh=head_dim, D=config.hidden_size,
            D_mlp=getattr(config, "intermediate_size", None), V=config.vocab_size,
            context_window=config.max_position_embeddings,
            rope_base=float(base),
            dtype=dtype, device=str(device), bytes_per_value=BYTES_PER_VALUE[dtype],
            architecture=model_type, layer_types=types if SLIDING in types else (),
            sliding_window=getattr(config, "sliding_window", None) if SLIDING in types else None,
            rope_bases=bases, embedding_scale=config.hidden_size ** 0.5 if model_type.startswith("gemma") else 1.0,
            qk_norm=model_type.startswith(("gemma3", "qwen3")), weights=weights,
        )

    def to_json(self) -> dict:
        """The trace JSON's `model` object (its keys are a public format: docs/cli.md, "The trace JSON")."""
        return {"name": self.name, "layers": self.L, "heads": self.H, "kv_heads": self.Hkv, "head_dim": self.Dh,
                "hidden": self.D, "mlp_hidden": self.D_mlp, "vocab": self.V, "dtype": self.dtype,
                "context_window": self.context_window, "rope_theta": self.rope_base, "device": self.device,
                "bytes_per_value": self.bytes_per_value, "architecture": self.architecture,
                "layer_types": [self.layer_type(i) for i in range(self.L)], "sliding_window": self.sliding_window,
                "rope_thetas": [self.rope_base_of(i) for i in range(self.L)], "embedding_scale": self.embedding_scale,
                "qk_norm": self.qk_norm, "weights": self.weights}


def held_positions(window: int | None, n: int) -> int:
    """Positions HF's DynamicCache keeps in a layer once it has seen n: all of them, or, in a sliding-window
    layer, only the last window - 1 (the next query brings the window's last one itself)."""
    return n if window is None else min(n, window - 1)


def kv_bytes_formula(layers: int, kv_heads: int, head_dim: int, tokens: int, bytes_per_value: float) -> int:
    """2 (K and V) * L * Hkv * Dh * tokens * bytes. Qwen3-8B, 16-bit: 2*36*8*128*2 = 147,456 B/token."""
    n = 2 * integer("layers", layers, 0, 10**5) * integer("kv_heads", kv_heads, 0, 10**5) \
        * integer("head_dim", head_dim, 0, 10**5) * integer("tokens", tokens, 0, 10**12)
    return int(n * number("bytes_per_value", bytes_per_value, 0, 64))
