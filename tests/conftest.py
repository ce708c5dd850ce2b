"""Shared fixtures. Test tiers (markers registered in pyproject.toml):

  (none)   fast: pure logic, the tokenizer files and a tiny random-weight Llama; no model weights. Every
           page's AppTest is here too, on a tiny copy of SmolLM2's layout (fixture `tiny_app`): ids, shapes,
           links, escaping and the charts' numbers against Hugging Face's own forward pass
  model    loads the real SmolLM2-135M-Instruct (and Gemma-3-270M) weights: what the real weights answer,
           agreement with HF
  app      Streamlit AppTest on the real model: one smoke test per page group (Journey and Generation,
           Embeddings and Layers, Prompt caching, app.py), and the pages that show a real answer
  browser  Chromium through Playwright against a real server; servers run the tiny model (fixture
           `tiny_server_cache`) except where a walk checks the real answer (the Korean presenter walk, What if)

Fast tier alone: pytest -m "not model and not app and not browser"
Model tier alone (a GPU host without Streamlit, torchao, xgrammar or gguf; the weights cache copied there):
  pytest -m "model and not app and not browser" -k "not gemma"   (SmolLM2 only; the model goes on the GPU if any)
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_QUESTION = "Are tomatoes fruit?"


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist (`./run.sh fast`, `./run.sh test`), each worker's torch and the processes its tests start get
    their share of the cores, not all of them: two workers each running two math threads on two cores spin against
    each other. Set before torch is imported (the workers import this file first)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, threads)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores_between_workers()


M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter: free memory at the heap's top kept up to this many bytes


def _keep_freed_arrays() -> None:
    """A test process keeps the arrays it frees for reuse (glibc's mmap and trim thresholds 1 GiB), and
    app.py's give_freed_arrays_back (a server's memory bound) is a no-op here: with it, each AppTest of app.py made
    every vocabulary-sized array a fresh mapping, page-faulted in and unmapped again (test_hostile_links.py: 930k page
    faults, 3.7-4.5 s of system time; kept: 460-500k, 2.4-2.7 s)."""
    import ctypes

    from pipeline.server import process as server_process

    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(server_process.M_MMAP_THRESHOLD, 1 << 30)
            libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
        except (OSError, AttributeError):
            pass
    server_process.give_freed_arrays_back = lambda: None


_keep_freed_arrays()


def _tokenizer_from_earlier_runs(key: tuple, load):
    """The tokenizer `load()` gives, kept between test runs as a pickle in .cache/test-tokenizers/ (git-ignored),
    named by `key` (its files' contents and the model's record) and the transformers and tokenizers versions.
    Unpickling Gemma's tokenizer takes ~1.4 s here against ~5 s for a load (which parses its 33 MB tokenizer.json in
    Python as well as in Rust); each test worker loads it once a run. Written to a temporary name and renamed, so a
    worker never reads another's half-written file; a file that does not unpickle is loaded again and replaced."""
    import hashlib
    import pickle
    from pathlib import Path

    import tokenizers
    import transformers

    name = hashlib.sha1(repr((key, transformers.__version__, tokenizers.__version__)).encode()).hexdigest()
    path = Path(ROOT) / ".cache" / "test-tokenizers" / f"{name}.pkl"
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - absent, half-written by a killed run or from another version: load again
        pass
    tokenizer = load()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(pickle.dumps(tokenizer))
    os.replace(partial, path)
    return tokenizer


def _load_each_tokenizer_once() -> None:
    """One load per tokenizer in a test run: pipeline.model.weights_cache.load_tokenizer, wrapped so that the same
    files (by content) and model give the tokenizer already loaded. Every page test clears Streamlit's caches or
    makes new handles, and each handle read its files again: Gemma's 262k-token tokenizer ~5-7 s a load here, ~10
    loads a fast-tier run. The result depends only on the files and the model's registry record, and no code
    changes a tokenizer after load_tokenizer returns it (the app too shares one per handle across sessions). The same
    for pipeline.model.vocabulary's Vocabulary.from_folder. Installed before any test imports pipeline.model.handle
    or .loader, which import the name."""
    import hashlib

    from pipeline.model import weights_cache

    original = weights_cache.load_tokenizer
    loaded: dict = {}

    def files_key(folder) -> tuple | None:
        from pathlib import Path

        try:
            files = sorted(p for p in Path(folder).iterdir() if p.is_file() and not p.name.endswith(".safetensors")
                           and p.name != "config.json")
            return tuple((p.name, hashlib.sha1(p.read_bytes()).hexdigest()) for p in files)
        except OSError:
            return None  # not a readable folder: the real load says why

    def load_tokenizer(folder, model=None):
        key = files_key(folder)
        if key is None or not any(name.startswith("tokenizer") for name, _ in key):
            return original(folder, model)
        key = (key, repr(weights_cache.resolve(model)) if model is not None else None)
        if key not in loaded:
            loaded[key] = _tokenizer_from_earlier_runs(key, lambda: original(folder, model))
        return loaded[key]

    load_tokenizer.__doc__ = original.__doc__
    weights_cache.load_tokenizer = load_tokenizer

    # The same for the token names a stored run is drawn with (a handle's `vocabulary`): Gemma's tokenizer.json is
    # parsed again by every new handle, ~0.5 s each, and every cleared Streamlit cache makes new handles.
    from pipeline.model.vocabulary import Vocabulary

    from_folder, vocabularies = Vocabulary.from_folder.__func__, {}

    def vocabulary_from_folder(cls, folder, extra=()):
        key = files_key(folder)
        if key is None:
            return from_folder(cls, folder, extra)
        key = (key, tuple(extra))
        if key not in vocabularies:
            vocabularies[key] = from_folder(cls, folder, extra)
        return vocabularies[key]

    vocabulary_from_folder.__doc__ = from_folder.__doc__
    Vocabulary.from_folder = classmethod(vocabulary_from_folder)


_load_each_tokenizer_once()


def _lighter_apptest() -> None:
    """Three costs of Streamlit's AppTest that have nothing to do with the page under test, cut once
    streamlit.testing is imported (the behaviour of a run is the same):
      - every AppTest scans the metadata of every installed package for Streamlit components (~0.2-0.5 s each, ~280
        runs a fast-tier run): the installed packages do not change during a test run, so the scan runs once;
      - the test thread waits for the script thread in a 1 ms sleep loop (~80,000 wake-ups, each taking the GIL
        from the page's own work): it joins the script thread instead (the runner's SHUTDOWN event comes just
        before that thread ends), keeping AppTest's own timeout and its message;
      - every run of every AppTest starts a new script cache, so each page file was read, rewritten for
        Streamlit's "magic" and compiled again at every click (~6 % of the fast tier's CPU): the compiled code is
        kept for the run, per file and per version of it (path, modification time, size)."""
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import app_test, local_script_runner

    if getattr(manifest_scanner.scan_component_manifests, "_once", False):
        return
    scan, scanned = manifest_scanner.scan_component_manifests, []

    def scan_once(*args, **kwargs):
        if not scanned:
            scanned.append(scan(*args, **kwargs))
        return list(scanned[0])

    scan_once._once = True
    manifest_scanner.scan_component_manifests = scan_once
    poll = local_script_runner.require_widgets_deltas

    def require_widgets_deltas(runner, timeout: float = 3) -> None:
        thread = runner._script_thread
        if thread is None:
            return poll(runner, timeout)
        thread.join(timeout)
        if not runner.script_stopped():  # what AppTest's own loop does on a timeout
            runner.request_stop()
            runner.join()
            raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")

    local_script_runner.require_widgets_deltas = require_widgets_deltas
    app_test.ScriptCache = local_script_runner.ScriptCache = _script_cache_for_the_run()


def _script_cache_for_the_run():
    """A ScriptCache class whose instances share the code they compiled, keyed by the file's version."""
    from streamlit import config
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    compiled: dict[tuple, object] = {}

    class RunScriptCache(ScriptCache):
        def get_bytecode(self, script_path: str):
            path = os.path.abspath(script_path)
            stat = os.stat(path)
            key = (path, stat.st_mtime_ns, stat.st_size, config.get_option("runner.magicEnabled"))
            if key not in compiled:
                compiled[key] = super().get_bytecode(path)
            return compiled[key]

    return RunScriptCache

# Property tests: modest example counts (each test sets its own), no deadline on 2 shared CPU cores. Two
# profiles, chosen by CI=true:
#   local  new examples every run; each failure found is kept in the example database, .hypothesis/ under the
#          cwd (git-ignored), and tried first next run; a failure prints the blob that replays it
#          (@reproduce_failure) and the seed its examples came from (`--hypothesis-seed=N`);
#   ci     derandomized: the examples follow from each test's code, so the run that decides a landing is the
#          same every time (derandomize implies no database).
# `--hypothesis-profile` and `--hypothesis-seed` override (Hypothesis uses no database under a given seed).
# A failure worth keeping also becomes an @example in its test.
CI = os.environ.get("CI") == "true"
_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("local", **_COMMON)  # Hypothesis's default database: .hypothesis/examples
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.load_profile("ci" if CI else "local")
LOCAL_EXAMPLES_SHARE = 4  # the local profile draws a quarter of each test's examples: `examples(n)`


def examples(n: int) -> int:
    """A property test's example count, @settings(max_examples=examples(100)): all n in the ci profile (the run
    that decides a landing), a quarter of them (10 at least) in the local one, where every run draws new examples
    and first replays the failures its database kept, so the examples add up over a newcomer's runs. Read when
    the test module is imported, after `--hypothesis-profile` is applied."""
    return n if settings.get_current_profile_name() == "ci" else max(10, n // LOCAL_EXAMPLES_SHARE)


def _files_needing_absent_streamlit() -> list[str]:
    """The test files that import Streamlit at module level (the page tests), where Streamlit is not installed:
    a GPU host runs the model tier (`-m "model and not app and not browser"`) without the app's packages, and
    those files are then left out of collection (named in the report header) instead of failing it."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("streamlit") is not None:
        return []
    here = Path(__file__).parent
    return sorted(p.name for p in here.glob("test_*.py")
                  if any(line.startswith(("from streamlit", "import streamlit"))
                         for line in p.read_text(encoding="utf-8").splitlines()))


collect_ignore = _files_needing_absent_streamlit()


def pytest_report_header(config):
    name = settings.get_current_profile_name()
    lines = [f"hypothesis profile {name!r}: derandomized, no example database" if settings.default.derandomize
             else f"hypothesis profile {name!r}: example database {settings.default.database}"]
    if collect_ignore:
        lines.append(f"streamlit is not installed: not collected (page tests): {', '.join(collect_ignore)}")
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing property test's report says which seed its examples came from, beside Hypothesis's own
    @reproduce_failure blob (Hypothesis prints the seed itself only for flaky failures)."""
    outcome = yield
    report = outcome.get_result()
    test = getattr(item, "obj", None)
    if not (report.failed and report.when == "call" and is_hypothesis_test(test)):
        return
    # Hypothesis keeps the seed it drew on the test (a private name; tests/test_hypothesis_setup.py notices a rename)
    seed = getattr(test, "_hypothesis_internal_use_generated_seed", None)  # None: derandomized or a given seed
    report.sections.append(("Hypothesis", f"examples drawn from seed {seed}: rerun with --hypothesis-seed={seed} "
                            "to draw them again (a failure replayed from the database: use the blob)"
                            if seed is not None else "no random seed: derandomized, or a seed was given"))


@pytest.fixture(scope="session")
def lm():
    """The real SmolLM2-135M-Instruct, loaded once for the whole run (tests using it are marked `model`)."""
    from pipeline.model.loader import shared_model

    return shared_model()


@pytest.fixture(scope="session")
def gemma_lm():
    """The real Gemma-3-270M (base), loaded once for the whole run (tests using it are marked `model`)."""
    from pipeline.model.loader import shared_model

    return shared_model("gemma-3-270m")


@pytest.fixture(scope="session")
def default_trace(lm):
    """The default request ("Are tomatoes fruit?", default options) followed once for the whole run."""
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest

    return run_trace(ChatRequest.from_question(DEFAULT_QUESTION), lm)


@pytest.fixture(scope="session")
def tokenizer():
    """The model's tokenizer alone: tokenizer files only, no weights read."""
    from transformers import AutoTokenizer

    from pipeline.model.weights_cache import weights_cache_dir

    return AutoTokenizer.from_pretrained(weights_cache_dir())


def app_pages() -> list[str]:
    """The views/ file names (without .py) of every page in app.py's PAGES, in the app's order (read from the
    source: importing app.py would run the app)."""
    import ast

    with open(os.path.join(ROOT, "app.py")) as f:
        tree = ast.parse(f.read())
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "PAGES" for t in node.targets))
    return [file.removesuffix(".py") for file, *_ in ast.literal_eval(table)]


def page_app(view: str, **session_state):
    """One page of views/ in Streamlit's AppTest (it runs the file alone, without app.py's sidebar), the
    sidebar's values preset: page_app("generation", req_max_new_tokens=8).run()."""
    from streamlit.testing.v1 import AppTest

    _lighter_apptest()
    at = AppTest.from_file(os.path.join(ROOT, "views", "pages", f"{view}.py"), default_timeout=600)
    for key, value in session_state.items():
        at.session_state[key] = value
    return at


def chart_data(chart) -> list[dict]:
    """A plotly chart of an AppTest as its traces' dicts, numeric arrays decoded (plotly packs numpy arrays as
    base64 'bdata'): chart_data(at.get("plotly_chart")[0])[0]["x"]."""
    import base64
    import json

    import numpy as np

    def decode(v):
        if isinstance(v, dict) and "bdata" in v:
            array = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
            shape = v.get("shape")
            if isinstance(shape, str):
                shape = [int(n) for n in shape.split(",")]
            return array.reshape(shape) if shape else array
        return v

    return [{k: decode(v) for k, v in trace.items()} for trace in json.loads(chart.proto.spec)["data"]]


def prompt_ids(lm, question: str = DEFAULT_QUESTION) -> list[int]:
    """A question's prompt as Hugging Face's own chat template writes it (the default system prompt added)."""
    return lm.tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                            add_generation_prompt=True)["input_ids"]


def make_tiny_lm(tokenizer, seed: int = 0, **config):
    """A random-weight Llama with the real tokenizer's vocabulary, wrapped like the real model.

    Bookkeeping that depends on token ids, not on what the weights know, runs on it in milliseconds.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.model.loader import LoadedModel

    settings = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, max_position_embeddings=8192,
                    attn_implementation="sdpa")
    settings.update(config)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**settings)).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name="tiny-llama", device=torch.device("cpu"))


@pytest.fixture(scope="session")
def tiny_lm(tokenizer):
    return make_tiny_lm(tokenizer)


# SmolLM2-135M-Instruct's heads (9 heads, 3 KV heads) and vocabulary at a tiny width (head_dim 8) and depth: the pages
# draw the same heads and token ids as with the real model, from random weights, over 4 layers instead of 30 (every
# layer is a dozen module calls per pass whatever its width: 30 of them were a fifth of the fast tier's time). Seed 3:
# greedy decoding of the default question never meets a near-tie (top-2 logit gap >= 0.02; seed 1's was 4e-4, so an
# answer decoded by another path than Hugging Face's could part from it on float rounding alone).
TINY_APP_LAYOUT = dict(num_hidden_layers=4, num_attention_heads=9, num_key_value_heads=3, hidden_size=72,
                       intermediate_size=144, tie_word_embeddings=True)


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


_source_trees: dict = {}


def source_tree(path):
    """The parsed source (ast.Module) of a file, parsed once per version of it (path, modification time, size) in a
    test run: several tests scan the same ~200 project files, and ast.parse was ~3 % of the fast tier's CPU.
    Shared: callers walk the tree and never change it."""
    import ast

    path = os.path.abspath(path)
    stat = os.stat(path)
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _source_trees:
        with open(path, encoding="utf-8") as f:
            _source_trees[key] = ast.parse(f.read(), filename=path)
    return _source_trees[key]


def copy_tokenizer_files(source, folder) -> None:
    """The tokenizer's files of a converted weights cache, copied as they are beside a tiny model's weights: the
    app reads them as it reads the real cache's (and the test run loads them once, _load_each_tokenizer_once)."""
    import shutil

    for path in source.iterdir():
        if path.is_file() and path.name.startswith(("tokenizer", "special_tokens", "added_tokens", "chat_template")):
            shutil.copyfile(path, folder / path.name)


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
    from test_architectures import tiny_gemma3

    tokenizer = load_tokenizer(real, GEMMA3)
    folder = tiny_app_model[0] / GEMMA3.cache_folder
    model = tiny_gemma3(tokenizer).eval()
    model.save_pretrained(folder)
    copy_tokenizer_files(real, folder)
    assert cache_ready(folder)
    return LoadedModel(model=model, tokenizer=tokenizer, name=GEMMA3.display_name, device=torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny_server_cache(tiny_app_model, tiny_app_gemma, tmp_path_factory):
    """A fresh TPE_CACHE_DIR for app servers on the tiny model (browser tier): empty stores of runs and rooms,
    the weights folder a link to the tiny model's. The server loads it as it loads the real cache."""
    from pipeline.model.registry import GEMMA3
    from pipeline.model.weights_cache import weights_cache_dir

    root = tmp_path_factory.mktemp("tiny-server-cache")
    names = [weights_cache_dir().name] + ([GEMMA3.cache_folder] if tiny_app_gemma is not None else [])
    for name in names:
        (root / name).symlink_to(tiny_app_model[0] / name, target_is_directory=True)
    return root


_streamlit_caches = {"tiny": False}  # st.cache_resource holds the tiny model's handle and stores


def clear_streamlit_caches() -> None:
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()


def _handles_are_tiny(root, tiny: dict) -> bool:
    """Whether the model handles in Streamlit's caches are the tiny models' (their files under `root`, their network
    the tiny one). In two of ~10 fast-tier runs today two tiny-model page tests drew a real 30-layer run (and ran the
    real network, 300 s of CPU); where the real network got into a cached handle is not pinned down (a handle made
    on the real weights cache by a test without `tiny_app` is the likely way in). Checked at every tiny_app test."""
    from views.server_state import model_handle

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
    """AppTest on the tiny model through the app's own path: TPE_CACHE_DIR names the tiny cache (views/server_state.py's
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
    # room's server does) was ~10 % of the fast tier's CPU, beside the tests; test_serving.py tests both settings.
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


TIERS = ("model", "app", "browser")
REAL_MODEL_FIXTURES = {"lm", "default_trace", "gemma_lm"}


def pytest_collection_modifyitems(config, items):
    """Safety net: a test that asks for the real model is in the `model` tier even if its mark was forgotten."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("model"):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _apptest_costs():
    """_lighter_apptest, once a test module has imported Streamlit's AppTest (a test that imports it in its body
    gets it from the next test on)."""
    if "streamlit.testing.v1" in sys.modules:
        _lighter_apptest()


@pytest.fixture(autouse=True)
def _fast_tier(request, monkeypatch):
    """In the fast tier (no tier marker) loading the real weights is an error, not a slow test; and the
    tiny model runs on one thread (its matrices are too small to share, and on a busy 2-core machine
    threads waiting for each other cost more than the maths)."""
    if any(request.node.get_closest_marker(tier) for tier in TIERS):
        if _streamlit_caches["tiny"]:  # an AppTest on the real model after ones on the tiny model
            clear_streamlit_caches()
            _streamlit_caches["tiny"] = False
        yield
        return
    import torch

    from pipeline.model import loader

    def refuse(*_args, **_kwargs):
        raise AssertionError("a fast-tier test tried to load the model weights: mark it `model`")

    refuse.real = loader.load_model  # for a CLI run in-process (tests/cli_kit.py), whose weights cache is unusable
    monkeypatch.setattr(loader, "load_model", refuse)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
