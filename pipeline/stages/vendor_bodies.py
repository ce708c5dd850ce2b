"""The request as a vendor's API receives it: OpenAI's and Anthropic's JSON bodies, and the one option neither has."""
from __future__ import annotations

from pipeline.stages.request import ChatRequest, GenerationOptions, logit_bias_body

PENALTY_NOTE = ("Anthropic's Messages API has none of the penalties nor a logit bias, so its body leaves them out; "
                "OpenAI has presence_penalty, frequency_penalty and logit_bias but no repetition_penalty, which "
                "vLLM and Hugging Face transformers accept.")


def openai_style(request: ChatRequest) -> dict:
    """OpenAI-style body: the system prompt is a message with the system role."""
    o = request.options
    body = {
        "model": request.model,
        "messages": [{"role": r, "content": c} for r, c in request.messages],
        "max_tokens": o.max_new_tokens,
        "temperature": o.temperature,
        "top_p": o.top_p,
        "stream": True,
    }
    if o.seed is not None:
        body["seed"] = o.seed
    if o.stop:
        body["stop"] = list(o.stop)
    if o.presence_penalty:
        body["presence_penalty"] = o.presence_penalty
    if o.frequency_penalty:
        body["frequency_penalty"] = o.frequency_penalty
    if o.logit_bias:
        body["logit_bias"] = logit_bias_body(o)
    return body


def repetition_body(options: GenerationOptions) -> dict:
    """The one option neither OpenAI nor Anthropic has: {"repetition_penalty": p} as vLLM's OpenAI-compatible
    server takes it beside the OpenAI fields (and Hugging Face's generate as an argument); {} when it is off."""
    p = options.repetition_penalty
    return {"repetition_penalty": p} if p != 1 else {}


def anthropic_style(request: ChatRequest) -> dict:
    """Anthropic-style body: the system prompt is a top-level field, not a message."""
    o = request.options
    body = {"model": request.model, "max_tokens": o.max_new_tokens}
    if request.system is not None:
        body["system"] = request.system
    body["messages"] = [{"role": r, "content": c} for r, c in request.messages if r != "system"]
    body.update({"temperature": o.temperature, "top_p": o.top_p, "stream": True})
    if o.top_k:
        body["top_k"] = o.top_k
    if o.stop:
        body["stop_sequences"] = list(o.stop)
    return body
