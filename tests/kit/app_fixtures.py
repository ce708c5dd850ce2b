"""Fixtures of the app on the tiny models: their weights cache, a server's cache folder, AppTest through the
app's own path; and a real-model server's cache folder with stores of its own (a pytest plugin)."""
import threading

import pytest

from kit.apptest import clear_streamlit_caches
from kit.tiny_models import TINY_APP_LAYOUT, copy_tokenizer_files, make_tiny_lm


@pytest.fixture(scope="session")
def tiny_app_model(tokenizer, tmp_path_factory):
    """(cache root, LoadedModel): the tiny model saved where the app looks for the converted weights
    (TPE_CACHE_DIR/smollm2-135m-instruct, as pipeline.model.weights_cache lays it out), so an app
    pointed at that root reads its config and tokenizer files unchanged."""
    from pipeline.model.weights_cache import DEFAULT_MODEL_NAME, cache_ready, weights_cache_dir

    lm = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    lm.name = DEFAULT_MODEL_NAME  # what the app calls the model of its weights cache
    root = tmp_path_factory.mktemp("tiny-cache")
    folder = root / weights_cache_dir().name
    lm.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert cache_ready(folder)
    return root, lm


@pytest.fixture(scope="session")
def tiny_app_gemma(tiny_app_model):
    """A tiny random-weight Gemma 3 with Gemma's real tokenizer, saved beside the tiny SmolLM2 as Gemma's
    converted weights: pages that show both models (Tokens, Compare models) or a Gemma pick read its files
    instead of converting the real GGUF (~45 s). None where Gemma's tokenizer is not converted yet."""
    import torch

    from pipeline.model.loader import LoadedModel
    from pipeline.model.registry import GEMMA3
    from pipeline.model.weights_cache import cache_ready, load_tokenizer, weights_cache_dir

    real = weights_cache_dir(GEMMA3)
    if not (real / "tokenizer.json").exists():
        return None
    from kit.tiny_models import tiny_gemma3

    tokenizer = load_tokenizer(real, GEMMA3)
    folder = tiny_app_model[0] / GEMMA3.cache_folder
    model = tiny_gemma3(tokenizer).eval()
    model.save_pretrained(folder)
    copy_tokenizer_files(real, folder)
    assert cache_ready(folder)
    return LoadedModel(model=model, tokenizer=tokenizer, name=GEMMA3.display_name, device=torch.device("cpu"))


def _tiny_server_folder(tiny_app_model, tiny_app_gemma, tmp_path_factory):
    from pipeline.model.registry import GEMMA3
    from pipeline.model.weights_cache import weights_cache_dir

    root = tmp_path_factory.mktemp("tiny-server-cache")
    names = [weights_cache_dir().name] + ([GEMMA3.cache_folder] if tiny_app_gemma is not None else [])
    for name in names:
        (root / name).symlink_to(tiny_app_model[0] / name, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def tiny_server_cache(tiny_app_model, tiny_app_gemma, tmp_path_factory):
    """A fresh TPE_CACHE_DIR for app servers on the tiny model (browser tier): empty stores of runs and rooms,
    the weights folder a link to the tiny model's. The server loads it as it loads the real cache."""
    return _tiny_server_folder(tiny_app_model, tiny_app_gemma, tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_server_folder(tiny_app_model, tiny_app_gemma, tmp_path_factory):
    """The same, made once a test process: the TPE_CACHE_DIR of kit.browser_fixtures' `tiny_server`, which the browser
    files of a process share (its stores of runs and rooms, room/, and its weights folders' links)."""
    return _tiny_server_folder(tiny_app_model, tiny_app_gemma, tmp_path_factory)


@pytest.fixture(scope="module")
def real_server_cache(tmp_path_factory):
    """A fresh TPE_CACHE_DIR for an app server on the real models: each converted weights folder a link to the
    user's (read, never written), empty stores of runs, results and rooms. A server on the user's own cache kept its
    rooms there: every run of a test that starts presenting left a live room of the client the server cannot name
    (localhost), and the eleventh such run within the rooms' three live hours was refused a room."""
    from pipeline.model.registry import MODELS
    from pipeline.model.weights_cache import weights_cache_dir

    root = tmp_path_factory.mktemp("real-server-cache")
    for spec in MODELS.values():
        if weights_cache_dir(spec).is_dir():
            (root / spec.cache_folder).symlink_to(weights_cache_dir(spec), target_is_directory=True)
    return root


_streamlit_caches = {"tiny": False}  # st.cache_resource holds the tiny model's handle and stores


def _handles_are_tiny(root, tiny: dict) -> bool:
    """Whether the model handles in Streamlit's caches are the tiny models' (their files under `root`, their network
    the tiny one). In two of ~10 fast-tier runs today two tiny-model page tests drew a real 30-layer run (and ran the
    real network, 300 s of CPU); where the real network got into a cached handle is not pinned down (a handle made
    on the real weights cache by a test without `tiny_app` is the likely way in). Checked at every tiny_app test."""
    from views.server.state import model_handle

    for key, lm in tiny.items():  # {registry key: the tiny LoadedModel}
        for weights in ("fp32", "bf16", "int8"):
            handle = model_handle(key, weights)  # cached; made now on the tiny files if no page asked for it
            if handle.is_loaded and handle.loaded().model.config.hidden_size != lm.model.config.hidden_size:
                return False
            folder = handle._folder  # None until a page reads the files
            if folder is not None and root not in folder.parents:
                return False
    return True


@pytest.fixture
def tiny_app(tiny_app_model, tiny_app_gemma, monkeypatch):
    """AppTest on the tiny model through the app's own path: TPE_CACHE_DIR names the tiny cache (views/server/state.py's
    get_model reads its files, its run store lives beside them) and pipeline.model.loader.shared_model gives the
    tiny LoadedModel for the default model. Streamlit's caches (per process, like a server's) are shared by the
    tiny-model tests, and cleared when a real-model AppTest follows one or a handle in them is not a tiny model's
    (_handles_are_tiny). Yields the LoadedModel."""
    from pipeline.model import loader
    from pipeline.model.registry import resolve

    root, lm = tiny_app_model
    tiny = {resolve(None).key: lm, **({resolve("gemma-3-270m").key: tiny_app_gemma} if tiny_app_gemma else {})}
    monkeypatch.setenv("TPE_CACHE_DIR", str(root))
    if not _streamlit_caches["tiny"] or not _handles_are_tiny(root, tiny):
        clear_streamlit_caches()
        _streamlit_caches["tiny"] = True
    # The warm-up prepares the default request only: timing every prompt-caching scenario in the background (as a
    # room's server does) was ~10 % of the fast tier's CPU, beside the tests; test_serving_pages.py tests both settings.
    monkeypatch.setenv("TPE_WARM_UP", "request")
    monkeypatch.setitem(loader._shared, resolve(None).key, lm)
    if tiny_app_gemma is not None:
        monkeypatch.setitem(loader._shared, resolve("gemma-3-270m").key, tiny_app_gemma)
    yield lm


@pytest.fixture(params=["tiny", pytest.param("real", marks=pytest.mark.app)])
def page_lm(request):
    """The model a page test runs on: the tiny one (`tiny_app`, fast tier), then the real one (`app` tier)."""
    if request.param == "tiny":
        return request.getfixturevalue("tiny_app")
    from pipeline.model.loader import shared_model

    return shared_model()


@pytest.fixture
def lessons_reported():
    """After the test, wait for the lesson-progress threads it started (views/server/lesson_runs.py prints a line
    as each stage's runs are ready, up to 0.5 s after the last): a line printed later landed in the next test's
    output on that worker (a CLI test that reads its stdout whole failed on it)."""
    yield
    for thread in threading.enumerate():
        if thread.name == "lesson-progress":
            thread.join(60)
            assert not thread.is_alive(), "a lesson's runs were still being prepared 60 s after its test"
