"""Comparing models on one request (pipeline/run/compare_models.py): fast on two tiny random Llamas, then the
real pair."""
import pytest
from kit.texts import DEFAULT_QUESTION
from kit.tiny_models import make_tiny_lm

from pipeline.model.dims import FULL, SLIDING, ModelDims
from pipeline.run.compare_models import answers_sentence, attention_kinds, compare_models, kv_footprint
from pipeline.stages.request import ChatRequest, GenerationOptions

# Gemma-3-270M as its config.json states it (18 layers, a full one every sixth, window 512, 1 K/V head of 256)
GEMMA_TYPES = tuple(FULL if i % 6 == 5 else SLIDING for i in range(18))
GEMMA = ModelDims(name="Gemma-3-270M", L=18, H=4, Hkv=1, Dh=256, D=640, D_mlp=2048, V=262144, context_window=32768,
                  rope_base=10000.0, dtype="float32", device="cpu", bytes_per_value=4, architecture="gemma3_text",
                  layer_types=GEMMA_TYPES, sliding_window=512)


def test_gemma_kv_bytes_stop_growing_in_sliding_layers():
    kv = kv_footprint(GEMMA, [0] * 18, prompt_tokens=1)
    assert kv.per_token_bytes == 18 * 2 * 1 * 256 * 4 == 36_864  # every layer, while shorter than the window
    assert kv.long_run_per_token_bytes == 3 * 2048  # past the window only the 3 full layers grow
    # HF's cache keeps the last window - 1 = 511 positions of a sliding layer (pipeline.model.kv_tensors)
    assert kv.bytes_at(1000) == 15 * 2048 * 511 + 3 * 2048 * 1000
    kinds = attention_kinds(GEMMA)
    assert (kinds.full_layers, kinds.sliding_layers, kinds.window, kinds.sharing) == (3, 15, 512, "multi-query")


def test_two_tiny_models_compared(tokenizer):
    """Two random Llamas that differ in K/V heads: each record's KV bytes read from its real cache equal the
    formula, the timing is measured for both and names what differs."""
    grouped = make_tiny_lm(tokenizer, seed=0)  # H=4, Hkv=2
    mqa = make_tiny_lm(tokenizer, seed=1, num_key_value_heads=1, num_hidden_layers=3)
    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=4))
    result = compare_models(request, [grouped, mqa], repeats=2)
    a, b = result.runs
    assert a.kv.per_layer_bytes == (2 * 2 * 16 * 4,) * 2 and b.kv.per_layer_bytes == (2 * 1 * 16 * 4,) * 3
    assert a.kv.measured_per_layer_bytes == a.kv.per_layer_bytes
    assert b.kv.measured_per_layer_bytes == b.kv.per_layer_bytes
    assert (a.attention.sharing, b.attention.sharing) == ("grouped-query", "multi-query")
    assert a.ids == b.ids and a.template_tokens == len(a.tokens) > 10  # one tokenizer, one template
    assert a.answer_tokens == 4 and len(a.first_candidates) == 5
    assert a.first_candidates[0].prob >= a.first_candidates[-1].prob > 0
    assert result.timing.ttft.repeats == 2 and result.timing.tpot.repeats == 2
    assert any("2 layers of width 64 vs 3" in w for w in result.timing.work_differs)
    assert answers_sentence(result).count("the 4-token limit cut it") == 2  # neither tiny model stops by itself
    # the words follow each record's tuning and the request's format
    from dataclasses import replace

    tuned = replace(result, runs=(replace(a, instruct=True), replace(b, instruct=False)))
    assert "tiny-llama was tuned on chat turns (instruct): it reads the turns" in answers_sentence(tuned)
    plain = replace(tuned, request=replace(request, prompt_format="plain"))
    assert "here it gets bare text with no turns" in answers_sentence(plain)
    assert "never to take turns" not in answers_sentence(plain) and "never to take turns" in answers_sentence(tuned)


@pytest.mark.model
def test_smollm2_and_gemma_on_one_request(lm, gemma_lm):
    request = ChatRequest.from_question(DEFAULT_QUESTION, options=GenerationOptions(max_new_tokens=6))
    result = compare_models(request, [lm, gemma_lm], repeats=1)
    smol, gemma = result.runs
    assert (smol.instruct, gemma.instruct) == (True, False)
    assert smol.template_text.startswith("<|im_start|>system") and "<start_of_turn>model\n" in gemma.template_text
    # bytes read from each model's real cache tensors after the prompt equal the formula in every layer
    assert smol.kv.measured_per_layer_bytes == (2 * 3 * 64 * 4,) * 30 == smol.kv.per_layer_bytes
    assert gemma.kv.measured_per_layer_bytes == (2 * 1 * 256 * 4,) * 18 == gemma.kv.per_layer_bytes
    assert (gemma.attention.full_layers, gemma.attention.sliding_layers) == (3, 15)
    assert gemma.embedding_parameters == 262144 * 640 and smol.embedding_parameters == 49152 * 576
    assert result.timing is not None and len(result.timing.work_differs) >= 3
    assert "Gemma-3-270M is a base model" in answers_sentence(result)


MALICIOUS = "<img src=x onerror=alert(1)> **bold** 토마토"


@pytest.mark.app
def test_compare_page_on_the_real_models():
    """The page runs the request through SmolLM2 and Gemma and shows both answers and both prompts; the
    question's HTML stays text (it reaches the page only escaped, or inside code blocks)."""
    from kit.apptest import page_app

    at = page_app("compare_models", req_question=MALICIOUS, req_max_new_tokens=4).run()
    assert not at.exception, at.exception
    codes = [c.value for c in at.code]
    assert len(codes) == 4  # two answers, two prompts
    assert any("<|im_start|>user\n" + MALICIOUS in c for c in codes)
    assert any("<start_of_turn>user\n" + MALICIOUS in c for c in codes)
    markdown = "\n".join(m.value for m in at.markdown)
    assert "SmolLM2-135M-Instruct" in markdown and "Gemma-3-270M" in markdown
    assert "is a base model" in markdown and "<img" not in markdown.replace("&lt;img", "")
    assert "The two do different work" in markdown
    assert len(at.dataframe) == 4  # candidates ×2, shape table, timing


@pytest.mark.app
def test_tokens_page_counts_the_text_in_both_vocabularies():
    """Section 4 of the Tokens page: the typed text through SmolLM2's and Gemma's tokenizers, counts as the
    tokenizers themselves give them (HF's own encode, no special tokens added)."""
    from kit.apptest import page_app

    from pipeline.model.handle import ModelHandle

    text = "토마토는 과일인가요, 채소인가요?"
    at = page_app("tokens", tok_text=text, req_question=text, req_max_new_tokens=2).run()
    assert not at.exception, at.exception
    counts = {name: len(ModelHandle(key).tokenizer.encode(text, add_special_tokens=False))
              for key, name in (("smollm2-135m", "SmolLM2-135M-Instruct"), ("gemma-3-270m", "Gemma-3-270M"))}
    assert counts["SmolLM2-135M-Instruct"] > 2 * counts["Gemma-3-270M"]  # Korean: 49k vs 262k pieces shows
    markdown = "\n".join(m.value for m in at.markdown)
    for name, n in counts.items():
        assert f"**{name}** (" in markdown and f"**{n} tokens**" in markdown
    table = at.dataframe[-3].value  # the fixed samples, before the other-tokenizers table and the capitals one
    assert list(table.columns) == ["text", "SmolLM2-135M-Instruct", "Gemma-3-270M"]
    assert table.iloc[0].to_dict() == {"text": "your question", **counts}  # the sidebar's question, asked in Korean


def test_sentencepiece_space_shows_like_a_byte_level_one(tokenizer, gemma_tokenizer):  # noqa: F811
    """Gemma's '▁tomatoes' and SmolLM2's 'Ġtomatoes' are both ' tomatoes': both show as '␣tomatoes'."""
    from pipeline.text.token_names import tokens_text

    for tok in (tokenizer, gemma_tokenizer):
        ids = tok.encode("Are tomatoes fruit?", add_special_tokens=False)
        assert tokens_text(tok, ids) == ["Are", "␣tomatoes", "␣fruit", "?"]


def test_compare_page_runs_as_a_long_job_that_its_starter_can_stop_and_start_again(tiny_app, monkeypatch):
    """Opening the page starts the comparison in the model's queue, a model's run or a timed answer at a time: past
    the page's own wait (0 s here) its progress is shown with a Cancel button; once stopped, the page says so and
    offers to start it again, and that run's result is drawn with when it was made."""
    import threading
    from concurrent.futures import CancelledError

    from kit.apptest import page_app

    from pipeline.run import compare_models as compare
    from views.server import long_job
    from views.server.state import run_queue

    monkeypatch.setattr(long_job, "IN_PAGE_WAIT_S", 0.0)
    held, go_on, runs = threading.Event(), threading.Event(), []
    real = compare.compare_models_steps

    def steps(*args, **kw):  # the first run waits in its second part until the test lets it go on
        inner = real(*args, **kw)

        def chunks():
            runs.append(1)
            yield next(inner)
            if len(runs) == 1:
                held.set()
                assert go_on.wait(60)
            return (yield from inner)
        return chunks()

    monkeypatch.setattr(compare, "compare_models_steps", steps)
    at = page_app("compare_models", req_question="Which is heavier, a kilo of iron or of feathers?",
                  req_max_new_tokens=2).run()
    assert not at.exception, at.exception
    assert held.wait(60)
    [job] = [t for t in run_queue().long_jobs() if "compare_models" in t.key]
    at.run()
    [bar] = at.get("progress")
    assert bar.proto.text.startswith(f"⏳ The comparison of the two models: 1 of {job.progress.total} parts done")
    [cancel] = [b for b in at.button if b.label == "Cancel"]
    cancel.click().run()
    assert any(i.value.startswith("You stopped the comparison of the two models after 1 of") for i in at.info)
    go_on.set()
    with pytest.raises(CancelledError):
        job.result(60)
    assert not at.code  # nothing drawn: the page stopped
    at.button(key="cmp_start").click().run()
    assert not at.exception, at.exception
    [again] = [t for t in run_queue().long_jobs() if "compare_models" in t.key] or [None]
    if again is not None:  # still running when the page looked: wait for it, then look again
        again.result(60)
        at.run()
    assert len(at.code) == 4 and runs == [1, 1]  # two answers, two prompts: from the second run
    assert any("Made at " in c.value for c in at.caption)


def test_measuring_the_speed_again_keeps_both_verdicts(tiny_app):
    """A second measurement of the same question is shown beside the first, both dated, with what they agree on;
    the first is not replaced (seen once: "4.0x" then "1.9x", each kept alone for everyone)."""
    import re

    from kit.apptest import page_app

    from views.server.state import run_queue

    at = page_app("compare_models", req_question="Is a tomato a fruit, asked twice?", req_max_new_tokens=3).run()
    assert not at.exception, at.exception

    def timing_lines():  # the TTFT item of the timing list
        return [m.value.split("\n- **")[0] for m in at.markdown if m.value.startswith("- **TTFT (plain path)**")]

    [first] = timing_lines()
    assert "measured once, at " in first
    at.button(key="cmp_again").click().run()
    assert not at.exception, at.exception
    for job in [t for t in run_queue().long_jobs() if "compare_models" in t.key]:
        job.result(120)  # still running when the page looked: wait for it, then look again
    at.run()
    [both] = timing_lines()
    assert re.search(r"(in each of|in any of|the|of) 2 measurements", both), both
    assert len(re.findall(r"\n  - \d\d:\d\d: ", both)) == 2  # each measurement listed with its time


def test_candidate_label_names_a_character_part_as_journey_does(tokenizer):
    """SmolLM2's vocabulary spells '토' in three byte tokens: the chosen one reads '토 (1/3)' as Journey's title and
    chips read it, another candidate what it would start."""
    from pipeline.text.unfinished import candidate_label

    ids = tokenizer("토마토", add_special_tokens=False)["input_ids"]
    assert len(ids) > 3  # byte tokens, three a character
    assert candidate_label(tokenizer, [1, 2], ids[0], ids) == "토 (1/3) · bytes <0xED>"
    assert candidate_label(tokenizer, [1, 2], ids[0]) == "<0xED> (byte 1 of 3)"  # not chosen
    whole = tokenizer(" fruit", add_special_tokens=False)["input_ids"]
    assert candidate_label(tokenizer, [1, 2], whole[0], whole) == "␣fruit"


LONG_QUESTION = "\n".join(f"Line {k}: a tomato?" for k in range(30))  # 30 lines, within the tiny model's 512 tokens


def compare_page(monkeypatch, question: str):
    from kit.apptest import page_app
    from kit.table_width import record_tables

    asked = record_tables(monkeypatch)
    from views.server.state import run_queue

    at = page_app("compare_models", req_question=question, req_max_new_tokens=3).run()
    assert not at.exception, at.exception
    for job in [t for t in run_queue().long_jobs() if "compare_models" in t.key]:
        job.result(300)  # still running when the page looked (past its own wait): wait for it, then look again
        at.run()
    assert any(s.value.startswith("3. The first token") for s in at.subheader), "the comparison did not finish"
    return at, asked


def test_compare_pages_tables_name_tokens_readably_and_fit_the_page(tiny_app, monkeypatch):
    """The first token's table showed repr(text) ('<0xED>' in quotes); the shape table and the timing table (two
    columns per model) ran past the page's right edge."""
    from kit.table_width import too_wide

    at, asked = compare_page(monkeypatch, "토마토는 과일이야?")
    candidates = [d for d, _ in asked if "probability" in d.columns]
    assert len(candidates) == 2
    assert not [t for d in candidates for t in d["token"] if t.startswith(("'", '"'))], [list(d["token"]) for d in
                                                                                         candidates]
    assert not too_wide([(d, kw) for d, kw in asked if "probability" in d.columns], share=0.5)
    assert not too_wide([(d, kw) for d, kw in asked if "probability" not in d.columns]), \
        [d.to_dict() for d, _ in asked if "probability" not in d.columns]


def test_a_long_prompt_shows_its_start_whole_and_says_how_much_more_there_is(tiny_app, monkeypatch):
    """The prompt boxes scrolled at a fixed height, cut mid-line with nothing to say there was more."""
    at, _ = compare_page(monkeypatch, LONG_QUESTION)
    more = [e for e in at.expander if "more line" in e.label]
    assert len(more) == 2, [e.label for e in at.expander]  # each model's prompt
    heads = [c.value for c in at.code if "Line 0:" in c.value]
    assert len(heads) == 2 and all("Line 29:" not in h for h in heads)
    for head in heads:  # the start ends where a line of the question ends, not inside one
        last = head.split("\n")[-1]
        assert not last.startswith("Line") or last.endswith("a tomato?"), last
    for box in more:
        rest = box.code[0].value
        assert "Line 29:" in rest and box.label.startswith(f"{rest.count(chr(10)) + 1} more lines below"), box.label
