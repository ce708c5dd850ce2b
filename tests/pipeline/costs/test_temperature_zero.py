"""Temperature 0 at scale (pipeline.costs.temperature_zero, parting): one greedy request run many times through
BatchDecoder in changing batch mixes, on the tiny random Llama. The model's scores are put on a coarse grid
(so no batch's rounding can move a choice, and every run must agree), then a batch-dependent change is forced at
one step: the runs it hit must be the ones counted as parting there, and nothing else may part."""
import json

import pytest
import torch

from pipeline.core.common_prefix import first_difference
from pipeline.costs.parting import tally

GRID = 8  # scores rounded to 1/8: far coarser than a batch's float rounding (~1e-7 on the tiny model)
LEAD = 0.5  # token FORCED's score is set this far above the best where a batch changes it
FORCED = 1000


def on_a_grid(lm, monkeypatch, bump_step=None, prompt_len=None, min_rows=None, hits=None):
    """lm.forward with its scores on the grid; with bump_step: in a decode pass of at least min_rows rows, every row
    choosing the token of step bump_step of a prompt of prompt_len tokens gets FORCED first by LEAD
    (hits counts them)."""
    real = lm.forward

    def forward(ids, **kwargs):
        out = real(ids, **kwargs)
        logits = torch.round(out.logits * GRID) / GRID
        positions = kwargs.get("position_ids")
        if bump_step is not None and positions is not None and logits.shape[0] >= min_rows:
            rows = (positions[:, -1] == prompt_len + bump_step - 1).nonzero().flatten()
            logits[rows, -1, FORCED] = logits[rows, -1].max(dim=-1).values + LEAD
            hits.append(len(rows))
        out.logits = logits
        return out

    monkeypatch.setattr(lm, "forward", forward)


def request_len(lm, question="Are tomatoes fruit?"):
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    return len(tokenize_request(lm.tokenizer, ChatRequest.from_question(question)).ids)


def test_when_no_batch_can_move_a_choice_every_run_agrees(tiny_lm, monkeypatch):
    from pipeline.costs.temperature_zero import temperature_zero

    on_a_grid(tiny_lm, monkeypatch)
    r = temperature_zero(tiny_lm, requests=14, new_tokens=4, max_batch=6, seed=3)
    t = r.tally
    assert (t.runs, t.distinct, [c.count for c in t.completions]) == (14, 1, [14])
    assert t.parted_at == {} and all(v.parted_at is None and v.completion == 0 for v in t.variants)
    assert t.top2_spread == [0.0] * 4 and t.largest_top2_difference == 0.0  # on the grid every run's scores are equal
    assert r.fillers > 0 and t.distinct_mixes > 1  # yet the runs went through different batches
    sizes = [p[0] for v in t.variants for p in v.passes[1:]]
    assert min(sizes) < max(sizes) <= 6
    assert all(len(v.passes) == 4 for v in t.variants)  # the prefill's group, then one pass per later token
    assert t.completions[0].text == tiny_lm.tokenizer.decode(t.completions[0].token_ids)


def test_through_the_static_step_the_runs_agree_with_the_eager_batch_and_record_their_padding(tiny_lm):
    """The runs through the static batched step (what the room's decode is on CUDA, run eagerly here) give the
    eager batch's completions, and each pass records the slots the bucket ran beyond the run's own positions
    (before: the eager batch's mask width was read, absent there, and every padding came out negative)."""
    from pipeline.costs.temperature_zero import temperature_zero
    from pipeline.model.decoders.graphed_batch import MIN_POSITIONS

    runs = {static: temperature_zero(tiny_lm, requests=6, new_tokens=3, max_batch=4, seed=1, static=static)
            for static in (False, True)}
    assert [c.token_ids for c in runs[True].tally.completions] == [c.token_ids for c in runs[False].tally.completions]
    length = request_len(tiny_lm)
    padding = [p[2] for v in runs[True].tally.variants for p in v.passes[1:]]  # the decode passes
    # a run's k-th decode pass holds its prompt and k tokens, in a bucket of 64 slots (these runs need fewer)
    assert all(MIN_POSITIONS - length - 3 <= pad <= MIN_POSITIONS - length - 1 for pad in padding), padding


def test_runs_a_batch_changed_part_where_it_changed_them(tiny_lm, monkeypatch):
    """The change: FORCED wins step 2 in every decode pass of 5 rows or more. Exactly the runs whose step-2 pass
    had 5 rows or more (as the run recorded them, and as many as the forward pass hit) part there."""
    from pipeline.costs.temperature_zero import temperature_zero

    hits = []
    on_a_grid(tiny_lm, monkeypatch, bump_step=2, prompt_len=request_len(tiny_lm), min_rows=5, hits=hits)
    r = temperature_zero(tiny_lm, requests=16, new_tokens=5, max_batch=6, filler_share=0.0, seed=2)
    t = r.tally
    changed = {v.index for v in t.variants if v.passes[2][0] >= 5}
    assert 0 < len(changed) < 8  # the seed's schedule gives a minority: the most common completion is the unchanged
    assert sum(hits) == len(changed)  # no fillers: every row the forward pass changed was one of the runs
    assert t.distinct == 2 and [c.count for c in t.completions] == [16 - len(changed), len(changed)]
    assert t.parted_at == {2: len(changed)}
    assert t.completions[1].parted_at == 2 and t.completions[1].token_ids[2] == FORCED
    for v in t.variants:
        assert (v.parted_at == 2) == (v.index in changed)
        if v.index in changed:
            assert (v.chosen, v.expected, v.completion) == (FORCED, t.completions[0].token_ids[2], 1)
            assert v.own_lead == LEAD  # its lead at the step where it parted, from its own kept scores
            assert v.reference_lead is None  # FORCED was not among the reference's best KEPT_SCORES: no near-tie
    assert t.largest_top2_difference == 0.0  # the reference's top two tokens were never moved


def test_a_model_whose_window_is_shorter_than_the_prompt_runs_each_request_alone(tiny_models):
    """The tiny Gemma's sliding window (4) is shorter than the prompt: the room prefills and decodes each such request
    on its own, so every run's passes are alone and of the same shapes, and their scores are equal to the bit."""
    from pipeline.costs.temperature_zero import temperature_zero

    t = temperature_zero(tiny_models["gemma"], requests=6, new_tokens=3, max_batch=4, seed=0).tally
    assert all(p == (1, 0, 0) for v in t.variants for p in v.passes)
    assert t.distinct == 1 and t.largest_top2_difference == 0.0


def test_tally_counts_orders_and_finds_the_first_difference():
    def top(*pairs):  # (id, score) best first
        return [p[0] for p in pairs], [p[1] for p in pairs]

    step0 = top((5, 2.0), (6, 1.0))
    tokens = [[5, 7, 9], [5, 7, 9], [5, 8, 9], [5, 7]]  # the last ended early (an end token at step 2 elsewhere)
    tops = [[step0, top((7, 1.00), (8, 0.99)), top((9, 3.0), (1, 0.0))],
            [step0, top((7, 1.00), (8, 0.98)), top((9, 3.0), (1, 0.0))],
            [step0, top((8, 1.01), (7, 1.00)), top((9, 3.0), (1, 0.0))],
            [step0, top((7, 1.02), (3, 0.50))]]  # 8 not kept by this run
    passes = [[(1, 0, 0), (2, 1, 0), (2, 1, 0)], [(2, 0, 0), (3, 2, 1), (3, 2, 1)],
              [(2, 1, 0), (4, 3, 2), (4, 3, 2)], [(1, 0, 0), (1, 0, 0)]]
    t = tally(tokens, tops, passes)
    assert t.distinct == 3 and [(c.count, c.token_ids, c.parted_at) for c in t.completions] == [
        (2, [5, 7, 9], None), (1, [5, 8, 9], 1), (1, [5, 7], 2)]
    assert t.reference == 0 and t.parted_at == {1: 1, 2: 1}
    v = t.variants[2]
    assert (v.parted_at, v.chosen, v.expected) == (1, 8, 7)
    assert v.own_lead == pytest.approx(0.01) and v.reference_lead == pytest.approx(0.01)
    assert t.variants[3].chosen is None  # it parted by ending, not by another token
    assert t.reference_gap == pytest.approx([1.0, 0.01, 3.0])
    # step 1: runs 1-3 asked the same; |1.00-1.00|, |0.98-0.99|, |1.00-1.00| and |1.01-0.99|; run 3 lacks token 8
    assert t.top2_spread == pytest.approx([0.0, 0.02, 0.0]) and t.missing_scores == 1
    assert t.distinct_mixes == 4
    assert first_difference([1, 2], [1, 2]) is None and first_difference([1, 2], [1, 3]) == 1


def test_cli_writes_every_run(tiny_lm, tmp_path, monkeypatch):
    from pipeline.cli import main
    from pipeline.model import loader

    monkeypatch.setattr(loader, "shared_model", lambda name=None: tiny_lm)
    out = tmp_path / "t0.json"
    assert main(["temperature-zero", "--requests", "5", "--new-tokens", "3", "--max-batch", "3", "--seed", "2",
                 "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert {"model", "device", "requests", "new_tokens", "max_batch", "seed", "seconds", "distinct", "completions",
            "parted_at", "reference_gap", "top2_spread", "largest_top2_difference", "distinct_mixes",
            "mix_range", "variants"} <= r.keys()
    assert (r["requests"], r["runs"], len(r["variants"])) == (5, 5, 5)
    assert sum(c["count"] for c in r["completions"]) == 5 and r["distinct"] == len(r["completions"])
    assert sum(r["parted_at"].values()) == sum(c["count"] for c in r["completions"][1:])
    for v in r["variants"]:
        assert {"index", "completion", "parted_at", "chosen", "expected", "own_lead", "reference_lead"} <= v.keys()
        tokens = r["completions"][v["completion"]]["token_ids"]
        assert len(v["passes"]) == len(tokens) and all(len(p) == 3 and p[0] <= 3 for p in v["passes"])
    assert r["mix_range"]["batch_sizes"][1] <= 3


@pytest.mark.parametrize("argv, field", [(["--requests", "0"], "requests"), (["--new-tokens", "0"], "new_tokens"),
                                         (["--max-batch", "0"], "max_batch"), (["--fillers", "1.5"], "fillers"),
                                         (["--question", ""], "question")])
def test_cli_refuses_bad_input_before_loading(argv, field, monkeypatch, tmp_path):
    from kit.cli import run_cli

    from pipeline.model import loader

    monkeypatch.setattr(loader, "shared_model", lambda name=None: pytest.fail("loaded the model"))
    code, _out, err = run_cli(tmp_path, "temperature-zero", *argv)
    assert code == 2
    assert f"error: {field}:" in err


def test_prefill_decode_page_runs_the_question_many_times(tiny_app, monkeypatch):
    """The page's button runs the long job (small here) and shows the pipeline's own count and answers."""
    from kit.paths import ROOT
    from streamlit.testing.v1 import AppTest

    from views.pages.prefill_decode import temperature_zero_runs as panel

    monkeypatch.setattr(panel, "RUN_COUNTS", (6, 9))
    monkeypatch.setattr(panel, "NEW_TOKENS", 3)
    at = AppTest.from_file(f"{ROOT}/views/pages/prefill_decode/page.py", default_timeout=300)
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, at.exception
    at.select_slider(key="pd_t0_n").set_value(9)
    at.button(key="pd_t0").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    distinct = int(metrics["Different answers"].split(" of ")[0])
    assert metrics["Different answers"] == f"{distinct} of 9"
    table = at.dataframe[-1].value
    assert list(table.columns) == ["runs", "parts from the most common at step", "answer"]
    assert table["runs"].sum() == 9 and len(table) == distinct
    assert any("batch histories among 9 runs" in c.value for c in at.caption)
