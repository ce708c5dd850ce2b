#!/bin/bash
# bench/room_ab.sh OLD_TREE [PAIRS] [WEIGHTS]: the room of 30 (bench/workshop_load.py) on two trees, interleaved.
#
# OLD_TREE: another checkout of this project (e.g. `git worktree add /tmp/before <commit>`); it runs on this
# tree's .venv. Each run: a fresh server from that tree on an empty store of runs (the converted weights copied
# from TPE_CACHE_DIR), TPE_WEIGHTS=WEIGHTS (bf16), warmed by one session on the default question; the room
# arrives once the server's queue has been quiet 8 s (its warm-up done); 30 learners 0.3 s apart, one of them in
# Chromium. The runs go this tree, old tree, this tree, ... (PAIRS pairs, default 3), since this machine's speed
# moves from minute to minute; compare a run with its neighbours. Logs: .cache/room-ab/.
set -euo pipefail
OLD=$(realpath "$1"); PAIRS=${2:-3}; WEIGHTS=${3:-bf16}
HERE=$(cd "$(dirname "$0")/.." && pwd)
SRC=${TPE_CACHE_DIR:-$HOME/.cache/token-pipeline-explorer}  # where the converted weights are
OUT=$HERE/.cache/room-ab; mkdir -p "$OUT"
PY=$HERE/.venv/bin/python
one() {  # one LABEL TREE
  local label=$1 tree=$2 port store
  port=$($PY -c "import socket; s=socket.socket(); s.bind(('localhost', 0)); print(s.getsockname()[1])")
  store=$(mktemp -d)
  for d in "$SRC"/*/; do case "$(basename "$d")" in runs|room) ;; *) cp -r "$d" "$store/" ;; esac; done  # no stored runs
  (cd "$tree" && TPE_CACHE_DIR=$store TPE_WEIGHTS=$WEIGHTS exec "$PY" -m streamlit run app.py \
      --server.port "$port" --server.headless true) > "$OUT/$label-server.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 120); do curl -sf "localhost:$port/_stcore/health" >/dev/null && break; sleep 1; done
  "$PY" "$HERE/bench/workshop_load.py" --url "http://localhost:$port" --sessions 1 --browsers 0 > "$OUT/$label-warm.log"
  "$PY" "$HERE/bench/workshop_load.py" --url "http://localhost:$port" --sessions 30 --browsers 1 --pid "$server" \
      --server-log "$OUT/$label-server.log" --quiet-before 8 > "$OUT/$label.log" || true
  kill "$server"; wait "$server" 2>/dev/null || true
  rm -rf "$store"
  echo "== $label ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  grep -E "errors|cross-talk|new question, time|already asked|CPU time|RSS" "$OUT/$label.log" || cat "$OUT/$label.log"
}
for i in $(seq 1 "$PAIRS"); do
  one "this$i" "$HERE"
  one "old$i" "$OLD"
done
