"""Why a head attends (pipeline/attribution/qk.py): one head's pre-softmax scores split into query part x key part
terms, on tiny random-weight Llama and Gemma 3 models (fast tier; the tiny Gemma's sliding window of 4 is shorter
than the prompt) and the real SmolLM2 and Gemma 3 (`model`).

References from outside the code under test: Hugging Face's eager attention probabilities (output_attentions=True
on a model loaded with attn_implementation="eager"): two keys' score difference must be the log-ratio of their
probabilities, since both share the softmax's denominator; and the keys the eager kernel gives 0 are the ones
outside the window."""
import copy

import numpy as np
import pytest
import torch
from kit.cli import run_cli
from kit.texts import CLEAN
from kit.tolerance import U32, any_logit_tolerance, float32_tolerance, forward_tolerance

from pipeline.attribution.qk import (
    check_attends,
    grouped,
    in_words,
    largest_terms,
    parse_attends,
    part_names,
    qk_attribution,
)
from pipeline.attribution.record import record_step
from pipeline.core.errors import InputError


def eager_probabilities(model, ids: list[int]) -> list[np.ndarray]:
    """HF's own eager attention weights (L of (H, T, T), float64) for `ids`."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True, use_cache=False)
    return [a[0].double().numpy() for a in out.attentions]


def check_against_eager(lm, rec, probs, layer: int, head: int, query: int | None = None) -> None:
    qa = qk_attribution(lm, rec, layer, head, query=query, top=6)
    p = probs[layer][head, qa.query_position]
    scores = [k.score for k in qa.keys]
    assert scores == sorted(scores, reverse=True)  # keys in order of score
    # the terms split the score read from the record's float32 stream (the blocks before, then the input norm and
    # the projections): its rounding on the terms' own absolute sum (kit.tolerance); HF's eager pass is another
    T = rec.resid.shape[1]
    d_score = max(forward_tolerance(lm.dims, np.abs(k.terms).sum(), T, layers=layer + 1) for k in qa.keys)
    for k in qa.keys:
        assert k.terms.shape == (len(qa.parts), len(qa.parts))
        assert k.terms_sum == pytest.approx(k.score, abs=d_score)  # the terms add up to the score
        assert k.probability == pytest.approx(p[k.position], abs=2 * d_score + float32_tolerance(T, 1.0, depth=2))
    for a, b in zip(qa.keys, qa.keys[1:]):  # score differences are HF's log-ratios (its exp rounds once a weight)
        assert a.score - b.score == pytest.approx(np.log(p[a.position] / p[b.position]), abs=2 * d_score + 4 * U32)
    seen = ~np.isnan(qa.scores)
    assert np.all(p[~seen] == 0) and np.all(p[seen] > 0)  # later keys and keys outside a window: no score


@pytest.fixture(scope="module")
def tiny_eager(tiny_models):  # noqa: F811
    out = {}
    for name, lm in tiny_models.items():
        model = copy.deepcopy(lm.model)
        model.set_attn_implementation("eager")
        out[name] = model
    return out


@pytest.mark.parametrize("which", ["llama", "gemma"])
def test_terms_sum_to_the_score_and_differences_are_hfs_log_ratios(which, tiny_models, tiny_eager,  # noqa: F811
                                                                   tokenizer):
    lm = tiny_models[which]
    ids = tokenizer(CLEAN)["input_ids"]
    rec = record_step(lm, ids)
    probs = eager_probabilities(tiny_eager[which], ids)
    for layer in range(lm.dims.L):  # Gemma: sliding, sliding, full
        for head in range(lm.dims.H):
            check_against_eager(lm, rec, probs, layer, head)
    check_against_eager(lm, rec, probs, lm.dims.L - 1, 1, query=3)  # an earlier query position
    if which == "gemma":  # the window bites: position 6 sees 3..6 only in a sliding layer, 0..6 in the full one
        assert np.flatnonzero(~np.isnan(qk_attribution(lm, rec, 0, 0, query=6).scores)).tolist() == [3, 4, 5, 6]
        assert np.flatnonzero(~np.isnan(qk_attribution(lm, rec, 2, 0, query=6).scores)).tolist() == list(range(7))


def test_json_small_matrix_and_words(tiny_models, tokenizer):  # noqa: F811
    lm = tiny_models["llama"]
    ids = tokenizer(CLEAN)["input_ids"]
    rec = record_step(lm, ids)
    qa = qk_attribution(lm, rec, 2, 3, top=3)
    doc = qa.to_json()
    assert (doc["layer"], doc["head"], doc["query_position"]) == (2, 3, len(ids) - 1)
    assert qa.parts == part_names(2) == ["embedding", "layer 0 attention", "layer 0 MLP", "layer 1 attention",
                                         "layer 1 MLP"]
    for k in doc["keys"]:
        assert len(k["terms"]) == 25 and {"query_part", "key_part", "value"} == set(k["terms"][0])
        assert sum(t["value"] for t in k["terms"]) == pytest.approx(k["terms_sum"], abs=1e-9)
    key = qa.keys[0]
    rows, cols, m = grouped(qa.parts, key.terms, n=2)
    assert rows[-1] == cols[-1] == "other parts (3)" and m.shape == (3, 3)
    assert m.sum() == pytest.approx(key.terms_sum, abs=1e-9)  # folding the rest keeps the sum
    (a, b, v), *_ = largest_terms(qa.parts, key.terms, 1)
    assert abs(v) == pytest.approx(np.abs(key.terms).max())
    assert f"the query's {a} meeting the key's {b}" in in_words(qa.parts, key)


@pytest.mark.parametrize("text, field", [("3", "attends"), ("a.b", "attends"), ("1.-2", "attends"),
                                         ("²." + "1", "attends"), ("9" * 5000 + ".1", "attends")])
def test_attends_must_be_layer_dot_head(text, field):
    with pytest.raises(InputError) as e:
        parse_attends(text)
    assert e.value.field == field and "LAYER.HEAD" in str(e.value)
    assert parse_attends(" 12.3 ") == (12, 3)


def test_ranges_are_checked_against_the_model(tiny_models):  # noqa: F811
    lm = tiny_models["llama"]
    for args, field, said in [((3, 0, None, 5), "attends", "layer must be between 0 and 2"),
                              ((0, 4, None, 5), "attends", "head must be between 0 and 3"),
                              ((0, 0, 5, 5), "query", "between 0 and 4")]:
        with pytest.raises(InputError) as e:
            check_attends(lm, *args)
        assert e.value.field == field and said in str(e.value)
    assert check_attends(lm, 0, 0, None, 5) == 4


@pytest.mark.parametrize("argv, field", [
    (["explain", "--attends", "3", "Hi"], "attends"),
    (["explain", "--attends", "x.1", "Hi"], "attends"),
    (["explain", "--query", "2", "Hi"], "query"),
    (["explain", "--attends", "1.1", "--query", "-1", "Hi"], "query"),
])
def test_cli_refuses_bad_attends_in_one_line_before_loading(tmp_path, argv, field):
    code, out, err = run_cli(tmp_path, *argv)
    assert (code, out) == (2, ""), err
    assert err.startswith(f"error: {field}: ") and err.count("\n") == 1, err


@pytest.mark.model
@pytest.mark.parametrize("which, layers", [("lm", [0, 15, 29]), ("gemma_lm", [0, 5, 6, 17])])
def test_real_models_against_hf_eager(which, layers, request, tmp_path):
    """SmolLM2 (every layer full) and Gemma 3 (0 and 6 sliding, 5 and 17 full): the terms add up to the model's
    score, the differences are HF's eager log-ratios; and the CLI's --json holds the same split."""
    import json

    from transformers import AutoModelForCausalLM

    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = request.getfixturevalue(which)
    fmt = "plain" if which == "gemma_lm" else "chat"
    ids = tokenize_request(lm.tokenizer, ChatRequest.from_question("Are tomatoes fruit?", prompt_format=fmt)).ids
    rec = record_step(lm, ids)
    eager = AutoModelForCausalLM.from_pretrained(lm.model.config._name_or_path, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    probs = eager_probabilities(eager, ids)
    for layer in layers:
        for head in (0, lm.dims.H - 1):
            check_against_eager(lm, rec, probs, layer, head)
    if which == "lm":
        out = tmp_path / "qk.json"
        code, _out, err = run_cli(tmp_path, "explain", "Are tomatoes fruit?", "--attends", "15.2", "--json",
                                  str(out), real_weights=True)
        assert code == 0, err
        qk = json.loads(out.read_text())["qk"]
        assert (qk["layer"], qk["head"]) == (15, 2)
        assert [k["score"] for k in qk["keys"]] == sorted((k["score"] for k in qk["keys"]), reverse=True)
        T = qk["query_position"] + 1  # layer 15's score: the 15 blocks before it, the norm and projections
        assert all(abs(k["terms_sum"] - k["score"])
                   <= forward_tolerance(lm.dims, sum(abs(t["value"]) for t in k["terms"]), T, layers=16)
                   for k in qk["keys"])
        code, _out, err = run_cli(tmp_path, "explain", "Hi", "--attends", "30.0", real_weights=True)
        assert code == 2 and err.startswith("error: attends: layer must be between 0 and 29") and \
            err.count("\n") == 1, err


@pytest.mark.parametrize("which", ["llama", "gemma"])
def test_graph_nodes_and_a_tokens_ablation(which, tiny_models, tokenizer):  # noqa: F811
    """Each head, MLP and token once, strongest route first; switching a token off is the model run on its own
    embeddings with that row zeroed (Hugging Face's forward on inputs_embeds), or set to the rows' mean."""
    from pipeline.attribution.graph import contribution_graph
    from pipeline.attribution.nodes import Node, ablate_node, graph_nodes
    from pipeline.core.maths import softmax

    lm = tiny_models[which]
    ids = tokenizer(CLEAN)["input_ids"]
    rec = record_step(lm, ids)
    nodes = graph_nodes(contribution_graph(rec, lm, threshold=0.01))
    assert [n.share for n in nodes] == sorted((n.share for n in nodes), reverse=True)
    assert len({(n.kind, n.layer, n.head, n.position if n.kind == "token" else None) for n in nodes}) == len(nodes)
    target = int(rec.logits.argmax())
    emb = lm.model.get_input_embeddings()(torch.tensor([ids])).detach()
    for mode, row in (("zero", torch.zeros_like(emb[0, 2])), ("mean", emb[0].mean(0))):
        r = ablate_node(lm, ids, target, Node("token", 0, None, 2, 2, 1.0), mode, clean_logits=rec.logits)
        changed = emb.clone()
        changed[0, 2] = row
        with torch.no_grad():
            want = lm.model(inputs_embeds=changed).logits[0, -1].double().numpy()
        tol = any_logit_tolerance(lm, len(ids))  # two passes on the same embeddings: float32 rounding apart
        assert r.prob_after == pytest.approx(float(softmax(want)[target]), abs=2 * tol + float32_tolerance(
            lm.dims.V, 1.0, depth=2))
        assert r.logit_after == pytest.approx(float(want[target]), abs=tol) and r.layer == -1
