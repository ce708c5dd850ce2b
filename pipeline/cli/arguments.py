"""What every command shares: the request its QUESTION and --system make, the --model check made before torch
is imported, and output files written atomically as strict JSON."""
from __future__ import annotations

import json
import os

from pipeline.core.errors import InputError
from pipeline.core.files import write_atomic
from pipeline.stages.request import ChatRequest, GenerationOptions, check_text


def write_output(path: str, field: str, write, what: str) -> None:
    """Write an output file atomically; a failure (a full disk) keeps the old file and names the field."""
    try:
        write_atomic(path, write, text=True)
    except OSError as e:
        raise InputError(field, f"could not write {what} to {path} ({e.strerror or e}); "
                                "the file there was left as it was.") from None


def write_json(path: str, obj, what: str) -> None:
    """Strict JSON (allow_nan=False): NaN or infinity, which json.dump would write as bare NaN and Infinity that no
    JSON reader takes, is refused and nothing is written."""
    try:
        write_output(path, "json", lambda f: json.dump(obj, f, ensure_ascii=False, indent=1, allow_nan=False), what)
    except ValueError as e:
        if "Out of range float" not in str(e):  # json's words for NaN and infinity; anything else is a bug
            raise
        raise InputError("json", f"{what} holds a number JSON cannot write (NaN or infinity); nothing was "
                                 f"written to {path}.") from None


def request_from_args(args, options: GenerationOptions) -> ChatRequest:
    """The chat request QUESTION and --system make (`--plain`: the question as it is, no chat format). Each is
    checked first, so that its error names the option typed rather than the message it became (messages[0])."""
    if args.system is not None:
        check_text("system", args.system)
    if not check_text("question", args.question).strip():
        raise InputError("question", "is empty; give a question.")
    return ChatRequest.from_question(args.question, system=args.system, options=options,
                                     prompt_format="plain" if args.plain else "chat",
                                     weights=getattr(args, "weights", "fp32"))


def check_model_arg(name: str | None) -> None:
    """A registry key or a folder (pipeline.model.registry.resolve refuses anything else, naming both) whose
    config.json reads as a model's: checked before torch is imported (~4 s), so bad input is refused at once."""
    from pathlib import Path

    from pipeline.model.registry import resolve
    from pipeline.model.weights_cache import check_model_folder

    if name is not None and resolve(name).is_local:
        if not os.path.isdir(name):
            raise InputError("model", f"{name} is not a folder (give a local Hugging Face model folder).")
        check_model_folder(Path(name))
