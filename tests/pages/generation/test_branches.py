"""Generation's "Branch: N samples" (views/pages/generation/branches.py): AppTest on the tiny model (fast tier). The
samples drawn on the page equal single runs with their seeds and temperatures; disagreeing rows are marked and shaded;
token text is escaped; a picked token shows its top-5 and a What if link whose request is that sample's run; all
samples identical says so; the page's link carries every control and reproduces the samples."""
from urllib.parse import parse_qs, urlparse

from kit.apptest import html_blocks, link_opened, page_app
from kit.texts import DEFAULT_QUESTION

from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions

BRANCH = {"req_max_new_tokens": 5, "gen_branch_on": True, "gen_branch_n": 3, "gen_branch_seed": 20,
          "gen_branch_t0": 1.0, "gen_branch_t1": 1.5, "gen_branch_t2": 0.0}


def single(lm, temperature: float, seed: int) -> list[int]:
    options = GenerationOptions(max_new_tokens=5, temperature=temperature, seed=seed)
    return run_trace(ChatRequest.from_question(DEFAULT_QUESTION, options=options), lm).generated_token_ids


def table(at) -> str:
    tables = [b for b in html_blocks(at) if "divergence (bits)" in b]
    assert len(tables) == 1
    return tables[0]


def test_branch_samples_side_by_side_equal_single_runs(tiny_app):
    at = page_app("generation", **BRANCH).run()
    assert not at.exception, at.exception
    html = table(at)
    wanted = [single(tiny_app, t, 20 + i) for i, t in enumerate([1.0, 1.5, 0.0])]
    assert html.count("<tr") == 1 + max(map(len, wanted))  # a header, then one row per position
    for i in range(3):
        assert f"seed {20 + i}" in html
    marked = html.count("◆")
    assert marked == sum(len({w[j] for w in wanted if j < len(w)}) > 1 for j in range(max(map(len, wanted))))
    assert marked > 0 and "rgba(234, 88, 12" in html  # the random tiny model at T = 1 parts somewhere
    assert "Jensen–Shannon" in " ".join(c.value for c in at.caption)
    # a token picked: its top-5, and What if at that step of that sample's own run
    at.selectbox(key="gen_branch_sample").set_value(1).run()
    at.selectbox(key="gen_branch_step").set_value(2).run()
    assert not at.exception
    top = at.dataframe[-1].value
    chosen = wanted[1][2]  # sample 1's own run (seed 21, T = 1.5) took this token at step 2
    assert len(top) == 5 and list(top["chosen"]) == ["✓" if i == chosen else "" for i in top["id"]]
    link = next(m.value for m in at.markdown if "Open What if" in m.value)
    href = link[link.index("](") + 2:link.index(")", link.index("]("))]
    query = {k: v[0] for k, v in parse_qs(urlparse(href).query).items()}
    assert urlparse(href).path.endswith("what-if")
    assert (query["seed"], query["temperature"], query["br.step"]) == ("21", "1.5", "2")
    assert single(tiny_app, float(query["temperature"]), int(query["seed"])) == wanted[1]  # the link's run is sample 1


def test_identical_samples_say_so(tiny_app):
    at = page_app("generation", **{**BRANCH, "gen_branch_t0": 0.0, "gen_branch_t1": 0.0}).run()
    assert not at.exception, at.exception
    assert any("identical" in i.value and "temperature" in i.value for i in at.info)
    assert "◆" not in table(at)


def test_token_text_is_escaped(tiny_app):
    from pipeline.run.samples import Position, Sample, SampleSet
    from views.request.samples import samples_table

    s = SampleSet([1], [Sample(0, 1.0, [5], "<b>x</b>", "length", [[]]), Sample(1, 1.0, [6], "y", "length", [[]])],
                  [Position(0, (5, 6), True, 0.5)], 0.1, 0.0)
    html = samples_table(s, [["<script>alert(1)</script>"], ["&amp;"]])
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp;amp;" in html


def app_at(query: dict[str, str]):
    """app.py opened with this query string, then at Generation (as a browser opening the link)."""
    at = link_opened("generation/page.py", query)
    assert not at.exception, at.exception
    return at


def query_of(at) -> dict[str, str]:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


def test_the_link_reproduces_the_samples(tiny_app):
    """The page's link carries N, the base seed, each temperature and the switch: opened through app.py in a
    fresh session it draws the same samples."""
    first = app_at({"max_new_tokens": "5"})
    for key, value in BRANCH.items():
        if key.startswith("gen_"):
            first.session_state[key] = value
    first.run()
    link = query_of(first)
    assert {link[k] for k in ("gen.branch_n", "gen.branch_seed", "gen.branch_t1", "gen.branch_on")} == \
        {"3", "20", "1.5", "1"}
    again = app_at(link)
    assert table(again) == table(first)
