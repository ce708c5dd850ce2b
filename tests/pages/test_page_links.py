"""Links that reproduce a view: every control of every page is in its link, under a name of the page's
own (`nt.top_k`) that never shares one with the request's (`top_k`). AppTest on the tiny model (fast tier) through
app.py: each page of PAGES is drawn, its controls enumerated and set away from their defaults, the link it writes
opened in a fresh session, and the same request and controls found there."""

import pytest
from kit.apptest import link_opened, page_app
from kit.paths import app_page_table
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app")

ACTIONS = {"button", "form", "plotly_chart", "download_button"}  # what a click does, or a chart: not a control
# Not a selectbox (those take another of their own options): a value away from each control's default.
NON_DEFAULT = {
    "tok_text": "Hello links", "batch_q2": "Hey?", "batch_q3": "Why not?", "batch_side": "right",
    "em_words": "apple, pear, car, bus", "em_word": "pear", "em_a": "paris", "em_b": "france", "em_c": "italy",
    "rope_layer": 1, "ly_contrib_scale": "linear", "ly_positions": 5, "ly_lens_end": 8, "ly_commit_rule": "top3",
    "at_layer": 1, "at_scale": "log", "at_answer": True,
    "nt_step": 2, "nt_draws": 100, "nt_temperature": 0.5, "nt_top_k": 7, "nt_top_p": 0.8, "nt_min_p": 0.1,
    "nt_seed": 3, "nt_allowed": "Yes, Maybe",
    "why_layer": 1, "why_head": 2, "why_ab_layer": 3, "why_ab_head": 3, "why_ab_mode": "mean", "why_threshold": 0.1,
    "why_node_mode": "mean", "why_neuron_layer": 2, "why_patch_top": 6, "pd_t0_n": 200,
    "why_cap": 5,
    "why_corrupted": "Are pears fruit?",
    "br_step": 1, "br_typed": " maybe",
    "co_kind": "regex", "co_spec_regex": "(Yes|No)!", "co_spec_json_schema": '{"type": "string"}',  # then hidden
    "gen_speed": "instant", "gen_branch_n": 3, "gen_branch_seed": 5, "gen_branch_on": True, "gen_branch_t0": 0.5,
    "gen_branch_t1": 1.5, "gen_branch_t2": 0.0, "gen_branch_t3": 0.7,
    "kv_n_steps": 5, "kv_repeat": 4, "kv_tokens": 1000, "kv_reserve": 0.2,
    "pd_sizes": [1, 4], "pd_others": 3,
    "learn_text": "A short text.", "learn_answer": "No.", "learn_train_text": "Cats purr.", "learn_other_text": "Sky.",
    "learn_optimizer": "adam", "learn_lr": 0.05, "learn_mem_tokens": 100, "learn_mem_opt": "sgd",
    "fd_drafts": 3, "fd_request": "A new answer (drafting barely helps)",
    "pc_block_size": 8, "pc_text_a": "system: Be brief.\nuser: Hi", "pc_text_b": "system: Be brief.\nuser: Yo",
    "ca_source": "A prepared example", "ca_provider": "anthropic", "ca_auto_bp": False, "ca_out_tokens": 50,
    "ca_tps_openai": 1234.0, "ca_tps_anthropic": 2345.0, "ca_tps_vllm": 3456.0, "ca_only_misses": True,
    "ca_page": 1, "ca_fixes": True,
    "cmp_format": "plain",
}
KEPT = {"ca_source": "another log source hides the rest of the page", "ca_page": "the example fits one page",
        "co_spec_json_schema": "hidden once the format is a regular expression"}
REQUEST = {"req_question": "Are links fruit?", "req_max_new_tokens": 4, "req_temperature": 0.8, "req_top_k": 40,
           "req_top_p": 0.9, "req_min_p": 0.05, "req_seed": 7}
ISSUE_LINK = {"temperature": "0.8", "top_k": "40", "top_p": "0.9", "min_p": "0.05", "seed": "7", "step": "3",
              "draws": "1000", "t": "0.8", "max_new_tokens": "5"}  # the issue's link (and a short answer)


def pages() -> list[tuple[str, str]]:
    """(file, url) of every page in app.py's PAGES."""
    return [(file, url) for file, _, _, url, *_ in app_page_table()]


def declared(at) -> dict:
    """The page's controls as it declared them beside its widgets (views/links/controls.py), by link name."""
    from views.links.url_state import CONTROLS

    return dict(at.session_state[CONTROLS]) if CONTROLS in at.session_state else {}


def linked_key(at, widget_key: str) -> str:
    """The session key a link sets for this widget: its own, or the one its page keeps a per-run picker's value
    under (declared with `widget=`)."""
    return next((p.key for p in declared(at).values() if p.widget == widget_key), widget_key)


def controls(at) -> dict[str, object]:
    """The page's controls as drawn (the sidebar's request is not the page's): the key a link sets -> value."""
    return {linked_key(at, n.key): n.value for n in at.main if getattr(n, "key", None) and n.type not in ACTIONS}


def linked_keys(at) -> set[str]:
    return {p.key for p in declared(at).values()}


def app_at(file: str, query: dict[str, str]) -> AppTest:
    """app.py opened with this query string, then at the page (as a browser opening the link: the request
    is read on the first page of the session, the page's controls on arrival at it)."""
    at = link_opened(file, query)
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("file,path", pages())
def test_every_control_of_every_page_has_a_link_parameter(file, path):
    """A control made without `linked` (views/links/controls.py), or `left_out` with a reason, fails here; and no
    page parameter shares a name with the request's."""
    from views.links.url_state import LEFT_OUT
    from views.links.url_state import REQUEST as REQUEST_PARAMS

    at = page_app(file.removesuffix(".py"), req_max_new_tokens=4).run()
    assert not at.exception, at.exception
    left_out = at.session_state[LEFT_OUT] if LEFT_OUT in at.session_state else {}
    missing = sorted(k for k in controls(at) if k not in linked_keys(at) and k not in left_out)
    assert not missing, f"{path}: controls with no link parameter: {missing}"
    assert not set(declared(at)) & set(REQUEST_PARAMS), path


def test_the_issues_next_token_link_opens_its_request_and_its_step():
    """The link from the issue: top_k, top_p, min_p and seed are the request's (before: the page's own controls
    took them, and the sidebar showed top-k 0, seed 0); step, draws and t are the page's older names."""
    at = app_at("next_token/page.py", ISSUE_LINK)
    ss = at.session_state
    assert (ss["req_top_k"], ss["req_seed"], ss["req_top_p"], ss["req_min_p"], ss["req_temperature"]) == \
        (40, 7, 0.9, 0.05, 0.8)
    assert (ss["nt_step"], ss["nt_draws"], ss["nt_temperature"]) == (3, 1000, 0.8)
    # the page's own filters start from the run's settings, which are the link's request
    assert (ss["nt_top_k"], ss["nt_seed"], ss["nt_top_p"], ss["nt_min_p"]) == (40, 7, 0.9, 0.05)
    link = query_of(at)
    assert (link["top_k"], link["nt.top_k"], link["nt.step"]) == ("40", "40", "3")


def test_the_request_and_the_pages_own_top_k_travel_side_by_side():
    at = app_at("next_token/page.py", {**{k: v for k, v in ISSUE_LINK.items() if k not in ("step", "draws", "t")},
                                  "nt.top_k": "5", "nt.seed": "11", "nt.step": "1"})
    ss = at.session_state
    assert (ss["req_top_k"], ss["req_seed"]) == (40, 7)
    assert (ss["nt_top_k"], ss["nt_seed"], ss["nt_step"]) == (5, 11, 1)
    assert at.sidebar.number_input(key="req_top_k").value == 40
    assert at.number_input(key="nt_top_k").value == 5


@pytest.mark.parametrize("sizes, shown", [("4,512", [4]), ("256,512", None)])
def test_a_link_with_batch_sizes_only_a_gpu_offers_opens_on_a_cpu(sizes, shown):
    """Prefill & decode's sweep offers up to 512 rows on a GPU, 32 on a CPU: a link made on a GPU server keeps the
    sizes this device offers, or shows the default when it offers none of them (Streamlit refuses the others)."""
    from pipeline.costs.sweep import BATCH_SIZES

    at = app_at("prefill_decode/page.py", {"pd.sizes": sizes})
    assert at.multiselect(key="pd_sizes").value == (shown or list(BATCH_SIZES))
    assert at.multiselect(key="pd_sizes").options == [str(b) for b in BATCH_SIZES]


def query_of(at) -> dict[str, str]:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


@pytest.mark.parametrize("file,path", pages())
def test_a_link_reopens_the_same_request_and_controls(file, path):
    """Every control away from its default (each selectbox to another of its options), the link the page
    writes opened in a fresh session: the same request, the same controls, drawn the same."""
    at = app_at(file, {})
    for key, value in REQUEST.items():
        at.session_state[key] = value
    drawn = controls(at.run())
    linked = linked_keys(at) & set(drawn)
    unset = sorted(linked - set(NON_DEFAULT) - {linked_key(at, w.key) for w in [*at.selectbox, *at.multiselect]})
    assert not unset, f"{path}: add a value away from the default for {unset} to NON_DEFAULT"
    for _ in range(2):  # twice: a slider whose range follows another control is a new widget after that moves
        for key in sorted(linked & set(NON_DEFAULT)):
            at.session_state[key] = NON_DEFAULT[key]
        at.run()
    for key in [w.key for w in at.selectbox if w.key in linked - set(NON_DEFAULT)]:  # in page order: options follow
        box = at.selectbox(key=key)
        if len(box.options) > 1:
            box.select_index(0 if box.index else len(box.options) - 1).run()
    for picker in [w for w in at.multiselect if linked_key(at, w.key) in linked - set(NON_DEFAULT)]:
        picker.set_value(picker.value[:2]).run()  # Attention's four tokens by hand: two of them
    assert not at.exception, at.exception
    before = controls(at)
    unchanged = sorted(k for k in linked if before.get(k) == drawn[k] and k not in KEPT)
    assert not unchanged, f"{path}: still at their defaults: {unchanged}"
    link = query_of(at)
    assert all(link.get(k) == v for k, v in {"q": "Are links fruit?", "top_k": "40", "seed": "7"}.items()), link
    again = app_at(file, link)
    for key, value in REQUEST.items():
        assert again.session_state[key] == value, (key, link)
    after = controls(again)
    assert {k: after.get(k) for k in linked} == {k: before.get(k) for k in linked}, link
    if path != "presenter":  # a room named without its key is followed: the link then says `follow=`
        assert query_of(again) == link
