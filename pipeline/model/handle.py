"""The model as the app holds it: name, dimensions and tokenizer at once, the network on first use.

A page that draws a stored run needs only the files beside the weights (config and tokenizer), so a
fresh server draws its first page before torch is imported (~2-4 s here) and the network is built
(~3 s). The rest of the LanguageModel interface (pipeline.model.interface) — `forward`, `model`,
`lock`, `dims`, `device`, ... — loads the network once per process (pipeline.model.loader.shared_model,
shared with the CLI and the tests) and is answered by it. `start_loading()` does that in a background
thread. A name the handle does not declare raises AttributeError (nothing is forwarded blindly).

    lm = ModelHandle()
    lm.name, lm.config_dims.L, lm.vocabulary   # files only: no torch, no transformers
    lm.tokenizer                               # transformers' tokenizer (no torch either)
    lm.forward([[1, 2, 3]])                    # the first call loads the network (blocking)
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pipeline.model.dims import ModelDims
from pipeline.model.registry import ModelSpec, resolve
from pipeline.model.vocabulary import Vocabulary
from pipeline.model.weights_cache import check_model_folder, ensure_weights_cache, load_tokenizer

if TYPE_CHECKING:  # torch loads with the network, not with the handle
    import torch
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

    from pipeline.model.loader import LoadedModel

LOADED_DTYPE = "float32"  # what loader.load_model builds (the captures are exact float32)


class ModelHandle:
    def __init__(self, source: str | None = None, weights: str = "fp32"):
        from pipeline.model.weight_formats import check_weights

        self.source = source  # None: the default model; a registry key ('gemma-3-270m'); or a local HF folder
        self.weights = check_weights(weights)  # the weight format (weight_formats): fp32 as loaded, bf16, int8
        self._spec = resolve(source)
        self._folder_lock = threading.Lock()  # one lock per thing read, so a page reading the config
        self._tokenizer_lock = threading.Lock()  # never waits for the tokenizer's ~1 s load
        self._vocabulary_lock = threading.Lock()
        self._loader_lock = threading.Lock()
        self._folder: Path | None = None
        self._config_dims: ModelDims | None = None
        self._tokenizer = None
        self._vocabulary = None
        self._loaded = None  # the LoadedModel, once built
        self._loader: threading.Thread | None = None
        self.load_error: Exception | None = None  # what a background load raised (a real use raises it again)

    @property
    def folder(self) -> Path:
        if self._folder is not None:
            return self._folder
        with self._folder_lock:
            if self._folder is None:
                folder = ensure_weights_cache(self._spec)
                check_model_folder(folder)
                self._folder = folder
            return self._folder

    @property
    def name(self) -> str:
        return self._spec.display_name

    @property
    def spec(self) -> ModelSpec:
        """The registry's record of the model (instruct or base, chat format, note): no files read."""
        return self._spec

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        if self._loaded is not None:
            return self._loaded.tokenizer
        folder = self.folder
        with self._tokenizer_lock:
            if self._tokenizer is None:
                self._tokenizer = load_tokenizer(folder, self._spec)
            return self._tokenizer

    @property
    def vocabulary(self):
        """Token names and special ids only (pipeline.model.vocabulary): what drawing a stored run needs."""
        folder = self.folder
        with self._vocabulary_lock:
            if self._vocabulary is None:
                self._vocabulary = (Vocabulary.from_folder(folder, self._spec.turn_tokens)
                                    if (folder / "tokenizer.json").exists()
                                    else None)
        return self._vocabulary or self.tokenizer

    @property
    def config_dims(self) -> ModelDims:
        """The dimensions from config.json; `device` is '' until the network has loaded (then `dims`)."""
        if self._loaded is not None:
            return self._loaded.dims
        if self._config_dims is None:
            config = SimpleNamespace(**json.loads((self.folder / "config.json").read_text(encoding="utf-8")))
            try:
                dtype = "bfloat16" if self.weights == "bf16" else LOADED_DTYPE
                self._config_dims = ModelDims.from_config(config, self.name, dtype, "", weights=self.weights)
            except AttributeError as e:  # a key missing from config.json
                raise AttributeError(f"reading the model's files for `config_dims` failed ({e})") from None
        return self._config_dims

    @property
    def is_loaded(self) -> bool:
        return self._loaded is not None

    @property
    def device_label(self) -> str:
        """'cpu' / 'cuda' once loaded; a page can show it without waiting for the load."""
        if self._loaded is not None:
            return str(self._loaded.device)
        if self.load_error is not None:
            return f"(not loaded: {self.load_error})"
        return "(loading in the background)"

    def loaded(self) -> LoadedModel:
        """The LoadedModel, built on the first call (the same object `shared_model` gives everyone)."""
        if self._loaded is None:
            from pipeline.model.loader import shared_model

            self._loaded = shared_model(self.source, tokenizer=self.tokenizer, weights=self.weights)
        return self._loaded

    def start_loading(self) -> None:
        """Build the network in a background thread (once); a later use finds it ready or waits for it."""
        with self._loader_lock:
            if self._loaded is not None or self._loader is not None:
                return
            self._loader = threading.Thread(target=self._load_quietly, name="model-loader", daemon=True)
        self._loader.start()

    def _load_quietly(self) -> None:
        from pipeline.model.warm_up import warm_cuda

        try:
            warm_cuda(self.loaded())  # a server's start: CUDA's first-call set-up here, not in a first request
        except Exception as e:  # kept for the page that needs the model: it raises it again
            self.load_error = e

    # The rest of LanguageModel: the loaded network's, loading it on first use.
    @property
    def dims(self) -> ModelDims:
        return self.loaded().dims

    @property
    def config(self) -> PretrainedConfig:
        return self.loaded().config

    @property
    def model(self) -> torch.nn.Module:
        return self.loaded().model

    @property
    def device(self) -> torch.device:
        return self.loaded().device

    @property
    def lock(self) -> threading.RLock:
        return self.loaded().lock

    @property
    def calls(self) -> int:
        return self.loaded().calls

    def forward(self, input_ids: Any, *, cache: Any = None, use_cache: bool = True, logits_to_keep: int = 1,
                attention: str = "sdpa", **kwargs: Any) -> Any:
        return self.loaded().forward(input_ids, cache=cache, use_cache=use_cache, logits_to_keep=logits_to_keep,
                                     attention=attention, **kwargs)

    def forward_chunked(self, ids: list[int], kv_cache: Any = None) -> tuple[torch.Tensor, Any]:
        return self.loaded().forward_chunked(ids, kv_cache)

    def count_pass(self) -> None:
        self.loaded().count_pass()

    def __setattr__(self, name: str, value) -> None:
        """Only the handle's own fields: `lm.lock = ...` here would silently miss the loaded model."""
        if not name.startswith("_") and name not in ("source", "weights", "load_error"):
            raise AttributeError(f"set `{name}` on the loaded model (handle.loaded()), not on the handle")
        object.__setattr__(self, name, value)
