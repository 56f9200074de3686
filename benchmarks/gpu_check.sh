#!/usr/bin/env bash
# bloomperf's first check on a GPU: one command, at most 9 minutes on one H200 with no internet
# (Python 3.12 with torch 2.11+cu130, transformers 5.x, accelerate, nvidia-ml-py, pytest installed),
# from the project root, with ../shared/gpukit copied to .gpukit/:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh
#
# Steps in priority order (if only part of it runs, what ran first is worth most), each in its
# own time box (a hang costs its box, never the whole budget); the plan of boxes is printed
# first, and a plan over BUDGET_S is refused (exit 2) before anything runs:
#   1. install .gpukit/wheels offline into $SITE (deepspeed, bitsandbytes, DeepSpeed's needs),
#      then DeepSpeed's JIT build of the fused kernels starts in the background
#      (TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS capped), overlapped with everything up to step 5
#   2. bloomperf doctor (sized for the model this check loads) and bloomperf topology; the
#      GPUs' NVML answers (benchmarks/record_nvml.py)
#   3. a 2-layer bloom-176b: accelerate bf16 and int8 (real NVML peaks)
#   4. the reference profile (transformers 4.43.4 from .gpukit/wheels-reference): ds-inference
#      fp16, once the JIT build is done
#   5. accelerate bf16 at batch sizes up to OOM, against `bloomperf predict`; ds-zero bf16 and
#      ds-autotp fp16
# Results, worker logs and a summary go to $OUT: log.txt (everything printed), summary.txt (the
# table, the OOM boundary against the prediction), nvml-answers.json (the recorder's) and
# gpu-check.tgz (every results JSON and log).
#
# GPU_CHECK_DEVICE=cpu runs the same steps on the tiny model on this CPU in a minute or two (no
# install, no JIT build; ds-inference is skipped by bloomperf itself): tests/test_gpu_check.py.
# GPU_CHECK_REHEARSAL=h200 runs the H200 run's own command lines on this CPU against the H200's
# documented facts (benchmarks/h200-facts.json), each through benchmarks/rehearse.py: doctor,
# topology, predict, the plans, the kit's resolution for Python 3.12 and the JIT flags run for
# real; steps that need CUDA stop where they must and say so. Exit 0: the H200 run gets past
# every step a CPU can judge (docs/gpu.md).
# Other settings: BUDGET_S (default 540), PHASES ("main ref"), LAYERS (2), BATCHES (1,8,64),
# OOM_BATCHES, NEW_TOKENS (20), PYTHON (python3), KIT (.gpukit), SITE (/tmp/bloomperf-site),
# JIT_JOBS (MAX_JOBS of the JIT build, 8: half the cores, the runs keep the rest), BOX_SCALE
# (1: multiplies every box).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 3
DEVICE=${GPU_CHECK_DEVICE:-cuda}
REHEARSAL=${GPU_CHECK_REHEARSAL:-}
case "$REHEARSAL" in
  "" | h200) ;;
  *) echo "gpu_check: GPU_CHECK_REHEARSAL=$REHEARSAL: the only rehearsal is h200"; exit 2 ;;
esac
if [ -n "$REHEARSAL" ]; then DEVICE=cuda; fi  # the H200 run's own command lines
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=$OUT/work
mkdir -p "$WORK/tmp" || exit 3
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
DEADLINE=$((T0 + BUDGET_S))
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
  # Fused kernels need a GPU: bloomperf skips every ds-inference cell, which is no failure here.
  REF_GATE=(--allow-incomplete)
  TOPOLOGY=1xH200-141GB  # predict plans for a GPU it is not on; only the steps are checked
else
  MODEL=(--model bloom-176b --layers "${LAYERS:-2}")
  INSTALL=${GPU_CHECK_INSTALL:-1}
  AUTOTP_DTYPE=fp16
  REF_GATE=()
  # One folder for DeepSpeed's JIT build and the ds-inference workers that load it.
  export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/bloomperf-torch-extensions}
  # 2 blocks of bloom-176b take 17 GB in bf16; the KV cache, activations and logits of batches
  # in the thousands fill the rest of an H200 (bloomperf predict puts the boundary near 4096).
  OOM_BATCHES=${OOM_BATCHES:-1024,2048,4096,6144,8192,12288}
  TOPOLOGY=detect
fi
# The rehearsal runs each step's command line through benchmarks/rehearse.py, with the kits
# the step would find on its path there; a real run runs it as it is.
EXEC=()
rehearse_with() {  # kit folders...: the prefix that rehearses a step with those kits installed
  local kits=() kit
  for kit in "$@"; do kits+=(--kit "$kit"); done
  EXEC=("$PY" "$ROOT/benchmarks/rehearse.py" --facts "$ROOT/benchmarks/$REHEARSAL-facts.json"
        "${kits[@]}" --)
}
if [ -n "$REHEARSAL" ]; then
  SITE=$WORK/site
  rehearse_with "$KIT/wheels"
fi
BATCHES=${BATCHES:-1,8,64}
BOX_SCALE=${BOX_SCALE:-1}
export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}
# --allow-no-baseline: no baseline holds a 2-layer bloom-176b on this GPU (nor ds-zero/ds-autotp
# on the tiny model): the check asks whether each step runs and what it measures, and a step
# fails on an error, a timeout or nothing measured, not for want of a baseline (docs/gate.md).
COMMON=("${MODEL[@]}" --device "$DEVICE" --new-tokens "${NEW_TOKENS:-20}" --cycles 3 --warmup 1
        --load-timeout 240 --cell-timeout 90 --no-lock --allow-no-baseline)
FAILED=()
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# ---- the plan: every box in the order the steps run (seconds on the H200, then on a CPU) -----
# Worth most first: the NVML answers and accelerate's real peaks, then ds-inference (its JIT
# build overlapped from the start), then the OOM boundary and the ZeRO / auto-TP cells. A busy
# 2-core CPU machine needs other boxes than the H200 (DeepSpeed's CPU start-up alone takes a
# minute there); BOX_SCALE multiplies either.
PLAN=()
plan() {  # label h200-seconds cpu-seconds
  local seconds=$2
  [ "$DEVICE" = cpu ] && seconds=$3
  PLAN+=("$1 $((seconds * BOX_SCALE))")
}
if has_phase main; then
  [ "$INSTALL" = 1 ] && plan install 45 90
  plan doctor 30 60; plan topology 15 30; plan record-nvml 15 30; plan accelerate 150 300
fi
if has_phase ref; then
  [ "$INSTALL" = 1 ] && plan install-ref 20 60
  plan ds-inference 100 60
fi
if has_phase main; then
  plan predict 15 30; plan oom 70 200; plan ds-zero 40 300; plan ds-autotp 40 300
fi
# The JIT build runs beside the steps, in a box of its own that ends before ds-inference's.
JIT_BOX=$((300 * BOX_SCALE))
box_of() {  # label: its planned seconds
  local entry
  for entry in "${PLAN[@]}"; do [ "${entry% *}" = "$1" ] && echo "${entry#* }" && return; done
  echo 5
}
print_plan() {
  local entry total=0
  echo "plan ($DEVICE${REHEARSAL:+, rehearsal of the $REHEARSAL run}): budget $BUDGET_S s"
  for entry in "${PLAN[@]}"; do
    printf '  %-13s %5s s\n' "${entry% *}" "${entry#* }"
    total=$((total + ${entry#* }))
  done
  if [ "$DEVICE" = cuda ] && has_phase ref; then
    printf '  %-13s %5s s  (in the background from the start; not in the sum)\n' "JIT build" "$JIT_BOX"
  fi
  printf '  %-13s %5s s of %s s\n' "sum" "$total" "$BUDGET_S"
  PLAN_TOTAL=$total
}
print_plan
if ((PLAN_TOTAL > BUDGET_S)); then
  echo "gpu_check: the plan's boxes add up to $PLAN_TOTAL s, over BUDGET_S=$BUDGET_S: not started"
  exit 2
fi

# Seconds left for a step: its planned box, keeping $2 (default 20) for the steps after it.
box() {
  local left=$((DEADLINE - $(date +%s) - ${2:-20})) most
  most=$(box_of "$1")
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
bench() {  # name run-options...
  local name=$1
  shift
  step "bloomperf run $name: $*"
  timed "run $name" "$(box "$name" 0)" "${EXEC[@]}" "$PY" -m bloomperf run "${COMMON[@]}" \
    --output "$WORK/$name.json" "$@"
  gpu_memory
}
install() {  # label target wheel-folder
  [ "$INSTALL" = 1 ] || { echo "install skipped (GPU_CHECK_INSTALL=$INSTALL)"; return 0; }
  [ -f "$2/.done" ] && { echo "already installed in $2"; return 0; }
  timed "$1 $3" "$(box "$1" 0)" "${EXEC[@]}" "$PY" -m pip install -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target "$2" "$3"/*.whl || return 1
  [ -n "$REHEARSAL" ] || touch "$2/.done"
}
JIT_PID=
start_jit_build() {  # DeepSpeed's fused kernels, built beside the measuring steps
  [ "$DEVICE" = cuda ] && has_phase ref || return 0
  step "JIT-build DeepSpeed's fused kernels (InferenceBuilder) into $TORCH_EXTENSIONS_DIR," \
    "in the background: TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS=${JIT_JOBS:-8}"
  JIT_STARTED=$(date +%s)
  TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${JIT_JOBS:-8} timeout -s INT -k 20 "$JIT_BOX" \
    "${EXEC[@]}" "$PY" -c "from deepspeed.ops.op_builder import InferenceBuilder
InferenceBuilder().load(verbose=False)" > "$WORK/jit.log" 2>&1 &
  JIT_PID=$!
}
wait_jit_build() {
  [ -n "$JIT_PID" ] || return 0
  local rc=0
  wait "$JIT_PID" || rc=$?
  echo "JIT build: rc=$rc after $(($(date +%s) - JIT_STARTED)) s"; tail -5 "$WORK/jit.log"
  ((rc == 0)) || FAILED+=("JIT build (exit $rc$( ((rc == 124)) && echo ', time box'))")
  JIT_PID=
}

if has_phase main; then
  step "install $KIT/wheels into $SITE"
  install install "$SITE" "$KIT/wheels"
fi
start_jit_build
if has_phase main; then
  step "bloomperf doctor"
  # Doctor sizes disk and RAM for what this check builds and loads, never the default full model.
  timed doctor "$(box doctor)" "${EXEC[@]}" "$PY" -m bloomperf doctor "${MODEL[@]}" \
    --device "$DEVICE" --format json > "$WORK/doctor.json"
  "$PY" -c "import json, sys
for c in json.load(open(sys.argv[1]))['checks']: print(f\"{c['status']:<4}  {c['name']:<13} {c['reason']}\")" \
    "$WORK/doctor.json"
  step "bloomperf topology"
  timed topology "$(box topology)" "${EXEC[@]}" "$PY" -m bloomperf topology --json \
    > "$WORK/topology.json"
  head -c 1200 "$WORK/topology.json"; echo
  # The GPUs' real NVML answers, for the CPU suite's replay (copy to tests/data/nvml/).
  step "record NVML answers into $OUT/nvml-answers.json"
  if [ "$DEVICE" = cuda ]; then
    timed record-nvml "$(box record-nvml)" "${EXEC[@]}" "$PY" benchmarks/record_nvml.py \
      --output "$OUT/nvml-answers.json"
  else  # a CPU machine may have no NVML: the recorder says why and exits 2, no failure here
    rc=0
    "$PY" benchmarks/record_nvml.py --output "$OUT/nvml-answers.json" || rc=$?
    ((rc == 0 || rc == 2)) || FAILED+=("record-nvml (exit $rc)")
  fi
  bench accelerate --backends accelerate --dtypes bf16,int8 --batch-sizes "$BATCHES"
fi

if has_phase ref; then
  step "reference profile: transformers 4.43.4 from $KIT/wheels-reference"
  [ -n "$REHEARSAL" ] && rehearse_with "$KIT/wheels" "$KIT/wheels-reference"
  MAIN_PYTHONPATH=$PYTHONPATH
  install install-ref "$SITE-ref" "$KIT/wheels-reference"
  export PYTHONPATH=$ROOT:$SITE-ref:$SITE${PYTHONPATH:+:$PYTHONPATH}
  "${EXEC[@]}" "$PY" -c "import transformers; print('transformers', transformers.__version__)"
  wait_jit_build
  bench ds-inference --backends ds-inference --dtypes fp16 --batch-sizes "$BATCHES" \
    "${REF_GATE[@]}"
  # Back to the main profile for the steps after.
  [ -n "$REHEARSAL" ] && rehearse_with "$KIT/wheels"
  export PYTHONPATH=$MAIN_PYTHONPATH
fi

if has_phase main; then
  step "OOM boundary: accelerate bf16 up to batch ${OOM_BATCHES##*,}, against bloomperf predict"
  timed predict "$(box predict)" "${EXEC[@]}" "$PY" -m bloomperf predict "${MODEL[@]}" \
    --topology "$TOPOLOGY" --backends accelerate --dtypes bf16 --batches "$OOM_BATCHES" \
    --new-tokens 8 --format json > "$WORK/predict.json"
  bench oom --backends accelerate --dtypes bf16 --batch-sizes "$OOM_BATCHES" --new-tokens 8 \
    --cycles 1
  bench ds-zero --backends ds-zero --dtypes bf16 --batch-sizes "$BATCHES"
  bench ds-autotp --backends ds-autotp --dtypes "$AUTOTP_DTYPE" --batch-sizes "$BATCHES"
fi
wait_jit_build

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
