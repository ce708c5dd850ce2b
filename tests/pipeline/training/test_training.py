"""How it learned: scoring under teacher forcing (against HF's own loss), one training step on a copy of the
weights (in process on a tiny model; in a child process on the real one), the memory estimate and its refusal."""
import os
import copy
import hashlib
import math

import pytest
import torch
from kit.tolerance import float32_tolerance, logprob_tolerance

from pipeline.core.errors import InputError
from pipeline.training import memory, train_step
from pipeline.training.score import answer_ids, article_penalty, score_ids, text_ids

SENTENCE = "The contract lasts three years."
OTHER = "Tomatoes are fruit."


def hf_token_logprobs(model, ids):
    """Reference: HF's loss, and the log-probs written out by hand from its logits (log_softmax, gather)."""
    x = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    logp = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
    return float(out.loss), logp[torch.arange(len(ids) - 1, device=x.device), x[0, 1:]].tolist()


def weights_hash(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_score_equals_hf_loss_on_tiny_model(tiny_lm):
    ids = text_ids(tiny_lm, SENTENCE)
    score = score_ids(tiny_lm, ids)
    loss, logprobs = hf_token_logprobs(tiny_lm.model, ids)
    assert score.logprobs[0] is None and len(score.logprobs) == len(ids)
    tol = logprob_tolerance(tiny_lm, len(ids))  # ours and HF's pass: float32 rounding apart (kit.tolerance)
    assert score.logprobs[1:] == pytest.approx(logprobs, abs=tol)
    assert score.mean_loss == pytest.approx(loss, abs=tol)
    assert score.perplexity == pytest.approx(math.exp(loss), rel=2 * tol)
    for t in score.scored:  # rank 1 is the model's own top choice; surprisal is -log2 p
        assert (score.ranks[t] == 1) == (score.top_ids[t] == ids[t])
        assert score.surprisal_bits(t) == pytest.approx(-math.log2(score.prob(t)))


def test_answer_is_scored_after_the_templated_question(tiny_lm):
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    ids, start = answer_ids(tiny_lm, "Are tomatoes fruit?", "Yes, they are.")
    prompt = tokenize_request(tiny_lm.tokenizer, ChatRequest.from_question("Are tomatoes fruit?")).ids
    assert ids[:start] == prompt and start == len(prompt)
    score = score_ids(tiny_lm, ids, start)
    assert score.logprobs[:start] == [None] * start
    _, logprobs = hf_token_logprobs(tiny_lm.model, ids)
    want = -sum(logprobs[start - 1:]) / (len(ids) - start)
    assert score.mean_loss == pytest.approx(want, abs=logprob_tolerance(tiny_lm, len(ids)))


@pytest.mark.parametrize("text, field, says", [
    ("", "text", "give some text"), ("   \n", "text", "give some text"),
    ("bad \x1b[2J escape", "text", "control character \\x1b at position 4"),
    ("x" * 20_001, "text", "at most 20,000"),
])
def test_bad_text_is_refused(tiny_lm, text, field, says):
    with pytest.raises(InputError) as e:
        text_ids(tiny_lm, text)
    assert e.value.field == field and says in e.value.message


def test_text_past_the_context_window_is_refused(tokenizer):
    from kit.tiny_models import make_tiny_lm

    small = make_tiny_lm(tokenizer, max_position_embeddings=8)
    with pytest.raises(InputError, match="at most 8 fit"):
        text_ids(small, "one two three four five six seven eight nine ten")
    with pytest.raises(InputError, match="at least two"):
        text_ids(small, "Hi")


def test_article_worked_numbers():
    """The article: "three" at 54 % costs 0.6, at 5 % costs 3.0."""
    assert round(article_penalty(0.54), 1) == 0.6 and round(article_penalty(0.05), 1) == 3.0


def test_one_step_lowers_the_loss_and_leaves_the_original_untouched(tiny_lm):
    ids, other = text_ids(tiny_lm, SENTENCE), text_ids(tiny_lm, OTHER)
    before = weights_hash(tiny_lm.model)
    for optimizer, lr in (("sgd", 0.5), ("adam", 1e-3)):
        result = train_step.take_step(copy.deepcopy(tiny_lm.model), ids, other, optimizer, lr)
        assert -sum(result["logprobs_after"]) < -sum(result["logprobs_before"])
        # the same logits, HF's cross entropy against our log-softmax: each a log-sum-exp of V terms
        lse = float32_tolerance(tiny_lm.dims.V, 1.0, depth=2) * (1 + abs(result["loss"]))
        assert result["loss"] == pytest.approx(-sum(result["logprobs_before"]) / (len(ids) - 1), abs=lse)
        assert set(result["grad_norms"]) == {"embeddings", "layer 0", "layer 1", "final norm", "head"}
        assert result["grad_norm"] == pytest.approx(math.sqrt(sum(v * v for v in result["grad_norms"].values())))
    assert weights_hash(tiny_lm.model) == before


@pytest.mark.parametrize("optimizer, lr, field", [
    ("rmsprop", 0.1, "optimizer"), ("sgd", 0.0, "learning_rate"), ("sgd", float("nan"), "learning_rate"),
    ("adam", 5, "learning_rate")])
def test_bad_step_options(optimizer, lr, field):
    with pytest.raises(InputError) as e:
        train_step.check_step_options(optimizer, lr)
    assert e.value.field == field


def test_memory_by_hand():
    """ZeRO (Rajbhandari et al. 2019, §3.1): mixed-precision Adam holds 16 bytes per parameter (2 weights,
    2 gradients, 12 optimizer: float32 master copy and two moments); float32 Adam 4 + 4 + 8."""
    p = 1_000_000
    mixed = memory.training_memory(p, 1, 1, 1, None, 2, "adam")
    assert (mixed.weights + mixed.gradients + mixed.optimizer) == 16 * p
    full = memory.training_memory(p, 30, 576, 10, 49_152, 4, "adam")
    assert (full.weights, full.gradients, full.optimizer) == (4 * p, 4 * p, 8 * p)
    assert full.activations == 30 * 10 * 576 * 34 * 2 + 10 * 49_152 * 8
    assert memory.training_memory(p, 1, 1, 1, None, 4, "sgd").optimizer == 0
    inference = memory.inference_memory(p, 30, 3, 64, 100, 49_152, 4)
    assert inference.kv_cache == 2 * 30 * 3 * 64 * 100 * 4 and inference.weights == 4 * p


def test_step_refused_when_memory_will_not_fit(tiny_lm, monkeypatch):
    def no_child(*_a, **_k):
        raise AssertionError("a child process started although the step does not fit")

    monkeypatch.setattr(train_step.subprocess, "run", no_child)
    monkeypatch.setattr(memory, "available_bytes", lambda: 100 * 2**20)  # 100 MiB free
    params = sum(p.numel() for p in tiny_lm.model.parameters())
    with pytest.raises(InputError) as e:
        train_step.run_step("smollm2-135m", [1, 2, 3], [4, 5], "adam", 1e-4, params, tiny_lm.dims)
    assert e.value.field == "memory" and "0.10 GiB are available" in e.value.message


def test_memory_available_reads_meminfo(tmp_path):
    """MemAvailable is read in kB and given in bytes; a kernel too old to write it (before Linux 3.14) falls back to
    the free pages, which never exceed the machine's memory."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   12345678 kB\n")
    assert memory.available_bytes(str(meminfo)) == 12345678 * 1024
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:         1000 kB\n")
    free = memory.available_bytes(str(meminfo))
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert free is not None and 0 < free <= total


@pytest.mark.model
def test_score_equals_hf_loss_on_real_models(lm, gemma_lm):
    for model in (lm, gemma_lm):
        ids = text_ids(model, SENTENCE)
        score = score_ids(model, ids)
        loss, logprobs = hf_token_logprobs(model.model, ids)
        tol = logprob_tolerance(model, len(ids))
        assert score.logprobs[1:] == pytest.approx(logprobs, abs=tol)
        assert score.mean_loss == pytest.approx(loss, abs=tol)


@pytest.mark.model
def test_real_step_in_a_child_lowers_loss_and_leaves_the_shared_model_bit_identical(lm):
    ids, other = text_ids(lm, SENTENCE), text_ids(lm, OTHER)
    before = weights_hash(lm.model)
    params = sum(p.numel() for p in lm.model.parameters())
    result = train_step.run_step("smollm2-135m", ids, other, "sgd", 0.01, params, lm.dims)
    assert sum(result["logprobs_after"]) > sum(result["logprobs_before"])
    # the child started from ours (its own process and threads: maybe other kernels, float32 rounding apart)
    assert score_ids(lm, ids).mean_loss == pytest.approx(result["loss"], abs=logprob_tolerance(lm, len(ids)))
    assert weights_hash(lm.model) == before
    assert len([k for k in result["grad_norms"] if k.startswith("layer ")]) == lm.dims.L


def test_page_scores_and_refuses_a_step_that_does_not_fit(tiny_app, monkeypatch):
    """How it learned on the tiny model: the sentence's chips and table equal score_ids; the step runs only when
    asked, and with too little memory it is refused with the message (no child process)."""
    from kit.apptest import page_app

    from pipeline.training import train_step

    started = []
    monkeypatch.setattr(train_step.subprocess, "run", lambda *a, **k: started.append(a))
    at = page_app("how_it_learned").run()
    assert not at.exception, at.exception
    expected = score_ids(tiny_app, text_ids(tiny_app, SENTENCE))
    table = at.dataframe[0].value
    assert list(table["rank"]) == expected.ranks[1:]
    assert list(table["loss (nats)"]) == [round(-lp, 3) for lp in expected.logprobs[1:]]
    assert f"{expected.mean_loss:.3f} nats" in [m.value for m in at.metric]
    assert any("Take one step" in i.value for i in at.info) and not started
    monkeypatch.setattr(memory, "available_bytes", lambda: 2**20)
    at.button(key="FormSubmitter:train_form-Take one step").click().run()
    assert not at.exception, at.exception
    assert any("memory:" in e.value and "available now" in e.value for e in at.error) and not started


@pytest.mark.parametrize("argv, says", [
    (["score", ""], "text: give some text"), (["score", "a\x07b"], "text: holds the control character \\x07"),
    (["score", "Yes", "--answer-to", " "], "answer_to: give some text"),  # the option typed (was `question`)
    (["score", "x", "--json", "/proc/nope.json"], "json:")])
def test_cli_refuses_bad_input_before_loading_the_model(argv, says, capsys):
    from pipeline.cli import main

    assert main(argv) == 2  # the fast tier refuses to load weights: the check came first
    assert says in capsys.readouterr().err


@pytest.mark.model
def test_cli_score_json(lm, tmp_path):
    import json

    from pipeline.cli import main

    out = tmp_path / "score.json"
    assert main(["score", SENTENCE, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    loss, logprobs = hf_token_logprobs(lm.model, doc["ids"])
    assert doc["ids"] == lm.tokenizer(SENTENCE)["input_ids"] and doc["tokens"][0]["logprob"] is None
    assert [t["id"] for t in doc["tokens"]] == doc["ids"]
    tol = logprob_tolerance(lm, len(doc["ids"]))
    assert [t["logprob"] for t in doc["tokens"][1:]] == pytest.approx(logprobs, abs=tol)
    assert doc["mean_loss"] == pytest.approx(loss, abs=tol)
    assert main(["score", "Yes, they are.", "--answer-to", "Are tomatoes fruit?", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    start = doc["scored_from"]
    assert all(t["logprob"] is None for t in doc["tokens"][:start])
    answer = [t["logprob"] for t in doc["tokens"][start:]]
    assert doc["mean_loss"] == pytest.approx(-sum(answer) / len(answer))


def test_surprisal_chips_escape_token_text_and_colour_by_bits():
    from ui.chips import surprisal_chips, surprisal_colour

    html = surprisal_chips(["<img src=x onerror=alert(1)>", "ok"], [1, 2], [None, 0.5], ["#0 <b>", "#1"])
    assert "<img" not in html and "&lt;img src=x" in html and "<b>" not in html
    assert surprisal_colour(None) == "#e5e7eb"  # not scored: grey
    assert surprisal_colour(0.0).startswith("hsl(120,") and surprisal_colour(12.0).startswith("hsl(0,")
    assert surprisal_colour(99.0) == surprisal_colour(12.0)  # capped at the red end
