"""The two models the Compare models page and the Tokens page put side by side: the model this session
picked (server_state.get_model) and another registry model. Both come from server_state's one handle per
model and server, so a model is never loaded twice; the network loads only when a page runs it."""
from __future__ import annotations

from pipeline.model.handle import ModelHandle
from pipeline.model.registry import MODELS
from views.server.state import get_model


def model_handle(key: str) -> ModelHandle:
    """The handle of model `key` (server_state.get_model(key): one per model and server)."""
    return get_model(key)


def compared_keys() -> tuple[str, str]:
    """The picked model first, then the first other registry model (SmolLM2 and Gemma)."""
    own = get_model().spec.key
    return own, next(k for k in MODELS if k != own)
