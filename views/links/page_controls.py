"""Each page's own controls in its link (views/links/url_state.py copies them both ways).

A page's parameter is named after its widget's key, the page's prefix then a dot: `nt_top_k` is `nt.top_k`,
`ly_lens_end` is `ly.lens_end`. The request's parameters have no dot (`top_k`), so the two never share a
name: a Next token link carries the request's top-k and the page's own top-k side by side. The presenter's
room names (`room`, `key`, `follow`, `stage`) stay as they are: they are printed as QR codes and in docs.

Ranges that depend on the run (a step, a token's position) are checked by the page when it draws
(url_state.keep_in_range), and so are options that depend on the device (url_state.keep_offered: the sweep's batch
sizes); a selectbox or radio given a value it does not offer shows its own default.
"""
from __future__ import annotations

from typing import Callable

from views.links.params import (
    MAX_NUMBER_CHARS,
    Param,
    _num,
    choice,
    integer,
    number,
    option,
    presenter_key,
    quoted,
    room_code,
    text,
)

WIDE = 1 << 20  # a position or step: the page keeps it inside the run's own range


def link_name(key: str) -> str:
    """A widget key -> its link parameter: `why_ab_layer` -> `why.ab_layer`."""
    prefix, _, rest = key.partition("_")
    return f"{prefix}.{rest}"


def boolean(s: str) -> bool:
    if s not in ("0", "1"):
        raise ValueError(f"{quoted(s)} must be 1 (on) or 0 (off)")
    return s == "1"


def _bit(v) -> str:
    return "1" if v else "0"


def numbers_from(options) -> Callable[[str], list[int]]:
    """'1,4,16' -> [1, 4, 16], each one of `options` (a multiselect)."""
    def parse(s: str) -> list[int]:
        parts = s.split(",") if s and len(s) <= MAX_NUMBER_CHARS * 8 else []
        if not s or any(p not in {str(o) for o in options} for p in parts):
            raise ValueError(f"{quoted(s)} must be some of {', '.join(map(str, options))}, comma-separated")
        return [int(p) for p in parts]
    return parse


def positions(most: int) -> Callable[[str], list[int]]:
    """'3,5,9' -> [3, 5, 9]: up to `most` token positions (the page keeps those its run has)."""
    def parse(s: str) -> list[int]:
        parts = s.split(",") if len(s) <= MAX_NUMBER_CHARS * most else []
        if not 1 <= len(parts) <= most:
            raise ValueError(f"{quoted(s)} must be 1 to {most} token positions, comma-separated")
        return [integer(0, WIDE)(p) for p in parts]
    return parse


def _joined(v) -> str:
    return ",".join(map(str, v))


def pair(hi: int) -> Callable[[str], tuple[int, int]]:
    """'3-2' -> (3, 2): a layer and a head."""
    def parse(s: str) -> tuple[int, int]:
        layer, _, head = s.partition("-")
        return integer(0, hi)(layer), integer(0, hi)(head)
    return parse


def _pair(v) -> str:
    return f"{v[0]}-{v[1]}"


def _linked(*params: Param) -> dict[str, Param]:
    return {link_name(p.key): p for p in params}


def page_controls(page: str, L: int, H: int) -> dict[str, Param]:
    """The controls of the page at this URL path, by link name (ranges from the model: L layers, H heads)."""
    make = _PAGES.get(page)
    return make(L, H) if make else {}


def _attention(L, H):
    from pipeline.stages.attention import SCALES

    return _linked(Param("at_layer", integer(0, L - 1)), Param("at_head", integer(0, H - 1)),
                   Param("at_scale", choice(SCALES)), Param("at_row", integer(0, WIDE)),
                   Param("at_hand", positions(4), _joined), Param("at_answer", boolean, _bit))


def _next_token(L, H):
    return _linked(Param("nt_step", integer(0, 4096)), Param("nt_draws", choice([10, 30, 100, 300, 1000, 3000, 10000])),
                   Param("nt_temperature", option("temperature"), _num), Param("nt_top_k", option("top_k")),
                   Param("nt_top_p", option("top_p"), _num), Param("nt_min_p", option("min_p"), _num),
                   Param("nt_seed", option("seed")), Param("nt_allowed", text(400)))


def _why_token(L, H):
    from pipeline.attribution.interventions import MODES

    return _linked(Param("why_step", integer(0, WIDE)), Param("why_target", integer(0, 1 << 22)),
                   Param("why_minus", integer(0, 1 << 22)), Param("why_layer", integer(0, L - 1)),
                   Param("why_head", integer(0, H)), Param("why_threshold", number(0.01, 0.5), _num),
                   Param("why_cap", integer(2, 32)), Param("why_node", pair(max(L, H)), _pair),
                   Param("why_ab_layer", integer(0, L - 1)), Param("why_ab_head", integer(0, H)),
                   Param("why_ab_mode", choice(MODES)),
                   Param("why_ig_kind", choice(["integrated gradients", "gradient × input"])),
                   Param("why_corrupted", text()), Param("why_qk_query", integer(0, WIDE)),
                   Param("why_neuron_layer", integer(0, L - 1)), Param("why_neuron_position", integer(0, WIDE)),
                   Param("why_patch_top", integer(0, 48)),  # component_patching.MAX_CHECKED
                   Param("why_node_mode", choice(MODES)))


def _embeddings(L, H):
    from pipeline.stages.embeddings import MAX_WORD_CHARS, MAX_WORD_LIST_CHARS

    return _linked(Param("em_rows_start", integer(0, WIDE)), Param("em_words", text(MAX_WORD_LIST_CHARS)),
                   *(Param(k, text(MAX_WORD_CHARS)) for k in ("em_word", "em_a", "em_b", "em_c")))


def _kv_cache(L, H):
    from pipeline.stages.kv_cache import load_configs

    cfg = load_configs()
    return _linked(Param("kv_n_steps", integer(2, 32)), Param("kv_repeat", choice([1, 4, 8])),  # the page's REPEATS
                   Param("kv_model", choice(cfg["models"])), Param("kv_gpu", choice(cfg["gpus"])),
                   Param("kv_dtype", choice(cfg["dtypes"])), Param("kv_wdtype", choice(cfg["weight_dtypes"])),
                   Param("kv_tokens", integer(1, 1_000_000)), Param("kv_reserve", number(0.0, 0.3), _num))


def _how_it_learned(L, H):
    from pipeline.stages.kv_cache import load_configs
    from pipeline.training.score import MAX_SCORE_CHARS
    from pipeline.training.train_step import LR_RANGE

    return _linked(Param("learn_text", text(MAX_SCORE_CHARS)), Param("learn_answer", text(MAX_SCORE_CHARS)),
                   Param("learn_train_text", text(2000)), Param("learn_other_text", text(2000)),  # TRAIN_CHARS
                   Param("learn_optimizer", choice(("sgd", "adam"))), Param("learn_lr", number(*LR_RANGE), _num),
                   Param("learn_mem_tokens", integer(1, 131_072)),
                   Param("learn_mem_dtype", choice(load_configs()["weight_dtypes"])),
                   Param("learn_mem_opt", choice(("adam", "sgd"))))


def _faster_decode(L, H):
    from pipeline.faster.speculative.rounds import MAX_DRAFTS
    from views.pages.faster_decode.drafts import EXAMPLES, YOURS

    return _linked(Param("fd_drafts", integer(1, MAX_DRAFTS)), Param("fd_request", choice([*EXAMPLES, YOURS])))


def _prompt_caching(L, H):
    from pipeline.prompt_cache.scenarios import scenarios

    return _linked(Param("pc_block_size", choice([4, 8, 16, 32])), Param("pc_scenario", choice(list(scenarios()))),
                   Param("pc_text_a", text()), Param("pc_text_b", text()))


def _cache_audit(L, H):
    from pipeline.prompt_cache.audit.examples import EXAMPLES
    from pipeline.prompt_cache.audit.rules import PROVIDERS

    return _linked(Param("ca_source", choice(["A prepared example", "Paste", "Upload a file"])),
                   Param("ca_example", choice(EXAMPLES)), Param("ca_provider", choice(PROVIDERS)),
                   Param("ca_auto_bp", boolean, _bit), Param("ca_out_tokens", integer(0, 100_000)),
                   *(Param(f"ca_tps_{p}", number(1.0, 1e9), _num) for p in PROVIDERS),
                   Param("ca_only_misses", boolean, _bit), Param("ca_page_size", choice((10, 20, 50))),  # PAGE_SIZES
                   Param("ca_page", integer(1, WIDE)), Param("ca_fixes", boolean, _bit))


def _prefill_decode(L, H):
    from pipeline.costs.sweep import GPU_BATCH_SIZES
    from views.pages.prefill_decode.temperature_zero_runs import RUN_COUNTS

    # every size any device offers; the page keeps those its own device does (url_state.keep_offered)
    return _linked(Param("pd_sizes", numbers_from(GPU_BATCH_SIZES), _joined), Param("pd_others", integer(1, 31)),
                   Param("pd_t0_n", choice(RUN_COUNTS)))


_PAGES: dict[str, Callable[[int, int], dict[str, Param]]] = {
    "tokens": lambda L, H: _linked(Param("tok_text", text(4_000))),  # the page's TEXT_CHARS
    "tensors": lambda L, H: _linked(Param("batch_q2", text(1_000)), Param("batch_q3", text(1_000)),  # QUESTION_CHARS
                                    Param("batch_side", choice(["left", "right"])),
                                    Param("batch_single_from", integer(0, WIDE)),
                                    Param("batch_from", integer(0, WIDE))),
    "embeddings": _embeddings,
    "position": lambda L, H: _linked(Param("rope_layer", integer(0, L - 1)), Param("rope_head", integer(0, H - 1)),
                                     Param("rope_i", integer(0, WIDE)), Param("rope_j", integer(0, WIDE))),
    "layers": lambda L, H: _linked(Param("ly_token", integer(0, WIDE)),
                                   Param("ly_contrib_scale", choice(["log", "linear"])),
                                   Param("ly_positions", integer(1, WIDE)), Param("ly_lens_end", integer(1, WIDE))),
    "attention": _attention,
    "next-token": _next_token,
    "why-token": _why_token,
    "what-if": lambda L, H: _linked(Param("br_step", integer(0, 4096)), Param("br_pick", text(400)),
                                    Param("br_typed", text(40))),
    "constrained": lambda L, H: _linked(Param("co_kind", choice(["json_schema", "regex", "choice"])),
                                        *(Param(f"co_spec_{k}", text(20_000))
                                          for k in ("json_schema", "regex", "choice"))),
    "generation": lambda L, H: _linked(Param("gen_speed", choice(["recorded", "2× faster", "10× faster", "instant"]))),
    "kv-cache": _kv_cache,
    "prefill-decode": _prefill_decode,
    "how-it-learned": _how_it_learned,
    "faster-decode": _faster_decode,
    "prompt-caching": _prompt_caching,
    "cache-audit": _cache_audit,
    "compare-models": lambda L, H: _linked(Param("cmp_format", choice(["chat", "plain"]))),
    "presenter": lambda L, H: {"stage": Param("pr_stage", integer(1, 13)), "room": Param("pr_room", room_code),
                               "key": Param("pr_key", presenter_key, private=True),
                               "follow": Param("pr_follow", room_code)},
}

LEGACY = {  # page -> {a name older links used: today's}; the request's own names (top_k, ...) stay the request's
    "next-token": {"step": "nt.step", "draws": "nt.draws", "t": "nt.temperature"},
    "attention": {"layer": "at.layer", "head": "at.head", "scale": "at.scale"},
    "position": {"layer": "rope.layer", "head": "rope.head"},
    "kv-cache": {"steps": "kv.n_steps"},
    "prompt-caching": {"block": "pc.block_size", "scenario": "pc.scenario"},
}

LINKED_AS = {  # a widget whose key names its run (a key ending in * names every key that starts so) -> the session
    "at_hand_tokens_*": "at_hand",  # key its page keeps its value under for the link, and reads a link's from
}

NOT_LINKED = {  # widget keys left out of links, and why
    "br_tree": "the branches explored in this session: a link cannot make them again",
    "ca_text": "a pasted log can be megabytes: a link carries the prepared examples only",
    "ca_file": "an uploaded file cannot travel in a link",
    "ca_prices": "the edited price table",
    "why_node_pick": "a node of this run's contribution graph, whose list follows the run and its threshold",
    "why_qk_key_*": "one of the picked head's top keys: a new head or query position starts again at its top key",
    "pr_question": "the presenter's question box writes the request's question, which the link carries as `q`",
}


def not_linked(key: str) -> bool:
    """Whether a widget is left out of links (a NOT_LINKED key ending in * names every key that starts so)."""
    return key in NOT_LINKED or any(k.endswith("*") and key.startswith(k[:-1]) for k in NOT_LINKED)


def linked_key(widget_key: str) -> str:
    """The session key a link sets for this widget: its own, or LINKED_AS's for one whose key names its run."""
    return next((v for k, v in LINKED_AS.items() if k.endswith("*") and widget_key.startswith(k[:-1])), widget_key)
