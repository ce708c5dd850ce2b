"""Prefill and decode on the roofline (pipeline/serving): FLOP and byte counts against a hand calculation
and torch's own FlopCounterMode, the ceilings, the batching sweep and the determinism report on tiny models."""
import json
import re

import pytest
import torch
from kit.apptest import chart_data
from kit.tolerance import any_logit_tolerance, assert_within
from torch.utils.flop_counter import FlopCounterMode

from pipeline.costs.pass_costs import decode_cost, pass_cost, prefill_cost
from pipeline.model.dims import FULL, SLIDING, ModelDims
from pipeline.model.loader import LoadedModel

SMOLLM2 = ModelDims(name="smollm2", L=30, H=9, Hkv=3, Dh=64, D=576, D_mlp=1536, V=49152, context_window=8192,
                    rope_base=1e5, dtype="float32", device="cpu", bytes_per_value=4)
GEMMA3 = ModelDims(name="gemma3", L=18, H=4, Hkv=1, Dh=256, D=640, D_mlp=2048, V=262144, context_window=32768,
                   rope_base=1e4, dtype="float32", device="cpu", bytes_per_value=4, architecture="gemma3_text",
                   layer_types=((SLIDING,) * 5 + (FULL,)) * 3, sliding_window=512, qk_norm=True)


def test_smollm2_decode_step_by_hand():
    c = decode_cost(SMOLLM2, past=99)
    # per layer: q, o 576x(9*64); k, v 576x(3*64); gate, up, down 576x1536; 2 FLOPs per multiply-add
    assert c.flops_linear == 30 * 2 * (576 * (9 + 3 + 3 + 9) * 64 + 3 * 576 * 1536) == 212_336_640
    assert c.flops_attention == 30 * 2 * 2 * 1 * (99 + 1) * 9 * 64 == 6_912_000  # q·k and p·v over 100 keys
    assert c.flops_head == 2 * 576 * 49152 == 56_623_104
    # weights: 30 blocks (attention, MLP, 2 norms), final norm, the tied 49152x576 table read by the head, 1 row
    weights = 30 * (576 * 24 * 64 + 3 * 576 * 1536 + 2 * 576) + 576 + 49152 * 576 + 576
    assert c.bytes_weights == 4 * weights == 538_062_336
    assert c.bytes_kv_read == 2 * 30 * 3 * 64 * 99 * 4 == 4_561_920
    assert c.bytes_kv_written == 2 * 30 * 3 * 64 * 1 * 4 == 46_080
    assert 0.5 < c.intensity < 0.52  # about one FLOP per two bytes: far below any CPU's or GPU's balance point


def test_gemma3_decode_step_by_hand_sliding_layers_read_511_keys():
    c = decode_cost(GEMMA3, past=1000)
    assert c.flops_linear == 18 * 2 * (640 * (4 + 1 + 1 + 4) * 256 + 3 * 640 * 2048) == 200_540_160
    # 15 sliding layers hold the last 511 positions (+ the new one), 3 full layers all 1000 (+1)
    assert c.flops_attention == 2 * 2 * 4 * 256 * (15 * 512 + 3 * 1001) == 43_757_568
    assert c.flops_head == 2 * 640 * 262144
    block = 640 * 10 * 256 + 3 * 640 * 2048 + 4 * 640 + 2 * 256  # 4 norms, QK-norms of width Dh
    assert c.bytes_weights == 4 * (18 * block + 640 + 262144 * 640 + 640)
    assert c.bytes_kv_read == 2 * 1 * 256 * (15 * 511 + 3 * 1000) * 4


def test_prefill_has_the_t_squared_term_and_batching_shares_the_weights():
    T = 200
    p = prefill_cost(SMOLLM2, T)
    assert p.flops_attention == 30 * 2 * 2 * T * T * 9 * 64
    assert p.flops_head == 2 * 576 * 49152  # only the last position's logits
    assert p.intensity > 50 * decode_cost(SMOLLM2, T).intensity
    one, eight = decode_cost(SMOLLM2, 50), decode_cost(SMOLLM2, 50, batch_size=8)
    assert eight.flops == 8 * one.flops
    assert eight.bytes_weights == one.bytes_weights + 7 * 576 * 4  # one read of the weights, 7 more embedding rows
    assert eight.bytes_kv_read == 8 * one.bytes_kv_read


@pytest.fixture(scope="module")
def tiny_models(tokenizer):
    from kit.tiny_models import TINY_APP_LAYOUT, make_tiny_lm, tiny_gemma3

    return [make_tiny_lm(tokenizer, **TINY_APP_LAYOUT),  # tied embeddings
            make_tiny_lm(tokenizer),  # untied
            LoadedModel(model=tiny_gemma3(tokenizer).eval(), tokenizer=tokenizer, name="tiny-gemma",
                        device=torch.device("cpu"))]


@pytest.mark.parametrize("T, past", [(12, 0), (1, 11), (1, 40), (5, 40)])
def test_flops_equal_torch_flop_counter(tiny_models, T, past):
    """Eager attention runs as matrix multiplies FlopCounterMode sees (CPU SDPA is a kernel it does not count);
    past=40 is beyond the tiny Gemma's window, so its sliding layers read fewer keys than its full one."""
    for lm in tiny_models:
        ids = list(range(100, 100 + past + T))
        cache = lm.forward([ids[:past]]).cache if past else None
        with FlopCounterMode(display=False) as counter:
            lm.forward([ids[past:]], cache=cache, attention="eager")
        assert counter.get_total_flops() == pass_cost(lm.dims, T, past).flops, lm.name


def test_weight_bytes_are_the_parameters(tiny_models):
    for lm in tiny_models:
        m = lm.dims
        params = sum(p.numel() for p in lm.model.parameters())
        untied_head = 0 if lm.config.tie_word_embeddings else m.V * m.D  # the embedding table the pass barely reads
        assert pass_cost(m, 3).bytes_weights == (params - untied_head + 3 * m.D) * m.bytes_per_value, lm.name


@pytest.mark.model
def test_real_models_weights_are_their_parameters(lm, gemma_lm):
    for model in (lm, gemma_lm):
        params = sum(p.numel() for p in model.model.parameters())  # both tie the head to the embeddings
        assert pass_cost(model.dims, 1).bytes_weights == (params + model.dims.D) * model.dims.bytes_per_value
    assert decode_cost(lm.dims, 99) == decode_cost(SMOLLM2, 99)  # the hand-written configs are the real ones
    assert decode_cost(gemma_lm.dims, 1000) == decode_cost(GEMMA3, 1000)
    for model in (lm, gemma_lm):  # and torch's own count on one real pass of each
        with FlopCounterMode(display=False) as counter:
            model.forward([list(range(1000, 1012))], attention="eager")
        assert counter.get_total_flops() == prefill_cost(model.dims, 12).flops, model.name


@pytest.mark.model
def test_real_model_alone_and_in_a_batch(lm):
    """SmolLM2's greedy request alone and padded in a batch of 3: logits agree to float32 rounding, and any flip
    is reported with its gap (a near-tie), never raised."""
    from pipeline.costs.determinism import determinism

    from pipeline.costs.batched import request_ids

    d = determinism(lm, others=2, steps=4)
    positions = max(map(len, request_ids(lm, 3))) + 4  # the longest prompt and its steps
    assert d.padding > 0 and d.max_abs_logit_diff <= any_logit_tolerance(lm, positions)
    for f in d.flips:
        assert abs(f.gap_alone) <= 2 * d.per_step[f.step] + 1e-6


# ---- measured on a tiny model: shapes and sanity, never speeds ---------------------------------------------
@pytest.fixture(scope="module")
def tiny(tiny_models):
    return tiny_models[0]


def test_ceilings_are_measured_once_then_read_from_the_cache(tiny, tmp_path, monkeypatch):
    from pipeline.costs import ceilings as c

    monkeypatch.setenv("TPE_CACHE_DIR", str(tmp_path))
    first = c.ceilings(tiny.dims, tiny.device, repeats=2, copy_bytes=2**20, T=8)
    assert [m.name.split(" (")[0] for m in first.matmuls] == ["q,k,v", "MLP up", "MLP down", "LM head"]
    assert all(m.low <= m.median <= m.high and m.median > 0 for m in first.matmuls + [first.copy])
    assert first.flops_per_s == max(m.median for m in first.matmuls)
    assert (tmp_path / "serving" / "ceilings.json").exists()
    monkeypatch.setattr(c, "measure", lambda *a, **k: pytest.fail("measured again instead of read"))
    assert c.ceilings(tiny.dims, tiny.device) == first


@pytest.mark.parametrize("which", [0, 2], ids=["llama", "gemma3"])
def test_batched_rows_decode_as_each_request_alone(tiny_models, which):
    """The plain batched decode keeps each row's own positions and masks the padding: each row's greedy tokens
    are the tokens of the same prompt decoded alone (a random tiny model has no near-ties at these steps).
    The tiny Gemma's prompts run past its sliding window, so the window and the padding meet too."""
    from pipeline.costs.batched import decode_rows, request_ids

    lm = tiny_models[which]
    prompts = request_ids(lm, 3)
    assert len({len(p) for p in prompts}) > 1  # different lengths: the batch is padded
    together = decode_rows(lm, prompts, steps=4, keep_row=1)
    assert together.tokens.shape == (3, 4) and len(together.step_seconds) == 3
    for row, p in enumerate(prompts):
        alone = decode_rows(lm, [p], steps=4, keep_row=0)
        assert together.tokens[row].tolist() == alone.tokens[0].tolist()
        if row == 1:
            assert_within(together.logits, alone.logits, any_logit_tolerance(lm, len(p) + 4), "row 1's scores")


def test_sweep_json_shape_and_sanity(tiny):
    from pipeline.costs.ceilings import measure
    from pipeline.costs.sweep import sweep

    roof = measure(tiny.dims, tiny.device, repeats=1, copy_bytes=2**20, T=8)
    points = sweep(tiny, (4, 1, 2), steps=2, repeats=2, roof=roof)
    rows = [p.to_json() for p in points]
    assert [r["batch_size"] for r in rows] == [1, 2, 4]
    for r, p in zip(rows, points):
        assert {"batch_size", "tokens_per_s", "ms_per_token_per_user"} <= r.keys()
        assert r["tokens_per_s"] == pytest.approx(r["batch_size"] * 1e3 / r["ms_per_token_per_user"])
        lo, hi = r["step_s_range"]
        assert lo <= r["step_s"] <= hi
        assert r["flops_per_step"] == p.batch_size * pass_cost(tiny.dims, 1, p.past).flops
        assert r["predicted_step_s"] > 0


def test_bend_is_where_tokens_per_second_stop_growing():
    from pipeline.costs.sweep import Point, bend

    def pt(b, tokens_per_s):
        return Point(b, b / tokens_per_s, (0, 1), 10, decode_cost(SMOLLM2, 10, b), None)

    assert bend([pt(1, 10), pt(2, 19), pt(4, 36), pt(8, 45)]).batch_size == 8
    assert bend([pt(1, 10), pt(2, 19), pt(4, 36)]) is None
    assert bend([pt(1, 10), pt(4, 20)]).batch_size == 4  # two doublings must buy 1.5² = 2.25x
    assert bend([pt(1, 10), pt(4, 30)]) is None
    noisy = [pt(1, 2.7), pt(2, 4.5), pt(4, 6.3), pt(8, 8.5), pt(16, 17.2), pt(32, 20.6)]  # measured here once
    assert bend(noisy).batch_size == 32  # 4 and 8 grew slowly, but 16 made up for it: no bend there


def test_bend_compares_each_doubling_with_the_one_before():
    """8 -> 16 bought 1.68x: not a bend, though 16 is below 1.5^2 of B = 4 (the old rule's reference)."""
    from pipeline.costs.sweep import Point, bend, doubling_gain

    def pt(b, tokens_per_s):
        return Point(b, b / tokens_per_s, (0, 1), 10, decode_cost(SMOLLM2, 10, b), None)

    made_up = [pt(1, 10), pt(2, 19), pt(4, 36), pt(8, 45), pt(16, 75.6), pt(32, 80)]
    assert doubling_gain(made_up[3], made_up[4]) == pytest.approx(1.68)
    assert bend(made_up).batch_size == 32
    assert bend(made_up[:5]) is None  # it ends growing by 1.68x: no bend yet


def test_bad_batch_sizes_are_refused_naming_the_field():
    from pipeline.core.errors import InputError
    from pipeline.costs.sweep import parse_batch_sizes

    assert parse_batch_sizes(" 8,1, 2") == (1, 2, 8)
    assert parse_batch_sizes("256,512") == (256, 512)  # a GPU's sweep goes to 512 (batch_sizes("cuda"))
    for bad in ("", "1,,x", "0,2", "1,1", "2,999", "2,513", "-1", "²"):
        with pytest.raises(InputError) as e:
            parse_batch_sizes(bad)
        assert e.value.field == "batch_sizes"


def test_the_sweep_offers_a_gpu_batches_past_a_cpus():
    from pipeline.costs.sweep import BATCH_SIZES, batch_sizes

    assert batch_sizes("cpu") == BATCH_SIZES and BATCH_SIZES[-1] == 32
    gpu = batch_sizes("cuda:0")
    assert gpu[:len(BATCH_SIZES)] == BATCH_SIZES and gpu[-1] == 512
    assert all(b == 2 * a for a, b in zip(gpu, gpu[1:]))  # doublings: where a doubling stops paying is the bend


def test_determinism_report_on_a_tiny_model(tiny):
    """The request's row is padded inside the batch, yet its logits agree with the alone run's to float32
    rounding; a flip, where one happens, is reported with how close the alone run's choice was (a near-tie)."""
    from pipeline.costs.determinism import determinism

    d = determinism(tiny, others=3, steps=4)
    out = d.to_json()
    assert {"batch_size", "max_abs_logit_diff", "flipped_steps"} <= out.keys()
    assert d.batch_size == 4 and d.padding > 0 and len(d.per_step) == 4
    # float32 rounding of padded rows against one row (kit.tolerance); a broken padding mask moves logits by whole
    # units
    from pipeline.costs.batched import request_ids

    assert d.max_abs_logit_diff == max(d.per_step) <= any_logit_tolerance(tiny, max(map(len, request_ids(tiny, 4))) + 4)
    for f in d.flips:
        assert abs(f.gap_alone) <= 2 * d.per_step[f.step] + 1e-6


def test_a_flip_is_reported_with_its_gap_not_raised():
    import numpy as np

    from pipeline.costs.determinism import compare

    alone = np.array([[1.0, 3.0, 2.9999], [0.0, 5.0, 1.0]], dtype=np.float32)  # step 0: a near-tie
    batch = np.array([[1.0, 2.9999, 3.0], [0.0, 5.0, 1.0]], dtype=np.float32)
    per_step, flips = compare(alone, batch, tokens=[1, 1])
    assert per_step == pytest.approx([1e-4, 0.0], abs=1e-6)
    assert [(f.step, f.alone_token, f.batch_token) for f in flips] == [(0, 1, 2)]
    assert flips[0].gap_alone == pytest.approx(1e-4, abs=1e-6)


def test_serving_command_writes_the_json(tiny, tmp_path, monkeypatch):
    import json

    from pipeline.cli import main
    from pipeline.costs.ceilings import ceilings
    from pipeline.model import loader

    monkeypatch.setenv("TPE_CACHE_DIR", str(tmp_path))
    ceilings(tiny.dims, tiny.device, repeats=1, copy_bytes=2**20, T=8)  # cached: the command reads it
    monkeypatch.setattr(loader, "shared_model", lambda name=None: tiny)
    out = tmp_path / "serving.json"
    assert main(["serving", "--batch-sizes", "2,1", "--steps", "2", "--repeats", "1", "--determinism", "2",
                 "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["ceilings"]["flops_per_s"] > 0 and r["ceilings"]["bytes_per_s"] > 0
    assert r["decode"]["flops_per_token"] == pass_cost(tiny.dims, 1, r["decode"]["past"]).flops
    assert r["decode"]["bytes_per_token"] == pass_cost(tiny.dims, 1, r["decode"]["past"]).bytes
    assert [p["batch_size"] for p in r["sweep"]] == [1, 2]
    assert r["determinism"]["batch_size"] == 3 and isinstance(r["determinism"]["flipped_steps"], list)
    assert [p["tokens"] for p in r["prefill"]] == [16, 64, 256]
    f = r["fixed_cost"]  # a pass at almost no work, with what the ceilings do not explain
    assert f["flops"] == pass_cost(tiny.dims, 1, 0).flops and len(f["runs_s"]) == 7
    assert f["verdict"] in ("compute-bound", "memory-bound", "overhead-bound") and f["overhead_s"] >= 0
    assert f["operations"] == sum(f["operations_by_name"].values()) > 10 * tiny.dims.L  # dozens a layer
    assert f["operations_by_name"]["scaled_dot_product_attention"] == tiny.dims.L  # one attention per layer
    assert "batched decode" in r["decode"]["label"]


@pytest.mark.parametrize("argv, field", [(["--batch-sizes", "0"], "batch_sizes"),
                                         (["--determinism", "0"], "determinism"), (["--steps", "1"], "steps")])
def test_serving_command_refuses_bad_input_before_loading(argv, field, monkeypatch, tmp_path):
    from kit.cli import run_cli

    from pipeline.model import loader

    monkeypatch.setattr(loader, "shared_model", lambda name=None: pytest.fail("loaded the model"))
    code, _out, err = run_cli(tmp_path, "serving", *argv)
    assert code == 2
    assert f"error: {field}:" in err


# ---- the page -----------------------------------------------------------------------------------------------------
def test_prefill_decode_page_opens_and_runs_its_buttons(tiny_app, monkeypatch):
    """On the tiny model: no ceilings yet (the passes shown without shares), then each button; the numbers shown
    are the pipeline's own for this run."""
    from kit.paths import ROOT
    from streamlit.testing.v1 import AppTest

    from pipeline.costs import ceilings as c

    measured, real_measure = [], c.measure
    monkeypatch.setattr(c, "cached", lambda m, device: None)  # this machine has not measured them yet
    monkeypatch.setattr(c, "measure", lambda m, device, **kw: measured.append(
        real_measure(m, device, repeats=1, copy_bytes=2**20, T=8)) or measured[-1])  # small: a test's budget
    at = AppTest.from_file(f"{ROOT}/views/pages/prefill_decode/page.py", default_timeout=300)
    at.session_state["req_max_new_tokens"] = 4
    at.session_state["req_question"] = "Where does this run sit on the roofline?"  # asked by no other test: the
    at.run()  # run is computed now, through the queue's batch (a stored one would draw no schedule)
    assert not at.exception, at.exception
    assert any("Not measured on this machine yet" in i.value for i in at.info) and not measured
    table = at.dataframe[0].value  # the run's prefill and a decode step, before any ceiling
    assert table["pass"][0].startswith("prefill (") and "share of compute" not in table.columns
    assert any("room's schedule" in h.value for h in at.subheader)
    schedule = [c for c in at.get("plotly_chart") if '"orientation": "h"' in json.dumps(json.loads(c.proto.spec))]
    assert schedule  # this run went through the queue's batch: its bars are drawn
    for chart in schedule:  # anonymous: "you" or "learner n", never a request's text
        assert all(re.fullmatch(r"you|learner \d+", y) for t in chart_data(chart) for y in t.get("y", []))
    n_prompt = int(table["pass"][0].split("(")[1].split()[0])
    assert table["FLOPs"][0] == f"{prefill_cost(tiny_app.dims, n_prompt).flops / 1e6:,.0f} M"
    assert table["pass"][0].endswith(", captured run")  # every time names its path
    # its pass fed step k-1's token after n_prompt+k-1
    k = int(table["pass"][1].removeprefix("decode step ").removesuffix(", captured run"))
    assert table["bytes"][1] == f"{decode_cost(tiny_app.dims, n_prompt + k - 1).bytes / 1e6:,.0f} MB"

    at.button(key="pd_ceilings").click().run()
    assert not at.exception, at.exception
    assert len(measured) == 1
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Compute ceiling"] == f"{measured[0].flops_per_s / 1e9:,.2f} GFLOP/s"
    assert metrics["Memory ceiling"] == f"{measured[0].bytes_per_s / 1e9:,.2f} GB/s"
    table = at.dataframe[1].value
    assert set(table["verdict (measured)"]) <= {"compute-bound", "memory-bound", "overhead-bound"}
    assert list(table.columns)[:2] == ["pass", "verdict (measured)"]  # in sight: the far right was cut by the page
    said = " ".join(m.value for m in at.markdown)
    assert "captured run:" in said and "-bound" in said  # a regime said for each pass, by its path

    at.button(key="pd_plain").click().run()  # the plain path and a pass at almost no work, placed beside it
    assert not at.exception, at.exception
    passes = list(at.dataframe[1].value["pass"])
    assert any(p.endswith("plain path") for p in passes) and "1-token pass, nothing cached" in passes
    said = " ".join(m.value for m in at.markdown)
    assert "decode step, plain path:" in said
    from pipeline.costs.launches import operations  # the probe's count, as the page says it: counted here again
    ops = operations(lambda: tiny_app.forward([[min(1000, tiny_app.dims.V - 1)]])).total
    layers = tiny_app.model.config.num_hidden_layers
    assert f"runs {ops:,} separate operations ({ops / layers:,.0f} a layer × {layers} layers)" in said

    at.button(key="pd_prefill").click().run()
    assert not at.exception, at.exception
    assert list(at.dataframe[3].value["prompt tokens"]) == [16, 64, 256]  # after the verdicts and the numbers
    at.multiselect(key="pd_sizes").set_value([1, 2])
    at.button(key="pd_sweep").click().run()
    assert not at.exception, at.exception
    said = " ".join(m.value for m in at.markdown)
    assert "At B = 1:" in said and ("bends at" in said or "kept growing" in said)
    at.slider(key="pd_others").set_value(2)
    at.button(key="pd_det").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Steps where the choice flips"].endswith("of 12")
    # the page's own run is in the store
    assert metrics["TTFT (captured run)"] != "—" and metrics["TPOT (batched)"] != "—"  # its steps ran in the batch


def test_room_metrics_from_finished_runs():
    """Medians and nearest-rank p95 of TTFT, TPOT and end-to-end; throughput divides a batched run's time by
    the batch it was decoded in."""
    from types import SimpleNamespace as NS

    from pipeline.costs.metrics import percentile, room_metrics

    def run(ttft, tpot, total, tokens, batch):
        return NS(timings=NS(ttft_s=ttft, tpot_s=tpot, total_s=total), usage=NS(completion_tokens=tokens),
                  steps=[NS(batch_size=batch)] * tokens)

    runs = [run(1.0, 0.1, 2.0, 10, 1), run(3.0, 0.2, 4.0, 10, 2), run(2.0, None, 2.0, 1, 1)]
    r = room_metrics(runs)
    assert (r.ttft_s.p50, r.ttft_s.p95, r.ttft_s.n) == (2.0, 3.0, 3)
    assert (r.tpot_s.p50, r.tpot_s.n) == (pytest.approx(0.15), 2)  # a one-token answer has no TPOT
    assert r.e2e_s.p50 == 2.0 and r.e2e_s.p95 == 4.0
    assert r.throughput_tokens_per_s == pytest.approx(21 / (2.0 + 4.0 / 2 + 2.0))
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile(list(range(1, 101)), 95) == 95
    empty = room_metrics([])
    assert empty.ttft_s is None and empty.throughput_tokens_per_s is None
