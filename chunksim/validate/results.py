"""Read a benchmark's measured per-request results: what `sim validate --against` and
`sim calibrate` compare the simulator with. No torch.

Formats (docs/validation.md has each schema):

- `vllm bench serve --save-result --save-detailed` JSON (vllm/benchmarks/serve.py).
  Per request, index-aligned: `input_lens`, `output_lens`, `ttfts` (s), `itls` (lists,
  s), `errors` ("" = success); `latencies` (s) where the version writes it, else E2E =
  TTFT + sum(ITL), the definition vLLM's own timeline plot uses; `start_times` (s,
  `time.perf_counter()` when the request was sent; vLLM PR #32667, January 2026) where
  the version writes it. Run-wide: `request_rate` (a number or "inf"), `burstiness`,
  `max_concurrency`, `ramp_up_*`.
- SGLang `python -m sglang.bench_serving --output-file F --output-details` JSONL: one run
  per line (the tool appends); `--run N` picks one (default: the last). The same
  per-request arrays without `latencies` or start times.
- Generic per-request CSV or JSONL, one row per request: `arrival_s`, `prompt_tokens`,
  `output_tokens`, `ttft_ms`, `e2e_ms`; optional `itl_ms` (a list: JSON array, or
  numbers separated by spaces or `;` in a CSV cell) and `cached_tokens`.

Arrivals come from the file where it records them (`start_times`, `arrival_s`). Where it
does not, they are rebuilt as the bench tool drew them (`arrivals`): the schedule needs
the seed the tool ran with (`--seed`, which these files do not record).

A malformed file raises InputError naming the file and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunksim.core.errors import InputError, reading
from chunksim.validate import arrivals as arr

FORMATS = ("vllm", "sglang", "generic")
GENERIC_REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms")
GENERIC_OPTIONAL = ("itl_ms", "cached_tokens")


@dataclass(frozen=True)
class MeasuredRun:
    """One benchmark run's successful requests, sorted by arrival (seconds from the first)."""

    path: str
    """The file read."""
    format: str
    """vllm, sglang or generic."""
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    e2el_s: np.ndarray
    itl_s: tuple[np.ndarray, ...] | None
    """Each request's token gaps (None: the file has none)."""
    cached_tokens: np.ndarray | None
    """Prompt tokens served from the prefix cache, per request (None: not recorded)."""
    arrivals: str
    """Where the arrival times come from (recorded, or how they were rebuilt)."""
    failed: int = 0
    """Requests the file marks failed (left out)."""
    settings: dict | None = None
    """Run-wide settings the file records (request rate, burstiness, concurrency, model)."""

    def __len__(self) -> int:
        return len(self.arrival_s)


def _fail(path, field: str, why: str) -> InputError:
    return InputError(f"results file {path}: field {field!r} {why}")


def _array(path, doc: dict, field: str, n: int | None,
           required: bool = True) -> np.ndarray | None:
    if field not in doc:
        if not required:
            return None
        raise _fail(path, field, "is missing; save the results with --save-detailed "
                                 "(vLLM) or --output-details (SGLang)")
    v = doc[field]
    if not isinstance(v, list) or (n is not None and len(v) != n):
        size = len(v) if isinstance(v, list) else type(v).__name__
        raise _fail(path, field, f"must be a list of {n} numbers, one per request (has "
                                 f"{size})")
    try:
        a = np.asarray([float("nan") if x is None else x for x in v], dtype=float)
    except (TypeError, ValueError):
        raise _fail(path, field, "holds something that is not a number") from None
    return a


def _itls(path, doc: dict, n: int, required: bool = True) -> list[np.ndarray] | None:
    v = doc.get("itls")
    if v is None:
        if required:
            raise _fail(path, "itls", "is missing; save the results with --save-detailed "
                                      "(vLLM) or --output-details (SGLang)")
        return None
    if not isinstance(v, list) or len(v) != n:
        raise _fail(path, "itls", f"must be a list of {n} lists, one per request")
    out = []
    for i, row in enumerate(v):
        try:
            a = np.asarray(row if row is not None else [], dtype=float)
        except (TypeError, ValueError):
            raise _fail(path, "itls", f"entry {i} is not a list of numbers") from None
        if a.ndim != 1 or not np.all(np.isfinite(a)) or (a < 0).any():
            raise _fail(path, "itls", f"entry {i} must be a list of gaps >= 0 s")
        out.append(a)
    return out


def _check(path, field: str, a: np.ndarray, ok: np.ndarray, integer: bool, low: float,
           strict: bool = False) -> None:
    v = a[ok]
    bad = ~np.isfinite(v) | ((v <= low) if strict else (v < low))
    if integer:
        bad |= v != np.round(v)
    if bad.any():
        i = int(np.flatnonzero(ok)[np.flatnonzero(bad)[0]])
        need = "an integer" if integer else "a number"
        rel = ">" if strict else ">="
        raise _fail(path, field, f"entry {i} = {a[i]!r} is not {need} {rel} {low:g}")


def _bench_json(path, doc: dict, fmt: str, seed: int) -> MeasuredRun:
    """vLLM or SGLang: the same per-request arrays."""
    if "input_lens" not in doc and "ttfts" not in doc:
        raise _fail(path, "input_lens", "is missing: this is a summary without per-request "
                                        "results; re-run the benchmark with --save-detailed "
                                        "(vLLM) or --output-details (SGLang)")
    inp = _array(path, doc, "input_lens", None)
    n = len(inp)
    if n == 0:
        raise _fail(path, "input_lens", "is empty: the run has no requests")
    out = _array(path, doc, "output_lens", n)
    ttft = _array(path, doc, "ttfts", n)
    itls = _itls(path, doc, n)
    errors = doc.get("errors")
    if errors is not None and (not isinstance(errors, list) or len(errors) != n):
        raise _fail(path, "errors", f"must be a list of {n} strings")
    ok = np.ones(n, dtype=bool)
    if errors is not None:
        ok &= np.asarray([not e for e in errors], dtype=bool)
    ok &= out > 0  # vLLM records 0 output tokens for a failed request
    _check(path, "input_lens", inp, ok, True, 1)
    _check(path, "output_lens", out, ok, True, 1)
    _check(path, "ttfts", ttft, ok, False, 0.0, strict=True)
    lat = _array(path, doc, "latencies", n, required=False)
    if lat is None:
        lat = np.asarray([t + float(g.sum()) for t, g in zip(ttft, itls, strict=True)])
    else:
        _check(path, "latencies", lat, ok, False, 0.0, strict=True)
    bad = np.flatnonzero(ok & (lat < ttft - 1e-9))
    if len(bad):
        i = int(bad[0])
        raise _fail(path, "latencies", f"entry {i} = {lat[i]} s is shorter than its TTFT "
                                       f"{ttft[i]} s")
    settings = {k: doc.get(k) for k in ("request_rate", "burstiness", "max_concurrency",
                                         "ramp_up_strategy", "ramp_up_start_rps",
                                         "ramp_up_end_rps", "model_id", "backend",
                                         "dataset_name", "label") if k in doc}
    starts = _array(path, doc, "start_times", n, required=False)
    if starts is not None:
        _check(path, "start_times", starts, ok, False, -math.inf)
        arrival = starts - np.min(starts[ok]) if ok.any() else starts
        how = "recorded (start_times)"
    else:
        arrival, how = arr.rebuild(fmt, doc, n, seed, str(path))
    if not ok.any():
        raise _fail(path, "errors", f"marks all {n} requests failed: nothing to compare")
    idx = np.flatnonzero(ok)
    order = idx[np.argsort(arrival[idx], kind="stable")]
    t0 = float(arrival[order[0]])
    return MeasuredRun(str(path), fmt, arrival[order] - t0, inp[order].astype(np.int64),
                       out[order].astype(np.int64), ttft[order], lat[order],
                       tuple(itls[i] for i in order), None, how, int(n - ok.sum()),
                       settings)


def _parse_list(path, row: int, text) -> np.ndarray:
    if isinstance(text, list):
        vals = text
    elif text is None or (isinstance(text, str) and not text.strip()):
        vals = []
    elif isinstance(text, str):
        s = text.strip()
        if s.startswith("["):
            try:
                vals = json.loads(s)
            except json.JSONDecodeError:
                raise InputError(f"results file {path} row {row}: field 'itl_ms' = {text!r} "
                                 "is not a JSON list of ms") from None
        else:
            vals = s.replace(";", " ").split()
    else:
        raise InputError(f"results file {path} row {row}: field 'itl_ms' must be a list of ms")
    try:
        a = np.asarray(vals, dtype=float) / 1000.0
    except (TypeError, ValueError):
        raise InputError(f"results file {path} row {row}: field 'itl_ms' = {text!r} is not "
                         "a list of ms") from None
    if a.ndim != 1 or not np.all(np.isfinite(a)) or (a < 0).any():
        raise InputError(f"results file {path} row {row}: field 'itl_ms' must hold gaps >= 0 ms")
    return a


def _generic(path: Path, rows: list[dict], first_row: int) -> MeasuredRun:
    if not rows:
        raise _fail(path, "arrival_s", "has no rows: the file holds no requests")
    missing = [c for c in GENERIC_REQUIRED if c not in rows[0]]
    if missing:
        raise _fail(path, missing[0], f"is missing (columns: {', '.join(rows[0])}); a "
                                      f"generic results file needs {', '.join(GENERIC_REQUIRED)}")
    cols: dict[str, list] = {c: [] for c in GENERIC_REQUIRED}
    for i, r in enumerate(rows):
        for c in GENERIC_REQUIRED:
            v = r.get(c)
            try:
                x = float(v)
            except (TypeError, ValueError):
                x = math.nan
            low_ok = x >= 0 if c == "arrival_s" else x > 0 if c in ("ttft_ms", "e2e_ms") else x >= 1
            if not (math.isfinite(x) and low_ok) or (c.endswith("tokens") and x != int(x)):
                need = {"arrival_s": "seconds >= 0", "prompt_tokens": "an integer >= 1",
                        "output_tokens": "an integer >= 1"}.get(c, "ms > 0")
                raise InputError(f"results file {path} row {i + first_row}: field {c!r} = "
                                 f"{v!r} is not {need}")
            cols[c].append(x)
    arrival = np.asarray(cols["arrival_s"])
    ttft = np.asarray(cols["ttft_ms"]) / 1000.0
    e2e = np.asarray(cols["e2e_ms"]) / 1000.0
    bad = np.flatnonzero(e2e < ttft)
    if len(bad):
        i = int(bad[0])
        raise InputError(f"results file {path} row {i + first_row}: field 'e2e_ms' = "
                         f"{e2e[i] * 1e3:g} is shorter than its ttft_ms {ttft[i] * 1e3:g}")
    itls = None
    if "itl_ms" in rows[0]:
        itls = [_parse_list(path, i + first_row, r.get("itl_ms")) for i, r in enumerate(rows)]
    cached = None
    if "cached_tokens" in rows[0]:
        try:
            cached = np.asarray([float(r.get("cached_tokens") or 0) for r in rows])
        except (TypeError, ValueError):
            cached = np.asarray([-1.0])
        bad = np.flatnonzero(~np.isfinite(cached) | (cached < 0) | (cached != np.round(cached)))
        if len(bad):
            raise InputError(f"results file {path} row {int(bad[0]) + first_row}: field "
                             "'cached_tokens' must be an integer >= 0")
        over = np.flatnonzero(cached > np.asarray(cols["prompt_tokens"]))
        if len(over):
            raise InputError(f"results file {path} row {int(over[0]) + first_row}: field "
                             "'cached_tokens' exceeds prompt_tokens")
    order = np.argsort(arrival, kind="stable")
    t0 = float(arrival[order[0]])
    return MeasuredRun(str(path), "generic", arrival[order] - t0,
                       np.asarray(cols["prompt_tokens"], dtype=np.int64)[order],
                       np.asarray(cols["output_tokens"], dtype=np.int64)[order],
                       ttft[order], e2e[order],
                       None if itls is None else tuple(itls[i] for i in order),
                       None if cached is None else cached[order].astype(np.int64),
                       "recorded (arrival_s)", 0, {})


def _json_lines(path: Path, text: str) -> list:
    out = []
    for k, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"results file {path} line {k} is not JSON: {exc.msg}") from None
    return out


def detect(path: Path, text: str, docs: list) -> str:
    """vllm, sglang or generic, from the file's content."""
    if path.suffix.lower() == ".csv":
        return "generic"
    first = docs[0] if docs else None
    if isinstance(first, dict) and "arrival_s" in first:
        return "generic"
    bench_keys = ("input_lens", "ttfts", "request_throughput", "completed", "duration",
                  "num_prompts", "endpoint_type", "backend")
    if isinstance(first, dict) and any(k in first for k in bench_keys):
        # vLLM writes one JSON object (endpoint_type/num_prompts/burstiness among its keys);
        # SGLang appends one object per line and names E2E `mean_e2e_latency_ms`
        if "mean_e2e_latency_ms" in first or "random_range_ratio" in first:
            return "sglang"
        return "vllm"
    return "generic"


def load_results(path: str | Path, fmt: str | None = None, seed: int = 0,
                 run: int | None = None) -> MeasuredRun:
    """Read a results file (format detected unless `fmt`); `seed` is the bench tool's
    --seed for rebuilding arrivals it did not record; `run` picks one line of an SGLang
    JSONL (default the last)."""
    p = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--results-format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise InputError(f"--against {path}: no such file")
    with reading(p, "results file"):
        text = p.read_text(encoding="utf-8")
        if p.suffix.lower() == ".csv" or fmt == "generic" and not text.lstrip().startswith("{"):
            reader = csv.DictReader(io.StringIO(text))
            return _generic(p, list(reader), 2)
        stripped = text.strip()
        if not stripped:
            raise InputError(f"results file {p} is empty")
        try:
            docs = [json.loads(stripped)]
        except json.JSONDecodeError:
            docs = _json_lines(p, text)
        kind = fmt or detect(p, text, docs)
        if kind == "generic":
            if not all(isinstance(d, dict) for d in docs):
                raise InputError(f"results file {p}: each JSONL line must be an object")
            return _generic(p, docs, 1)
        if not all(isinstance(d, dict) for d in docs):
            raise InputError(f"results file {p} must hold a JSON object (one per line)")
        if len(docs) > 1 and run is None:
            run = len(docs) - 1
        i = run or 0
        if not 0 <= i < len(docs):
            raise InputError(f"--run {run}: results file {p} holds {len(docs)} run(s), 0.."
                             f"{len(docs) - 1}")
        return _bench_json(p, docs[i], kind, seed)
