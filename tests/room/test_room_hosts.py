"""A room on two hosts sharing one Redis: `./run.sh room-store`, `room-host` and `room-balancer`, the hosts being
two network namespaces on this machine joined by a third, the switch (a bridge, a veth pair to each host, 10.x
addresses; nothing leaves the machine). Host A runs Redis and one replica, host B one replica, the switch HAProxy in
front of both and this test's Chromium. Nothing is made in the root namespace: the other browser tests' Chromium
runs there and aborts every request in flight (net::ERR_NETWORK_CHANGED) when a link or an address comes or goes.
Checked: a question asked on A then on B is computed once (the replicas' queue logs count the model runs); a
presenter on A and a learner following on B share the room (rooms are in Redis too); A's replicas killed, A's learner
reconnects through the balancer to B and sees their question without a new run, and the presenter, on B now, still
drives the room;
Redis stopped and restarted mid-session: no error page, and the run asked meanwhile is in Redis afterwards.
The replicas run the tiny random-weight model (conftest's `tiny_server_cache`). Needs root and namespaces:
skipped with the reason where they cannot be made (a CI container without CAP_NET_ADMIN)."""
import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import quote

import pytest
from kit.browser import CHROMIUM, ROOT, open_page, question_shown, settle, until, watch
from kit.room_walk import next_stage, start_presenting, wait_for_stage

pytestmark = pytest.mark.multihost
Q1, Q2 = "Why is the sky green?", "What is a prime number?"
REPLICA_PORT, STORE_PORT, BALANCER_PORT = 8601, 6390, 8500  # each namespace is new: every port is free there
SUBNET = "10.77.0"  # seen inside the LAN's namespaces only, so it clashes with nothing on the machine
RUN_LINE = re.compile(r"request \d+ left: waited")  # the queue's log line as each model run of a page ends
_lans = itertools.count()


def _ip(*args: str, ns: str | None = None) -> None:
    """`ip` in the network namespace `ns` (`ip -n`); in the root namespace only `ip netns add` and `del`, which make
    no link there."""
    subprocess.run(["ip", *(["-n", ns] if ns else []), *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def two_host_lan():
    """A switch and two hosts, each a network namespace: the switch holds a bridge (address SUBNET.1) and a veth
    pair joins each host to it. Each pair is made in its host with the peer end created in the switch, so the root
    namespace never sees a link, an address or a route come or go. Yields (the switch's namespace,
    [(namespace, address) of host A, of host B])."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    name = f"tpe{os.getpid()}-{next(_lans)}"
    switch, hosts = f"{name}-switch", [f"{name}-a", f"{name}-b"]
    made: list[str] = []

    def clean():
        for ns in reversed(made):  # a veth pair goes with either end's namespace, the bridge with the switch
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    try:
        for ns in (switch, *hosts):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", "lan", "type", "bridge", ns=switch)
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", "lan", ns=switch)
        _ip("link", "set", "lan", "up", ns=switch)
        for n, ns in enumerate(hosts):
            port = f"port{n}"
            _ip("link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", switch, ns=ns)
            _ip("link", "set", port, "master", "lan", "up", ns=switch)
            _ip("addr", "add", f"{SUBNET}.{2 + n}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
    except subprocess.CalledProcessError as e:
        clean()
        pytest.skip(f"cannot make network namespaces here: {' '.join(e.cmd)}: {e.stderr.strip()}")
    try:
        yield switch, [(ns, f"{SUBNET}.{2 + n}") for n, ns in enumerate(hosts)]
    finally:
        clean()


RTM_EVENTS = {16: "new link", 17: "link deleted", 20: "new address", 21: "address deleted", 24: "new route",
              25: "route deleted"}
# what Chromium's network change notifier listens to (links, IPv4 and IPv6 addresses), and the routes
ROOT_GROUPS = 0x1 | 0x10 | 0x40 | 0x100 | 0x400  # RTMGRP_LINK, _IPV4_IFADDR, _IPV4_ROUTE, _IPV6_IFADDR, _IPV6_ROUTE


def _root_view() -> str:
    return "".join(subprocess.run(["ip", "-o", *what], capture_output=True, text=True, check=True).stdout
                   for what in (["link"], ["addr"], ["route"], ["-6", "route"]))


def _events(sock: socket.socket) -> Counter:
    """The netlink messages the socket has received, counted by kind."""
    sock.setblocking(False)
    seen = Counter()
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return seen
        offset = 0
        while offset + 16 <= len(data):  # each message: a 16-byte header (length, type, ...), then its body
            length, kind = struct.unpack_from("=IH", data, offset)
            seen[RTM_EVENTS.get(kind, f"netlink message {kind}")] += 1
            offset += max(16, (length + 3) & ~3)


def test_building_and_removing_the_lan_changes_nothing_in_the_root_namespace():
    """The root namespace's links, addresses and routes are the same before, during and after, and no change
    came or went meanwhile (a netlink socket subscribed as Chromium's is)."""
    before = _root_view()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, ROOT_GROUPS))  # subscribed once bind returns
        with two_host_lan() as (switch, hosts):
            during = _root_view()
            ports = subprocess.run(["ip", "-n", switch, "-o", "link", "show", "master", "lan"],
                                   capture_output=True, text=True, check=True).stdout
            assert ports.count("state UP") == 2, f"the switch's bridge lacks its two hosts:\n{ports}"
        after = _root_view()
        seen = _events(sock)
    assert not seen, f"the root namespace saw {dict(seen)} (an unrelated change on this machine meanwhile too)"
    assert before == during == after


@pytest.fixture(scope="module")
def lan():
    with two_host_lan() as built:
        yield built


class Room:
    """The room's processes, each in its own process group (killed as a group); the test's own checks run in the
    switch's namespace (`in_lan`), as the balancer and the browser do."""

    def __init__(self, tmp, lan, cache):
        self.switch, ((self.ns_a, self.a), (self.ns_b, self.b)) = lan
        self.tmp, self.cache, self.procs = tmp, cache, {}
        self.store_dir = tmp / "store"
        self.port = BALANCER_PORT

    def in_lan(self, *cmd: str, **kwargs) -> subprocess.CompletedProcess:
        """`cmd` run in the switch's namespace, from the project's folder, its output captured."""
        return subprocess.run(["ip", "netns", "exec", self.switch, *cmd], cwd=ROOT, capture_output=True, text=True,
                              **kwargs)

    def chromium(self):
        """An executable that starts Debian's Chromium in the switch's namespace (Playwright drives it through pipes,
        which `ip netns exec` passes on)."""
        wrapper = self.tmp / "chromium-in-the-switch"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {self.switch} {CHROMIUM} "$@"\n')
        wrapper.chmod(0o755)
        return wrapper

    def healthy(self, address: str, seconds: float) -> bool:
        """Whether the replica at `address` answers its health check from the switch within `seconds`."""
        code = ("import sys; from pipeline.server.health import wait_healthy; "
                f"sys.exit(not wait_healthy(sys.argv[1], {seconds}))")
        return self.in_lan(sys.executable, "-c", code, f"http://{address}:{REPLICA_PORT}").returncode == 0

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
                   ROOM_ADDRESS=address, ROOM_LOGS=str(self.tmp / f"logs-{name}"), TPE_CACHE_DIR=str(cache),
                   TPE_WARM_UP="request")  # no prompt-caching scenario played in the background: no page opens one

    def runs_on(self, name: str) -> int:
        """Model runs of a page on host `name` so far (its replica's queue log)."""
        return sum(len(RUN_LINE.findall(p.read_text(errors="replace")))
                   for p in (self.tmp / f"logs-{name}").glob("replica-*.log"))

    def stored_runs(self) -> int:
        """Runs in the room's Redis, asked from the switch (raises while Redis does not answer)."""
        code = ("import sys, redis; url = open(sys.argv[1]).read().strip(); "
                "print(len(redis.Redis.from_url(url, socket_timeout=2).keys('tpe:runs:*')))")
        return int(self.in_lan(sys.executable, "-c", code, str(self.store_dir / "store.url"), check=True).stdout)

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
        r.start("balancer", ["room-balancer", str(hosts), str(r.port)], ns=r.switch,
                ROOM_BALANCER_CFG=str(r.tmp / "haproxy.cfg"))
        for address in (r.a, r.b):
            if not r.healthy(address, 300):
                pytest.fail(f"the replica at {address} never became healthy")
        _wait_for(lambda: _both_up((r.tmp / "balancer.out").read_text(errors="replace")), 60,
                  "the balancer to see both hosts")
        yield r
    finally:
        r.stop_all()


def _done(page, question: str, timeout_s: float = 300) -> None:
    # the body's whole text read 4 times a second, not every 100 ms
    until(page, "q => document.body.innerText.includes('This run took') && "
          "document.body.innerText.includes(q)", arg=question, timeout_s=timeout_s, every_ms=250)


def _ask(page, question: str) -> None:
    """The learner types a new question in the sidebar and runs it on the page they have open, then waits for that
    run's end. No new page load: one of the same tab took ~3.6 s of Chromium's CPU (measured 2026-12-06), a page
    drawn in place ~1 s."""
    settle(page)  # the end-of-run mark already on the page, so the one waited for below is the new run's
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.locator("textarea").first.fill(question)
    sidebar.get_by_role("button", name="Run the model").click()
    settle(page)
    _done(page, question)


def _replica(context) -> str | None:
    return next((c["value"] for c in context.cookies() if c["name"] == "TPE_REPLICA"), None)


def _on(browser, url: str, replica: str):
    """A learner whose browser the balancer already sent to `replica` (its sticky cookie)."""
    context = browser.new_context()
    context.add_cookies([{"name": "TPE_REPLICA", "value": replica, "url": url}])
    return context, watch(context.new_page())


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
@pytest.mark.skipif(not (shutil.which("haproxy") and shutil.which("redis-server")),
                    reason="haproxy or redis-server is not installed (./run.sh test installs them)")
def test_two_hosts_share_runs_through_redis_survive_a_dead_host_and_a_redis_restart(room):
    from playwright.sync_api import sync_playwright

    url = f"http://127.0.0.1:{room.port}"
    link = lambda q: f"{url}/journey?q={quote(q)}&max_new_tokens=4"  # noqa: E731
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=room.chromium(), args=["--no-sandbox"])
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

        # 1b. a presenter on host A (a tab of A's browser), a learner following on host B: the room is in Redis
        presenter = watch(ctx_a.new_page())
        presenter.goto(f"{url}/presenter?q={quote(Q1)}&max_new_tokens=4")
        settle(presenter)
        code = re.search(r"follow=([a-z0-9]+)", start_presenting(presenter)).group(1)
        follower = watch(ctx_b.new_page())
        follower.goto(f"{url}/presenter?follow={code}")
        wait_for_stage(follower, 1, timeout_s=300)
        next_stage(presenter, 2)
        wait_for_stage(follower, 2, timeout_s=60)
        b_runs = room.runs_on("b")  # what the follower's stages asked of host B, if anything

        # 2. every replica of host A killed: its learner is sent to B and sees the question, no new run
        # away from Journey, so Journey's last line below is drawn afresh, by B; to a page of the same request that
        # loads nothing more (Tokens loads the other model's tokenizer too, on A and again on B as it reconnects)
        open_page(page_a, "Request & template", shot=ROOT / "artifacts" / "room-hosts-Request.png")
        room.kill("a")
        _wait_for(lambda: page_a.wait_for_timeout(500) or _replica(ctx_a) == "r2", 180,
                  "the learner of host A to reconnect to host B")
        open_page(page_a, "Journey", shot=ROOT / "artifacts" / "room-hosts-Journey.png")
        _done(page_a, Q1)
        assert question_shown(page_a) == Q1
        assert room.runs_on("b") == b_runs, "host B ran host A's question again"
        assert page_a.locator('[data-testid="stException"]').count() == 0
        # the presenter's tab, now on host B too (its key kept by its browser), still drives; the learner follows
        wait_for_stage(presenter, 2, timeout_s=180)
        settle(presenter)
        next_stage(presenter, 3)
        wait_for_stage(follower, 3, timeout_s=60)

        # 3. Redis stopped mid-session: pages keep working from memory and say so; restarted: the run is stored
        before = room.stored_runs()
        room.kill("store", signal.SIGTERM)  # a clean stop: Redis saves its snapshot, so earlier runs survive
        _ask(page_b, Q2)
        assert room.runs_on("b") == b_runs + 1
        body = page_b.inner_text("body")
        assert "unavailable" in body and "Traceback" not in body
        assert page_b.locator('[data-testid="stException"]').count() == 0
        room.start_store()
        _wait_for(lambda: _store_answers(room) and room.stored_runs() == before + 1, 120,
                  "the run asked while Redis was down to be written once it was back")
        _ask(page_a, Q2)  # the other learner (on B now) asks it too: from memory, no run
        assert room.runs_on("b") == b_runs + 1
        browser.close()
