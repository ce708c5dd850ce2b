"""What tests/conftest.py does to keep the fast tier fast, checked not to change what a test sees: a tokenizer is
loaded once per content of its files (and again once they change), AppTest still times out a page, and a page is
compiled again when its file changes."""
import builtins

import pytest


def save_word_tokenizer(folder, vocab: dict[str, int]) -> None:
    """A three-word tokenizer.json (the tokenizers library's own format) with a plain fast-tokenizer config."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = '{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}'
    (folder / "tokenizer_config.json").write_text(config)


def test_a_tokenizer_is_loaded_once_per_content_of_its_files_and_again_when_they_change(tmp_path):
    from pipeline.model import weights_cache

    save_word_tokenizer(tmp_path / "a", {"[UNK]": 0, "hi": 1, "there": 2})
    save_word_tokenizer(tmp_path / "b", {"[UNK]": 0, "hi": 1, "there": 2})
    a = weights_cache.load_tokenizer(tmp_path / "a")
    assert weights_cache.load_tokenizer(tmp_path / "b") is a  # the same files elsewhere: the tokenizer loaded
    save_word_tokenizer(tmp_path / "b", {"[UNK]": 0, "hi": 2, "there": 1})  # the files changed: loaded again
    b = weights_cache.load_tokenizer(tmp_path / "b")
    assert b is not a and b.encode("hi there") == [2, 1] and a.encode("hi there") == [1, 2]


def test_apptest_still_stops_a_page_that_runs_past_its_timeout(tmp_path):
    from kit.apptest import lighter_apptest
    from streamlit.testing.v1 import AppTest

    lighter_apptest()
    page = tmp_path / "slow.py"
    page.write_text("import time\nimport streamlit as st\nst.write('started')\ntime.sleep(0.5)\nst.write('done')\n")
    with pytest.raises(RuntimeError, match=r"timed out after 0\.1"):
        AppTest.from_file(str(page), default_timeout=0.1).run()
    at = AppTest.from_file(str(page), default_timeout=30).run()  # in time: the page as it ran
    assert [m.value for m in at.markdown] == ["started", "done"]


def test_apptest_compiles_a_page_once_per_version_of_its_file(tmp_path, monkeypatch):
    from kit.apptest import lighter_apptest
    from streamlit.runtime.scriptrunner import script_cache
    from streamlit.testing.v1 import AppTest

    lighter_apptest()
    compiles = []
    monkeypatch.setattr(script_cache, "compile", raising=False,  # the module calls the builtin by name
                        value=lambda *a, **k: compiles.append(a[1]) or builtins.compile(*a, **k))
    page = tmp_path / "counter.py"
    page.write_text("import streamlit as st\nst.write('one')\nst.button('again', key='again')\n")
    at = AppTest.from_file(str(page)).run()
    at.button(key="again").click().run()
    AppTest.from_file(str(page)).run()  # a second AppTest of the same file
    assert compiles == [str(page)]  # three runs, one compile
    page.write_text("import streamlit as st\nst.write('two, a longer page')\n")  # the file changed: compiled again
    assert [m.value for m in AppTest.from_file(str(page)).run().markdown] == ["two, a longer page"]
    assert compiles == [str(page)] * 2
