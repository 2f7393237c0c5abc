#!/usr/bin/env bash
# One device call for the GPU validation, as a lent GPU machine runs it (see
# /work/.library/device and docs/fidelity.md "Results on GPU"):
#
#   device run, carry [".whl"], timeout_s 600:
#     bash benchmarks/gpu_session.sh --grid chat
#
# Installs what the GPU image lacks (simpy, from wheels carried in .whl/, no network),
# runs benchmarks/validate_gpu.py with its arguments under a time limit that leaves room to
# pack, and leaves in $OUT (at most 8 files come back): nvidia-smi's report, the log, and
# one archive of everything validate_gpu wrote (profile, validation.json per scenario,
# live steps, plots). Exit status: validate_gpu's (124 = the time limit cut it short;
# the scenarios finished by then are in the archive).
set -uo pipefail
LIMIT_S=${LIMIT_S:-560}
OUT=${OUT:-out/gpu_session}
mkdir -p "$OUT"
if ! python -c "import simpy" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "simpy is missing and no wheel was carried: make one here with" \
             "'python3 -m pip download simpy==4.1.2 --no-deps -d .whl' and pass" \
             "carry [\".whl\"]" >&2
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
