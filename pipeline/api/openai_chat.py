"""POST /v1/chat/completions: OpenAI's body -> an ApiCall; the finished runs -> a chat.completion, or its stream's
chunks (chat.completion.chunk). usage.prompt_tokens_details.cached_tokens: the prompt positions whose K/V this server
reused (the run's record, reused_positions)."""
from __future__ import annotations

import json
import time

from pipeline.api import fields
from pipeline.api.call import MAX_DRAWS, SEEDS, ApiCall, ModelInfo, conversation, draws, pick_model
from pipeline.api.errors import ApiError, from_input_error
from pipeline.core.errors import InputError
from pipeline.stages.request import (
    APP_MAX_NEW_TOKENS,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    GenerationOptions,
)

SUPPORTED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n",
             "logprobs", "top_logprobs", "response_format", "stream", "stream_options", "presence_penalty",
             "frequency_penalty", "logit_bias"}
IGNORED = {"user", "store", "metadata", "service_tier", "safety_identifier", "prompt_cache_key"}
REFUSED = {"tools": "no tool calls (the models here were not trained for them).",
           "tool_choice": "no tool calls.", "functions": "no function calls.", "function_call": "no function calls.",
           "parallel_tool_calls": "no tool calls.", "audio": "text only.", "modalities": "text only.",
           "prediction": "no predicted outputs.", "reasoning_effort": "the models here do not reason apart.",
           "web_search_options": "no web search.", "verbosity": "no verbosity setting."}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_TOP_LOGPROBS = 20  # OpenAI's bound
DEFAULT_TEMPERATURE = 1.0  # OpenAI's default (the pages start at 0: greedy)
FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


def parse(body: dict, catalogue: dict[str, ModelInfo]) -> ApiCall:
    fields.refuse_unknown(body, SUPPORTED, IGNORED, REFUSED)
    if "model" not in body:
        raise ApiError(400, "is required (GET /v1/models lists the models).", "model")
    model = pick_model(body["model"], catalogue)
    system, turns = _messages(body.get("messages"))
    options = _options(body, model)
    n = fields.whole("n", _given(body, "n", 1), 1, MAX_DRAWS)
    stream = fields.flag("stream", _given(body, "stream", False))
    stream_options = body.get("stream_options")
    include_usage = False
    if stream_options is not None:
        if not stream:
            raise ApiError(400, "is only allowed with stream: true.", "stream_options")
        stream_options = fields.obj("stream_options", stream_options)
        for name in stream_options:
            if name not in ("include_usage", "include_obfuscation"):
                raise ApiError(400, "is not a stream option this server knows.", f"stream_options.{name}")
        include_usage = fields.flag("stream_options.include_usage", stream_options.get("include_usage", False))
    logprobs = fields.flag("logprobs", _given(body, "logprobs", False))
    top = body.get("top_logprobs")
    top_logprobs = 0 if top is None else fields.whole("top_logprobs", top, 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise ApiError(400, "needs logprobs: true.", "top_logprobs")
    schema = _schema(body.get("response_format"))
    conv = conversation(turns, system)
    return ApiCall(draws(conv, options, model, n, body.get("seed") is not None), model, stream, include_usage,
                   logprobs, top_logprobs, schema)


def _messages(value) -> tuple[str | None, list[tuple[str, str, str]]]:
    messages = fields.array("messages", value, fields.MAX_API_MESSAGES)
    system, turns = None, []
    for i, message in enumerate(messages):
        name = f"messages[{i}]"
        message = fields.obj(name, message)
        role = message.get("role")
        if role not in ROLES:
            raise ApiError(400, f"must be one of system, developer, user, assistant, got {fields.shown_value(role)}"
                                " (tool messages need tool calls, which this server does not make).", f"{name}.role")
        for extra in message:
            if extra not in ("role", "content", "name"):
                raise ApiError(400, "is not supported by this server (text messages only).", f"{name}.{extra}")
        content = _content(f"{name}.content", message.get("content"))
        if ROLES[role] == "system":
            if turns or system is not None:
                raise ApiError(400, "one system (or developer) message, first, is what the pages run; this one "
                                    "comes later.", f"{name}.role")
            system = content
        else:
            turns.append((ROLES[role], content, f"{name}.content"))
    return system, turns


def _content(name: str, content) -> str:
    """A string, or content parts of type text (joined); any other part is refused, naming it."""
    if isinstance(content, list):
        parts = fields.array(name, content, fields.MAX_API_MESSAGES)
        texts = []
        for j, part in enumerate(parts):
            part = fields.obj(f"{name}[{j}]", part)
            if part.get("type") != "text":
                raise ApiError(400, f"only parts of type text are read here, got {fields.shown_value(part.get('type'))}"
                                    ".", f"{name}[{j}].type")
            texts.append(fields.text(f"{name}[{j}].text", part.get("text")))
        content = "".join(texts)
    return fields.text(name, content)


def _options(body: dict, model: ModelInfo) -> GenerationOptions:
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise ApiError(400, "give max_tokens or max_completion_tokens, not both.", "max_completion_tokens")
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_new = body.get(name)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None:
        for k, s in enumerate(fields.array("stop", stop, MAX_STOP_STRINGS)):
            if fields.text(f"stop[{k}]", s, MAX_STOP_CHARS) == "":
                raise ApiError(400, "a stop string cannot be empty.", f"stop[{k}]")
    seed = body.get("seed")
    try:
        return GenerationOptions(
            max_new_tokens=APP_MAX_NEW_TOKENS if max_new is None else fields.whole(name, max_new, 1,
                                                                                   APP_MAX_NEW_TOKENS),
            temperature=fields.number("temperature", _given(body, "temperature", DEFAULT_TEMPERATURE), 0, 2),
            top_p=fields.number("top_p", _given(body, "top_p", 1.0), 0.01, 1),
            seed=0 if seed is None else fields.whole("seed", seed, 0, SEEDS - 1),
            stop=tuple(stop or ()),
            presence_penalty=fields.number("presence_penalty", _given(body, "presence_penalty", 0.0), -2, 2),
            frequency_penalty=fields.number("frequency_penalty", _given(body, "frequency_penalty", 0.0), -2, 2),
            logit_bias=fields.obj("logit_bias", _given(body, "logit_bias", {})))
    except InputError as e:
        raise from_input_error(e, {"max_new_tokens": name}) from None


def _given(body: dict, name: str, default):
    """A field's value, or its default when absent or null (the SDKs send null for "not given")."""
    value = body.get(name)
    return default if value is None else value


def _schema(value) -> str | None:
    """response_format -> the JSON schema the answer is decoded under, as text; None for plain text."""
    if value is None:
        return None
    value = fields.obj("response_format", value)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind != "json_schema":
        raise ApiError(400, f"must be text, json_object or json_schema, got {fields.shown_value(kind)}.",
                       "response_format.type")
    spec = fields.obj("response_format.json_schema", value.get("json_schema"))
    schema = fields.obj("response_format.json_schema.schema", spec.get("schema", {}))
    return json.dumps(schema, indent=1)


# ---- responses ----------------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def completion(call_id: str, model: str, choices: list[dict], usage_body: dict, run_link: str) -> dict:
    """The whole answer: choices [{text, finish_reason, logprobs}] as choice(...) made them."""
    return {"id": call_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage_body, "system_fingerprint": None, "service_tier": "default",
            "tpe_run": run_link}


def choice(index: int, text: str, finish_reason: str, logprobs: list[dict] | None) -> dict:
    return {"index": index, "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
            "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
            "finish_reason": FINISH.get(finish_reason, "stop")}


def chunk(call_id: str, model: str, created: int, run_link: str, index: int | None = None, delta: dict | None = None,
          finish_reason: str | None = None, usage_body: dict | None = None, include_usage: bool = False,
          logprobs: list[dict] | None = None) -> dict:
    """One chat.completion.chunk: a choice's delta (or its end), or the last one with the usage and no choice.
    logprobs: the entries of the tokens that made this delta (a stream asked with logprobs)."""
    out = {"id": call_id, "object": "chat.completion.chunk", "created": created, "model": model,
           "system_fingerprint": None, "choices": [], "tpe_run": run_link}
    if index is not None:
        out["choices"] = [{"index": index, "delta": delta or {},
                           "logprobs": None if logprobs is None else {"content": logprobs, "refusal": None},
                           "finish_reason": FINISH.get(finish_reason) if finish_reason else None}]
    if include_usage:
        out["usage"] = usage_body
    return out
