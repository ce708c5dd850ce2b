"""The architecture map: the parts a request passes through, drawn from the model's own dimensions, each part naming
the page (by URL path) that shows it. Plain data; ui/model_map.py draws it.

    parts = model_map(dims)              # SmolLM2: request ... 30 blocks ... sampler, loop
    parts.blocks[5].attention.detail     # Gemma: '4 query heads, 1 KV head · full · RoPE base 1,000,000'

The order is the request's: the text, its tokens, the embedding rows, then N blocks (each: its norms, attention with
H query heads reading Hkv key/value heads, the MLP), the final norm, the LM head, the sampler, and the loop that feeds
the chosen token back with its KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.model.dims import SLIDING, ModelDims


@dataclass(frozen=True)
class MapPart:
    key: str  # unique within one map: 'embeddings', 'attention', 'block.5' ...
    label: str  # a short name
    detail: str  # its size in this model, in words
    page: str  # the URL path of the page that shows it ('embeddings', 'attention', ...)


@dataclass(frozen=True)
class MapBlock:
    index: int  # 0 .. L-1
    kind: str  # 'full' or 'sliding'
    detail: str  # what its attention reaches and its RoPE base
    page: str


@dataclass(frozen=True)
class ModelMap:
    before: tuple[MapPart, ...]  # the request up to the first block
    block_parts: tuple[MapPart, ...]  # what every block holds, in order (norms, attention, MLP)
    blocks: tuple[MapBlock, ...]  # (L,) one per block
    after: tuple[MapPart, ...]  # the final norm to the loop

    def parts(self) -> tuple[MapPart, ...]:
        return self.before + self.block_parts + self.after

    def pages(self) -> set[str]:
        return {p.page for p in self.parts()} | {b.page for b in self.blocks}

    def lit(self, page: str) -> frozenset[str]:
        """The keys of the parts the page at URL path `page` is about ('blocks': every block): the parts that
        open it, else ABOUT's; none for a page about the whole (Start, Journey, Presenter mode).

            lit('attention') -> {'attention'}   lit('prompt-caching') -> {'kv_cache'}
        """
        keys = {p.key for p in self.parts() if p.page == page}
        if any(b.page == page for b in self.blocks):
            keys.add(BLOCKS)
        return frozenset(keys) or ABOUT.get(page, frozenset())


BLOCKS = "blocks"  # in a set of lit keys: every block's cell
# The pages no part opens, and the parts each is about (keys as in model_map; BLOCKS: every block)
ABOUT = {
    "tensors": frozenset({"tokens", "embeddings"}),  # the ids, padded into the rectangle the lookup reads
    "why-token": frozenset({"attention", "mlp", "lm_head"}),  # heads and neurons behind the first token's score
    "what-if": frozenset({"sampler", "loop"}),  # another token chosen at a step, then the loop goes on
    "constrained": frozenset({"sampler"}),  # a grammar sets the refused tokens' scores to -inf before the draw
    "prefill-decode": frozenset({BLOCKS, "loop"}),  # every weight read once per pass: the prompt's, each token's
    "how-it-learned": frozenset({"lm_head", BLOCKS}),  # the loss on the scores; one step nudges every weight
    "faster-decode": frozenset({BLOCKS, "loop"}),  # fewer bytes per weight read, more tokens per loop
    "prompt-caching": frozenset({"kv_cache"}),  # the cache kept across requests
    "cache-audit": frozenset({"kv_cache"}),  # what a provider's prompt cache would reuse
    "traffic": frozenset({"kv_cache"}),  # the API's requests, block by block reused or prefilled
    "compare-models": frozenset({"tokens", BLOCKS, "kv_cache"}),  # where two models differ most: vocabulary,
    # blocks (how many, which attention) and the cache they keep
}


def _heads(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def block_parts(dims: ModelDims) -> tuple[MapPart, ...]:
    """What one block holds, in order. Llama-shaped blocks: norm, attention, norm, MLP. Gemma 3 norms the attention's
    and the MLP's outputs again before they join the residual stream: four norms."""
    gemma = dims.architecture.startswith("gemma3")
    attention = MapPart("attention", "attention",
                        f"{_heads(dims.H, 'query head')}, {_heads(dims.Hkv, 'KV head')}"
                        + (f" ({dims.group} share each)" if dims.group > 1 else "") + f", {dims.Dh} wide", "attention")
    mlp = MapPart("mlp", "MLP", f"{dims.D} → {dims.D_mlp or '?'} → {dims.D}", "layers")
    norm = lambda key, label: MapPart(key, label, f"RMSNorm, {dims.D} wide", "layers")  # noqa: E731
    if gemma:
        return (norm("norm.attention_in", "norm"), attention, norm("norm.attention_out", "norm"),
                norm("norm.mlp_in", "norm"), mlp, norm("norm.mlp_out", "norm"))
    return norm("norm.attention_in", "norm"), attention, norm("norm.mlp_in", "norm"), mlp


def model_map(dims: ModelDims, plain: bool = False) -> ModelMap:
    """The map of `dims`' model (a ModelDims, e.g. a run's trace.dims); plain: the request is sent as plain text (no
    chat template), as the sidebar's prompt format can say for a base model."""
    blocks = []
    for i in range(dims.L):
        window = dims.window(i)
        kind = "sliding" if dims.layer_type(i) == SLIDING else "full"
        reach = f"sliding: the last {window:,} positions" if window else "full: every earlier position"
        blocks.append(MapBlock(i, kind, f"block {i}, {reach}, RoPE base {dims.rope_base_of(i):,.0f}", "layers"))
    before = (
        MapPart("request", "request", "the messages' text as typed (plain text: no chat template)"
                if plain else "the messages as one text (chat template)", "request"),
        MapPart("tokens", "tokens", f"ids from a vocabulary of {dims.V:,}", "tokens"),
        MapPart("embeddings", "embeddings", f"a row of {dims.D} numbers per token",
                "embeddings"),
        MapPart("position", "position (RoPE)", "turns q and k by position, in attention", "position"),
    )
    after = (
        MapPart("final_norm", "final norm", f"RMSNorm, {dims.D} wide", "layers"),
        MapPart("lm_head", "LM head", f"{dims.D} numbers → {dims.V:,} scores", "next-token"),
        MapPart("sampler", "sampler", "scores → one token", "next-token"),
        MapPart("loop", "loop", "the token goes back in", "generation"),
        MapPart("kv_cache", "KV cache", f"K and V per position: {dims.L} layers × "
                f"{_heads(dims.Hkv, 'KV head')} × {dims.Dh}", "kv-cache"),
    )
    return ModelMap(before, block_parts(dims), tuple(blocks), after)
