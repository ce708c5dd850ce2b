"""A scripted support agent through the official OpenAI SDK against this server's API: why a stable prompt prefix
makes an agent cheaper and faster, with no code to write.

Two agents run the same support chat (TURNS turns, a ~1,500-token system prompt of policies, each turn appending the
agent's answer, a tool's result and the next question):
  stable = the system prompt never changes: every turn after the first can reuse the prefix cache;
  trap   = the same, with the current time at the top of the system prompt (the classic trap): nothing after its
           first few tokens is ever shared, so every turn prefills the whole conversation again.
Both sides run in one process, interleaved turn by turn (stable turn i, then trap turn i), streamed at temperature 0.
Printed for each: the hit rate (prompt tokens the server reported as cached, `cached_tokens`, over prompt tokens,
after the first turn), TTFT as the client sees it (request sent -> first streamed text) p50 and p95, and the prefill
time the stable prompt saved (the trap's TTFT minus the stable one's, summed over the turns after the first).
The two agents send different user agents, so the Traffic page lists their requests side by side.

Run: .venv/bin/python bench/agent_traffic.py [--turns 20] [--quick] [--base-url http://localhost:8501]
Without --base-url it starts server.py on a free port (as ./run.sh does) and stops it at the end.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import openai

from pipeline.costs.metrics import spread
from pipeline.server.health import free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent

MODEL = "SmolLM2-135M-Instruct"
ANSWER_TOKENS = 16  # each turn's answer: the point is the prompt, not the answer
QUICK_TURNS = 3
PRODUCTS = ["kettle", "toaster", "blender", "lamp", "heater", "fan", "scale", "grinder"]
CITIES = ["Leeds", "Lyon", "Porto", "Graz", "Turku", "Gdansk", "Bilbao", "Aarhus"]


def system_prompt(clauses: int = 27) -> str:
    """A support desk's policies: about 1,500 tokens of SmolLM2's tokenizer with 27 clauses."""
    lines = ["You are the support agent of Tomato Home Goods. Answer in one or two short sentences. Use the tool "
             "results the user pastes; never invent an order status. The policies:"]
    for n in range(clauses):
        product, city = PRODUCTS[n % len(PRODUCTS)], CITIES[n % len(CITIES)]
        lines.append(f"Policy {n + 1}: a {product} bought in the {city} store may be returned within {14 + n % 3 * 7} "
                     f"days with its receipt; refunds go to the original card within {3 + n % 4} working days, and "
                     f"a damaged {product} is replaced at once if the customer sends a photo.")
    return "\n".join(lines)


def tool_result(turn: int) -> str:
    """What the agent's order-lookup tool returned this turn (the models here take no tool calls: it is pasted)."""
    return json.dumps({"order": f"A{1000 + turn}", "product": PRODUCTS[turn % len(PRODUCTS)],
                       "status": ["packed", "shipped", "delayed", "delivered"][turn % 4],
                       "eta_days": turn % 5, "store": CITIES[turn % len(CITIES)]})


def question(turn: int) -> str:
    return [f"Where is my order A{1000 + turn}?", "Can I return it?", "It arrived broken, what now?",
            "How long does a refund take?"][turn % 4]


class Agent:
    """One side: its conversation so far and what each turn measured."""

    def __init__(self, name: str, base_url: str, trap: bool):
        self.name, self.trap = name, trap
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=os.environ.get("TPE_API_KEY") or "unused",
                               max_retries=2, timeout=600)
        self.client = client.with_options(default_headers={"User-Agent": f"{client.user_agent} agent_traffic/{name}"})
        self.turns: list[dict] = []  # [{prompt, cached, ttft_s}] per turn
        self.history: list[dict] = []

    def messages(self) -> list[dict]:
        system = system_prompt()
        if self.trap:  # a new time every turn, at the very top: no two prompts share a block
            system = f"Current time: {datetime.now(timezone.utc).isoformat(timespec='microseconds')}\n{system}"
        return [{"role": "system", "content": system}, *self.history]

    def turn(self, n: int) -> None:
        self.history.append({"role": "user", "content": f"Tool result: {tool_result(n)}\n{question(n)}"})
        sent = time.perf_counter()
        first, text, usage = None, [], None
        stream = self.client.chat.completions.create(
            model=MODEL, messages=self.messages(), max_tokens=ANSWER_TOKENS, temperature=0, stream=True,
            stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter()
                text.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        ttft = (first or time.perf_counter()) - sent
        self.history.append({"role": "assistant", "content": "".join(text).strip() or "(no answer)"})
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        self.turns.append({"prompt": usage.prompt_tokens, "cached": cached or 0, "ttft_s": ttft})

    def summary(self) -> dict:
        later = self.turns[1:]  # the first turn finds nothing cached on either side
        prompt = sum(t["prompt"] for t in later)
        ttft = spread([t["ttft_s"] for t in self.turns])  # the Traffic page's p50 and p95 (one definition)
        return {"agent": self.name, "turns": len(self.turns), "first_prompt_tokens": self.turns[0]["prompt"],
                "last_prompt_tokens": self.turns[-1]["prompt"],
                "hit_rate_after_first": sum(t["cached"] for t in later) / prompt if prompt else 0.0,
                "ttft_p50_s": ttft.p50, "ttft_p95_s": ttft.p95,
                "ttft_later_s": sum(t["ttft_s"] for t in later)}


@contextlib.contextmanager
def started_server(log_name: str = "agent_traffic_server.log"):
    """server.py on a free port, as ./run.sh starts it, its console in artifacts/LOG_NAME; yields its address."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the finally below stops the server too
    port = free_port()
    log = open(ROOT / "artifacts" / log_name, "w") if (ROOT / "artifacts").is_dir() else open(os.devnull, "w")
    env = {**os.environ, "TPE_WARM_UP": os.environ.get("TPE_WARM_UP", "request")}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "server.py", "--server.port", str(port),
                             "--server.headless", "true"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        url = f"http://localhost:{port}"
        if not wait_healthy(url, seconds=300):
            raise SystemExit(f"server.py did not start (artifacts/{log_name} says why)")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def run(base_url: str, turns: int) -> list[dict]:
    agents = [Agent("stable", base_url, trap=False), Agent("timestamp-trap", base_url, trap=True)]
    for n in range(turns):
        for agent in agents:  # interleaved: both sides see the same machine at the same moment
            agent.turn(n)
    return [a.summary() for a in agents]


def report(rows: list[dict]) -> None:
    print(f"{'agent':<16} {'turns':>5} {'prompt tokens':>15} {'hit rate':>9} {'TTFT p50':>9} {'TTFT p95':>9}")
    for r in rows:
        print(f"{r['agent']:<16} {r['turns']:>5} {r['first_prompt_tokens']:>6,} -> {r['last_prompt_tokens']:<6,} "
              f"{r['hit_rate_after_first']:>8.0%} {r['ttft_p50_s'] * 1e3:>7.0f}ms {r['ttft_p95_s'] * 1e3:>7.0f}ms")
    stable, trap = rows
    print(f"prefill time saved by the stable prompt (turns after the first): "
          f"{trap['ttft_later_s'] - stable['ttft_later_s']:.2f} s of {trap['ttft_later_s']:.2f} s")
    if stable["ttft_p50_s"] > 0:
        print(f"TTFT p50, trap / stable: {trap['ttft_p50_s'] / stable['ttft_p50_s']:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="a running server (./run.sh); without it server.py is started here")
    parser.add_argument("--turns", type=int, default=20, help="turns of each agent's chat (default 20)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns: a check that it runs")
    parser.add_argument("--json", action="store_true", help="print the two summaries as JSON as well")
    args = parser.parse_args(argv)
    turns = QUICK_TURNS if args.quick else args.turns
    if turns < 2:
        parser.error("--turns must be at least 2 (the hit rate counts the turns after the first)")
    with contextlib.nullcontext(args.base_url.rstrip("/")) if args.base_url else started_server() as url:
        rows = run(url, turns)
    report(rows)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
