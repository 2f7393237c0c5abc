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

A malformed file raises InputError naming the file, the request (its index in the file's
arrays, or a generic file's row) and the field. The trace reader's plausibility rules
(`workloads.traces.columns`) hold here too: a boolean, string or null is not a number;
a clock spans at most 30 days and resolves a millisecond; a request has at most one gap
per output token after the first, and its TTFT plus its gaps come no later than its E2E.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from chunksim.core.errors import InputError, reading
from chunksim.validate import arrivals as arr
from chunksim.workloads.traces.columns import MAX_SPAN_S, MAX_TIME_STEP_S, MAX_TOKENS

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
    clock_origin_s: float | None = None
    """The first arrival on the file's own clock (`start_times`, `arrival_s`), s; None
    where the arrivals were rebuilt. Two files on one clock can be told apart, or found
    to be one run split in two (`calibrate.check_runs`)."""

    def __len__(self) -> int:
        return len(self.arrival_s)


def _fail(path, field: str, why: str) -> InputError:
    return InputError(f"results file {path}: field {field!r} {why}")


def shown(v) -> str:
    """A value as the file spells it: plain numbers (never a numpy repr), JSON's true and
    false, strings quoted."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    if isinstance(v, str):
        return repr(v[:40] + ("..." if len(v) > 40 else ""))
    return "null" if v is None else type(v).__name__


def _request(path, i: int, field: str, why: str) -> InputError:
    """One request's bad value: the file, the request (its index in the file's arrays)
    and the field."""
    return InputError(f"results file {path}: request {i}: field {field!r} {why}")


_NUMBER_TYPES = {int, float}
_NONE = type(None)


def _not_a_number(path, i: int, field: str, x, unit: str = "a number") -> InputError:
    kind = ("a boolean" if isinstance(x, bool) else "a string" if isinstance(x, str)
            else "null" if x is None else f"a JSON {type(x).__name__}")
    return _request(path, i, field, f"= {shown(x)} is {kind}, not {unit}; the bench tools "
                                    "write plain JSON numbers")


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
    types = set(map(type, v))
    if not types <= _NUMBER_TYPES | {_NONE}:  # bool is not int here: type() is exact
        i = next(i for i, x in enumerate(v) if type(x) not in _NUMBER_TYPES | {_NONE})
        raise _not_a_number(path, i, field, v[i])
    try:
        return np.asarray(v, dtype=float)  # None (a failed request's) -> NaN
    except OverflowError:  # an integer past float's range
        i = next(i for i, x in enumerate(v) if isinstance(x, int) and abs(x) > 1e308)
        raise _request(path, i, field, "is too large to be a number") from None


class Gaps:
    """Every request's token gaps, s, in one flat array (`flat`) with each request's
    offset into it: a 45,000-request bench holds millions of gaps, which one array keeps
    compact and checks in one pass."""

    def __init__(self, flat: np.ndarray, counts: np.ndarray) -> None:
        self.flat = flat
        self.counts = counts
        self.offsets = np.concatenate([[0], np.cumsum(counts)])

    def sums(self) -> np.ndarray:
        owner = np.repeat(np.arange(len(self.counts)), self.counts)
        return np.bincount(owner, weights=self.flat, minlength=len(self.counts))

    def owner_of(self, k: int) -> int:
        """The request whose gaps hold flat index k."""
        return int(np.searchsorted(self.offsets, k, side="right") - 1)

    def split(self) -> tuple[np.ndarray, ...]:
        o = self.offsets
        return tuple(self.flat[o[i]:o[i + 1]] for i in range(len(self.counts)))


def _itls(path, doc: dict, n: int, required: bool = True) -> Gaps | None:
    v = doc.get("itls")
    if v is None:
        if required:
            raise _fail(path, "itls", "is missing; save the results with --save-detailed "
                                      "(vLLM) or --output-details (SGLang)")
        return None
    if not isinstance(v, list) or len(v) != n:
        raise _fail(path, "itls", f"must be a list of {n} lists, one per request")
    rows = [[] if row is None else row for row in v]
    bad = next((i for i, row in enumerate(rows) if type(row) is not list), None)
    if bad is not None:
        raise _request(path, bad, "itls", f"= {shown(rows[bad])} is not a list of gaps (s)")
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    types = set()
    for row in rows:
        types.update(map(type, row))
    if not types <= _NUMBER_TYPES:  # name the first request holding one
        for i, row in enumerate(rows):
            for x in row:
                if type(x) not in _NUMBER_TYPES:
                    raise _not_a_number(path, i, "itls", x, "a gap in s")
    flat = np.fromiter(chain.from_iterable(rows), dtype=float, count=int(counts.sum()))
    gaps = Gaps(flat, counts)
    bad_k = np.flatnonzero(~np.isfinite(flat) | (flat < 0) | (flat > MAX_SPAN_S))
    if len(bad_k):
        k = int(bad_k[0])
        i = gaps.owner_of(k)
        raise _request(path, i, "itls", f"gap {k - int(gaps.offsets[i])} = {shown(flat[k])} "
                                        f"s is not a gap in [0, {MAX_SPAN_S:g}] s")
    return gaps


def _check(path, field: str, a: np.ndarray, ok: np.ndarray, integer: bool, low: float,
           strict: bool = False, high: float = math.inf, unit: str = "") -> None:
    v = a[ok]
    bad = ~np.isfinite(v) | ((v <= low) if strict else (v < low)) | (v > high)
    if integer:
        bad |= v != np.round(v)
    if bad.any():
        i = int(np.flatnonzero(ok)[np.flatnonzero(bad)[0]])
        need = "an integer" if integer else "a number"
        rel = ">" if strict else ">="
        top = f" and <= {high:,.0f}" if math.isfinite(high) else ""
        raise _request(path, i, field, f"= {shown(a[i])}{unit} is not {need} {rel} "
                                       f"{low:g}{top}")


def check_clock(path, field: str, t: np.ndarray, ok: np.ndarray, unit_s: float = 1.0,
                where=lambda i: f"request {i}") -> None:
    """The trace reader's clock rules (`workloads.traces.columns`): the requests span at
    most MAX_SPAN_S, and their clock resolves a millisecond (a nanosecond clock read as
    seconds, or a stray 1e300, fails one or the other)."""
    idx = np.flatnonzero(ok)
    if not len(idx):
        return
    x = t[idx]
    i, j = int(idx[np.argmin(x)]), int(idx[np.argmax(x)])
    span = float(t[j] - t[i]) * unit_s
    if span > MAX_SPAN_S:
        raise InputError(
            f"results file {path}: field {field!r}: the requests span {span:.4g} s "
            f"({span / 86400:.3g} days, {where(i)} to {where(j)}), more than "
            f"{MAX_SPAN_S / 86400:.0f} days: a clock in another unit, or a stray value at "
            f"{where(j) if abs(t[j]) >= abs(t[i]) else where(i)}")
    k = int(idx[np.argmax(np.abs(x))])
    step = float(np.spacing(abs(float(t[k])))) * unit_s
    if step > MAX_TIME_STEP_S:
        raise InputError(
            f"results file {path}: {where(k)}: field {field!r} = {shown(t[k])}: at that "
            f"size a time is only known to {step:.3g} s (a 64-bit float), so nearby "
            "arrivals would merge; write times from the run's start, in seconds")


def check_gaps(path, gaps: Gaps, out: np.ndarray, ttft: np.ndarray, e2e: np.ndarray | None,
               ok: np.ndarray, where=lambda i: f"request {i}", field: str = "itls",
               unit_ms: bool = False) -> None:
    """A request's gaps fit its tokens and its time: at most one gap per token after the
    first, and TTFT plus the gaps no longer than its E2E (which is when its last token
    came; 1 ms or 0.1 % of slack for rounding)."""
    over = np.flatnonzero(ok & (gaps.counts > out - 1))
    if len(over):
        i = int(over[0])
        c, o = int(gaps.counts[i]), int(out[i])
        raise InputError(
            f"results file {path}: {where(i)}: field {field!r} holds {c} token "
            f"gap{'s' if c != 1 else ''}, more than its {o} output "
            f"token{'s' if o != 1 else ''} can have ({o - 1}: one per token after the first)")
    if e2e is None:
        return
    total = ttft + gaps.sums()
    late = np.flatnonzero(ok & (total > e2e * (1 + 1e-3) + 1e-3))
    if len(late):
        i = int(late[0])
        k = 1e3 if unit_ms else 1.0
        u = "ms" if unit_ms else "s"
        raise InputError(
            f"results file {path}: {where(i)}: field {field!r}: TTFT plus its gaps "
            f"{total[i] * k:.6g} {u} exceeds its E2E {e2e[i] * k:.6g} {u}: the last token "
            "cannot come after the request finished")


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
    gaps = _itls(path, doc, n)
    errors = doc.get("errors")
    if errors is not None and (not isinstance(errors, list) or len(errors) != n):
        raise _fail(path, "errors", f"must be a list of {n} strings")
    ok = np.ones(n, dtype=bool)
    if errors is not None:
        ok &= np.asarray([not e for e in errors], dtype=bool)
    ok &= out > 0  # vLLM records 0 output tokens for a failed request
    _check(path, "input_lens", inp, ok, True, 1, high=MAX_TOKENS)
    _check(path, "output_lens", out, ok, True, 1, high=MAX_TOKENS)
    _check(path, "ttfts", ttft, ok, False, 0.0, strict=True, high=MAX_SPAN_S, unit=" s")
    lat = _array(path, doc, "latencies", n, required=False)
    if lat is not None:
        _check(path, "latencies", lat, ok, False, 0.0, strict=True, high=MAX_SPAN_S,
               unit=" s")
        bad = np.flatnonzero(ok & (lat < ttft - 1e-9))
        if len(bad):
            i = int(bad[0])
            raise _request(path, i, "latencies", f"= {shown(lat[i])} s is shorter than its "
                                                 f"TTFT {shown(ttft[i])} s")
    check_gaps(path, gaps, out, ttft, lat, ok)
    if lat is None:
        lat = ttft + gaps.sums()
    settings = {k: doc.get(k) for k in ("request_rate", "burstiness", "max_concurrency",
                                         "ramp_up_strategy", "ramp_up_start_rps",
                                         "ramp_up_end_rps", "model_id", "backend",
                                         "dataset_name", "label", "device", "gpu",
                                         "hardware") if k in doc}
    starts = _array(path, doc, "start_times", n, required=False)
    origin = None
    if starts is not None:
        _check(path, "start_times", starts, ok, False, -math.inf)
        check_clock(path, "start_times", starts, ok)
        origin = float(np.min(starts[ok])) if ok.any() else None
        arrival = starts - origin if ok.any() else starts
        how = "recorded (start_times)"
    else:
        arrival, how = arr.rebuild(fmt, doc, n, seed, str(path))
    if not ok.any():
        raise _fail(path, "errors", f"marks all {n} requests failed: nothing to compare")
    idx = np.flatnonzero(ok)
    order = idx[np.argsort(arrival[idx], kind="stable")]
    t0 = float(arrival[order[0]])
    itl = gaps.split()
    return MeasuredRun(str(path), fmt, arrival[order] - t0, inp[order].astype(np.int64),
                       out[order].astype(np.int64), ttft[order], lat[order],
                       tuple(itl[i] for i in order), None, how, int(n - ok.sum()),
                       settings, None if origin is None else origin + t0)


def _row_error(path, row: int, field: str, why: str) -> InputError:
    return InputError(f"results file {path} row {row}: field {field!r} {why}")


def _parse_list(path, row: int, text) -> np.ndarray:
    if isinstance(text, list):
        vals = text
        bad = next((x for x in vals if type(x) not in _NUMBER_TYPES), _NONE)
        if bad is not _NONE:
            raise _row_error(path, row, "itl_ms", f"holds {shown(bad)}, not a number of ms")
    elif text is None or (isinstance(text, str) and not text.strip()):
        vals = []
    elif isinstance(text, str):
        s = text.strip()
        if s.startswith("["):
            try:
                vals = json.loads(s)
            except json.JSONDecodeError:
                raise _row_error(path, row, "itl_ms", f"= {shown(text)} is not a JSON list "
                                                      "of ms") from None
        else:
            vals = s.replace(";", " ").split()
    else:
        raise _row_error(path, row, "itl_ms", f"= {shown(text)} must be a list of ms")
    try:
        a = np.asarray(vals, dtype=float) / 1000.0
    except (TypeError, ValueError):
        raise _row_error(path, row, "itl_ms", f"= {shown(text)} is not a list of "
                                              "ms") from None
    if a.ndim != 1 or not np.all(np.isfinite(a)) or (a < 0).any() or (a > MAX_SPAN_S).any():
        raise _row_error(path, row, "itl_ms", "must hold gaps >= 0 ms (and under 30 days)")
    return a


_NEED = {"arrival_s": "seconds >= 0", "prompt_tokens": "an integer >= 1",
         "output_tokens": "an integer >= 1", "ttft_ms": "ms > 0", "e2e_ms": "ms > 0"}


def _generic_value(path, row: int, c: str, v, typed: bool) -> float:
    """One cell as a number; `typed`: a JSON value (a string or a boolean is refused, as
    the trace reader refuses them), else CSV text."""
    if typed and type(v) not in _NUMBER_TYPES:
        kind = ("a boolean" if isinstance(v, bool) else "a string" if isinstance(v, str)
                else "missing" if v is None else f"a JSON {type(v).__name__}")
        raise _row_error(path, row, c, f"= {shown(v)} is {kind}, not {_NEED[c]}")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if c == "arrival_s":
        good = math.isfinite(x) and x >= 0
    elif c.endswith("tokens"):
        good = math.isfinite(x) and 1 <= x <= MAX_TOKENS and x == int(x)
    else:
        good = math.isfinite(x) and 0 < x <= MAX_SPAN_S * 1e3
    if not good:
        raise _row_error(path, row, c, f"= {shown(v)} is not {_NEED[c]}")
    return x


def _generic(path: Path, rows: list[dict], first_row: int, typed: bool = False) -> MeasuredRun:
    if not rows:
        raise _fail(path, "arrival_s", "has no rows: the file holds no requests")
    missing = [c for c in GENERIC_REQUIRED if c not in rows[0]]
    if missing:
        raise _fail(path, missing[0], f"is missing (columns: {', '.join(rows[0])}); a "
                                      f"generic results file needs {', '.join(GENERIC_REQUIRED)}")
    cols: dict[str, list] = {c: [] for c in GENERIC_REQUIRED}
    for i, r in enumerate(rows):
        for c in GENERIC_REQUIRED:
            cols[c].append(_generic_value(path, i + first_row, c, r.get(c), typed))
    arrival = np.asarray(cols["arrival_s"])
    ttft = np.asarray(cols["ttft_ms"]) / 1000.0
    e2e = np.asarray(cols["e2e_ms"]) / 1000.0
    out = np.asarray(cols["output_tokens"])
    every = np.ones(len(rows), dtype=bool)
    where = lambda i: f"row {i + first_row}"  # noqa: E731
    check_clock(path, "arrival_s", arrival, every, where=where)
    bad = np.flatnonzero(e2e < ttft)
    if len(bad):
        i = int(bad[0])
        raise _row_error(path, i + first_row, "e2e_ms", f"= {e2e[i] * 1e3:g} is shorter "
                                                        f"than its ttft_ms {ttft[i] * 1e3:g}")
    itls = None
    if "itl_ms" in rows[0]:
        itls = [_parse_list(path, i + first_row, r.get("itl_ms")) for i, r in enumerate(rows)]
        counts = np.fromiter(map(len, itls), dtype=np.int64, count=len(itls))
        gaps = Gaps(np.concatenate(itls) if itls else np.zeros(0), counts)
        check_gaps(path, gaps, out, ttft, e2e, every, where=where, field="itl_ms",
                   unit_ms=True)
    cached = None
    if "cached_tokens" in rows[0]:
        vals = []
        for i, r in enumerate(rows):
            v = r.get("cached_tokens")
            if typed and v is not None and type(v) not in _NUMBER_TYPES:
                raise _row_error(path, i + first_row, "cached_tokens",
                                 f"= {shown(v)} is not an integer >= 0")
            try:
                vals.append(float(v or 0))
            except (TypeError, ValueError):
                raise _row_error(path, i + first_row, "cached_tokens",
                                 f"= {shown(v)} is not an integer >= 0") from None
        cached = np.asarray(vals)
        bad = np.flatnonzero(~np.isfinite(cached) | (cached < 0) | (cached != np.round(cached)))
        if len(bad):
            raise _row_error(path, int(bad[0]) + first_row, "cached_tokens",
                             "must be an integer >= 0")
        over = np.flatnonzero(cached > np.asarray(cols["prompt_tokens"]))
        if len(over):
            raise _row_error(path, int(over[0]) + first_row, "cached_tokens",
                             "exceeds prompt_tokens")
    order = np.argsort(arrival, kind="stable")
    t0 = float(arrival[order[0]])
    return MeasuredRun(str(path), "generic", arrival[order] - t0,
                       np.asarray(cols["prompt_tokens"], dtype=np.int64)[order],
                       out.astype(np.int64)[order],
                       ttft[order], e2e[order],
                       None if itls is None else tuple(itls[i] for i in order),
                       None if cached is None else cached[order].astype(np.int64),
                       "recorded (arrival_s)", 0, {}, t0)


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
                 run: int | None = None, progress=None) -> MeasuredRun:
    """Read a results file (format detected unless `fmt`); `seed` is the bench tool's
    --seed for rebuilding arrivals it did not record; `run` picks one line of an SGLang
    JSONL (default the last); `progress(line)`, where given, hears what a large file's
    reading is doing (one line before, one after)."""
    p = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--results-format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise InputError(f"--against {path}: " + ("is a directory; give the results file in "
                                                  "it" if p.is_dir() else "no such file"))
    size = p.stat().st_size
    loud = progress is not None and size >= PROGRESS_BYTES
    if loud:
        progress(f"reading {p.name} ({size / 2**20:,.0f} MiB) ...")
    start = time.perf_counter()
    with reading(p, "results file"):
        result = _load(p, fmt, seed, run)
    if loud:
        gaps = sum(len(g) for g in result.itl_s) if result.itl_s is not None else 0
        progress(f"read {len(result):,} requests ({gaps:,} token gaps) from {p.name} in "
                 f"{time.perf_counter() - start:.1f} s")
    return result


PROGRESS_BYTES = 8 << 20
"""Files at least this large say on stderr that they are being read (and how long it took)."""


def _load(p: Path, fmt: str | None, seed: int, run: int | None) -> MeasuredRun:
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".csv" or fmt == "generic" and not text.lstrip().startswith("{"):
        reader = csv.DictReader(io.StringIO(text))
        return _generic(p, list(reader), 2)
    if not text or text.isspace():
        raise InputError(f"results file {p} is empty")
    try:
        docs = [json.loads(text)]  # (no stripped copy: a large file's text is large)
    except json.JSONDecodeError:
        docs = _json_lines(p, text)
    del text
    kind = fmt or detect(p, "", docs)
    if kind == "generic":
        if not all(isinstance(d, dict) for d in docs):
            raise InputError(f"results file {p}: each JSONL line must be an object")
        return _generic(p, docs, 1, typed=True)
    if not all(isinstance(d, dict) for d in docs):
        raise InputError(f"results file {p} must hold a JSON object (one per line)")
    if len(docs) > 1 and run is None:
        run = len(docs) - 1
    i = run or 0
    if not 0 <= i < len(docs):
        raise InputError(f"--run {run}: results file {p} holds {len(docs)} run(s), 0.."
                         f"{len(docs) - 1}")
    return _bench_json(p, docs[i], kind, seed)
