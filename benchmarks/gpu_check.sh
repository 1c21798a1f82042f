#!/usr/bin/env bash
# The GPU path measured in one prepared run (issue 15, item 4), sized for one device call. Limits
# come from its first run on an H200 (stop 49: env 27 s, tests 71 s, mechanisms 63 s, grid 38 s,
# compiled 33 s; the quick cell 27.5 s at fp32). Steps run in the order of what they are worth, and
# each writes its log as it goes, so a cut-off run keeps the earlier ones; a step cut off by its
# limit gets SIGABRT, so every Python process in it prints its threads' tracebacks
# (PYTHONFAULTHANDLER) into the step's log: where it stalled, not just that it did.
#
#   benchmarks/gpu_check.sh [OUTDIR]      # logs to OUTDIR, else $OUT (the device tool's folder), else ./gpu_check
#   STEPS="env main_job_gpu reid" benchmarks/gpu_check.sh   # only these steps (default: all but main_job_cpu)
#   DEVICE=cpu QUICK=1 benchmarks/gpu_check.sh /tmp/dry   # the same steps on the CPU, small: checks the script
#
# 1. env: the machine, and every import the steps need (stops there, naming what is missing);
# 2. tests: the tests whose checks run on CUDA where it is present (every mechanism's
#    conformance on the device, the release held on it, its random streams, and Triton's
#    compiled kernels against the eager ones and the CPU's);
# 3. mechanisms: benchmarks/mechanisms.py on the device at 128x64 and 224x224, 10,000 images
#    resident on it, each rate printed as it is measured (dp_pix at 128x64: the issue's target
#    is 1 M images/s on an H100);
# 4. main_job_gpu: the README's quick cell cold on the device at fp32 and bf16
#    (benchmarks/main_job.py); 5. main_job_cpu (only when STEPS names it): the same on the CPU at fp32;
# 6. grid: a 2-cell smoke grid on the processes executor (one worker per visible GPU);
# 7. reid: a smoke reID cell (reid_synth_persons) cold on the device at bf16, then at fp32;
# 8. compiled: step 3's noise mechanisms at 128x64 with every kernel compiled (BENCH_COMPILE=1).
#
# Python packages the machine lacks travel as wheels in ./.whl (benchmarks/device_wheels.sh
# fills it; the device tool carries it with `carry: [".whl"]`): they are installed into
# /tmp/site, first on PYTHONPATH, and the repository is imported from its root. Each step has
# its own time limit and log; a failed step does not stop the later ones.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu_check}}
export DEVICE=${DEVICE:-cuda}
device=$DEVICE
python=${PYTHON:-python3}
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 MLFLOW_DISABLE_TELEMETRY=true MPLCONFIGDIR="$scratch/mpl" \
  TORCH_HOME="$scratch/torch" HF_HOME="$scratch/hf" TORCHINDUCTOR_CACHE_DIR="$scratch/inductor"
if [ -d .whl ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing .whl failed" | tee "$out/env.log"; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${QUICK:-}" ]; then n=300; sizes="64x64"; precisions=fp32; profile=smoke
else n=10000; sizes="128x64 224x224"; precisions=fp32,bf16; profile=quick; fi

steps=" ${STEPS:-env tests mechanisms main_job_gpu grid reid compiled} "

step() {  # step NAME SECONDS COMMAND...: runs it with a time limit, output to the terminal and NAME.log
  local name=$1 limit=$2; shift 2
  case "$steps" in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name: $*"
  local start=$SECONDS
  # SIGABRT to the step's whole process group: faulthandler prints each Python's stacks before it dies.
  timeout -s ABRT -k 15 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$out/$name.log"
  return "$rc"
}

step env 45 bash -c '
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  nproc; '"$python"' - <<EOF
import importlib, sys, torch
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
missing, optional = [], ("datasets",)  # only the Hugging Face loaders import it; no step uses them
for name in ("bench", "mechanisms", "tasks", "attacks", "mlflow", "optuna", "opacus", "facenet_pytorch",
             "datasets", "torchmetrics", "torchvision", "sklearn", "pandas", "matplotlib", "xxhash", "yaml", "jinja2"):
    try:
        importlib.import_module(name)
    except Exception as exc:
        (print if name in optional else missing.append)(f"cannot import {name} ({type(exc).__name__}: {exc})")
if missing:
    sys.exit("; ".join(missing))
if "$DEVICE".startswith("cuda") and not torch.cuda.is_available():
    sys.exit("no CUDA device")
EOF' || exit 1

step tests 110 bash -c '"$0" -m pytest -q -p no:cacheprovider -rfE tests/conformance/test_mechanisms.py \
  tests/unit/test_release.py tests/unit/test_secure_streams.py \
  -k "(conforms and not (audit or claimed_noise or param_validation or boxes_required or claim_wellformed)) or release or device or cuda"
  first=$?
  "$0" -m pytest -q -p no:cacheprovider -rfE tests/unit/test_kernels.py -k cuda || exit
  exit $first' "$python"
step mechanisms 80 "$python" benchmarks/mechanisms.py --device "$device" --n "$n" --sizes $sizes --ref-images 10
step main_job_gpu 200 "$python" benchmarks/main_job.py --devices "$device" --precision "$precisions" --profile "$profile"
step main_job_cpu 240 "$python" benchmarks/main_job.py --devices cpu --precision fp32 --profile "$profile"
step grid 45 "$python" -m bench grid --task fewshot_synth_faces --mechanism dp_pix --param epsilon=1,3 \
  --param block=4 --seeds 0 --profile smoke --device "$device" --executor processes \
  --results-dir "$scratch/grid" --cache-dir "$scratch/cache"
step reid 120 bash -c 'for spec in "$DEVICE bf16" "$DEVICE fp32"; do set -- $spec
  start=$SECONDS
  '"$python"' -m bench run --task reid_synth_persons --mechanism pixelate --param block=8 --profile smoke \
    --device "$1" --precision "$2" --results-dir "'"$scratch"'/reid-$1-$2" --cache-dir "'"$scratch"'/reid-cache-$1-$2" \
    | grep -E "^(runtime|  stages|utility)" || exit 1
  echo "reid $1 $2: $((SECONDS - start)) s wall"
done'
step compiled 60 env BENCH_COMPILE=1 "$python" benchmarks/mechanisms.py --device "$device" --n "$n" \
  --sizes "${sizes%% *}" --ref-images 10 --mechanisms dp_pix gaussian_noise image_dp
