#!/usr/bin/env bash
# From nothing to the long-prompt comparison report, in one command:
#
#   examples/long_prompt_report.sh [OUT_DIR] [extra `sim compare` flags...]
#
# Installs chunksim into .venv if needed (no torch: the bundled whole-step tiny-cpu latency
# table is used, as for docs/example-report/), then replays the `long-prompt` scenario
# (one 8192-token prompt arriving 10 s into an 8 req/s stream of short chats) under whole
# prefill, fixed chunks and the token budget at four chunk sizes, each under 3 seeds, and
# writes comparison.csv/.json, PNG + SVG plots, report.md and a self-contained report.html
# into OUT_DIR (default reports/long-prompt). The page opens with the verdict: the
# configuration to run, the runner-up and the trade-off, against the default SLOs (add
# --slo KEY=MS for yours, which also runs the capacity search). `--seed 3` runs seeds 3,
# 4, 5 instead.
#
# docs/example-report/ was made with:
#   examples/long_prompt_report.sh docs/example-report --no-svg
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports/long-prompt}
shift || true
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -c "import chunksim" 2>/dev/null \
  || .venv/bin/python -m pip --disable-pip-version-check -q install -e .
.venv/bin/sim compare --profile tiny-cpu --workload long-prompt \
  --policies whole,chunk,budget --chunks 256,512,1024,2048 \
  --goodput itl=100 --out "$OUT" "$@"
echo "open $OUT/report.html (or read $OUT/report.md)"
