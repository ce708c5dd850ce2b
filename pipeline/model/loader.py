"""Load the real chat model and its tokenizer, offline, and own the one door into it.

The weights come from the local cache (pipeline.model.weights_cache: converted once from each
registry model's GGUF, pipeline.model.registry); any local Hugging Face causal-LM folder can be
given instead. The same class holds every architecture: what differs per architecture is in the
capture's layouts (pipeline.model.capture).

Every Hugging Face forward pass goes through `LoadedModel.forward`: it holds the model's lock, runs in
inference mode on the model's device, picks the attention kernel and counts the pass. The one pass
that goes around it is the plain serving path's `PlainDecoder.step` (pipeline/model/decoders/plain.py): its own maths
on the same weights, holding the same lock and counting itself with `count_pass`.
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError

from pipeline.core.errors import InputError
from pipeline.model.dims import ModelDims
from pipeline.model.passes import note_pass
from pipeline.model.prefill_record import PREFILL_CHUNK
from pipeline.model.registry import ModelSpec, resolve
from pipeline.model.weights_cache import check_model_folder, ensure_weights_cache, load_tokenizer

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    """The model, its tokenizer and the lock that serialises every forward pass (a LanguageModel,
    pipeline.model.interface).

    Hooks are global state on the model, so two browser sessions must never run it at once.
    """

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    name: str
    device: torch.device
    lock: threading.RLock = field(default_factory=threading.RLock)
    calls: int = 0  # forward passes run through `forward` by everyone (pages prove reuse with it)
    spec: ModelSpec | None = None  # the registry's record (instruct or base, chat format); None: a test's model
    weights: str = "fp32"  # the weight format (pipeline.model.weight_formats): fp32 as loaded, bf16, int8

    @property
    def config(self) -> PretrainedConfig:
        return self.model.config

    @property
    def dims(self) -> ModelDims:
        if not hasattr(self, "_dims"):
            try:
                self._dims = ModelDims.from_config(self.config, self.name, self.model.dtype, self.device,
                                                   weights=self.weights)
            except AttributeError as e:  # an architecture whose config names things otherwise (GPT-2's n_head)
                raise InputError("model", f"{self.name}'s config lacks what the pipeline reads ({e}).") from None
        return self._dims

    def forward(self, input_ids, *, cache=None, use_cache: bool = True, logits_to_keep: int = 1,
                attention: str = "sdpa", **kwargs):
        """One forward pass: (B, T) ids (a list, a list of lists or a tensor) -> the HF output.

        attention="eager" returns attention weights (captures need them); "sdpa" never builds an
        (H, T, T) matrix in memory. Positions continue from the cache's length.
        """
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        ids = ids[None] if ids.dim() == 1 else ids  # (B, T)
        kwargs = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in kwargs.items()}
        with self.lock, torch.inference_mode(), attention_implementation(self.model, attention):
            out = self.model(input_ids=ids.to(self.device), cache=cache, use_cache=use_cache,
                             logits_to_keep=logits_to_keep, **kwargs)
            self.count_pass()
        return out

    def forward_chunked(self, ids: list[int], kv_cache=None):
        """A prompt (after what `kv_cache` already holds) in passes of PREFILL_CHUNK tokens with SDPA, the
        lock released between them. Returns (logits (V,) for the token after it, the KV cache)."""
        for start in range(0, len(ids), PREFILL_CHUNK):
            out = self.forward([ids[start:start + PREFILL_CHUNK]], cache=kv_cache)  # (1, chunk)
            kv_cache = out.cache
        return out.logits[0, -1].float(), kv_cache  # float32 already, but for bf16 weights

    def count_pass(self) -> None:
        """One forward pass ran (call it holding `lock`): everyone's count and the caller's own."""
        self.calls += 1
        note_pass()


@contextmanager
def attention_implementation(model, name: str):
    """Switch the attention kernel for one forward pass and restore it afterwards."""
    before = model.config._attn_implementation
    if name != before:
        model.set_attn_implementation(name)
    try:
        yield
    finally:
        if model.config._attn_implementation != before:
            model.set_attn_implementation(before)


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_model(source: str | None = None, log=None, tokenizer=None) -> LoadedModel:
    """Load a model ready for capture: None (the default, SmolLM2), a registry key ('gemma-3-270m')
    or a local HF folder. tokenizer: one already loaded from the same folder (the app's handle has
    it), else loaded here."""
    from pipeline.model.hf_imports import transformers_lock, transformers_names

    AutoModelForCausalLM, = transformers_names("AutoModelForCausalLM")
    log = log or (lambda msg: print(msg, file=sys.stderr))
    spec = resolve(source)
    folder = ensure_weights_cache(spec, log=log)
    check_model_folder(folder)
    kwargs = dict(attn_implementation="sdpa", dtype=torch.float32)
    if torch.cuda.device_count() > 1:
        kwargs["device_map"] = "auto"  # spread a larger model across the GPUs with accelerate
    try:
        with transformers_lock:  # building the model imports more of transformers as it goes
            model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        tokenizer = tokenizer or load_tokenizer(folder, spec)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as e:  # a truncated weights file, ...
        hint = (f" Delete {folder} to convert the weights again." if not spec.is_local else "")
        raise InputError("model", f"{folder} could not be loaded ({type(e).__name__}: {str(e)[:300]}).{hint}") from None
    device = pick_device()
    if "device_map" not in kwargs:
        model.to(device)
    else:
        device = model.get_input_embeddings().weight.device
    model.eval()
    add_stop_tokens(model, tokenizer, spec.stop_tokens)
    return LoadedModel(model=model, tokenizer=tokenizer, name=spec.display_name, device=device, spec=spec)


def add_stop_tokens(model, tokenizer, names: tuple[str, ...]) -> None:
    """Tokens that end an answer besides EOS (Gemma's `<end_of_turn>`), added to the generation config's
    eos_token_id: our decode loop and HF's generate then stop at the same tokens."""
    eos = model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    for name in names:
        token_id = tokenizer.convert_tokens_to_ids(name)
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise InputError("model", f"the tokenizer has no {name!r} token (its stop token).")
        if token_id not in eos:
            eos.append(token_id)
    model.generation_config.eos_token_id = eos if len(eos) != 1 else eos[0]


_shared: dict[str, LoadedModel] = {}
_shared_lock = threading.Lock()


_converted: dict[tuple[str, str], tuple[LoadedModel, LoadedModel]] = {}  # (model key, weights) -> (fp32, its copy)


def shared_model(source: str | None = None, tokenizer=None, weights: str = "fp32") -> LoadedModel:
    """One loaded model per model, weight format and process (tests, CLI and the app all reuse it); `source` as
    load_model's. Another format than fp32 is a copy of the fp32 model converted on first use
    (pipeline.model.weight_formats): at most len(WEIGHT_FORMATS) - 1 more copies per model."""
    from pipeline.model.weight_formats import check_weights

    key = resolve(source).key  # None, 'smollm2-135m' and 'SmolLM2-135M-Instruct' are one model
    if check_weights(weights) != "fp32":
        base = shared_model(source, tokenizer)
        with base.lock:  # copied while no capture has hooks on it
            made = _converted.get((key, weights))
            if made is None or made[0] is not base:  # a copy of another fp32 model (a test's tiny one) is not it
                made = _converted[(key, weights)] = (base, converted_copy(base, weights))
            return made[1]
    with _shared_lock:
        if key not in _shared:
            _shared[key] = load_model(source, tokenizer=tokenizer)
        return _shared[key]


def converted_copy(base: LoadedModel, weights: str) -> LoadedModel:
    """A copy of a loaded model in another weight format: its own network and lock, the same tokenizer."""
    import copy

    from pipeline.model.weight_formats import convert

    model = convert(copy.deepcopy(base.model), weights)
    return LoadedModel(model=model, tokenizer=base.tokenizer, name=base.name, device=base.device, spec=base.spec,
                       weights=weights)
