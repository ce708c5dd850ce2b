"""What a test process sets up before any test runs: its share of the cores, freed arrays kept, each
tokenizer loaded once a run (and kept between runs)."""
import os
import sys

from kit.paths import ROOT


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


def tokenizer_from_earlier_runs(key: tuple, load):
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
            loaded[key] = tokenizer_from_earlier_runs(key, lambda: original(folder, model))
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


def prepare_test_process() -> None:
    """Everything above, in order; tests/conftest.py calls it before any test module (or torch) is imported."""
    _share_the_cores_between_workers()
    _keep_freed_arrays()
    _load_each_tokenizer_once()
