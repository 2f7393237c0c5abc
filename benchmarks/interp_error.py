"""How good is multilinear interpolation between measured points? Held-out grid lines.

For each axis (chunk_len, decode_count, kv_len, prior_len) and each interior value v of
it, drop every measured row at v, rebuild the latency model from the rest, and predict the
dropped rows. That is interpolation over a cell twice as wide as the shipped grid's, so the
errors bound the shipped model's from above. Prints a table, then one JSON line.

    python benchmarks/interp_error.py [--profile NAME_OR_CSV]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from chunksim.core.shape import BatchShape
from chunksim.latency.model import LatencyModel
from chunksim.latency.profile import load_profile

AXES = ("chunk_len", "decode_count", "kv_len", "prior_len")


def held_out_errors(profile, axis: str) -> list[float]:
    t = profile.table
    main = t[t.prior_len == 0] if axis != "prior_len" else t[t.prior_len > 0]
    values = sorted(main[axis].unique())
    errors: list[float] = []
    for v in values[1:-1]:  # interior values only: interpolation, not extrapolation
        if axis in ("chunk_len", "decode_count") and v == 0:
            continue
        held = t[axis] == v
        if axis != "prior_len":
            held &= t.prior_len == 0
        lat = LatencyModel(profile.with_table(t[~held]))
        for row in t[held].itertuples(index=False):
            if axis == "kv_len" and row.decode_count == 0:
                continue
            shape = BatchShape(row.chunk_len, float(row.prior_len), row.decode_count,
                               float(row.kv_len))
            pred, _ = lat.step_s(shape)
            errors.append((pred - row.median_s) / row.median_s * 100.0)
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    profile = load_profile(args.profile)
    print(f"profile: {profile.label} ({profile.sha256[:12]}); relative error of held-out "
          "rows, %")
    print(f"{'axis':<14}{'points':>7}{'median |e|':>12}{'p90 |e|':>9}{'max |e|':>9}"
          f"{'mean e':>8}")
    out = {}
    for axis in AXES:
        e = np.asarray(held_out_errors(profile, axis))
        a = np.abs(e)
        out[axis] = {"points": len(e), "median_abs_pct": round(float(np.median(a)), 2),
                     "p90_abs_pct": round(float(np.percentile(a, 90)), 2),
                     "max_abs_pct": round(float(a.max()), 2),
                     "mean_pct": round(float(e.mean()), 2)}
        r = out[axis]
        print(f"{axis:<14}{r['points']:>7}{r['median_abs_pct']:>12.2f}{r['p90_abs_pct']:>9.2f}"
              f"{r['max_abs_pct']:>9.2f}{r['mean_pct']:>8.2f}")
    print("(cells here are twice the shipped grid's width; the shipped model interpolates "
          "over half these spans)")
    print(json.dumps({"profile_sha256": profile.sha256, "held_out": out}))


if __name__ == "__main__":
    main()
