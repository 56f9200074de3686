#!/usr/bin/env bash
# bloomperf's first check on a GPU: one command inside one 600 s device call on one H200 with no
# internet (Python 3.12 with torch 2.11+cu130, transformers 5.x, accelerate, nvidia-ml-py, pytest
# installed), from the project root, with ../shared/gpukit copied to .gpukit/:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh
#
# Steps in order of value (if only part of it runs, what ran first is worth most), each in its
# own time box with its kill margin inside (a hang costs its box, never the whole budget); the
# plan (step, box, kill margin, cumulative, slack) is printed first, and a plan that leaves less
# than 10 % of BUDGET_S as slack is refused (exit 2) before anything runs:
#   1. install .gpukit/wheels offline into $SITE (deepspeed, bitsandbytes, DeepSpeed's needs;
#      PHASES=ref alone installs it too), then DeepSpeed's JIT build of the fused kernels starts
#      in the background (TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS capped)
#   2. bloomperf doctor (sized for the model this check loads, --host-ram 128GiB) and bloomperf
#      topology; the GPUs' NVML answers (benchmarks/record_nvml.py)
#   3. a 2-layer bloom-176b: accelerate bf16 and int8 (real NVML peaks)
#   4. the reference kit (transformers 4.43.4 from .gpukit/wheels-reference) installed
#   5. accelerate bf16 at batch sizes up to OOM, against `bloomperf predict` (the JIT build
#      finishes meanwhile)
#   6. ds-inference fp16 in the reference profile, once the JIT build is done (its wait is in
#      the plan): one group per batch size, each loading with from_pretrained (no DeepSpeed copy)
#   7. ds-zero bf16 and ds-autotp fp16
# What comes back: $OUT/progress.txt (a line as each step starts and ends: its last line says
# where the run stopped, also when the call's limit killed it), summary.txt (the table so far,
# the OOM boundary against the prediction) and gpu-check.tgz (every results JSON and log), both
# rewritten as each step ends, log.txt (everything printed) and nvml-answers.json.
#
# GPU_CHECK_DEVICE=cpu runs the same steps on the tiny model on this CPU (no install, no JIT
# build; ds-inference is skipped by bloomperf itself): tests/test_gpu_check.py.
# GPU_CHECK_REHEARSAL=h200 runs the H200 run's own command lines on this CPU against the H200's
# documented facts (benchmarks/h200-facts.json), each through benchmarks/rehearse.py: doctor,
# topology, predict, the plans, each group's host RAM and disk, the kit's resolution for Python
# 3.12 and the JIT flags run for real; steps that need CUDA stop where they must and say so.
# Exit 0: the H200 run gets past every step a CPU can judge (docs/gpu.md).
# Other settings: BUDGET_S (600: the device call's limit), PHASES ("main ref"), LAYERS (2),
# BATCHES (1,8,64), OOM_BATCHES, NEW_TOKENS (20), PYTHON (python3), KIT (.gpukit), SITE
# (/tmp/bloomperf-site), JIT_JOBS (MAX_JOBS of the JIT build, 8: half the cores, the runs keep
# the rest), BOX_SCALE (1: multiplies every box), BOXES ("label=seconds,...": single boxes),
# GPU_CHECK_HOST_RAM (128GiB), GPU_CHECK_WORK (the steps' folder, outside $OUT),
# REHEARSAL_SCALE (5: the rehearsal's CPU stand-ins get that many times each box).
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
# The steps' files live outside $OUT (the device tool brings back only a few files from there):
# gpu-check.tgz carries them, rewritten after every step.
WORK=${GPU_CHECK_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/bloomperf-gpu-check.XXXXXX")/work}
mkdir -p "$OUT" "$WORK/tmp" || exit 3
: > "$OUT/progress.txt"
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-600}  # the device call's limit
# The rehearsal prints and judges the H200's plan, but its CPU stand-ins of each step (a dry run
# of the device map on a busy 2-core machine, pip's resolver) are not the H200's timings: it
# enforces every box, and the deadline, REHEARSAL_SCALE times as long.
ENFORCE_SCALE=1
[ -n "$REHEARSAL" ] && ENFORCE_SCALE=${REHEARSAL_SCALE:-5}
DEADLINE=$((T0 + BUDGET_S * ENFORCE_SCALE))
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
  HOST_RAM_ARGS=()
  INSTALL=${GPU_CHECK_INSTALL:-0}
  OOM_BATCHES=${OOM_BATCHES:-1,4}
  AUTOTP_DTYPE=bf16  # DeepSpeed's CPU accelerator refuses fp16
  # Fused kernels need a GPU: bloomperf skips every ds-inference cell, which is no failure here.
  REF_GATE=(--allow-incomplete)
  TOPOLOGY=1xH200-141GB  # predict plans for a GPU it is not on; only the steps are checked
else
  MODEL=(--model bloom-176b --layers "${LAYERS:-2}")
  # The H200 machine is a Firecracker guest: its MemTotal starts far below its documented
  # 128 GiB (H200.md), and the DeepSpeed groups' host-RAM skips would judge by that.
  HOST_RAM_ARGS=(--host-ram "${GPU_CHECK_HOST_RAM:-128GiB}")
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
        --load-timeout 240 --cell-timeout 90 --no-lock --allow-no-baseline
        "${HOST_RAM_ARGS[@]}")
FAILED=()
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# ---- the plan: every box in the order the steps run (seconds on the H200, then on a CPU) -----
# Each box INCLUDES its kill margin: a step gets SIGINT at (box - margin) and SIGKILL at the box,
# so no step ends later than its box. The sum of the boxes (the JIT build's wait included) must
# leave SLACK_PERCENT of BUDGET_S (the device call's limit, 600 s) for what runs between the steps
# (the summary and archive after each) and for the machine itself; a plan that does not is
# refused (exit 2) before anything runs.
# Worth most first: the NVML answers and accelerate's real peaks, then the OOM boundary (it needs
# no JIT build: while it runs the build finishes, so ds-inference waits for nothing), then
# ds-inference, then the ZeRO / auto-TP cells. A busy 2-core CPU machine needs other boxes than
# the H200 (DeepSpeed's CPU start-up alone takes a minute there); BOX_SCALE multiplies either, and
# BOXES="label=seconds,..." sets single boxes (the tests kill a step at a tiny box this way).
# ds-inference at TP=1 loads with from_pretrained and lets kernel injection copy the real weights
# (backends/ds_inference.load_path): no 17 GB DeepSpeed copy. Its box is computed: 3 groups (one
# per batch size) x (about 12 s to start a worker with torch and DeepSpeed + 17 GB from the page
# cache at about 3 GB/s, 6 s + the injected copy to the GPU, 5 s + 3 cycles of 20 tokens, 2 s),
# 75 s, plus a fourth of that for the unmeasured, plus its kill margin: 105 s.
SLACK_PERCENT=10
RUN_MARGIN=10  # bloomperf run on SIGINT: kills its groups after a 2 s grace, saves the file
TOOL_MARGIN=5
LABELS=()
declare -A BOX MARGIN
plan() {  # label h200-seconds cpu-seconds margin: a box, its kill margin inside it
  local seconds=$2 override
  [ "$DEVICE" = cpu ] && seconds=$3
  seconds=$((seconds * BOX_SCALE))
  for override in ${BOXES//,/ }; do
    [ "${override%%=*}" = "$1" ] && seconds=${override#*=}
  done
  LABELS+=("$1")
  BOX[$1]=$seconds
  MARGIN[$1]=$4
  ((MARGIN[$1] >= seconds)) && MARGIN[$1]=$((seconds / 2))
}
BOXES=${BOXES:-}
# The install brings DeepSpeed, which the reference profile needs too: PHASES=ref installs it.
[ "$INSTALL" = 1 ] && plan install 40 90 $TOOL_MARGIN
if has_phase main; then
  plan doctor 25 60 $TOOL_MARGIN; plan topology 15 30 $TOOL_MARGIN
  plan record-nvml 10 30 $TOOL_MARGIN; plan accelerate 135 300 $RUN_MARGIN
fi
has_phase ref && [ "$INSTALL" = 1 ] && plan install-ref 15 60 $TOOL_MARGIN
if has_phase main; then
  plan predict 10 30 $TOOL_MARGIN; plan oom 60 200 $RUN_MARGIN
fi
# The JIT build runs beside the steps from the end of the install, in a box of its own (its kill
# margin inside); ds-inference waits for it: the wait's worst case is in the plan.
JIT_BOX=$((240 * BOX_SCALE))
JIT_MARGIN=10
if has_phase ref; then
  if [ "$DEVICE" = cuda ]; then
    jit_end=$((${BOX[install]:-0} + JIT_BOX)) before=0
    for label in "${LABELS[@]}"; do before=$((before + BOX[$label])); done
    wait_s=$((jit_end - before))
    ((wait_s < 0)) && wait_s=0
    LABELS+=(jit-wait); BOX[jit-wait]=$wait_s; MARGIN[jit-wait]=0
  fi
  plan ds-inference 105 60 $RUN_MARGIN
fi
if has_phase main; then
  plan ds-zero 55 300 $RUN_MARGIN; plan ds-autotp 55 300 $RUN_MARGIN
fi
print_plan() {
  local label total=0
  echo "plan ($DEVICE${REHEARSAL:+, rehearsal of the $REHEARSAL run}): budget $BUDGET_S s," \
    "slack kept >= $SLACK_PERCENT %"
  printf '  %-13s %5s %7s %11s %6s\n' step box margin cumulative slack
  for label in "${LABELS[@]}"; do
    total=$((total + BOX[$label]))
    printf '  %-13s %5s %7s %11s %6s\n' "$label" "${BOX[$label]}" "${MARGIN[$label]}" \
      "$total" "$((BUDGET_S - total))"
  done
  if [ "$DEVICE" = cuda ] && has_phase ref; then
    printf '  %-13s %5s %7s  (beside the steps from the end of the install; its wait is jit-wait)\n' \
      "JIT build" "$JIT_BOX" "$JIT_MARGIN"
  fi
  printf '  %-13s %5s s of %s s: slack %s s (%s %%)\n' "sum" "$total" "$BUDGET_S" \
    "$((BUDGET_S - total))" "$(((BUDGET_S - total) * 100 / BUDGET_S))"
  PLAN_TOTAL=$total
}
print_plan
if ((PLAN_TOTAL * 100 > BUDGET_S * (100 - SLACK_PERCENT))); then
  echo "gpu_check: the plan's boxes add up to $PLAN_TOTAL s, leaving less than" \
    "$SLACK_PERCENT % of BUDGET_S=$BUDGET_S: not started"
  exit 2
fi

# ---- what comes back: after every step, under $OUT --------------------------------------------
# $OUT holds at most a few files (the device tool brings back 8, two folders deep): log.txt,
# progress.txt (one line per step start and end: its last line says where the run stopped, also
# when the call's limit killed it), summary.txt and gpu-check.tgz (every results JSON and log),
# both rewritten when each step ends, and nvml-answers.json.
CURRENT=
progress() { echo "[+$(($(date +%s) - T0))s] $*" >> "$OUT/progress.txt"; }
stopped() {  # a signal: say where, keep what ran
  progress "stopped by SIG$1 during ${CURRENT:-no step}; the results of the steps before are kept"
  trap - EXIT
  exit $((128 + $2))
}
trap 'stopped TERM 15' TERM
trap 'stopped INT 2' INT
trap 'stopped HUP 1' HUP
# Seconds a step may run: its planned box, never past the budget less what the summary needs.
box() {
  local left=$((DEADLINE - $(date +%s) - 10)) most=$((${BOX[$1]:-5} * ENFORCE_SCALE))
  ((left > most)) && left=$most
  ((left < 2)) && left=2
  echo "$left"
}
step() { echo; echo "=== [+$(($(date +%s) - T0))s] $*"; }
# SIGINT at the box less its margin (bloomperf then kills its worker groups and keeps its results
# file valid), SIGKILL at the box.
timed() {  # label command...: run it in its box; remember a failure, go on
  local label=$1 seconds margin rc started
  shift
  seconds=$(box "$label")
  margin=$((${MARGIN[$label]:-$TOOL_MARGIN} * ENFORCE_SCALE))
  ((margin >= seconds)) && margin=$((seconds / 2))
  CURRENT=$label
  started=$(date +%s)
  progress "running $label (box $seconds s, kill margin $margin s); if this is the last line," \
    "the call ended during $label"
  timeout -s INT -k "$margin" "$((seconds - margin))" "$@"
  rc=$?
  echo "rc=$rc" >&2
  ((rc == 0)) || FAILED+=("$label (exit $rc$( ((rc == 124 || rc == 130 || rc == 137)) && echo ', time box'))")
  progress "ended $label: rc=$rc after $(($(date +%s) - started)) s"
  keep_results
  CURRENT=
  return "$rc"
}
gpu_memory() {
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader
}
bench() {  # name run-options...
  local name=$1
  shift
  step "bloomperf run $name: $*"
  timed "$name" "${EXEC[@]}" "$PY" -m bloomperf run "${COMMON[@]}" \
    --output "$WORK/$name.json" "$@"
  gpu_memory
}
install() {  # label target wheel-folder
  [ "$INSTALL" = 1 ] || { echo "install skipped (GPU_CHECK_INSTALL=$INSTALL)"; return 0; }
  [ -f "$2/.done" ] && { echo "already installed in $2"; return 0; }
  timed "$1" "${EXEC[@]}" "$PY" -m pip install -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target "$2" "$3"/*.whl || return 1
  [ -n "$REHEARSAL" ] || touch "$2/.done"
}
JIT_PID=
start_jit_build() {  # DeepSpeed's fused kernels, built beside the measuring steps
  [ "$DEVICE" = cuda ] && has_phase ref || return 0
  step "JIT-build DeepSpeed's fused kernels (InferenceBuilder) into $TORCH_EXTENSIONS_DIR," \
    "in the background: TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS=${JIT_JOBS:-8}"
  JIT_STARTED=$(date +%s)
  TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${JIT_JOBS:-8} timeout -s INT \
    -k "$((JIT_MARGIN * ENFORCE_SCALE))" "$(((JIT_BOX - JIT_MARGIN) * ENFORCE_SCALE))" \
    "${EXEC[@]}" "$PY" -c "from deepspeed.ops.op_builder import InferenceBuilder
InferenceBuilder().load(verbose=False)" > "$WORK/jit.log" 2>&1 &
  JIT_PID=$!
  progress "JIT build started in the background (box $JIT_BOX s)"
}
wait_jit_build() {
  [ -n "$JIT_PID" ] || return 0
  local rc=0 waited
  waited=$(date +%s)
  CURRENT=jit-wait
  wait "$JIT_PID" || rc=$?
  echo "JIT build: rc=$rc after $(($(date +%s) - JIT_STARTED)) s" \
    "(waited $(($(date +%s) - waited)) s for it)"
  tail -5 "$WORK/jit.log"
  ((rc == 0)) || FAILED+=("JIT build (exit $rc$( ((rc == 124 || rc == 137)) && echo ', time box'))")
  progress "JIT build ended: rc=$rc; waited $(($(date +%s) - waited)) s for it"
  CURRENT=
  JIT_PID=
}
# The table of every results file so far, and the archive of $WORK: rewritten after each step
# (through a temporary name, so that a kill mid-write leaves the previous one).
keep_results() {
  "$PY" "$ROOT/benchmarks/gpu_check_summary.py" "$WORK" > "$OUT/.summary.txt" 2>&1 \
    && mv "$OUT/.summary.txt" "$OUT/summary.txt"
  tar czf "$OUT/.gpu-check.tgz" -C "$WORK/.." "$(basename "$WORK")" 2>/dev/null \
    && mv "$OUT/.gpu-check.tgz" "$OUT/gpu-check.tgz"
}

step "install $KIT/wheels into $SITE"
install install "$SITE" "$KIT/wheels"
# The workers inherit it; an H100 image's 9.0a is what DeepSpeed could not parse (docs/gpu.md).
echo "TORCH_CUDA_ARCH_LIST on this machine: ${TORCH_CUDA_ARCH_LIST-unset}"
start_jit_build
if has_phase main; then
  step "bloomperf doctor"
  # Doctor sizes disk and RAM for what this check builds and loads, never the default full model.
  timed doctor "${EXEC[@]}" "$PY" -m bloomperf doctor "${MODEL[@]}" \
    "${HOST_RAM_ARGS[@]}" --device "$DEVICE" --format json > "$WORK/doctor.json"
  "$PY" -c "import json, sys
for c in json.load(open(sys.argv[1]))['checks']: print(f\"{c['status']:<4}  {c['name']:<13} {c['reason']}\")" \
    "$WORK/doctor.json"
  step "bloomperf topology"
  timed topology "${EXEC[@]}" "$PY" -m bloomperf topology --json > "$WORK/topology.json"
  head -c 1200 "$WORK/topology.json"; echo
  # The GPUs' real NVML answers, for the CPU suite's replay (copy to tests/data/nvml/).
  step "record NVML answers into $OUT/nvml-answers.json"
  if [ "$DEVICE" = cuda ]; then
    timed record-nvml "${EXEC[@]}" "$PY" benchmarks/record_nvml.py \
      --output "$OUT/nvml-answers.json"
  else  # a CPU machine may have no NVML: the recorder says why and exits 2, no failure here
    rc=0
    "$PY" benchmarks/record_nvml.py --output "$OUT/nvml-answers.json" || rc=$?
    ((rc == 0 || rc == 2)) || FAILED+=("record-nvml (exit $rc)")
  fi
  bench accelerate --backends accelerate --dtypes bf16,int8 --batch-sizes "$BATCHES"
fi

MAIN_PYTHONPATH=$PYTHONPATH
if has_phase ref; then
  step "reference profile: transformers 4.43.4 from $KIT/wheels-reference"
  install install-ref "$SITE-ref" "$KIT/wheels-reference"
fi

if has_phase main; then
  step "OOM boundary: accelerate bf16 up to batch ${OOM_BATCHES##*,}, against bloomperf predict"
  timed predict "${EXEC[@]}" "$PY" -m bloomperf predict "${MODEL[@]}" \
    --topology "$TOPOLOGY" --backends accelerate --dtypes bf16 --batches "$OOM_BATCHES" \
    --new-tokens 8 --format json > "$WORK/predict.json"
  bench oom --backends accelerate --dtypes bf16 --batch-sizes "$OOM_BATCHES" --new-tokens 8 \
    --cycles 1
fi

if has_phase ref; then
  [ -n "$REHEARSAL" ] && rehearse_with "$KIT/wheels" "$KIT/wheels-reference"
  export PYTHONPATH=$ROOT:$SITE-ref:$SITE${PYTHONPATH:+:$PYTHONPATH}
  "${EXEC[@]}" "$PY" -c "import transformers; print('transformers', transformers.__version__)"
  step "wait for the JIT build"
  wait_jit_build
  bench ds-inference --backends ds-inference --dtypes fp16 --batch-sizes "$BATCHES" \
    "${REF_GATE[@]}"
  # Back to the main profile for the steps after.
  [ -n "$REHEARSAL" ] && rehearse_with "$KIT/wheels"
  export PYTHONPATH=$MAIN_PYTHONPATH
fi

if has_phase main; then
  bench ds-zero --backends ds-zero --dtypes bf16 --batch-sizes "$BATCHES"
  bench ds-autotp --backends ds-autotp --dtypes "$AUTOTP_DTYPE" --batch-sizes "$BATCHES"
fi
wait_jit_build

step "summary"
keep_results
cat "$OUT/summary.txt"
[ -n "${GPU_CHECK_KEEP:-}" ] || rm -rf "$WORK"
echo "done in $(($(date +%s) - T0)) s; results in $OUT"
progress "finished: every step ended (${#FAILED[@]} failed)"
if ((${#FAILED[@]})); then
  printf 'failed step: %s\n' "${FAILED[@]}"
  exit 1
fi
