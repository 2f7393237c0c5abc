#!/usr/bin/env bash
# Re-measure the bundled component profile `tiny-cpu-components` in place, then print its
# calibration (composed model vs whole-model steps, per step kind, and the noise floor)
# as a table and one JSON line. Run it on a quiet machine: the calibration's noise floor
# (the same whole steps timed alone twice) must be well under the error being judged.
#
#     benchmarks/bundle_components_profile.sh            # default grid, ~6 min on one core
#
# It is the default profile, so afterwards: `python tests/fixtures/record_readme_runs.py --default-remeasured`
# (the README runs on the default profile are pinned to its bytes), `python -m pytest -q
# -p no:cacheprovider tests/test_bundled_profiles.py tests/test_composed.py
# tests/test_readme_runs.py`, and the README's paragraph on the default profile (points,
# seconds, calibration figures and noise floor) takes the new figures.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out=chunksim/data/profiles/tiny-cpu-components.csv
python -m chunksim.cli profile --kind components --model tiny --device cpu --threads 1 \
    --grid default --out "$out"
python - "$out" <<'PY'
import json
import sys
from pathlib import Path

meta = json.loads(Path(sys.argv[1]).with_suffix(".json").read_text())
cal = meta["calibration"]
floor = cal.get("repeatability") or {}
print(f"{'kind':<9}{'steps':>6}{'median |err| %':>16}{'P90 |err| %':>13}"
      f"{'floor median %':>16}{'floor P90 %':>13}")
for kind, st in cal["alone"].items():
    f = floor.get(kind, {})
    print(f"{kind:<9}{st['steps']:>6}{st['median_abs_error_pct']:>16.1f}"
          f"{st['p90_abs_error_pct']:>13.1f}{f.get('median_abs_error_pct', float('nan')):>16.1f}"
          f"{f.get('p90_abs_error_pct', float('nan')):>13.1f}")
a = cal["alone"]["all"]
print(json.dumps({
    "median_abs_error_pct": a["median_abs_error_pct"], "p90_abs_error_pct": a["p90_abs_error_pct"],
    "by_kind": {k: [v["median_abs_error_pct"], v["p90_abs_error_pct"]]
                for k, v in cal["alone"].items()},
    "noise_floor_median_pct": (floor.get("all") or {}).get("median_abs_error_pct"),
    "noise_floor_p90_pct": (floor.get("all") or {}).get("p90_abs_error_pct"),
    "drift_factor": cal["drift"]["factor"], "points": meta["points"],
    "elapsed_s": meta["elapsed_s"], "evict_bytes": meta["components"].get("evict_bytes")}))
PY
