#!/usr/bin/env bash
# bloomperf's first check on a GPU: one command, at most 9 minutes on one H200 with no internet
# (Python 3.12 with torch 2.11+cu130, transformers 5.x, accelerate, nvidia-ml-py, pytest installed),
# from the project root, with ../shared/gpukit copied to .gpukit/:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh
#
# Steps, each in its own time box (a hang costs its box, never the whole budget):
#   1. install .gpukit/wheels offline into $SITE (deepspeed, bitsandbytes, DeepSpeed's needs)
#   2. bloomperf doctor and bloomperf topology; the GPUs' NVML answers (benchmarks/record_nvml.py)
#   3. a 2-layer bloom-176b: accelerate bf16 and int8, ds-zero bf16, ds-autotp fp16 at a few batch
#      sizes; then accelerate bf16 at batch sizes up to OOM, against `bloomperf predict`
#   4. the reference profile (transformers 4.43.4 from .gpukit/wheels-reference) in a second
#      Python call: DeepSpeed's JIT build of the fused kernels, timed on its own, then
#      ds-inference fp16
# Results, worker logs and a summary go to $OUT: log.txt (everything printed), summary.txt (the
# table, the OOM boundary against the prediction), nvml-answers.json (the recorder's) and
# gpu-check.tgz (every results JSON and log).
#
# GPU_CHECK_DEVICE=cpu runs the same steps on the tiny model on this CPU in a minute or two (no
# install, no JIT build; ds-inference is skipped by bloomperf itself): tests/test_gpu_check.py.
# Other settings: BUDGET_S (default 540), PHASES ("main ref"), LAYERS (2), BATCHES (1,8,64),
# OOM_BATCHES, NEW_TOKENS (20), PYTHON (python3), KIT (.gpukit), SITE (/tmp/bloomperf-site).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 3
DEVICE=${GPU_CHECK_DEVICE:-cuda}
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=$OUT/work
mkdir -p "$WORK/tmp" || exit 3
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET_S:-540}))
PY=${PYTHON:-python3}
KIT=${KIT:-$ROOT/.gpukit}
SITE=${SITE:-/tmp/bloomperf-site}
PHASES=${PHASES:-main ref}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Worker logs go beside each results file (<name>.json.logs/); temporary folders (a failed
# group keeps its own) under $TMPDIR, inside the archive too.
export TMPDIR=$WORK/tmp

if [ "$DEVICE" = cpu ]; then
  MODEL=(--model tiny)
  INSTALL=${GPU_CHECK_INSTALL:-0}
  OOM_BATCHES=${OOM_BATCHES:-1,4}
  AUTOTP_DTYPE=bf16  # DeepSpeed's CPU accelerator refuses fp16
  BOX_SCALE=${BOX_SCALE:-3}
  # Fused kernels need a GPU: bloomperf skips every ds-inference cell, which is no failure here.
  REF_GATE=(--allow-incomplete)
  TOPOLOGY=1xH200-141GB  # predict plans for a GPU it is not on; only the steps are checked
else
  MODEL=(--model bloom-176b --layers "${LAYERS:-2}")
  INSTALL=${GPU_CHECK_INSTALL:-1}
  AUTOTP_DTYPE=fp16
  BOX_SCALE=${BOX_SCALE:-1}
  REF_GATE=()
  # One folder for DeepSpeed's JIT build and the ds-inference workers that load it.
  export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/bloomperf-torch-extensions}
  # 2 blocks of bloom-176b take 17 GB in bf16; the KV cache, activations and logits of batches
  # in the thousands fill the rest of an H200 (bloomperf predict puts the boundary near 4096).
  OOM_BATCHES=${OOM_BATCHES:-1024,2048,4096,6144,8192,12288}
  TOPOLOGY=detect
fi
BATCHES=${BATCHES:-1,8,64}
export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}
COMMON=("${MODEL[@]}" --device "$DEVICE" --new-tokens "${NEW_TOKENS:-20}" --cycles 3 --warmup 1
        --load-timeout 240 --cell-timeout 90 --no-lock)
FAILED=()

# Seconds left for a step: at most $1 (times BOX_SCALE), keeping $2 (default 20) for the steps
# after it. The boxes are sized for the H200; a busy 2-core CPU machine needs more (cpu: 3x).
box() {
  local left=$((DEADLINE - $(date +%s) - ${2:-20})) most=$(($1 * BOX_SCALE))
  ((left > most)) && left=$most
  ((left < 5)) && left=5
  echo "$left"
}
step() { echo; echo "=== [+$(($(date +%s) - T0))s] $*"; }
# SIGINT first: bloomperf then kills its worker groups (allow it 45 s: its own kill waits up to
# 40) and keeps the results file valid; SIGKILL only after that.
timed() {  # label seconds command...: run it in its box; remember a failure, go on
  local label=$1 seconds=$2 rc
  shift 2
  timeout -s INT -k 45 "$seconds" "$@"
  rc=$?
  echo "rc=$rc" >&2
  ((rc == 0)) || FAILED+=("$label (exit $rc$( ((rc == 124 || rc == 130)) && echo ', time box'))")
  return "$rc"
}
gpu_memory() {
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader
}
bench() {  # name seconds run-options...
  local name=$1 seconds=$2
  shift 2
  step "bloomperf run $name: $*"
  timed "run $name" "$(box "$seconds" 30)" "$PY" -m bloomperf run "${COMMON[@]}" \
    --output "$WORK/$name.json" "$@"
  gpu_memory
}
install() {  # target wheel-folder
  [ "$INSTALL" = 1 ] || { echo "install skipped (GPU_CHECK_INSTALL=$INSTALL)"; return 0; }
  [ -f "$1/.done" ] && { echo "already installed in $1"; return 0; }
  timed "install $2" "$(box 90)" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$1" "$2"/*.whl && touch "$1/.done"
}

if [[ " $PHASES " == *" main "* ]]; then
  step "install $KIT/wheels into $SITE"
  install "$SITE" "$KIT/wheels"
  step "bloomperf doctor"
  timed doctor "$(box 120)" "$PY" -m bloomperf doctor --device "$DEVICE" --format json \
    > "$WORK/doctor.json"
  "$PY" -c "import json, sys
for c in json.load(open(sys.argv[1]))['checks']: print(f\"{c['status']:<4}  {c['name']:<13} {c['reason']}\")" \
    "$WORK/doctor.json"
  step "bloomperf topology"
  timed topology "$(box 60)" "$PY" -m bloomperf topology --json > "$WORK/topology.json"
  head -c 1200 "$WORK/topology.json"; echo
  # The GPUs' real NVML answers, for the CPU suite's replay (copy to tests/data/nvml/).
  step "record NVML answers into $OUT/nvml-answers.json"
  if [ "$DEVICE" = cuda ]; then
    timed record-nvml "$(box 30)" "$PY" benchmarks/record_nvml.py --output "$OUT/nvml-answers.json"
  else  # a CPU machine may have no NVML: the recorder says why and exits 2, no failure here
    rc=0
    "$PY" benchmarks/record_nvml.py --output "$OUT/nvml-answers.json" || rc=$?
    ((rc == 0 || rc == 2)) || FAILED+=("record-nvml (exit $rc)")
  fi
  bench accelerate 200 --backends accelerate --dtypes bf16,int8 --batch-sizes "$BATCHES"
  bench ds-zero 120 --backends ds-zero --dtypes bf16 --batch-sizes "$BATCHES"
  bench ds-autotp 120 --backends ds-autotp --dtypes "$AUTOTP_DTYPE" --batch-sizes "$BATCHES"
  step "OOM boundary: accelerate bf16 up to batch ${OOM_BATCHES##*,}, against bloomperf predict"
  timed predict "$(box 60)" "$PY" -m bloomperf predict "${MODEL[@]}" --topology "$TOPOLOGY" \
    --backends accelerate --dtypes bf16 --batches "$OOM_BATCHES" --new-tokens 8 \
    --format json > "$WORK/predict.json"
  bench oom 150 --backends accelerate --dtypes bf16 --batch-sizes "$OOM_BATCHES" \
    --new-tokens 8 --cycles 1
fi

if [[ " $PHASES " == *" ref "* ]]; then
  step "reference profile: transformers 4.43.4 from $KIT/wheels-reference"
  install "$SITE-ref" "$KIT/wheels-reference"
  export PYTHONPATH=$ROOT:$SITE-ref:$SITE${PYTHONPATH:+:$PYTHONPATH}
  "$PY" -c "import transformers; print('transformers', transformers.__version__)"
  if [ "$DEVICE" = cuda ]; then
    step "JIT-build DeepSpeed's fused kernels (InferenceBuilder) into $TORCH_EXTENSIONS_DIR"
    started=$(date +%s)
    timed "JIT build" "$(box 330 60)" "$PY" -c "from deepspeed.ops.op_builder import InferenceBuilder
InferenceBuilder().load(verbose=False)" > "$WORK/jit.log" 2>&1
    echo "JIT build: $(($(date +%s) - started)) s"; tail -5 "$WORK/jit.log"
  fi
  bench ds-inference 150 --backends ds-inference --dtypes fp16 --batch-sizes "$BATCHES" \
    "${REF_GATE[@]}"
fi

step "summary"
"$PY" - "$WORK" > "$OUT/summary.txt" <<'EOF'
import json, sys
from pathlib import Path
from bloomperf.store.results.files import read_results

work = Path(sys.argv[1])
print(f"{'cell':<28} {'outcome':<8} {'ms/token':>9} {'peak GiB':>9} {'load s':>7}  note")
measured_ok = None
for path in sorted(work.glob("*.json")):
    if path.stem in ("doctor", "topology", "predict"):
        continue
    try:
        run = read_results(path)
    except Exception as exc:  # a run killed before its first cell: say so, go on
        print(f"{path.name}: unreadable ({exc})")
        continue
    for c in run.cells:
        ms = f"{c.ms_per_token:.3f}" if c.ms_per_token else "-"
        peak = f"{c.peak_memory_bytes / 2**30:.1f}" if c.peak_memory_bytes else "-"
        load = f"{c.load_time_s:.1f}" if c.load_time_s else "-"
        note = (c.message.splitlines() or [""])[0][:70]
        print(f"{path.stem + ':' + c.id:<28} {c.outcome.value:<8} {ms:>9} {peak:>9} {load:>7}  {note}")
        if path.stem == "oom" and c.outcome.value == "ok":
            measured_ok = max(measured_ok or 0, c.batch_size)
predicted = None
if (work / "predict.json").is_file() and (work / "predict.json").stat().st_size:
    rows = json.loads((work / "predict.json").read_text())["rows"]
    predicted = rows[0]["boundary"] if rows else None
print(f"OOM boundary, accelerate bf16: largest batch measured OK {measured_ok}, "
      f"predicted {predicted}")
EOF
cat "$OUT/summary.txt"
tar czf "$OUT/gpu-check.tgz" -C "$OUT" work
[ -n "${GPU_CHECK_KEEP:-}" ] || rm -rf "$WORK"
echo "done in $(($(date +%s) - T0)) s; results in $OUT"
if ((${#FAILED[@]})); then
  printf 'failed step: %s\n' "${FAILED[@]}"
  exit 1
fi
