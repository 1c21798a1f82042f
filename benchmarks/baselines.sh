#!/usr/bin/env bash
# The shipped baseline entries (leaderboard/entries/, issue 40), computed exactly as a user's
# submission is: a resumable grid of a suite, then `bench submit` per mechanism (conformance,
# the claims' audits, the entry with its digests), which reuses the grid's finished cells.
#
#   benchmarks/baselines.sh grid SUITE RESULTS          # the suite's cells here (processes executor; resumes)
#   benchmarks/baselines.sh submit SUITE RESULTS [SUFFIX]   # one entry per mechanism of the suite, named
#                                                           # MECHANISM[SUFFIX], into leaderboard/entries/
#                                                           # (named with --entries: the shipped folder is
#                                                           # written only when a command names it)
#   BENCH_GIT_SHA=... benchmarks/baselines.sh device SUITE OUT [GROUPS]   # on a GPU machine (device tool, .whl carried):
#       the suite's mechanisms in GROUPS parallel grids on the one GPU (default 4), each its own results
#       folder, packed into OUT/SUITE.tgz (the tool returns one file, not a tree of MLflow artifacts)
#   benchmarks/baselines.sh unpack TGZ RESULTS_PARENT   # here: unpack, `bench relocate` each results folder
#
# The shipped boards: `grid standard R && submit standard R` (fewshot_synth_faces, 66 cells) and
# `grid classify_baselines R && submit classify_baselines R _scenes` (classify_synth_scenes_obf_obf, 45 cells) and
# `grid dp_vit_quick R && submit dp_vit_quick R` (dp_vit_synth_objects, 30 cells: submit writes one entry per
# DP-SGD method, `identity + <method>`) and `grid reid_baselines R && submit reid_baselines R _reid`
# (reid_synth_persons, 39 cells). On a GPU: `device SUITE $OUT`, then here
# `unpack $OUT/SUITE.tgz P && submit SUITE P [SUFFIX]` (submit finds each mechanism's group folder under P).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export MLFLOW_DISABLE_TELEMETRY=true
mechanisms_of() {  # the suite's mechanism names, in order, once each
  "$python" -c 'import sys; from bench.scale.grid import load_suite
print(" ".join(dict.fromkeys(m.name for m in load_suite(sys.argv[1]).mechanisms)))' "$1"
}
case "${1:-}" in
  grid)
    "$python" -m bench grid --suite "$2" --executor processes --results-dir "$3" ;;
  submit)  # RESULTS may be the parent of a device run's group folders (g0, g1, ...): each mechanism's is used
    read -r -a names <<< "$(mechanisms_of "$2")"; groups=$(find "$3" -maxdepth 1 -type d -name 'g[0-9]*' | wc -l)
    for i in "${!names[@]}"; do
      m=${names[i]}; results=$3; [ "$groups" -gt 0 ] && results="$3/g$((i % groups))"
      "$python" -m bench submit --suite "$2" --mechanism "$m" --name "$m${4:-}" --results-dir "$results" \
        --entries leaderboard/entries --description "PrivBench baseline: $m on the $2 suite"
    done
    # Pin the baselines just written, beside the earlier pins (leaderboard/reproduced.py): an edited one is not one.
    "$python" -c 'import json, sys; from pathlib import Path; from leaderboard.reproduced import pinned_baselines, write_pins
folder, names = Path("leaderboard/entries"), set(sys.argv[1:])
new = [p.name for p in folder.glob("*.json") if json.loads(p.read_text())["name"].split(" + ")[0] in names]
write_pins(folder, sorted(set(pinned_baselines(folder)) | set(new)))' "${names[@]/%/${4:-}}" ;;
  device)
    if [ -d .whl ] && [ "${DEVICE:-cuda}" != cpu ]; then  # DEVICE=cpu: a dry run of this path on any machine
      "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    fi
    export PYTHONPATH="/tmp/site:$PWD" PYTHONFAULTHANDLER=1 MPLCONFIGDIR=/tmp/mpl TORCH_HOME=/tmp/torch HF_HOME=/tmp/hf
    # The device's copy of the tree has no git history: the caller passes BENCH_GIT_SHA=$(git rev-parse HEAD).
    [ -n "${BENCH_GIT_SHA:-}" ] || echo "warning: BENCH_GIT_SHA unset; the cells record git sha 'unknown'" >&2
    groups=${4:-4}; read -r -a names <<< "$(mechanisms_of "$2")"
    work=$(mktemp -d)
    for ((g = 0; g < groups; g++)); do
      picked=(); for ((i = g; i < ${#names[@]}; i += groups)); do picked+=("${names[i]}"); done
      [ ${#picked[@]} -eq 0 ] && continue
      list=$(IFS=,; echo "${picked[*]}")
      "$python" -m bench grid --suite "$2" --mechanism "$list" --device "${DEVICE:-cuda}" --executor local \
        --results-dir "$work/g$g" --cache-dir "$work/cache$g" > "$3/g$g.log" 2>&1 &
    done
    wait || true
    tar czf "$3/$(basename "$2" .yaml).tgz" -C "$work" $(cd "$work" && ls -d g*)
    tail -n 2 "$3"/g*.log ;;
  unpack)
    mkdir -p "$3" && tar xzf "$2" -C "$3"
    for d in "$3"/g*; do "$python" -m bench relocate --results-dir "$d"; done ;;
  *)
    sed -n '2,20p' "$0"; exit 2 ;;
esac
