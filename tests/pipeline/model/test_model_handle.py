"""The model handle: a stored run is drawn from the model's files alone, before torch and the network
have loaded; everything else is the loaded model's."""
import os
import subprocess
import sys

import pytest
from kit.paths import source_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_fresh_python(code: str, timeout: float = 600) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_vocabulary_answers_like_the_transformers_tokenizer_for_every_id(tokenizer):
    from pipeline.model.vocabulary import Vocabulary
    from pipeline.model.weights_cache import weights_cache_dir

    vocab = Vocabulary.from_folder(weights_cache_dir())
    every_id = list(range(len(tokenizer)))
    assert vocab.convert_ids_to_tokens(every_id) == tokenizer.convert_ids_to_tokens(every_id)
    assert vocab.all_special_ids == tokenizer.all_special_ids


def test_chips_drawn_from_the_vocabulary_equal_those_from_the_tokenizer(tokenizer):
    from pipeline.model.vocabulary import Vocabulary
    from pipeline.model.weights_cache import weights_cache_dir
    from pipeline.text.pieces import token_pieces
    from pipeline.text.unfinished import continuation_label

    vocab = Vocabulary.from_folder(weights_cache_dir())
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "토마토는 과일이야? 🍅 <|im_end|> naïve"}],
                                        tokenize=True, return_dict=False)
    assert token_pieces(vocab, ids) == token_pieces(tokenizer, ids)
    assert [continuation_label(vocab, ids[:k], ids[k]) for k in range(1, len(ids))] == \
           [continuation_label(tokenizer, ids[:k], ids[k]) for k in range(1, len(ids))]


def test_config_dims_are_the_model_cards_numbers():
    """SmolLM2-135M: 30 layers, 9 query heads sharing 3 key/value heads, width 576, vocabulary 49,152."""
    from pipeline.model.handle import ModelHandle

    m = ModelHandle().config_dims
    assert (m.L, m.H, m.Hkv, m.Dh, m.D, m.V, m.context_window) == (30, 9, 3, 64, 576, 49152, 8192)
    assert m.kv_bytes(1) == 2 * 30 * 3 * 64 * 4  # float32: 46,080 B per token
    assert m.device == ""  # not known before the network has loaded


def test_the_app_and_a_stored_run_import_without_torch():
    """What the first page needs — the pages' shared modules, the model's name, dimensions and token
    names, and a whole Trace record unpickled — never imports torch or transformers."""
    code = """
import pickle, sys
import numpy as np
import views.request.runs, views.server.warm_up, views.chrome.frame  # every module the pages share
from pipeline.model.handle import ModelHandle
from pipeline.run.record import Trace
from pipeline.model.prefill_record import Prefill
from pipeline.stages.decode_record import Decode, Step
h = ModelHandle()
print(h.name, h.config_dims.L, h.vocabulary.convert_ids_to_tokens([2])[0], h.is_loaded)
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    name, layers, end, loaded, heavy = run_fresh_python(code, timeout=120).split(maxsplit=4)
    assert (name, layers, end, loaded) == ("SmolLM2-135M-Instruct", "30", "<|im_end|>", "False")
    assert heavy.strip() == "[]"


@pytest.mark.model
def test_the_handle_answers_with_the_shared_loaded_model(lm):
    from pipeline.model.handle import ModelHandle

    handle = ModelHandle()
    assert handle.loaded() is lm  # one network per process, whoever asked first
    assert handle.tokenizer is lm.tokenizer and handle.dims == lm.dims
    assert handle.config_dims == lm.dims  # once loaded, the real dims (device included)
    from pipeline.model.passes import PassCounter, counting_passes

    with counting_passes(PassCounter()) as mine:  # this thread's passes (a warm-up may share the model)
        out = handle.forward([[1, 2, 3]], use_cache=False)  # delegated: the lock, the kernel, the count
    assert mine.n == 1 and tuple(out.logits.shape) == (1, 1, lm.dims.V)
    fresh = ModelHandle()
    assert not fresh.is_loaded and fresh.device_label.startswith("(loading")
    fresh.start_loading()
    fresh._loader.join(timeout=600)
    assert fresh.is_loaded and fresh.load_error is None and fresh.device_label == str(lm.device)


@pytest.mark.app
def test_a_fresh_server_draws_the_stored_default_run_before_the_network_loads():
    """Cold start: with the default request's run stored, a fresh process draws Journey completely —
    the request id, every prompt token's chip — without importing torch."""
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest
    from views.request.session import DEFAULT_QUESTION, request_key
    from views.server.state import run_store

    request = ChatRequest.from_question(DEFAULT_QUESTION)
    trace = run_store().get_or_run(request_key(request), lambda: run_trace(request))  # stored on disk too
    code = """
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file('views/pages/journey.py', default_timeout=600)
at.run()
assert not at.exception, at.exception
page = " ".join(str(m.value) for m in at.markdown) + " ".join(str(c.value) for c in at.caption)
print('torch' in sys.modules, 'This run took' in page, page.count('padding:1px 5px'), page.count('{rid}'))
""".replace("{rid}", trace.request.id)
    torch_loaded, complete, chips, rid_seen = run_fresh_python(code).split()[-4:]
    assert torch_loaded == "False" and complete == "True"
    assert int(chips) >= len(trace.tokens) and int(rid_seen) >= 1


RACE = """
import sys, threading, time
import views.request.runs, views.server.warm_up, views.chrome.frame  # every module the pages share
from pipeline.model.handle import ModelHandle
h, errors = ModelHandle(), []
def worker():
    time.sleep({delay})
    try:
        __import__("{module}")
    except Exception as e:
        errors.append(repr(e)[:200])
h.start_loading()
t = threading.Thread(target=worker)
t.start(); t.join(); h._loader.join()
errors += [repr(h.load_error)[:200]] if h.load_error else []
print("ERRORS", errors)
"""


@pytest.mark.model
@pytest.mark.parametrize("delay,module", [(0.3, "pipeline.stages.branch"), (1.5, "pipeline.stages.branch"),
                                          (0.0, "pipeline.prompt_cache.playback")])
def test_the_background_load_and_a_queue_job_import_transformers_together(delay, module):
    """The network loading in the background while the warm-up imports the prompt cache: two threads
    resolving transformers' lazy names at once got "cannot import name ..." (2 of these 3 timings
    failed before the imports were serialised; a race, so a pass is evidence, not proof). The worker's
    sleep is not a wait for anything: it places the second import at a different moment of the load."""
    out = run_fresh_python(RACE.format(delay=delay, module=module), timeout=300)
    assert "ERRORS []" in out, out


def test_a_broken_config_is_reported_not_loaded_around(tmp_path):
    """A property that fails must not fall through to loading the network (a misleading 'could not be
    loaded'), and attributes of the loaded model cannot be set on the handle by mistake."""
    from pipeline.model.handle import ModelHandle

    (tmp_path / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2}')
    handle = ModelHandle(str(tmp_path))
    with pytest.raises(AttributeError, match="reading the model's files for `config_dims` failed"):
        handle.config_dims  # noqa: B018
    assert not handle.is_loaded and handle._loader is None
    with pytest.raises(AttributeError, match="on the loaded model"):
        handle.lock = None


def test_the_model_name_is_written_once_in_the_code():
    """Every default that names the model reads weights_cache.DEFAULT_MODEL_NAME: the string itself
    appears as a value in one place under pipeline/ (docstrings aside), the model registry."""
    import ast
    from pathlib import Path

    from pipeline.model.weights_cache import DEFAULT_MODEL_NAME
    from pipeline.stages.request import ChatRequest

    places = []
    for path in sorted(Path(ROOT, "pipeline").rglob("*.py")):
        tree = source_tree(path)
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        places += [path.name for n in ast.walk(tree) if isinstance(n, ast.Constant)
                   and n.value == DEFAULT_MODEL_NAME and id(n) not in docs]
    assert places == ["registry.py"], places
    assert ChatRequest.from_question("Hi").model == DEFAULT_MODEL_NAME
