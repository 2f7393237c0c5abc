"""Where a component profile's error comes from: the parts of whole-model steps timed in
place, against the same parts timed alone at the steps' exact shapes, against the
profile's interpolated figures.

For each calibration step of a component profile measured on CPU (default: the bundled
`tiny-cpu-components`), in one process, one thread, thread CPU time:

- whole: the step through the whole model (median of repeats);
- in place: each part timed inside those runs (clocks around `Block.dense_in` +
  `Block.dense_out`, `attend`, `embed_step`, `head_step`), per layer for the layer parts;
- exact: the same parts timed alone as `sim profile` times them (`LayerBench`: cold, and
  primed on CPU), at the step's exact shapes: no interpolation;
- table: the profile's interpolated figures for those parts.

Per step kind it prints the median signed error of four comparisons: `interpolation`
(table vs exact), `isolation` (exact vs in place: what timing a part alone misses),
`glue` (the in-place parts vs the whole step: what runs between the parts) and `total`
(the profile's composition vs the whole step). Then one JSON line with them.

    python benchmarks/component_in_place.py [--profile tiny-cpu-components] [--repeats 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator

import numpy as np

from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model

CLOCK = time.thread_time


@contextlib.contextmanager
def clocked(acc: dict[str, float]) -> Iterator[None]:
    """Add each part's thread CPU time to `acc` while the block runs (restored after)."""
    import chunksim.decoder.model as m

    targets = [(m.Block, "dense_in", "dense"), (m.Block, "dense_out", "dense"),
               (m, "attend", "attn"), (m.LlamaModel, "embed_step", "embed"),
               (m.LlamaModel, "head_step", "head")]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]

    def wrap(fn, part):
        def timed(*a, **k):
            t0 = CLOCK()
            out = fn(*a, **k)
            acc[part] = acc.get(part, 0.0) + CLOCK() - t0
            return out
        return timed

    for (owner, name, part), (_, _, fn) in zip(targets, saved, strict=True):
        setattr(owner, name, wrap(fn, part))
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="tiny-cpu-components")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()

    import torch

    from chunksim.decoder.config import ModelConfig
    from chunksim.decoder.device import pin_host_allocator
    from chunksim.decoder.model import build_model
    from chunksim.profiler.calibration import SampleStep, WholeSteps
    from chunksim.profiler.component_run import drift_ratios
    from chunksim.profiler.components import LayerBench

    prof = load_profile(args.profile)
    meta = prof.provenance
    if prof.kind != "components" or meta.get("device") != "cpu":
        raise SystemExit(f"{args.profile}: give a component profile measured on CPU")
    torch.set_num_threads(1)
    pin_host_allocator()
    fields = set(ModelConfig.__dataclass_fields__)
    cfg = ModelConfig(**{k: v for k, v in meta["model"].items() if k in fields})
    comp = meta["components"]
    model_lat = latency_model(prof)
    samples = meta["calibration"]["sample"]
    steps = [SampleStep(tuple(tuple(c) for c in s["step"][0]), tuple(s["step"][1]))
             for s in samples]
    layers = cfg.n_layers

    with torch.inference_mode():
        model = build_model(cfg, "cpu", torch.float32, seed=meta.get("seed", 0))
        whole = WholeSteps(model, steps, "cpu", torch.float32, meta.get("seed", 0))
        measured = []
        for fn in whole.fns:
            for _ in range(3):
                fn()
            totals, parts = [], []
            for _ in range(args.repeats):
                acc: dict[str, float] = {}
                with clocked(acc):
                    t0 = CLOCK()
                    fn()
                    totals.append(CLOCK() - t0)
                parts.append(acc)
            measured.append((statistics.median(totals),
                             {k: statistics.median(p[k] for p in parts) for k in parts[0]}))
        del whole, model
        timing = {"warmup": 2, "repeats": 5, "point_budget_s": 1.0, "point_min_s": 0.02,
                  "clock": CLOCK}
        bench = LayerBench(cfg, "cpu", torch.float32, meta.get("seed", 0), lambda: None,
                           timing, comp.get("evict_bytes", 0), prime=comp.get("prime", False))
        rows = []
        for st, (total, inplace) in zip(steps, measured, strict=True):
            tokens = sum(n for n, _, _ in st.chunks) + len(st.decodes)
            logits = len(st.decodes) + sum(1 for *_, need in st.chunks if need)
            exact = {"dense": bench.dense(tokens).median_s,
                     "attn": sum(bench.prefill_attn(n, p).median_s for n, p, _ in st.chunks)
                     + (bench.decode_attn(list(st.decodes)).median_s if st.decodes else 0.0),
                     "embed": bench.embed(tokens).median_s,
                     "head": bench.head(logits).median_s}
            table = _table_parts(model_lat, st, tokens, logits)
            place = {k: v / (layers if k in ("dense", "attn") else 1) for k, v in inplace.items()}
            rows.append({"kind": st.kind, "whole": total, "place": place, "exact": exact,
                         "table": table,
                         "composed": model_lat.step_s(st.shape())[0]})
        ratios = drift_ratios(bench, prof.table.to_dict("records"))
        drift = float(np.median(ratios)) if ratios else 1.0
        bench.close()

    def compose(parts: dict) -> float:
        return layers * (parts["dense"] + parts["attn"]) + parts["embed"] + parts["head"]

    comparisons = {
        "interpolation": lambda r: compose(r["table"]) * drift / compose(r["exact"]) - 1,
        "isolation": lambda r: compose(r["exact"]) / compose(r["place"]) - 1,
        "glue": lambda r: compose(r["place"]) / r["whole"] - 1,
        "total": lambda r: r["composed"] / r["whole"] - 1,
    }
    kinds = ("prefill", "decode", "mixed", "all")
    out = {}
    print(f"profile {prof.label} · {len(rows)} calibration steps · {args.repeats} repeats "
          f"each · median signed error % · drift {drift:.3f} (grid points now / table; "
          "interpolation is at today's speed)")
    print(f"{'comparison':<15}" + "".join(f"{k:>10}" for k in kinds))
    for name, f in comparisons.items():
        med = {}
        for kind in kinds:
            sel = [f(r) * 100 for r in rows if kind in ("all", r["kind"])]
            med[kind] = round(float(np.median(sel)), 2) if sel else None
        out[name] = med
        print(f"{name:<15}" + "".join(f"{med[k]:>10.1f}" for k in kinds))
    part_iso = {p: round(float(np.median([(r["exact"][p] / r["place"][p] - 1) * 100
                                          for r in rows if r["place"].get(p)])), 2)
                for p in ("dense", "attn", "embed", "head")}
    print("isolation by part (exact vs in place, median %): "
          + ", ".join(f"{p} {v:+.1f}" for p, v in part_iso.items()))
    print(json.dumps({"median_signed_error_pct": out, "isolation_by_part_pct": part_iso,
                      "drift_factor": round(drift, 4), "steps": len(rows),
                      "profile_sha256": prof.sha256}))


def _table_parts(lat, st, tokens: int, logits: int) -> dict:
    """The profile's interpolated figures for a step's parts (per layer for dense and
    attention), read from the component model's own grids."""
    d = len(st.decodes)
    attn = sum(lat.prefill.at(float(n), float(p))[0] for n, p, _ in st.chunks)
    if d:
        mean = sum(st.decodes) / d
        attn += lat._line(d).plane.at(mean, max(st.decodes) / mean)[0]
    return {"dense": lat.dense.at(tokens)[0], "attn": attn, "embed": lat.embed.at(tokens)[0],
            "head": lat.head.at(logits)[0]}


if __name__ == "__main__":
    main()
