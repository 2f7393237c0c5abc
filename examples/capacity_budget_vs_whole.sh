#!/usr/bin/env bash
# Sarathi-Serve's headline, qualitatively, on the bundled tiny-cpu profile: under a strict
# P99 ITL SLO the token budget (stall-free batching) sustains a higher request rate than
# whole-prompt prefill.
#
# Sarathi-Serve's strict SLO is 5x the time of one decode step of a batch of 32 requests
# with 4K-token contexts: ~16 ms on tiny-cpu, so ~80 ms; we use 100 ms. Measured on
# tiny-cpu (whole vs the best budget): 100 ms -> 1.19x, 50 ms -> 1.27x, 25 ms -> 1.45x.
# (Sarathi-Serve reports 2.6x on an A100; on a CPU prefill is costlier relative to
# decode, so the gap is smaller, but its direction is the same.)
#
#   examples/capacity_budget_vs_whole.sh [OUT_DIR] [extra `sim capacity` flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports/capacity}
shift || true
[ -x .venv/bin/sim ] || { echo "run ./dev run once (or pip install -e .) first" >&2; exit 2; }
.venv/bin/sim capacity --profile tiny-cpu --policies whole,chunk,budget \
  --chunks 256,512,1024,2048 --slo p99_itl_ms=100 --slo p99_ttft_ms=2000 --out "$OUT" "$@"
.venv/bin/python - "$OUT/capacity.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
cap = {c["config"]: c["max_rate"] for c in doc["configurations"]}
best_budget = max(v for k, v in cap.items() if k.startswith("budget"))
print(f"whole {cap['whole']:.3g} req/s, best budget {best_budget:.3g} req/s, "
      f"ratio {best_budget / cap['whole']:.2f}x" if cap["whole"] else "whole never met the SLOs")
PY
