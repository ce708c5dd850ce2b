"""Journey's compact commitment strip (views/pages/journey.py; the pass views/server/commitment.py, the chips
ui/commitment.py) on the tiny model (fast tier): on a click it shows each answer token shaded by its top-1 layer,
from the same pass Layers' strip reads, and each token is a link that opens the logit lens at that position on Layers.
"""
import html
import re
from urllib.parse import parse_qsl, urlsplit

from kit.apptest import link_opened, page_app

QUESTION = "Where is each word of the answer decided?"  # asked by no other test: no stored commitment yet


def strip_of(at) -> str:
    found = [m.value for m in at.markdown if "tpe-commit-link" in m.value]
    assert len(found) <= 1
    return found[0] if found else ""


def test_journey_draws_the_strip_compact_and_each_token_opens_its_lens_on_layers(tiny_app):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from views.server.commitment import kept_commitment

    at = page_app("journey", req_question=QUESTION, req_max_new_tokens=6).run()
    assert not at.exception, [e.message for e in at.exception]
    assert strip_of(at) == ""  # one more pass of the model: only on a click, until someone has made it
    at.button(key="jo_commit_go").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not [b for b in at.button if b.key == "jo_commit_go"]  # the strip took the button's place
    strip = strip_of(at)
    trace = run_trace(ChatRequest.from_question(QUESTION, options=GenerationOptions(max_new_tokens=6)), tiny_app)
    answer = trace.generated_token_ids
    kept = kept_commitment(trace.ids, answer)  # the pass Layers' strip reads too (checked against HF's lens in
    assert kept is not None and kept.token_ids == list(answer)  # tests/pipeline/stages/test_commitment.py)
    titles = re.findall(r"title='\(\d+\) [^']*'", strip)
    assert len(titles) == len(answer) > 0
    for j, layer in enumerate(kept.layers["top1"]):
        said = "never" if layer is None else f"layer {layer}"
        assert any(t.startswith(f"title='({j}) ") and said in t for t in titles), (j, said, titles)
    hrefs = [html.unescape(h) for h in re.findall(r"<a href='([^']*)' target='_self' class='tpe-commit-link'", strip)]
    assert len(hrefs) == len(answer)
    query = dict(parse_qsl(urlsplit(hrefs[-1]).query))
    assert urlsplit(hrefs[-1]).path == "./layers" and query["ly.commit_token"] == str(len(answer) - 1)
    assert query["q"] == QUESTION  # the request travels in the link: Layers opens on this very run

    # the link opened as a browser opens it: app.py with its query string, then Layers
    layers = link_opened("layers/page.py", query)
    assert not layers.exception, [e.message for e in layers.exception]
    assert layers.selectbox(key="ly_commit_token").value == len(answer) - 1
    table = layers.dataframe[-1].value
    assert list(table["its probability"])[0] == f"{float(kept.probs[-1, -1]):.1%}"  # the lens at that token
    assert kept_commitment(trace.ids, answer) is kept  # read, not run again
