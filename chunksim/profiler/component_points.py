"""Time every point of a component profile: in looks, each point keeping its lowest,
checkpointed as it goes so `--resume` continues an interrupted run.

Look 1 times every point; each later look re-times the points whose best median so far
is under `ComponentGrid.relook_below_s`, each look in its own seeded order. A point keeps
the look with the lowest median: other work on the machine only ever adds time, so the
lower look is the one it disturbed less (the calibration keeps a whole step's lower look
for the same reason). Slow points are left at one look: a burst of interference is a
small share of a long median.

The checkpoint is `NAME.partial.csv` (the table's columns plus `look`, one row appended
and flushed per timing) and `NAME.partial.json` (the run's identity, checked on resume),
as for a whole-step profile (`profiler.store`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from chunksim.latency.component_table import COLUMNS, KEY_COLUMNS, KEYS
from chunksim.profiler.store import Checkpoint
from chunksim.profiler.timing import Timing
from chunksim.progress import ProgressBar

CHECKPOINT_COLUMNS = (*COLUMNS, "look")

Work = tuple[str, object]
"""(component, key): `dense` / `embed` tokens, `prefill_attn` (chunk, prior),
`decode_attn` (count, mean, spread, lengths), `head` logits, `expert` tokens routed to
one expert."""


def row(component: str, t: Timing, **keys) -> dict:
    """One table row: the component, its key columns (0 where not its key), the timing."""
    r = dict.fromkeys(KEY_COLUMNS, 0)
    r.update(keys)
    return {"component": component, **r, "median_s": t.median_s, "p10_s": t.p10_s,
            "p90_s": t.p90_s, "mean_s": t.mean_s, "repeats": t.repeats}


def work_keys(name: str, key) -> dict:
    """The key columns of a work item's row."""
    if name in ("dense", "embed", "expert"):
        return {"tokens": key}
    if name == "prefill_attn":
        return {"chunk_len": key[0], "prior_len": key[1]}
    if name == "decode_attn":
        d, k, _, lens = key
        return {"decode_count": d, "kv_len": k, "kv_max": max(lens)}
    return {"logits": key}


def point_id(r: dict) -> tuple:
    return (r["component"], *(int(r[c]) for c in KEY_COLUMNS))


def checkpoint(out_csv) -> Checkpoint:
    return Checkpoint(out_csv, CHECKPOINT_COLUMNS, _parse)


def _parse(r: dict[str, str]) -> tuple[dict, int]:
    if r["component"] not in KEYS:
        raise ValueError(r["component"])
    out = {"component": r["component"], **{c: int(r[c]) for c in KEY_COLUMNS},
           **{c: float(r[c]) for c in COLUMNS[8:12]}, "repeats": int(r["repeats"])}
    return out, int(r["look"])


def measure_points(work: list[Work], time_point: Callable[[str, object], Timing],
                   looks: int, relook_below_s: float, seed: int, ckpt: Checkpoint,
                   done: Iterable[tuple[dict, int]] = (), show_progress: bool = True
                   ) -> tuple[list[dict], int]:
    """(one row per work item, in `work`'s order, each its lowest look; points timed more
    than once). `done`: (row, look) already measured (a resumed checkpoint)."""
    ids = [point_id({"component": n, **dict.fromkeys(KEY_COLUMNS, 0), **work_keys(n, k)})
           for n, k in work]
    seen: dict[tuple, dict[int, dict]] = {}
    for r, look in done:
        seen.setdefault(point_id(r), {})[look] = r

    def best(i: tuple) -> dict | None:
        got = seen.get(i)
        return min(got.values(), key=lambda r: r["median_s"]) if got else None

    for look in range(1, looks + 1):
        todo = [(i, w) for i, w in zip(ids, work, strict=True)
                if look not in seen.get(i, {})
                and (look == 1 or best(i)["median_s"] < relook_below_s)]
        # seeded order: a burst of interference scatters over the table instead of
        # skewing one region of an axis, which interpolation would take for a feature
        random.Random(seed + look).shuffle(todo)
        label = "components" if look == 1 else f"components, look {look}"
        with ProgressBar(label, total=len(todo), enabled=show_progress and bool(todo)) as bar:
            for i, (name, key) in todo:
                bar.describe(f"{name} {key if name != 'decode_attn' else key[:3]}")
                r = row(name, time_point(name, key), **work_keys(name, key))
                ckpt.append(tuple(r[c] for c in COLUMNS), look)
                seen.setdefault(i, {})[look] = r
                bar.advance()
    relooked = sum(1 for i in ids if len(seen.get(i, {})) > 1)
    return [best(i) for i in ids], relooked
