#!/usr/bin/env bash
# The GPU validation suite as one command with a time limit, for a CUDA machine that may
# lack simpy and network access (docs/validation.md, "The suites"):
#
#     bash benchmarks/gpu_suite.sh --grid chat      # arguments go to validate_gpu.py
#
# Installs simpy when missing, from wheels in .whl/ (make them on a machine with network:
# python3 -m pip download simpy==4.1.2 --no-deps -d .whl), runs
# benchmarks/validate_gpu.py with its arguments under LIMIT_S seconds (default 560), and
# leaves a few files in $OUT (default out/gpu_suite): nvidia-smi's report, the log, and
# one archive of everything validate_gpu wrote (profile, validation.json per scenario,
# live steps, plots). Exit status: validate_gpu's (124 = the time limit cut it short;
# the scenarios finished by then are in the archive).
set -uo pipefail
LIMIT_S=${LIMIT_S:-560}
OUT=${OUT:-out/gpu_suite}
mkdir -p "$OUT"
if ! python -c "import simpy" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "simpy is missing and .whl/ holds no wheel: make one with" \
             "'python3 -m pip download simpy==4.1.2 --no-deps -d .whl' on a machine" \
             "with network and copy .whl/ here" >&2
        exit 2
    fi
    python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi >"$OUT/nvidia_smi.txt" 2>&1 || true
timeout "$LIMIT_S" python benchmarks/validate_gpu.py --out out/validate_gpu "$@" 2>&1 \
    | tee "$OUT/validate_gpu.log"
rc=${PIPESTATUS[0]}
if [ -d out/validate_gpu ]; then
    tar czf "$OUT/validate_gpu.tgz" -C out validate_gpu
fi
echo "validate_gpu exit status $rc; $(ls "$OUT" | tr '\n' ' ')in $OUT"
exit "$rc"
