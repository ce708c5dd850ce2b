"""POST /v1/messages: Anthropic's body -> an ApiCall; the finished run -> a message, or its stream's events
(message_start, content_block_start, ping, content_block_delta..., content_block_stop, message_delta, message_stop).

usage: cache_read_input_tokens are the prompt positions whose K/V this server reused (the run's reused_positions);
with cache_control on a block, cache_creation_input_tokens are the rest of the prompt, which the prefix cache keeps
for the next request (this server caches every prompt's full blocks, with or without a breakpoint); input_tokens
are the tokens neither read nor written, as Anthropic counts them."""
from __future__ import annotations

import json

from pipeline.api import fields
from pipeline.api.call import ApiCall, ModelInfo, conversation, draws, pick_model
from pipeline.api.errors import ApiError, from_input_error
from pipeline.core.errors import InputError
from pipeline.stages.request import APP_MAX_NEW_TOKENS, MAX_STOP_CHARS, MAX_STOP_STRINGS, GenerationOptions

SUPPORTED = {"model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k", "stop_sequences", "stream",
             "cache_control"}
# (the anthropic SDK 2.x sends temperature, top_p and top_k only through extra_body: docs/api.md shows how)
IGNORED = {"metadata", "service_tier", "inference_geo", "speed", "diagnostics", "user_profile_id", "workspace_id"}
REFUSED = {"tools": "no tool use (the models here were not trained for it).", "tool_choice": "no tool use.",
           "thinking": "the models here do not think apart.", "mcp_servers": "no MCP servers.",
           "container": "no code execution.", "context_management": "no context management.",
           "output_config": "no output settings (a JSON schema: POST /v1/chat/completions' response_format)."}
STOP_REASONS = {"eos": "end_turn", "stop": "stop_sequence", "length": "max_tokens"}
DEFAULT_TEMPERATURE = 1.0  # Anthropic's default


def parse(body: dict, catalogue: dict[str, ModelInfo]) -> ApiCall:
    fields.refuse_unknown(body, SUPPORTED, IGNORED, REFUSED)
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise ApiError(400, "is required.", name)
    model = pick_model(body["model"], catalogue)
    marks = [0]
    if body.get("cache_control") is not None:  # the top-level mark: cache the whole prompt (automatic caching)
        _cache_control("cache_control", body["cache_control"])
        marks[0] += 1
    system = _system(body.get("system"), marks)
    turns = []
    for i, message in enumerate(fields.array("messages", body["messages"], fields.MAX_API_MESSAGES)):
        name = f"messages.{i}"
        message = fields.obj(name, message)
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise ApiError(400, f"must be user or assistant, got {fields.shown_value(role)} (the system prompt is the "
                                "top-level system field).", f"{name}.role")
        for extra in message:
            if extra not in ("role", "content"):
                raise ApiError(400, "is not a message field this server knows.", f"{name}.{extra}")
        turns.append((role, _blocks(f"{name}.content", message.get("content"), marks), f"{name}.content"))
    stream = fields.flag("stream", body["stream"] if body.get("stream") is not None else False)
    conv = conversation(turns, system)
    return ApiCall(draws(conv, _options(body, model), model, 1, False), model, stream, cache_marks=marks[0])


def _system(value, marks: list[int]) -> str | None:
    if value is None:
        return None
    return _blocks("system", value, marks)


def _blocks(name: str, content, marks: list[int]) -> str:
    """A string, or text blocks (joined); cache_control on a block is counted; any other block is refused."""
    if isinstance(content, list):
        texts = []
        for j, block in enumerate(fields.array(name, content, fields.MAX_API_MESSAGES)):
            where = f"{name}.{j}"
            block = fields.obj(where, block)
            if block.get("type") != "text":
                raise ApiError(400, f"only text blocks are read here, got {fields.shown_value(block.get('type'))}.",
                               f"{where}.type")
            for extra in block:
                if extra not in ("type", "text", "cache_control", "citations"):
                    raise ApiError(400, "is not a text block field this server knows.", f"{where}.{extra}")
            if block.get("cache_control") is not None:
                _cache_control(f"{where}.cache_control", block["cache_control"])
                marks[0] += 1
            texts.append(fields.text(f"{where}.text", block.get("text")))
        content = "".join(texts)
    return fields.text(name, content)


def _cache_control(name: str, control) -> None:
    control = fields.obj(name, control)
    if control.get("type") != "ephemeral":
        raise ApiError(400, "must be ephemeral.", f"{name}.type")
    if control.get("ttl", "5m") not in ("5m", "1h"):
        raise ApiError(400, "must be 5m or 1h.", f"{name}.ttl")


def _options(body: dict, model: ModelInfo) -> GenerationOptions:
    stop = body.get("stop_sequences")
    if stop is not None:
        for k, s in enumerate(fields.array("stop_sequences", stop, MAX_STOP_STRINGS)):
            if fields.text(f"stop_sequences.{k}", s, MAX_STOP_CHARS) == "":
                raise ApiError(400, "a stop sequence cannot be empty.", f"stop_sequences.{k}")
    given = lambda name, default: default if body.get(name) is None else body[name]  # noqa: E731
    try:
        return GenerationOptions(
            max_new_tokens=fields.whole("max_tokens", body["max_tokens"], 1, APP_MAX_NEW_TOKENS),
            temperature=fields.number("temperature", given("temperature", DEFAULT_TEMPERATURE), 0, 1),
            top_p=fields.number("top_p", given("top_p", 1.0), 0.01, 1),
            top_k=fields.whole("top_k", given("top_k", 0), 0, model.vocab_size), seed=0, stop=tuple(stop or ()))
    except InputError as e:
        raise from_input_error(e, {"stop": "stop_sequences"}) from None


# ---- responses ----------------------------------------------------------------------------------
def usage(prompt_tokens: int, output_tokens: int, reused: int, cache_marks: int) -> dict:
    created = max(0, prompt_tokens - reused) if cache_marks else 0
    return {"input_tokens": prompt_tokens - reused - created, "output_tokens": output_tokens,
            "cache_read_input_tokens": reused, "cache_creation_input_tokens": created}


def message(call_id: str, model: str, text: str | None, finish_reason: str | None, stop_sequence: str | None,
            usage_body: dict, run_link: str) -> dict:
    """The whole message (text None: message_start's empty one)."""
    return {"id": call_id, "type": "message", "role": "assistant", "model": model,
            "content": [] if text is None else [{"type": "text", "text": text, "citations": None}],
            "stop_reason": STOP_REASONS.get(finish_reason) if finish_reason else None,
            "stop_sequence": stop_sequence, "usage": usage_body, "tpe_run": run_link}


def stop_sequence_found(full_text: str, text: str, stops: tuple[str, ...]) -> str | None:
    """Which stop sequence ended the answer: the one that follows the answer's text in the whole decoded text."""
    return next((s for s in stops if full_text.startswith(text + s)), None)


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
