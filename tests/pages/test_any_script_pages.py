"""Any script on every page: each stage page opened with a Korean and an emoji question names the prompt's tokens
by their character ('토 (1/3)'), never by bare bytes; Request & template and Tokens say which text their character
counts count. AppTest on the tiny model (fixture `tiny_app`, fast tier); the grouping itself:
tests/pipeline/text/test_any_script.py."""
import json

import pytest
from kit.texts import KOREAN

VIEWS = ["journey", "request", "tokens", "tensors", "embeddings", "position", "layers",
         "attention", "next_token", "generation", "kv_cache", "prompt_caching"]  # every stage page, in order
NAMES_PROMPT_TOKENS = {"journey", "request", "tokens", "embeddings", "position", "layers", "attention"}
QUESTIONS = {"korean": (KOREAN, "토"), "emoji": ("Are 🍅 fruit? 👩‍🔬", "🍅")}


def page_strings(at) -> str:
    """Everything a page names: markdown (HTML too), captions, plotly specs, tables, widget options, code."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    parts += [json.dumps(json.loads(c.proto.spec), ensure_ascii=False) for c in at.get("plotly_chart")]
    parts += [df.value.to_string() for df in at.dataframe]
    parts += [str(o) for box in list(at.selectbox) + list(at.multiselect) for o in box.options]
    parts += [j.proto.body for j in at.json]
    return " ".join(parts)


@pytest.mark.parametrize("lang", list(QUESTIONS))
@pytest.mark.parametrize("view", VIEWS)
def test_every_page_names_tokens_by_their_character(view, lang, tiny_app):
    from kit.apptest import page_app

    question, char = QUESTIONS[lang]
    at = page_app(view, req_question=question, req_max_new_tokens=12)  # the answer's length does not matter here
    at.run()
    assert not at.exception, at.exception
    text = page_strings(at)
    if view in NAMES_PROMPT_TOKENS:
        assert char in text, f"{view}: {char} not in the page's labels"
    if view in {"tokens", "journey", "attention", "layers", "embeddings", "position"}:
        grouped = [f"{char} (1/", f"␣{char} (1/",  # axis and table labels: '토 (1/3)'
                   f"part 1 of 3 of {char}", f"part 1 of 3 of ␣{char}"]  # a chip's title, under the bracket
        assert any(g in text for g in grouped), f"{view}: no grouped label for {char}"


def test_request_and_tokens_pages_say_which_text_their_character_counts_count(tokenizer, tiny_app):
    """R&T once said 'Characters in the prompt 165', Tokens '114 characters but 66 tokens' for the same Korean
    request. Both count the whole prompt; they differ only by the markers, letter by letter vs one each."""
    import re

    from kit.apptest import page_app

    from ui.escape import code_span

    rt = page_app("request", req_question=KOREAN)
    rt.run()
    assert not rt.exception, rt.exception
    letters = next(m for m in rt.metric if m.label == "Characters in the whole prompt text")
    assert f"{code_span('<|im_start|>')} alone is 12" in letters.proto.help  # the marker read from the template
    tk = page_app("tokens", req_question=KOREAN)
    tk.run()
    assert not tk.exception, tk.exception
    info = next(i.value for i in tk.info if i.value.startswith("Your whole prompt has"))
    assert f"template included; each marker such as {code_span('<|im_start|>')} counts as one" in info
    read = int(re.search(r"has ([\d,]+) characters", info).group(1).replace(",", ""))
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    tokens = tokenize_request(tokenizer, ChatRequest.from_question(KOREAN)).tokens
    markers = [t.text for t in tokens if t.special]
    assert markers and int(str(letters.value).replace(",", "")) - read == sum(len(m) - 1 for m in markers)
