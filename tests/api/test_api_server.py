"""The API on the app's own server (server.py, started as ./run.sh starts it), driven by clients no one here wrote:
the official openai and anthropic SDKs, and curl. The server runs the tiny model (conftest's `tiny_server_cache`):
what is checked here is the protocol, the errors, the keys and the queue's places; the real model's answers (equal
to Hugging Face's generate, logprobs equal to its logits' log-softmax) are tests/test_api_model.py."""
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import jsonschema
import pytest
from kit.browser import CHROMIUM, ROOT, SHOTS, app_server, fresh_page, question_shown, settle
from kit.sdks import anthropic, openai

pytestmark = pytest.mark.browser

SMOL = "SmolLM2-135M-Instruct"
SLOTS = 4  # each client's places in the queue on this server (TPE_API_CLIENT_SLOTS)
HI = [{"role": "user", "content": "Hello there"}]
SERVER_LOG = ROOT / "artifacts" / "api-server.log"  # the module's server's log (the queue's and the batch's lines)


def server_log(start: int = 0) -> list[str]:
    """The server's log lines from line `start` on."""
    return SERVER_LOG.read_text(errors="replace").splitlines()[start:]


def wait_for_log(enough, timeout_s: float, going=lambda: True) -> list[str]:
    """The log's lines once enough(lines) holds, or after timeout_s, or once going() is false (what would write the
    lines has stopped): the caller asserts on what it got. Checked every 50 ms: the server writes as it works."""
    deadline = time.monotonic() + timeout_s
    while not enough(lines := server_log()) and going() and time.monotonic() < deadline:
        time.sleep(0.05)
    return lines


@pytest.fixture(scope="module")
def server(tiny_server_cache):
    with app_server("api-server.log", cache_dir=tiny_server_cache, script="server.py",
                    env={"TPE_API_CLIENT_SLOTS": str(SLOTS), "TPE_API_KEY": ""}) as url:
        yield url, Path(tiny_server_cache)


@pytest.fixture(scope="module")
def oa(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def an(server):
    return anthropic.Anthropic(base_url=server[0], api_key="unused", max_retries=0, timeout=120)


def stored_link(cache: Path, link: str) -> dict:
    """The request a run's short link stands for, as the server stored it (views/links/url_state.py opens it)."""
    code = parse_qs(urlparse(link).query)["link"][0]
    return json.loads((cache / "room" / f"link-{code}.json").read_text())["query"]


def test_models_lists_the_pickers_models_with_their_windows(oa, an):
    models = {m.id: m for m in oa.models.list()}
    assert models[SMOL].context_length > 0 and models[SMOL].max_prompt_tokens <= models[SMOL].context_length
    assert SMOL in {m.id for m in an.models.list()}
    assert oa.models.retrieve(SMOL).id == SMOL


def test_an_answer_carries_its_run_link_and_no_cached_tokens_on_a_first_request(oa, server):
    url, cache = server
    raw = oa.chat.completions.with_raw_response.create(
        model=SMOL, messages=[{"role": "system", "content": "You are terse."}, *HI], max_tokens=8, temperature=0)
    done = raw.parse()
    link = raw.headers["x-tpe-run"]
    assert link.startswith(f"{url}/journey?link=") and done.model_extra["tpe_run"] == link
    query = stored_link(cache, link)
    assert (query["q"], query["system"], query["max_new_tokens"], query["temperature"]) == (
        "Hello there", "You are terse.", "8", "0")
    (choice,) = done.choices
    assert choice.finish_reason in ("stop", "length") and isinstance(choice.message.content, str)
    assert done.usage.completion_tokens >= 1 and done.usage.prompt_tokens > 10
    assert done.usage.prompt_tokens_details.cached_tokens == 0


def test_a_second_request_sharing_a_long_system_prompt_reads_its_blocks_from_the_cache(oa, an):
    """The prefix cache is real: a first request with a new long system prompt reuses nothing; a second one with the
    same system prompt and another question reuses every full 16-token block before the question (the prompts part
    where the user's text starts: the template's few tokens before it and the question's own, under three blocks)."""
    system = "You answer questions about vegetable gardens, briefly and kindly. " * 12 + f"Nonce {time.time_ns()}."
    first = oa.chat.completions.create(model=SMOL, max_tokens=2, temperature=0,
                                       messages=[{"role": "system", "content": system}, *HI])
    second = oa.chat.completions.create(model=SMOL, max_tokens=2, temperature=0,
                                        messages=[{"role": "system", "content": system},
                                                  {"role": "user", "content": "Are tomatoes fruit?"}])
    assert first.usage.prompt_tokens > 150 and first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached % 16 == 0 and second.usage.prompt_tokens - 48 <= cached < second.usage.prompt_tokens
    streamed = list(oa.chat.completions.create(
        model=SMOL, max_tokens=2, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Is a pumpkin a fruit?"}]))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens >= cached - 16
    message = an.messages.create(model=SMOL, max_tokens=2, extra_body={"temperature": 0},
                                 system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                                 messages=[{"role": "user", "content": "Is a cucumber a fruit?"}])
    assert message.usage.cache_read_input_tokens >= cached - 16 and message.usage.cache_read_input_tokens % 16 == 0


def test_a_streamed_answer_is_the_same_answer_and_ends_with_its_usage(oa):
    whole = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=12, temperature=0)
    chunks = list(oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=12, temperature=0, stream=True,
                                             stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason]
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    # the same prompt again: every full 16-token block but the one holding the last token (one is always run)
    assert whole.usage.prompt_tokens_details.cached_tokens == 0
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == (whole.usage.prompt_tokens - 1) // 16 * 16


def test_streams_at_once_each_get_their_own_answer(oa):
    """As many streams as the client has places, all at once, each with its own question: every stream's text is
    its own question's answer (no cross-talk between the batch's rows)."""
    questions = [f"Question number {i}: what comes next?" for i in range(SLOTS)]
    expected = [oa.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": q}], max_tokens=16,
                                           temperature=0).choices[0].message.content for q in questions]
    got: dict[int, str] = {}

    def stream(i: int) -> None:
        chunks = oa.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": questions[i]}],
                                            max_tokens=16, temperature=0, stream=True)
        got[i] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(SLOTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got.get(i) for i in range(SLOTS)] == expected
    assert len(set(expected)) > 1  # the questions' answers differ, so a mix-up would show


def test_n_draws_are_each_their_own_run(oa, server):
    done = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=6, temperature=1.0, seed=5, n=3)
    assert [c.index for c in done.choices] == [0, 1, 2]
    seeds = [stored_link(server[1], c.model_extra["tpe_run"])["seed"] for c in done.choices]
    assert seeds == ["5", "6", "7"]
    again = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=6, temperature=1.0, seed=5, n=3)
    assert [c.message.content for c in again.choices] == [c.message.content for c in done.choices]  # seeded
    greedy = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=6, temperature=0, n=2)
    assert greedy.choices[0].message.content == greedy.choices[1].message.content
    streamed = list(oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=6, temperature=1.0, seed=5, n=3,
                                               stream=True))
    texts = ["".join(c.choices[0].delta.content or "" for c in streamed if c.choices and c.choices[0].index == i)
             for i in range(3)]
    assert texts == [c.message.content for c in done.choices]


def test_a_json_schema_answer_validates(oa, server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    raw = oa.chat.completions.with_raw_response.create(
        model=SMOL, messages=[{"role": "user", "content": "Is a tomato a fruit?"}], max_tokens=40, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    done = raw.parse()
    jsonschema.validate(json.loads(done.choices[0].message.content), schema)
    assert "/constrained?link=" in raw.headers["x-tpe-run"]
    assert json.loads(stored_link(server[1], raw.headers["x-tpe-run"])["co.spec_json_schema"]) == schema


def test_logprobs_are_a_distribution_over_the_chosen_tokens(oa):
    done = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=5, temperature=0, logprobs=True,
                                      top_logprobs=3)
    content = done.choices[0].logprobs.content
    assert 1 <= len(content) <= 5
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)  # greedy: the best one was chosen
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)


def test_a_stream_with_logprobs_carries_each_pieces_tokens_and_a_schema_stream_validates(oa):
    """OpenAI's stream chunks carry choices[].logprobs.content for the tokens of their delta: the pieces join to the
    whole answer's text, and their entries to its logprobs, token for token."""
    asked = dict(model=SMOL, messages=HI, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    whole = oa.chat.completions.create(**asked)
    chunks = list(oa.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True}))
    choices = [c.choices[0] for c in chunks if c.choices]
    assert "".join(c.delta.content or "" for c in choices) == whole.choices[0].message.content
    streamed = [e for c in choices if c.logprobs for e in c.logprobs.content]
    assert [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in streamed] == [
        (e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in whole.choices[0].logprobs.content]
    assert choices[-1].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    text = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
        model=SMOL, messages=[{"role": "user", "content": "Is a tomato a fruit?"}], max_tokens=40, temperature=0,
        stream=True, response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
        if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_anthropic_messages_whole_and_streamed(an):
    kwargs = dict(model=SMOL, max_tokens=10, messages=[{"role": "user", "content": "Hello there"}],
                  system=[{"type": "text", "text": f"You are terse ({time.time_ns()}).",
                           "cache_control": {"type": "ephemeral"}}],
                  extra_body={"temperature": 0})
    raw = an.messages.with_raw_response.create(**kwargs)
    whole = raw.parse()
    assert raw.headers["x-tpe-run"] == whole.model_extra["tpe_run"]
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.output_tokens >= 1
    assert whole.usage.cache_read_input_tokens == 0
    assert whole.usage.input_tokens + whole.usage.cache_creation_input_tokens > 10
    with an.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    prompt = whole.usage.input_tokens + whole.usage.cache_creation_input_tokens
    assert final.usage.cache_read_input_tokens == (prompt - 1) // 16 * 16  # the same prompt again: its full blocks


@pytest.mark.parametrize("kwargs,error,param", [
    (dict(temperature=5), "BadRequestError", "temperature"),
    (dict(max_tokens=100_000), "BadRequestError", "max_tokens"),
    (dict(messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}]), "BadRequestError",
     "messages[0].role"),
    (dict(tools=[{"type": "function", "function": {"name": "f"}}]), "BadRequestError", "tools"),
    (dict(top_logprobs=2), "BadRequestError", "top_logprobs"),
    (dict(model="gpt-4o"), "NotFoundError", "model"),
    (dict(messages=[{"role": "user", "content": "tomato " * 9000}]), "UnprocessableEntityError", "messages"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objct"}}}),
     "UnprocessableEntityError", "response_format.json_schema.schema"),
])
def test_every_openai_error_comes_through_the_sdks_own_class(oa, kwargs, error, param):
    with pytest.raises(getattr(openai, error)) as e:
        oa.chat.completions.create(**{"model": SMOL, "messages": HI, "max_tokens": 4, **kwargs})
    assert e.value.body["param"] == param and param in e.value.message


@pytest.mark.parametrize("kwargs,error,field", [
    (dict(max_tokens=0), "BadRequestError", "max_tokens"),
    (dict(extra_body={"top_k": -1}), "BadRequestError", "top_k"),
    (dict(model="claude-sonnet-4-5"), "NotFoundError", "model"),
    (dict(messages=[{"role": "user", "content": "tomato " * 9000}]), "UnprocessableEntityError",
     "messages"),
])
def test_every_anthropic_error_comes_through_the_sdks_own_class(an, kwargs, error, field):
    with pytest.raises(getattr(anthropic, error)) as e:
        an.messages.create(**{"model": SMOL, "max_tokens": 4, "messages": HI, **kwargs})
    assert e.value.body["error"]["message"].startswith(field)


def test_a_body_past_the_limit_is_413_and_a_lone_surrogate_is_400(server, oa, an):
    with pytest.raises(openai.APIStatusError) as e:
        oa.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": "x" * 3_000_000}], max_tokens=4)
    assert e.value.status_code == 413
    with pytest.raises(anthropic.APIStatusError) as e:
        an.messages.create(model=SMOL, max_tokens=4, messages=[{"role": "user", "content": "x" * 3_000_000}])
    assert e.value.status_code == 413 and e.value.body["error"]["type"] == "request_too_large"
    out = curl(server[0], "/v1/chat/completions", '{"model": "%s", "messages": [{"role": "user", "content": '
               '"a\\ud800b"}]}' % SMOL)
    assert out["status"] == 400 and out["body"]["error"]["param"] == "messages[0].content"


def curl(url: str, path: str, data: str | None = None, headers: tuple[str, ...] = ()) -> dict:
    """curl's answer: {"status", "body" (JSON, or the raw text), "headers"}."""
    args = ["curl", "-sS", "-i", "--max-time", "120", f"{url}{path}", *[a for h in headers for a in ("-H", h)]]
    if data is not None:
        args += ["-H", "content-type: application/json", "--data-binary", data]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    head, _, body = out.partition("\n\n")  # text=True: curl's \r\n read as \n
    lines = head.split("\n")
    found = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    try:
        body = json.loads(body)
    except json.JSONDecodeError:
        pass
    return {"status": int(lines[0].split()[1]), "body": body, "headers": found}


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_whole_and_streamed(server):
    url = server[0]
    body = {"model": SMOL, "messages": HI, "max_tokens": 6, "temperature": 0}
    whole = curl(url, "/v1/chat/completions", json.dumps(body))
    assert whole["status"] == 200 and whole["headers"]["x-tpe-run"] == whole["body"]["tpe_run"]
    streamed = curl(url, "/v1/chat/completions", json.dumps({**body, "stream": True}))
    events = [line[6:] for line in streamed["body"].split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == whole["body"]["choices"][0]["message"]["content"]
    assert curl(url, "/v1/nothing")["status"] == 404
    assert curl(url, "/v1/chat/completions", "{not json")["body"]["error"]["type"] == "invalid_request_error"
    anth = curl(url, "/v1/messages", json.dumps(body), ("anthropic-version: 2023-06-01",))
    assert anth["status"] == 200 and anth["body"]["type"] == "message"


def test_past_its_places_a_client_gets_429_and_a_stream_it_leaves_frees_them(oa):
    with pytest.raises(openai.RateLimitError) as e:
        oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=4, temperature=1.0, n=SLOTS + 1)
    assert int(e.value.response.headers["retry-after"]) >= 1
    logged = sum(" left: " in line for line in server_log())  # requests that left the batch
    stream = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=256, temperature=1.0, n=SLOTS,
                                        stream=True)
    next(iter(stream))  # every place of this client is held by the stream now
    with pytest.raises(openai.RateLimitError):
        oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=4, temperature=0)
    stream.close()  # the client leaves mid-stream
    deadline, answered = time.monotonic() + 10, None
    while answered is None and time.monotonic() < deadline:
        try:
            answered = oa.chat.completions.create(model=SMOL, messages=HI, max_tokens=4, temperature=0)
        except openai.RateLimitError:
            time.sleep(0.05)
    assert answered is not None, "the stream's places were not given back once its client left"
    # ... and its answers left the batch early: the queue's log has no request that ran its 256 tokens
    lines = wait_for_log(lambda lines: sum(" left: " in line for line in lines) >= logged + SLOTS + 1, 30)
    left = [line for line in lines if " left: " in line][logged:]
    assert len(left) >= SLOTS + 1 and not any(" 256 tokens" in line for line in left), left


def client_at(server, address: str) -> "openai.OpenAI":
    """An SDK client whose connections leave from `address` (127.0.0.x: loopback, another client to the server)."""
    import httpx2 as httpx  # the openai SDK's own HTTP client library

    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=120,
                         http_client=httpx.Client(transport=httpx.HTTPTransport(local_address=address)))


def test_a_flood_past_the_queues_bound_gets_429_with_retry_after_and_others_keep_their_turn(server):
    """One client fills its places with whole jobs (json_schema draws, each run whole in its turn): its next request
    is 429 with retry-after; while those jobs wait, another client's prompt over 1,024 tokens is 429 with
    retry-after 30 (a long prompt waits for a shorter line), and a third client's short question is answered."""
    flooder, long_asker, learner = (client_at(server, f"127.0.0.{n}") for n in (2, 3, 4))
    # a story of at least 600 characters: each job runs for many tokens, so none ends before the checks below
    schema = {"type": "object", "properties": {"story": {"type": "string", "minLength": 600}}, "required": ["story"]}
    logged = len(server_log())
    flood: dict = {}

    def fill_the_places():
        flood["done"] = flooder.chat.completions.create(
            model=SMOL, messages=[{"role": "user", "content": f"A long story, please ({time.time()})."}],
            max_tokens=256, temperature=1.0, seed=11, n=SLOTS,
            response_format={"type": "json_schema", "json_schema": {"name": "story", "schema": schema}})
    filling = threading.Thread(target=fill_the_places)
    filling.start()

    def queue_lengths(lines=None) -> list[int]:
        """The queue's length as each job came in since the test began (the queue logs each), from `lines` (the log's
        whole text) or the log read now."""
        lines = server_log() if lines is None else lines
        counts = [line.rsplit("a job came in; ", 1)[1].split()[0] for line in lines[logged:]
                  if "a job came in; " in line]
        return [int(n) for n in counts if n.isdigit()]
    wait_for_log(lambda lines: len(queue_lengths(lines)) >= SLOTS, 120, going=filling.is_alive)
    assert len(queue_lengths()) >= SLOTS and max(queue_lengths()) >= SLOTS, (queue_lengths(), filling.is_alive())
    long_prompt = [{"role": "system", "content": "Remember this. " * 400}, {"role": "user", "content": "Well?"}]
    try:
        with pytest.raises(openai.RateLimitError) as long_refused:  # the flood's jobs stand in the line
            long_asker.chat.completions.create(model=SMOL, messages=long_prompt, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as flood_more:  # its places are all held while its jobs wait
            flooder.chat.completions.create(model=SMOL, messages=HI, max_tokens=1)
    except pytest.fail.Exception as e:  # say what the queue held: a flood job that ended too soon shows here
        raise AssertionError(f"{e}; the queue's lengths as jobs came in: {queue_lengths()}; the flood still going: "
                             f"{filling.is_alive()}") from None
    assert filling.is_alive(), "the flood ended before both refusals: its jobs were not long enough to check them"
    short = learner.chat.completions.create(model=SMOL, messages=HI, max_tokens=2, temperature=0)
    filling.join()
    assert int(flood_more.value.response.headers["retry-after"]) >= 1
    assert "each client may hold" in flood_more.value.message
    assert int(long_refused.value.response.headers["retry-after"]) == 30
    assert "requests are waiting" in long_refused.value.message and long_refused.value.body["param"] == "messages"
    assert len(flood["done"].choices) == SLOTS and short.choices[0].message.content is not None
    assert all(len(json.loads(c.message.content)["story"]) >= 600 for c in flood["done"].choices
               if c.finish_reason == "stop")  # the schema held where a story ended


def test_many_requests_at_once_all_answer_or_are_told_to_retry(oa):
    results, errors = [], []

    def ask(i):
        try:
            results.append(oa.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": f"Q{i}"}],
                                                      max_tokens=8, temperature=0))
        except openai.RateLimitError as e:
            errors.append(e)
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) + len(errors) == 12 and len(results) >= SLOTS
    assert all(r.choices[0].message.content is not None for r in results)


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_the_run_link_opens_that_very_run_on_journey(oa, chromium):
    """The link restores the request in the sidebar, and Journey shows the run the API made (its id), not a new one."""
    messages = [{"role": "system", "content": "You answer in riddles."}, {"role": "user", "content": "Where?"},
                {"role": "assistant", "content": "Here."}, {"role": "user", "content": "Which seed is sown?"}]
    raw = oa.chat.completions.with_raw_response.create(model=SMOL, messages=messages, max_tokens=7, temperature=0.7,
                                                       seed=3)
    run_id = raw.parse().id.removeprefix("chatcmpl-")
    with fresh_page(chromium) as page:
        page.goto(raw.headers["x-tpe-run"])
        settle(page)
        assert question_shown(page) == "Which seed is sown?"
        page.get_by_text(run_id).first.wait_for(timeout=30_000)
        page.screenshot(path=str(SHOTS / "api-run-link.png"))


def test_on_another_address_the_api_needs_its_key(tiny_server_cache):
    with app_server("api-key-server.log", host="127.0.0.1", cache_dir=tiny_server_cache, script="server.py",
                    args=("--server.address", "0.0.0.0"), env={"TPE_API_KEY": "s3cret-key"}) as url:
        for key in ("wrong", "s3cret"):
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0).models.list()
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
                model=SMOL, max_tokens=4, messages=HI)
        assert SMOL in {m.id for m in openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret-key").models.list()}
        answer = anthropic.Anthropic(base_url=url, api_key="s3cret-key", max_retries=0).messages.create(
            model=SMOL, max_tokens=4, messages=HI)
        assert answer.usage.output_tokens >= 1
        assert curl(url, "/v1/models")["status"] == 401
        assert curl(url, "/_stcore/health")["status"] == 200  # the pages need no key


def test_on_another_address_without_a_key_the_api_is_off(tiny_server_cache):
    with app_server("api-off-server.log", host="127.0.0.1", cache_dir=tiny_server_cache, script="server.py",
                    args=("--server.address", "0.0.0.0"), env={"TPE_API_KEY": ""}) as url:
        with pytest.raises(openai.NotFoundError) as e:
            openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0).chat.completions.create(
                model=SMOL, messages=HI, max_tokens=4)
        assert "the API is off" in e.value.message and "TPE_API_KEY" in e.value.message
        assert curl(url, "/_stcore/health")["status"] == 200  # the pages are served
