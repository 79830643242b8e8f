#!/usr/bin/env bash
# The verdict checks on a GPU, in one command: the verdict-agreement corpus, the false-alarm corpus (the
# targets named in $1, default triton) and the GPU tests of tests/test_verdicts.py; logs and JSON to
# $OUT/verdicts.tgz (parts: $2, e.g. agreement,tests,ab,alarms). Each part has its own time limit so one overrun still leaves the others' files.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out/r"
targets=${1:-triton}
parts=${2:-agreement,tests,alarms}
export KFORGE_HOME=${KFORGE_HOME:-/tmp/kforge-verdicts}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > "$out/r/gpu.txt" 2>&1
if [[ $parts == *agreement* ]]; then
  timeout 170 python3 bench/verdict_agreement.py --device cuda:0 --out "$out/r/agreement-gpu.json" > "$out/r/agreement-gpu.log" 2>&1
fi
if [[ $parts == *tests* ]]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_verdicts.py \
    -k "poison or memo or tf32_gemm_fails or seed or renamed_gc or training_mode or thread" > "$out/r/pytest-gpu.txt" 2>&1
fi
if [[ $parts == *ab* ]]; then
  timeout ${AB_S:-130} python3 bench/timed_inputs_ab.py --device cuda:0 --repeats 2 --out "$out/r/timed-inputs-ab.json" \
    > "$out/r/timed-inputs-ab.log" 2>&1
fi
if [[ $parts == *alarms* ]]; then
  timeout ${ALARMS_S:-230} python3 bench/false_alarms.py --targets "$targets" --out "$out/r/false-alarms-${targets//,/-}.json" \
    > "$out/r/false-alarms-${targets//,/-}.log" 2>&1
fi
tar czf "$out/verdicts.tgz" -C "$out/r" .
