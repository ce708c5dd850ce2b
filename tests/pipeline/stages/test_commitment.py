"""Where each answer token was decided (pipeline.stages.commitment, the Layers page's strip, `trace --commitment`).

The three definitions on hand-made lens ranks (fast tier); the layers against the logit lens computed from Hugging
Face's own `output_hidden_states=True` pass over the prompt and the answer, read through the model's own final-norm
and head modules in float64 (tiny Llama and tiny Gemma 3 in the fast tier, the real SmolLM2 and Gemma in the model
tier), where a layer decided by a near-tie may be either; the strip on the Layers page; the CLI's JSON.
"""
import json

import numpy as np
import pytest
import torch
from kit.apptest import run_page
from kit.cli import run_cli
from kit.tolerance import float32_tolerance, forward_tolerance, unembedding_magnitude

from pipeline.stages.commitment import (
    DEFINITIONS,
    LENS_TOP,
    answer_commitment,
    answer_stream,
    commitment_layers,
    settled_layers,
)
from pipeline.stages.layers import logit_lens
from ui.commitment import strip_html

# ---- the three definitions on hand-made lens readings (L = 4: layers 0..4) -----------------------------------------

T_, F_ = True, False


def test_settled_layer_is_the_first_from_which_it_holds_through_the_last():
    holds = np.array([[F_, T_, T_, F_, T_],
                      [T_, F_, T_, F_, F_],
                      [F_, T_, T_, F_, T_],
                      [T_, T_, T_, F_, T_],
                      [T_, T_, T_, T_, F_]])  # (L+1 = 5, S = 5)
    # held from 3; from 2 (the dip at 1 resets it); from 0; only at the last layer; not at the last layer
    assert settled_layers(holds) == [3, 2, 0, 4, None]
    assert settled_layers(np.zeros((5, 0), dtype=bool)) == []


def test_three_definitions_give_three_layers_for_one_token():
    # one token over layers 0..4: rank 7, 2, 0, 1, 0 (others scored above it) and its probability
    ranks = np.array([[7], [2], [0], [1], [0]])
    probs = np.array([[0.01], [0.2], [0.6], [0.45], [0.7]])
    assert commitment_layers(ranks, probs) == {"top1": [4], "top3": [1], "p_half": [4]}
    # a token the model does not rank first even at the end (sampled): never for top-1, still top-3
    ranks, probs = np.array([[5], [3], [2], [1]]), np.array([[0.01], [0.1], [0.3], [0.4]])
    assert commitment_layers(ranks, probs) == {"top1": [None], "top3": [2], "p_half": [None]}
    # exactly 0.5 is not over 0.5; a tie at the top (rank 0: no token strictly above) is top-1
    assert commitment_layers(np.array([[0], [0]]), np.array([[0.5], [0.5]])) == {
        "top1": [0], "top3": [0], "p_half": [None]}


def test_the_strip_escapes_token_text_and_names_each_layer():
    html = strip_html(["<img src=x onerror=alert(1)>", "'q'", "ok"], [2, None, 4], [0.9, 0.1, 0.5], L=4)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&#x27;q&#x27;" in html and "'q'" not in html  # quotes too: the text also lands in the title attribute
    assert "layer 2; final probability 90.0%" in html
    assert "never (not even at the last layer)" in html and "layer 4 (only at the last layer)" in html
    linked = strip_html(["a", "b"], [1, 2], [0.5, 0.5], L=4, hrefs=["./layers?q=x&ly.commit_token=0", "./l'><x"])
    assert linked.count("class='tpe-commit-link'") == 2 and "href='./layers?q=x&amp;ly.commit_token=0'" in linked
    assert "'><x" not in linked  # an address is escaped in its attribute too


# ---- against Hugging Face's own hidden states ----------------------------------------------------------------------

def hf_lens(lm, prompt: list[int], answer: list[int]):
    """The lens at the positions that predicted the answer, from one HF pass with output_hidden_states=True:
    entries 0..L-1 through the model's own final-norm module, entry L as HF gives it (already after the final norm),
    then the head's weights in float64 and the model's soft-capping. Per layer and token (L+1, S): the answer
    token's logit, the best three other tokens' logits (L+1, S, 3), its probability, and the tolerance of a logit:
    two float32 passes (ours goes through the KV cache) may put a logit apart by forward_tolerance times its terms'
    absolute sum |x| . |W_U[t]| (kit.tolerance), the largest over tokens."""
    n, S = len(prompt) + len(answer) - 1, len(answer)
    with torch.inference_mode():
        hidden = lm.model(torch.tensor([prompt + answer[:-1]]), output_hidden_states=True,
                          use_cache=False).hidden_states  # L+1 of (1, n, D)
        last = slice(len(prompt) - 1, n)
        normed = [lm.model.model.norm(h[0, last]) for h in hidden[:-1]] + [hidden[-1][0, last]]  # L+1 of (S, D)
        w = lm.model.get_output_embeddings().weight.detach().double()  # (V, D)
    cap = getattr(lm.config, "final_logit_softcapping", None)
    own, best3, probs, tol = [], [], [], []
    per_logit = forward_tolerance(lm.dims, 1.0, n)
    for x in normed:  # one layer's (S, V) at a time: Gemma's vocabulary is 262,144
        logits = x.double() @ w.T
        logits = (cap * torch.tanh(logits / cap) if cap else logits).numpy()
        mine = logits[np.arange(S), answer]
        probs.append(np.exp(mine - logits.max(-1) - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))))
        logits[np.arange(S), answer] = -np.inf
        best3.append(-np.sort(-np.partition(logits, logits.shape[-1] - 3, axis=-1)[:, -3:], axis=-1))
        own.append(mine)
        tol.append(per_logit * unembedding_magnitude(lm, x.float().numpy()).max(-1))
    return np.stack(own), np.stack(best3), np.stack(probs), np.stack(tol)


def reference_bounds(lm, prompt, answer) -> dict[str, list[tuple[int, int]]]:
    """Per definition and token, the earliest and the latest layer a correct float32 lens may give: a reading within
    the tolerance of its threshold (the top-1's or the third other token's logit; probability 0.5) may go either
    way. L + 1 stands for None (never)."""
    own, best3, p, tol = hf_lens(lm, prompt, answer)
    p_tol = p * (2 * tol + float32_tolerance(lm.dims.V, 1.0, depth=2))
    margins = {"top1": (own - best3[..., 0], 2 * tol), "top3": (own - best3[..., 2], 2 * tol),
               "p_half": (p - 0.5, p_tol)}
    L1 = own.shape[0]
    out = {}
    for name, (margin, t) in margins.items():
        surely, maybe = margin > t, margin >= -t  # holds for any correct computation; for some
        earliest, latest = settled_layers(maybe), settled_layers(surely)
        out[name] = [(L1 if a is None else a, L1 if b is None else b) for a, b in zip(earliest, latest)]
    return out


def greedy_answer(lm, prompt: list[int], steps: int) -> list[int]:
    """`steps` greedy tokens from Hugging Face's generate (its KV cache: one pass over the prompt, then one token a
    pass; a pass over the whole sequence at each step took ~5 s more on Gemma), none of them an end token."""
    with torch.inference_mode():
        out = lm.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                                pad_token_id=lm.tokenizer.pad_token_id or 0)
    return out[0, len(prompt):].tolist()


def check_against_hf(lm, prompt: list[int], answer: list[int], reuse=None):
    c = answer_commitment(lm, prompt, answer, reuse)
    L, S = lm.dims.L, len(answer)
    assert c.ranks.shape == c.probs.shape == (L + 1, S) and c.top_ids.shape == c.top_probs.shape == (L + 1, S, LENS_TOP)
    # the kept top tokens are the page's logit lens over the same stream (one reading of the lens for both)
    stream, _ = answer_stream(lm, prompt, answer, reuse)
    lens_ids, lens_probs = logit_lens(lm, stream, k=LENS_TOP)
    assert np.array_equal(c.top_ids, lens_ids) and np.allclose(c.top_probs, lens_probs, rtol=1e-6, atol=1e-9)
    top1 = c.top_ids[..., 0] == np.asarray(answer)[None, :]
    assert np.all(c.ranks[top1] == 0) and np.all(c.probs[top1] == c.top_probs[..., 0][top1])
    bounds = reference_bounds(lm, prompt, answer)
    exact = 0
    for name in DEFINITIONS:
        for j, ((lo, hi), got) in enumerate(zip(bounds[name], c.layers[name])):
            got = L + 1 if got is None else got
            assert lo <= got <= hi, f"{name}, token {j} ({answer[j]}): layer {got}, HF's lens allows {lo}..{hi}"
            exact += lo == hi
    assert exact >= 2 * S, "near-ties everywhere: the comparison would check nothing"
    return c


@pytest.fixture(scope="module")
def tiny_gemma(request):
    from kit.tiny_models import tiny_llama_or_gemma

    return tiny_llama_or_gemma(request, request.getfixturevalue("tokenizer"), "gemma")


def test_tiny_llama_layers_equal_hf_lens(tiny_app_model):
    from kit.tiny_models import prompt_ids

    lm = tiny_app_model[1]
    prompt = prompt_ids(lm)
    answer = greedy_answer(lm, prompt, 5) + [1234]  # and a token it did not choose: never by top-1
    c = check_against_hf(lm, prompt, answer)
    assert all(x is not None for x in c.layers["top1"][:-1]) and c.layers["top1"][-1] is None


def test_the_pass_reads_the_prompts_cached_blocks_and_still_equals_hf_lens(tiny_app_model):
    """Over the server's prefix cache (pipeline.prompt_cache.reuse), the pass runs only the prompt's positions no
    block holds; the last prompt token always runs (its stream is the first one read)."""
    from kit.tiny_models import prompt_ids

    from pipeline.prompt_cache.reuse import ServerReuse

    lm = tiny_app_model[1]
    prompt = prompt_ids(lm)
    answer = greedy_answer(lm, prompt, 4)
    reuse = ServerReuse()
    assert check_against_hf(lm, prompt, answer, reuse).reused_positions == 0  # nothing kept yet: all run
    reuse.keep(lm, prompt, lm.forward_chunked(prompt)[1])  # as the page's run keeps its prompt
    block = reuse.config.block_size
    c = check_against_hf(lm, prompt, answer, reuse)
    assert c.reused_positions == (len(prompt) - 1) // block * block > 0
    plain = answer_commitment(lm, prompt, answer)
    assert plain.reused_positions == 0 and c.layers == plain.layers


def test_tiny_gemma_layers_equal_hf_lens(tiny_gemma):
    from kit.tiny_models import TEXT

    prompt = tiny_gemma.tokenizer(TEXT)["input_ids"][:12]  # longer than its sliding window (4)
    check_against_hf(tiny_gemma, prompt, greedy_answer(tiny_gemma, prompt, 6))


@pytest.mark.model
@pytest.mark.parametrize("which", ["lm", "gemma_lm"])
def test_real_models_layers_equal_hf_lens(which, request):
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = request.getfixturevalue(which)
    prompt = tokenize_request(lm.tokenizer, ChatRequest.from_question("Are tomatoes fruit?")).ids
    answer = greedy_answer(lm, prompt, 10)
    c = check_against_hf(lm, prompt, answer + [lm.tokenizer.convert_tokens_to_ids(",")])
    L = lm.dims.L
    assert any(x is not None and x < L for x in c.layers["top3"]), "no token settled before the last layer"


# ---- the page and the command line ---------------------------------------------------------------------------------

def test_layers_page_draws_the_strip_of_the_run(tiny_app):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest
    from pipeline.text.pieces import token_pieces
    from ui.escape import html_text

    from kit.texts import DEFAULT_QUESTION

    from views.server.state import result_store
    from views.server.waiting import model_result_key

    at = run_page("layers")
    strip = [m.value for m in at.markdown if "final probability" in m.value]
    assert len(strip) == 1
    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION), tiny_app)  # the page's run, again
    c = answer_commitment(tiny_app, trace.ids, trace.generated_token_ids)
    # the strip's pass went through the queue and is kept for everyone in the result store, as the other passes
    kept = result_store().peek(model_result_key(("commitment", tuple(trace.ids), tuple(trace.generated_token_ids))))
    assert kept is not None and kept.layers == c.layers
    assert f"it read {kept.reused_positions} prompt position" in " ".join(x.value for x in at.caption)
    assert strip[0].count("title=") == len(trace.generated_token_ids)
    for j, p in enumerate(token_pieces(tiny_app.tokenizer, trace.generated_token_ids)):
        assert f">{html_text(p.label)}<" in strip[0]
        layer = c.layers["top1"][j]
        assert (f"({j}) {html_text(p.label)}: " + ("never" if layer is None else f"layer {layer}")) in strip[0]
    assert "choice of definition" in " ".join(r.help or "" for r in at.radio) + " ".join(x.value for x in at.caption)
    at.radio(key="ly_commit_rule").set_value("p_half").run()
    at.selectbox(key="ly_commit_token").set_value(len(trace.generated_token_ids) - 1).run()
    assert not at.exception
    table = at.dataframe[-1].value
    assert len(table) == tiny_app.dims.L + 1
    assert list(table["its probability"])[0] == f"{float(c.probs[-1, -1]):.1%}"  # the last layer's row first


def test_trace_commitment_json_has_one_entry_per_answer_token(tmp_path, tiny_app_model):
    from pipeline.model.weights_cache import weights_cache_dir

    root, lm = tiny_app_model
    out = tmp_path / "trace.json"
    code, printed, err = run_cli(tmp_path, "trace", "Are tomatoes fruit?", "--max-new-tokens", "4", "--commitment",
                                 "--json", str(out), "--model", str(root / weights_cache_dir().name))
    assert code == 0, err
    j = json.loads(out.read_text())
    ids = j["generated_token_ids"]
    assert [e["token_id"] for e in j["commitment"]] == ids
    assert all(set(e) == {"token_id", *DEFINITIONS} for e in j["commitment"])
    prompt = [t["id"] for t in j["tokens"]]
    c = answer_commitment(lm, prompt, ids)
    assert j["commitment"] == c.to_json()
    bounds = reference_bounds(lm, prompt, ids)
    L = lm.dims.L
    for name in DEFINITIONS:
        for (lo, hi), e in zip(bounds[name], j["commitment"]):
            assert lo <= (L + 1 if e[name] is None else e[name]) <= hi
    assert "Where each token was decided" in printed
