"""Errors in each provider's own shape, always naming the field at fault; never a traceback.

    400 a field is malformed or out of range   401 no key or a wrong one   404 unknown model or path, API off
    413 the body is too large                  422 well-formed, but the model cannot serve it (prompt past the
    429 this client has too many requests          window or the server's cap, a schema the grammar engine refuses)
        in the queue (retry-after)
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import InputError

OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
                500: "server_error"}
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                   413: "request_too_large", 422: "invalid_request_error", 429: "rate_limit_error",
                   500: "api_error"}


@dataclass
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None  # the field at fault, as the client wrote it: messages[2].content
    retry_after_s: int | None = None  # 429: when a retry has a chance

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message

    def openai_body(self) -> dict:
        """{"error": {"message", "type", "param", "code"}}: what the openai SDK reads into its exception."""
        return {"error": {"message": str(self), "type": OPENAI_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": None}}

    def anthropic_body(self) -> dict:
        """{"type": "error", "error": {"type", "message"}}: Anthropic's shape (no param: the message names it)."""
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(self.status, "invalid_request_error"),
                                           "message": str(self)}}

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)} if self.retry_after_s is not None else {}


# The run's own field names -> the API's (GenerationOptions and ChatRequest name theirs)
API_NAMES = {"max_new_tokens": "max_tokens", "stop": "stop", "temperature": "temperature", "top_p": "top_p",
             "top_k": "top_k", "seed": "seed", "logit_bias": "logit_bias"}
TOO_BIG_FOR_MODEL = "the prompt is"  # check_fits' words: the prompt (or prompt + answer) past what the model takes


def from_input_error(e: InputError, names: dict[str, str] | None = None) -> ApiError:
    """An InputError of the run (pipeline.stages.request, the queue, the engine) as the API's error: the prompt or
    answer past the window or the server's cap, or a schema the grammar engine refuses, is 422, anything else 400;
    the field under the API's name."""
    field = {**API_NAMES, **(names or {})}.get(e.field, e.field)
    unservable = e.field == "json_schema" or e.message.startswith(TOO_BIG_FOR_MODEL) or " exceed the " in e.message
    status = 422 if unservable else 400
    return ApiError(status, e.message, field)
