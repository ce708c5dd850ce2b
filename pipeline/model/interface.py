"""What every stage asks of the model: one page to read. Plain Python, no torch at import.

Two classes implement it: `LoadedModel` (pipeline.model.loader: the network itself) and `ModelHandle`
(pipeline.model.handle: the app's handle, which answers `name` and `tokenizer` from the files and
loads the network for the rest). Both hold any Hugging Face causal LM: a second architecture (Gemma 3)
is a second capture layout (pipeline.model.capture: where each hook sits in its blocks), not a flag.
Stages take `lm: LanguageModel` and use only the members below (a test scans pipeline/ for `lm.<name>`
to keep it so).

    lm.forward([[1, 2, 3]]).logits          # (1, 1, V): one pass, under the lock, counted
    logits, kv = lm.forward_chunked(ids)    # a long prompt in chunks: logits (V,) for the next token
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch and transformers load only with the network (the cold-start promise)
    import torch
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

    from pipeline.model.dims import ModelDims


@runtime_checkable
class LanguageModel(Protocol):
    """A causal language model the stages can run, capture and count.

    `model` and `config` are a Hugging Face causal LM and its config: the captures hook its modules
    by name (`model.layers.3.self_attn`), read its embeddings, final norm and head, and build HF KV
    caches from `config`. A second architecture gives modules of the same shape (or brings its own
    capture names).
    """

    @property
    def name(self) -> str:
        """Shown on pages and stored in each run: 'SmolLM2-135M-Instruct' or a local folder's name."""
        ...

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """Text <-> ids and the chat template."""
        ...

    @property
    def dims(self) -> ModelDims:
        """L, H, Hkv, Dh, D, V, context window, dtype and device of the loaded network."""
        ...

    @property
    def config(self) -> PretrainedConfig:
        """The HF config (DynamicCache needs it; rms_norm_eps)."""
        ...

    @property
    def model(self) -> torch.nn.Module:
        """The network: hook points, embeddings, final norm, head, generation config."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the input ids go (the embeddings' device)."""
        ...

    @property
    def lock(self) -> threading.RLock:
        """Held for every pass and while hooks are registered: two sessions never run it at once."""
        ...

    @property
    def calls(self) -> int:
        """Forward passes run through `forward` by everyone since the network loaded."""
        ...

    def forward(self, input_ids: Any, *, cache: Any = None, use_cache: bool = True, logits_to_keep: int = 1,
                attention: str = "sdpa", **kwargs: Any) -> Any:
        """One pass over (B, T) ids -> the HF output (`.logits` (B, logits_to_keep, V), `.cache`, ...)."""
        ...

    def forward_chunked(self, ids: list[int], kv_cache: Any = None) -> tuple[torch.Tensor, Any]:
        """A prompt after what `kv_cache` holds, in chunks -> (logits (V,) for the next token, KV cache)."""
        ...

    def count_pass(self) -> None:
        """A pass ran outside `forward` (a caller's own decoder, holding `lock`): count it."""
        ...

