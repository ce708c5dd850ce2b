"""A room on two hosts sharing one Redis: `./run.sh room-store`, `room-host` and `room-balancer`, the hosts being
two network namespaces on this machine (veth pairs on a private bridge, 10.x addresses; nothing leaves the
machine). Host A runs Redis and one replica, host B one replica, HAProxy in the root namespace in front of both.
Checked: a question asked on A then on B is computed once (the replicas' queue logs count the model runs);
A's replicas killed, A's learner reconnects through the balancer to B and sees their question without a new run;
Redis stopped and restarted mid-session: no error page, and the run asked meanwhile is in Redis afterwards.
The replicas run the tiny random-weight model (conftest's `tiny_server_cache`). Needs root and namespaces:
skipped with the reason where they cannot be made (a CI container without CAP_NET_ADMIN)."""
import os
import re
import shutil
import signal
import subprocess
import time
from urllib.parse import quote

import pytest
from kit.browser import CHROMIUM, ROOT, open_page, question_shown, watch

from pipeline.server.health import free_port, wait_healthy

pytestmark = [pytest.mark.browser, pytest.mark.multihost,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
              pytest.mark.skipif(not (shutil.which("haproxy") and shutil.which("redis-server")),
                                 reason="haproxy or redis-server is not installed (./run.sh test installs them)")]
Q1, Q2 = "Why is the sky green?", "What is a prime number?"
REPLICA_PORT, STORE_PORT = 8601, 6390
RUN_LINE = re.compile(r"request \d+ left: waited")  # the queue's log line as each model run of a page ends


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _free_subnet() -> str:
    used = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    for n in range(os.getpid() % 200, os.getpid() % 200 + 50):
        prefix = f"10.{200 + n % 50}.{n % 250}"
        if f"inet {prefix}." not in used:
            return prefix
    pytest.skip("no free 10.x subnet")


@pytest.fixture(scope="module")
def lan():
    """Two hosts: network namespaces A and B, each with a veth pair to a bridge in the root namespace."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag, prefix = os.getpid() % 100000, _free_subnet()
    bridge, spaces = f"tpebr{tag}", [f"tpe{tag}a", f"tpe{tag}b"]
    made: list[tuple[str, str]] = []

    def clean():
        for kind, name in reversed(made):
            subprocess.run(["ip", "netns", "del", name] if kind == "ns" else ["ip", "link", "del", name],
                           capture_output=True)
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(("link", bridge))
        _ip("addr", "add", f"{prefix}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        addresses = []
        for n, ns in enumerate(spaces):
            _ip("netns", "add", ns)
            made.append(("ns", ns))
            outside, inside = f"{ns}0", f"{ns}1"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            made.append(("link", outside))
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", bridge, "up")
            address = f"{prefix}.{2 + n}"
            _ip("addr", "add", f"{address}/24", "dev", inside, ns=ns)
            _ip("link", "set", inside, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            addresses.append(address)
    except subprocess.CalledProcessError as e:
        clean()
        pytest.skip(f"cannot make network namespaces here: {' '.join(e.cmd)}: {e.stderr.strip()}")
    try:
        yield list(zip(spaces, addresses))
    finally:
        clean()



class Room:
    """The room's processes, each in its own process group (killed as a group)."""

    def __init__(self, tmp, lan, cache):
        (self.ns_a, self.a), (self.ns_b, self.b) = lan
        self.tmp, self.cache, self.procs = tmp, cache, {}
        self.store_dir = tmp / "store"
        self.port = free_port()

    def start(self, name: str, args: list[str], ns: str | None = None, **env) -> None:
        cmd = (["ip", "netns", "exec", ns] if ns else []) + ["bash", "run.sh", *args]
        log = open(self.tmp / f"{name}.out", "a")
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, **env})

    def kill(self, name: str, sig=signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)

    def start_store(self) -> None:
        self.start("store", ["room-store", self.a, str(STORE_PORT)], ns=self.ns_a, ROOM_STORE_DIR=str(self.store_dir))

    def start_host(self, name: str, ns: str, address: str) -> None:
        cache = self.tmp / f"cache-{name}"  # each host its own cache folder (weights linked), as two machines
        if not cache.exists():
            cache.mkdir()
            for entry in self.cache.iterdir():
                (cache / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        self.start(name, ["room-host", "1", str(REPLICA_PORT), "--store", f"@{self.store_dir / 'store.url'}"], ns=ns,
                   ROOM_ADDRESS=address, ROOM_LOGS=str(self.tmp / f"logs-{name}"), TPE_CACHE_DIR=str(cache))

    def runs_on(self, name: str) -> int:
        """Model runs of a page on host `name` so far (its replica's queue log)."""
        return sum(len(RUN_LINE.findall(p.read_text(errors="replace")))
                   for p in (self.tmp / f"logs-{name}").glob("replica-*.log"))

    def stored_runs(self) -> int:
        import redis

        url = (self.store_dir / "store.url").read_text().strip()
        return len(redis.Redis.from_url(url, socket_timeout=2).keys("tpe:runs:*"))

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)


def _wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)  # polling a process's state, bounded by the deadline


def _both_up(log: str) -> bool:
    """HAProxy marks a replica still starting DOWN, then UP after two good checks."""
    return all(f"replica{i} is DOWN" not in log or log.rfind(f"replica{i} is DOWN") < log.rfind(f"replica{i} is UP")
               for i in (1, 2))


def _store_answers(room) -> bool:
    try:
        room.stored_runs()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def room(lan, tiny_server_cache, tmp_path_factory):
    r = Room(tmp_path_factory.mktemp("two-hosts"), lan, tiny_server_cache)
    try:
        r.start_store()
        _wait_for(lambda: (r.store_dir / "store.url").exists() and _store_answers(r), 60, "Redis on host A")
        r.start_host("a", r.ns_a, r.a)
        r.start_host("b", r.ns_b, r.b)
        hosts = r.tmp / "hosts.txt"
        hosts.write_text(f"# host A\n{r.a}:{REPLICA_PORT}\n# host B\n{r.b}:{REPLICA_PORT}\n")
        r.start("balancer", ["room-balancer", str(hosts), str(r.port)],
                ROOM_BALANCER_CFG=str(r.tmp / "haproxy.cfg"))
        for address in (r.a, r.b):
            if not wait_healthy(f"http://{address}:{REPLICA_PORT}", 300):
                pytest.fail(f"the replica at {address} never became healthy")
        _wait_for(lambda: _both_up((r.tmp / "balancer.out").read_text(errors="replace")), 60,
                  "the balancer to see both hosts")
        yield r
    finally:
        r.stop_all()


def _done(page, question: str, timeout_s: float = 300) -> None:
    page.wait_for_function("q => document.body.innerText.includes('This run took') && "
                           "document.body.innerText.includes(q)", arg=question, timeout=timeout_s * 1000)


def _replica(context) -> str | None:
    return next((c["value"] for c in context.cookies() if c["name"] == "TPE_REPLICA"), None)


def _on(browser, url: str, replica: str):
    """A learner whose browser the balancer already sent to `replica` (its sticky cookie)."""
    context = browser.new_context()
    context.add_cookies([{"name": "TPE_REPLICA", "value": replica, "url": url}])
    return context, watch(context.new_page())


def test_two_hosts_share_runs_through_redis_survive_a_dead_host_and_a_redis_restart(room):
    from playwright.sync_api import sync_playwright

    url = f"http://127.0.0.1:{room.port}"
    link = lambda q: f"{url}/journey?q={quote(q)}&max_new_tokens=4"  # noqa: E731
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        ctx_a, page_a = _on(browser, url, "r1")
        ctx_b, page_b = _on(browser, url, "r2")
        # 1. the same question on host A, then on host B: one model run, on A
        page_a.goto(link(Q1))
        _done(page_a, Q1)
        assert _replica(ctx_a) == "r1"
        assert (room.runs_on("a"), room.runs_on("b")) == (1, 0)
        page_b.goto(link(Q1))
        _done(page_b, Q1)
        assert _replica(ctx_b) == "r2"
        assert (room.runs_on("a"), room.runs_on("b")) == (1, 0), "host B ran the question again"

        # 2. every replica of host A killed: its learner is sent to B and sees the question, no new run
        # away from Journey, so Journey's last line below is drawn afresh, by B
        open_page(page_a, "Tokens", shot=ROOT / "artifacts" / "room-hosts-Tokens.png")
        room.kill("a")
        _wait_for(lambda: page_a.wait_for_timeout(500) or _replica(ctx_a) == "r2", 180,
                  "the learner of host A to reconnect to host B")
        open_page(page_a, "Journey", shot=ROOT / "artifacts" / "room-hosts-Journey.png")
        _done(page_a, Q1)
        assert question_shown(page_a) == Q1
        assert room.runs_on("b") == 0, "host B ran host A's question again"
        assert page_a.locator('[data-testid="stException"]').count() == 0

        # 3. Redis stopped mid-session: pages keep working from memory and say so; restarted: the run is stored
        before = room.stored_runs()
        room.kill("store", signal.SIGTERM)  # a clean stop: Redis saves its snapshot, so earlier runs survive
        page_b.goto(link(Q2))
        _done(page_b, Q2)
        assert room.runs_on("b") == 1
        body = page_b.inner_text("body")
        assert "unavailable" in body and "Traceback" not in body
        assert page_b.locator('[data-testid="stException"]').count() == 0
        room.start_store()
        _wait_for(lambda: _store_answers(room) and room.stored_runs() == before + 1, 120,
                  "the run asked while Redis was down to be written once it was back")
        page_a.goto(link(Q2))  # the other learner (on B now) asks it too: from memory, no run
        _done(page_a, Q2)
        assert room.runs_on("b") == 1
        browser.close()
