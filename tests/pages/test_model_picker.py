"""The model picker: every page opens with Gemma 3 picked, the pick is in the run key and in the link.

Fast tier: the pages run on conftest's tiny models (`tiny_app`, `tiny_app_gemma`): a tiny random-weight Gemma 3
(test_architectures.py's `tiny_gemma3`) saved where the app looks for Gemma's converted weights, with Gemma's
real tokenizer, beside the tiny SmolLM2 for the default model (the warm-up's). App tier: the real Gemma.
"""
import os

import pytest
from kit.apptest import clear_streamlit_caches, page_app
from kit.paths import ROOT, app_pages
from streamlit.testing.v1 import AppTest

GEMMA = "gemma-3-270m"
PAGES = app_pages()  # every page of app.py's PAGES, by file name


@pytest.fixture
def tiny_gemma_cache(tiny_app_model, tiny_app_gemma):
    """(cache root, tiny Gemma LoadedModel): conftest's tiny SmolLM2 and tiny Gemma 3 (test_architectures.py's
    `tiny_gemma3`, Gemma's real tokenizer), saved side by side as pipeline.model.weights_cache lays them out."""
    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted yet: ./run.sh converts it")
    return tiny_app_model[0], tiny_app_gemma


@pytest.fixture
def gemma_app(tiny_gemma_cache, tiny_app):
    """AppTest on the tiny models through the app's own path (TPE_CACHE_DIR, loader.shared_model), sharing
    Streamlit's caches with the other tiny-model page tests as a server's sessions share them."""
    yield tiny_gemma_cache[1]


def texts(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning", "error", "success")
                     for e in getattr(at, kind))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_with_gemma_picked(gemma_app, page):
    at = page_app(page, req_model=GEMMA, req_max_new_tokens=4)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_the_run_is_gemmas_and_keyed_by_the_model(gemma_app):
    """The page's run is stored under Gemma's name and its prompt is written in Gemma's turns."""
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from views.request.session import DEFAULT_QUESTION, run_key
    from views.server.state import run_store

    at = page_app("generation", req_model=GEMMA, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=3))
    trace = run_store().peek(run_key("Gemma-3-270M", request.messages, request.options, "chat"))
    assert trace is not None and trace.dims.architecture == "gemma3_text"
    start = gemma_app.tokenizer.encode("<start_of_turn>user\n" + DEFAULT_QUESTION, add_special_tokens=False)
    assert trace.ids[1:1 + len(start)] == start and trace.ids[0] == gemma_app.tokenizer.bos_token_id


def test_plain_text_is_sent_as_it_is_when_picked(gemma_app):
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from views.request.session import DEFAULT_QUESTION, run_key
    from views.server.state import run_store

    at = page_app("generation", req_model=GEMMA, req_max_new_tokens=3, req_prompt_format="plain")
    at.run()
    assert not at.exception, at.exception
    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=3))
    trace = run_store().peek(run_key("Gemma-3-270M", request.messages, request.options, "plain"))
    tok = gemma_app.tokenizer
    assert trace.ids == [tok.bos_token_id, *tok.encode(DEFAULT_QUESTION, add_special_tokens=False)]


def app_at(**query) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = dict(query)
    return at


def test_the_link_picks_gemma_and_the_sidebar_says_what_it_is(gemma_app):
    at = app_at(model=GEMMA, max_new_tokens="3")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_model").value == GEMMA
    assert any("base (pretrained) model" in c.value for c in at.sidebar.caption)
    assert at.radio(key="req_prompt_format").value == "chat"  # a base model: the format can be chosen
    assert any("Model: Gemma-3-270M" in c.value for c in at.sidebar.caption)


def test_picking_a_model_puts_it_in_the_link(gemma_app):
    at = app_at(max_new_tokens="3")
    at.run()
    assert "model" not in at.query_params
    at.selectbox(key="req_model").set_value(GEMMA).run()
    assert not at.exception, at.exception
    assert at.query_params["model"] == GEMMA and at.query_params["max_new_tokens"] == "3"
    at.radio(key="req_prompt_format").set_value("plain").run()
    assert at.query_params["format"] == "plain"


def test_the_default_model_offers_no_prompt_format_and_stays_out_of_the_link(gemma_app):
    at = app_at(max_new_tokens="3")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_model").value == "smollm2-135m"
    assert not [r for r in at.radio if r.key == "req_prompt_format"]  # an instruct model is chatted to
    assert "model" not in at.query_params


@pytest.mark.parametrize("bad", ["gpt-5", "/etc", "[x](http://evil.example)"])
def test_an_unknown_model_in_the_link_is_a_note_and_the_default(gemma_app, bad):
    """A hand-edited model, or a folder the server does not offer (a link never opens a folder of its own)."""
    at = app_at(model=bad, max_new_tokens="3")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_model").value == "smollm2-135m"
    assert any("`model` was not usable" in w.value and "not a model this server offers" in w.value
               for w in at.warning), [w.value for w in at.warning]


def test_models_folders_are_offered_and_a_bad_one_is_a_message(gemma_app, tiny_gemma_cache, tmp_path, monkeypatch):
    good = str(tiny_gemma_cache[0] / "gemma-3-270m")
    monkeypatch.setenv("TPE_MODELS", os.pathsep.join([good, str(tmp_path / "missing")]))
    at = app_at(max_new_tokens="3")
    at.run()
    assert not at.exception, at.exception
    assert good in at.selectbox(key="req_model").options or any(
        "gemma-3-270m (folder)" in o for o in at.selectbox(key="req_model").options)
    assert any("is not offered" in w.value and "missing" in w.value for w in at.sidebar.warning)


def test_switching_the_model_resets_the_pages_controls(gemma_app):
    """At layer 29 of SmolLM2's 30 on the Attention page, picking Gemma (3 layers here) opens on a head of its own."""
    at = app_at(model="smollm2-135m", max_new_tokens="3")
    at.run()
    at.switch_page("views/pages/attention/page.py").run()
    assert not at.exception, at.exception
    at.session_state["rope_layer"] = 29  # SmolLM2's last layer, kept for the Position page
    at.selectbox(key="req_model").set_value(GEMMA).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_model").value == GEMMA
    assert "rope_layer" not in at.session_state  # Gemma's pages open on their own defaults


def test_the_start_model_is_tpe_models_pick_if_usable(tiny_gemma_cache, tmp_path, monkeypatch):
    """./run.sh app --model X sets TPE_MODEL: a folder or a name the picker offers; a bad one is SmolLM2."""
    from views.server.state import default_model_key, offered_models

    good = str(tiny_gemma_cache[0] / "gemma-3-270m")
    monkeypatch.setenv("TPE_MODEL", good)
    assert default_model_key() == good and good in offered_models()[0]
    monkeypatch.setenv("TPE_MODEL", GEMMA)
    assert default_model_key() == GEMMA
    for bad in (str(tmp_path / "missing"), "gpt-5"):
        monkeypatch.setenv("TPE_MODEL", bad)
        assert default_model_key() == "smollm2-135m"
        assert any(bad in note for note in offered_models()[1])


def test_the_start_weights_are_tpe_weights_pick_if_a_format(monkeypatch):
    """./run.sh app --weights bf16 sets TPE_WEIGHTS: the weight format a new session (and the warm-up) starts on;
    anything else is fp32, and the sidebar says why."""
    from views.server.state import default_weights, picked_weights, weights_note

    for named, expected in (("bf16", "bf16"), ("int8", "int8"), (" fp32 ", "fp32")):
        monkeypatch.setenv("TPE_WEIGHTS", named)
        assert (default_weights(), picked_weights(), weights_note()) == (expected, expected, None)
    for bad in ("fp16", "BF16", "bf16; rm -rf /"):
        monkeypatch.setenv("TPE_WEIGHTS", bad)
        assert default_weights() == "fp32" and repr(bad) in weights_note()
    monkeypatch.delenv("TPE_WEIGHTS")
    assert (default_weights(), weights_note()) == ("fp32", None)


def test_run_sh_passes_model_and_weights_to_the_app_and_the_rest_to_streamlit(tmp_path):
    """run.sh's argument loop, run on its own (the real script, cut at the exec)."""
    import subprocess

    src = open(os.path.join(ROOT, "run.sh")).read()
    loop = src[src.index("    args=()"):src.index('    exec "$VENV/bin/streamlit" run server.py "${args[@]}"')]
    script = ("set -euo pipefail\nf() {\n" + loop
              + '  echo "TPE_MODEL=${TPE_MODEL:-} TPE_WEIGHTS=${TPE_WEIGHTS:-} ARGS=${args[*]}"\n}\nf app "$@"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("TPE_MODEL", "TPE_WEIGHTS")}
    out = subprocess.run(["bash", "-c", script, "bash", "--server.port", "8600", "--model", "/m/x", "--x",
                          "--weights", "bf16"], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "TPE_MODEL=/m/x TPE_WEIGHTS=bf16 ARGS=--server.port 8600 --x"
    out = subprocess.run(["bash", "-c", script, "bash", "--weights=int8"], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert out.strip() == "TPE_MODEL= TPE_WEIGHTS=int8 ARGS="
    refused = subprocess.run(["bash", "-c", script, "bash", "--weights"], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "--weights needs a weight format" in refused.stderr


@pytest.mark.app
@pytest.mark.parametrize("model", [GEMMA, "smollm2-135m"])
@pytest.mark.parametrize("page", sorted(set(PAGES) - {"compare_models"}))
def test_every_page_opens_on_each_real_model(page, model):
    """Every page with each real model picked opens without an error, on that model's run (compare_models runs
    both real models in tests/pipeline/run/test_compare_models.py)."""
    clear_streamlit_caches()  # handles and stores on TPE_CACHE_DIR's real weights, not the tiny ones
    at = page_app(page, req_model=model, req_max_new_tokens=4)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


@pytest.mark.app
@pytest.mark.parametrize("page", ["journey", "next_token", "layers"])
def test_real_gemma_pages(page):
    """The real Gemma-3-270M picked: the page opens on its own run, drawn with its 18 layers and its turns."""
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from views.request.session import DEFAULT_QUESTION, run_key
    from views.server.state import run_store

    clear_streamlit_caches()  # handles and stores on TPE_CACHE_DIR's real weights
    at = page_app(page, req_model=GEMMA, req_max_new_tokens=4)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=4))
    trace = run_store().peek(run_key("Gemma-3-270M", request.messages, request.options, "chat"), disk=True)
    assert trace is not None and trace.dims.L == 18 and trace.dims.H == 4 and trace.dims.Hkv == 1
    if page == "journey":
        assert "Gemma-3-270M" in texts(at)


def test_the_presenters_links_carry_the_model(gemma_app):
    """The room's own link (explore alone) opens the same model; a follower's switch loads it with the request."""
    from views.links import url_state

    at = page_app("presenter", req_model=GEMMA, req_max_new_tokens=4, pr_stage=1)
    at.run()
    assert not at.exception, at.exception
    journey = [c.value for c in at.code if "/journey" in c.value]
    assert journey and "model=gemma-3-270m" in journey[0] and "max_new_tokens=4" in journey[0]
    assert url_state.REQUEST["model"].parse("Gemma-3-270M") == GEMMA  # what a follower's load_request reads


def test_gemmas_turn_markers_are_its_turn_tokens_not_a_newline(tiny_gemma_cache):
    """Gemma's tokenizer adds runs of newlines as tokens; the marker before a turn's text is <start_of_turn>
    (its published format: "<start_of_turn>user\\n...<end_of_turn>"), not the newline after the role."""
    from pipeline.stages.template import TurnMarkers, turn_markers

    assert turn_markers(tiny_gemma_cache[1].tokenizer) == TurnMarkers("<start_of_turn>", "<end_of_turn>")


def test_request_page_names_gemmas_markers_and_says_when_plain_text_has_none(gemma_app):
    at = page_app("request", req_model=GEMMA, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    assert any("between ` <start_of_turn>role ` and ` <end_of_turn> `" in m.value for m in at.markdown)
    at = page_app("request", req_model=GEMMA, req_max_new_tokens=3, req_prompt_format="plain")
    at.run()
    assert not at.exception, at.exception
    assert any(s.value.startswith("3. Plain text") for s in at.subheader)
    assert not any("between `" in m.value for m in at.markdown)


def test_a_learner_following_a_gemma_presenter_gets_gemma(gemma_app):
    at = page_app("presenter", pr_stage=3, req_model=GEMMA, req_max_new_tokens=4).run()
    assert not at.exception, at.exception
    at.button(key="pr_start").click().run()  # a room is made when the presenter starts, not by a visit
    room = at.session_state["pr_room"]
    learner = page_app("presenter", pr_stage=1, pr_follow=room, req_max_new_tokens=4).run()  # a fresh session
    assert not learner.exception, learner.exception
    assert learner.title[0].value == "3. Tokens"
    assert learner.session_state["req_model"] == GEMMA


def test_a_folder_that_cannot_be_read_is_a_message_and_the_default(gemma_app, tmp_path, monkeypatch):
    """A folder whose config.json is broken: not offered (the sidebar says why), a link to it opens the default."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    monkeypatch.setenv("TPE_MODELS", str(broken))
    at = app_at(model=str(broken), max_new_tokens="3")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="req_model").value == "smollm2-135m"
    assert any("`model` was not usable" in w.value for w in at.warning)
    assert any("is not offered" in w.value and "not valid JSON" in w.value for w in at.sidebar.warning), \
        [w.value for w in at.sidebar.warning]
