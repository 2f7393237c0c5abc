"""Flat records the engine emits: one row per step, one per request, pooled token gaps and
(optional) the schedule: one row per (step, request) and per preemption.

Columns grow in numpy arrays (amortized doubling) so the hot path writes scalars or slices.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from chunksim.sim.records.quantiles import LogHistogram, Samples

STEP_COLUMNS: dict[str, type] = {
    "start_s": float,          # step start, seconds
    "duration_s": float,       # forward pass(es) + per-step overhead, seconds
    "prefill_tokens": int,     # prefill tokens over all chunks
    "prefill_requests": int,   # requests computing a chunk of > 1 token
    "prior_tokens": float,     # effective prior context of the prefill part (latency.py)
    "decodes": int,            # requests computing exactly one token (speculative
                               # decoding: query rows, 1 + drafts verified per decode)
    "decode_kv_tokens": float, # mean context of the decodes
    "tokens_emitted": int,     # output tokens sampled at the end of the step
    "kv_blocks_used": int,     # KV blocks in use during the step
    "running": int,            # requests running in the step (after admission/preemption)
    "waiting": int,            # requests queued at the step's start
    "preempted": int,          # requests preempted right before the step
    "extrapolated": bool,      # latency lookup left the measured grid
}


StepRow = NamedTuple("StepRow", list(STEP_COLUMNS.items()))
"""One step's record, its fields named as STEP_COLUMNS (`StepLog.append`)."""

STEP_CHUNK_ROWS = 1 << 16
"""Rows per step buffer: a full buffer is handed on (kept, sampled, streamed) whole, so
recording never copies what it already holds."""
PENDING_ROWS = 1 << 12
"""Single step records held as they came, at most: they are written into the buffer
together, one assignment per column, when this many are held or the buffer is handed on
(`StepLog.append`)."""
EXACT_BUSY_ROWS = 1 << 22
"""Up to this many steps the busy time is one numpy sum over every step's duration (the
same float as summing the steps frame); beyond, the sums of consecutive blocks of this
many steps are added in order (bounded memory; within a few ulp of the one sum)."""


def frame_of(columns: dict[str, np.ndarray]):
    """A pandas DataFrame of equal-length column arrays that holds them as they are: one
    column each, not copied into blocks (the records hand on arrays they never write
    again)."""
    import pandas as pd

    return pd.concat({k: pd.Series(v, copy=False) for k, v in columns.items()}, axis=1)


def parse_steps_keep(text: str | int | None) -> int:
    """`--steps` value -> keep every k-th step (1: all, 0: none). Accepts `all`, `none`,
    `sample:N`, `sample=N` or `sample N` (every N-th step, the first included)."""
    if text is None:
        return 1
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"--steps {text}: a sampling interval must be >= 0")
        return text
    t = str(text).strip().lower()
    if t == "all":
        return 1
    if t == "none":
        return 0
    word, sep, n = t.replace(":", " ").replace("=", " ").partition(" ")
    if word == "sample" and sep:
        try:
            k = int(n.strip())
        except ValueError:
            k = 0
        if k >= 1:
            return k
    raise ValueError(f"--steps {text!r}: use all, none or sample:N (keep every N-th step, "
                     "N >= 1), e.g. --steps sample:100")


def steps_keep_label(keep: int) -> str:
    """The `--steps` spelling of `keep` (parse_steps_keep's inverse)."""
    return "all" if keep == 1 else "none" if keep == 0 else f"sample:{keep}"


class StepTotals:
    """What the summary needs of every step, folded as steps are recorded: count, busy
    time, extrapolated steps, peak KV blocks, and per coverage axis the steps above and
    below the profile's grid (`latency.coverage`). Exact whatever rows are kept."""

    def __init__(self, ranges: dict[str, tuple[float, float]] | None = None) -> None:
        self.n = 0
        self.busy_parts: list[float] = []
        self._dur: list[np.ndarray] = []  # durations of the current exact-sum block
        self._dur_rows = 0
        self.extrapolated = 0
        self.peak_kv_blocks = 0
        self.ranges = ranges
        self.beyond: dict[str, list] = {}  # axis -> [n above, max, n below, min]

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """Fold rows (equal-length column arrays)."""
        if not len(cols["start_s"]):
            return
        self._add_durations(cols["duration_s"])
        self._add_rest(cols)

    def _add_durations(self, d: np.ndarray) -> None:
        """Count the rows of durations `d` and add them to the busy time, in order."""
        self.n += len(d)
        while len(d):
            take = min(len(d), EXACT_BUSY_ROWS - self._dur_rows)
            self._dur.append(d[:take])  # buffers are never written again once handed on
            self._dur_rows += take
            d = d[take:]
            if self._dur_rows == EXACT_BUSY_ROWS:
                self._close_block()

    def _add_rest(self, cols) -> None:
        """Fold what does not depend on the rows' order (`cols`: columns or a frame)."""
        beyond = {}
        if self.ranges is not None:
            from chunksim.latency.coverage import beyond_grid

            beyond = beyond_grid(cols, self.ranges)
        self._fold(int(np.count_nonzero(cols["extrapolated"])),
                   int(cols["kv_blocks_used"].max()), beyond)

    def _fold(self, extrapolated: int, peak_kv_blocks: int, beyond) -> None:
        """Fold the order-free totals of some rows: counts add, extremes extend."""
        self.extrapolated += extrapolated
        self.peak_kv_blocks = max(self.peak_kv_blocks, peak_kv_blocks)
        for axis, (above, hi, below, lo) in beyond.items():
            b = self.beyond.setdefault(axis, [0, -np.inf, 0, np.inf])
            b[0] += above
            b[1] = max(b[1], hi)
            b[2] += below
            b[3] = min(b[3], lo)

    def _close_block(self) -> None:
        if self._dur:
            self.busy_parts.append(float(np.concatenate(self._dur).sum()))
        self._dur, self._dur_rows = [], 0

    @property
    def busy_s(self) -> float:
        """Summed step durations, seconds."""
        parts = list(self.busy_parts)
        if self._dur:
            parts.append(float(np.concatenate(self._dur).sum()))
        total = 0.0
        for p in parts:
            total += p
        return total

    def __len__(self) -> int:
        return self.n

    @classmethod
    def merged(cls, parts: list, ranges: dict[str, tuple[float, float]] | None = None,
               folded: list[StepTotals] | None = None) -> StepTotals:
        """The totals of `parts` (step frames, or `StepColumns`: the engines of one fleet
        run) as one run's: counts add, extremes extend, and the busy time is each part's
        own (its durations summed in its order, as `of` sums them) added in part order.
        The merged steps (`sim.fleet.records.merge_steps`) are never built: a sum over them
        in start order agrees to rounding. `folded`: each part's own totals over the
        same `ranges` (its engine's, folded as it recorded), taken as they are rather
        than read again from the rows."""
        totals = cls(ranges)
        if folded is not None and (len(folded) != len(parts) or any(
                t.ranges != ranges or t.n != len(f) for t, f in zip(folded, parts, strict=True))):
            folded = None  # not these parts' totals over these ranges: read the rows
        for i, f in enumerate(parts):
            if not len(f):
                continue
            part = folded[i] if folded is not None else cls.of(f, ranges)
            totals.n += part.n
            totals.busy_parts.append(part.busy_s)
            totals._fold(part.extrapolated, part.peak_kv_blocks, part.beyond)
        return totals

    @classmethod
    def of(cls, steps, ranges: dict[str, tuple[float, float]] | None = None) -> StepTotals:
        """The totals of a steps frame or its columns by name (a fleet's merged steps, a
        live run's), folded as the engine folds its own."""
        totals = cls(ranges)
        names = steps.columns if hasattr(steps, "columns") else list(steps)
        cols = {k: np.asarray(steps[k]) for k in names}
        if len(cols["start_s"]):
            totals.add(cols)
        totals._close_block()
        return totals


class StepLog:
    """Column store for step records, in fixed-size buffers. Every full buffer (and the
    last one at `close`) is folded into `totals`, then kept whole, thinned to every
    `keep`-th step (0: none kept) and/or handed to `sink(cols)` (a streaming writer);
    `frame()` holds the kept rows. Memory is one buffer plus what is kept. Single steps
    wait as records (at most PENDING_ROWS) and are written together, at the rows they
    hold; a bulk run of decode steps is written at once, at its own rows."""

    def __init__(self, capacity: int = STEP_CHUNK_ROWS, keep: int = 1, sink=None,
                 ranges: dict[str, tuple[float, float]] | None = None) -> None:
        self.n = 0
        self.keep = keep
        self.sink = sink
        self.totals = StepTotals(ranges)
        self.chunk_rows = max(1, capacity)
        self.base = 0  # global index of the buffer's first row
        self.cols = {k: np.zeros(self.chunk_rows, dtype=t) for k, t in STEP_COLUMNS.items()}
        self.kept: list[dict[str, np.ndarray]] = []
        self.closed = False
        self.pending: list[StepRow] = []  # single steps not written yet
        self.pending_at: list[int] = []  # their rows in the buffer

    def _write_pending(self) -> None:
        """Write the single steps held into the buffer: per column, every value at its
        row in one assignment (the values as a per-item write would store them)."""
        rows = self.pending
        if not rows:
            return
        at = np.array(self.pending_at, dtype=np.intp)
        for a, values in zip(self.cols.values(), zip(*rows, strict=True), strict=True):
            a[at] = values
        self.pending, self.pending_at = [], []

    def _flush(self) -> None:
        """Hand the buffer's rows on and start an empty one."""
        self._write_pending()
        m = self.n - self.base
        if m == 0:
            return
        part = {k: a[:m] for k, a in self.cols.items()}
        self.totals.add(part)
        if self.keep > 1:
            first = (-self.base) % self.keep
            part = {k: a[first::self.keep] for k, a in part.items()}
        if self.keep:
            if self.sink is not None:
                self.sink(part)
            elif self.keep == 1:  # the buffer is never written again: keep it as is
                self.kept.append(part)
            else:  # a copy, so the thinned rows do not hold the whole buffer
                self.kept.append({k: np.ascontiguousarray(a) for k, a in part.items()})
        self.base = self.n
        # a fresh zeroed buffer: the bulk path leaves the columns it does not write at 0
        self.cols = {k: np.zeros(self.chunk_rows, dtype=a.dtype) for k, a in self.cols.items()}

    def append(self, row: StepRow) -> None:
        """One step's record (held until the pending single steps are written)."""
        i = self.n - self.base
        if i >= self.chunk_rows:
            self._flush()
            i = 0
        self.pending.append(row)
        self.pending_at.append(i)
        self.n += 1
        if len(self.pending) >= PENDING_ROWS:
            self._write_pending()

    def extend_decodes(self, start_s, duration_s, decodes: int, kv_tokens, kv_blocks_used,
                       extrapolated) -> None:
        """k decode-only steps of `decodes` requests each (the engine's bulk path). Columns
        not written stay 0, which is their value for such steps."""
        k = len(start_s)
        i = self.n - self.base
        if i + k <= self.chunk_rows:  # the common case: it fits the buffer
            j = i + k
            c = self.cols
            c["start_s"][i:j] = start_s
            c["duration_s"][i:j] = duration_s
            c["decodes"][i:j] = decodes
            c["decode_kv_tokens"][i:j] = kv_tokens
            c["tokens_emitted"][i:j] = decodes
            c["kv_blocks_used"][i:j] = kv_blocks_used
            c["running"][i:j] = decodes
            c["extrapolated"][i:j] = extrapolated
            self.n += k
            return
        done = 0
        while done < k:
            i = self.n - self.base
            if i >= self.chunk_rows:
                self._flush()
                i = 0
            m = min(k - done, self.chunk_rows - i)
            j = i + m
            s = slice(done, done + m)
            c = self.cols
            c["start_s"][i:j] = start_s[s]
            c["duration_s"][i:j] = duration_s[s]
            c["decodes"][i:j] = decodes
            c["decode_kv_tokens"][i:j] = kv_tokens[s]
            c["tokens_emitted"][i:j] = decodes
            c["kv_blocks_used"][i:j] = kv_blocks_used[s]
            c["running"][i:j] = decodes
            c["extrapolated"][i:j] = (extrapolated[s] if np.ndim(extrapolated)
                                      else extrapolated)
            self.n += m
            done += m

    def close(self) -> StepTotals:
        """Flush the last rows (once); the totals of every step."""
        if not self.closed:
            self._flush()
            self.closed = True
        return self.totals

    def frame(self):
        """The kept rows (every step unless thinned or streamed to a sink)."""
        return frame_of(self.columns())

    def columns(self) -> dict[str, np.ndarray]:
        """The kept rows, one array per column: what `frame` holds."""
        self.close()
        if not self.kept:
            return {k: np.zeros(0, dtype=t) for k, t in STEP_COLUMNS.items()}
        if len(self.kept) == 1:
            return dict(self.kept[0])
        return {k: np.concatenate([p[k] for p in self.kept]) for k in STEP_COLUMNS}


class StepColumns:
    """A closed StepLog's kept rows read column by column, each as `frame` holds it and
    joined once, on first read: for readers of a few columns of many steps (a fleet's
    summary merges its engines' start times and durations without building their
    frames). Reads like a frame's columns."""

    __slots__ = ("kept", "got")

    def __init__(self, log: StepLog) -> None:
        log.close()
        self.kept = log.kept
        self.got: dict[str, np.ndarray] = {}

    columns = tuple(STEP_COLUMNS)

    def __getitem__(self, name: str) -> np.ndarray:
        col = self.got.get(name)
        if col is None:
            kept = self.kept
            if not kept:
                col = np.zeros(0, dtype=STEP_COLUMNS[name])
            elif len(kept) == 1:
                col = kept[0][name]
            else:
                col = np.concatenate([p[name] for p in kept])
            self.got[name] = col
        return col

    def __len__(self) -> int:
        return len(self["start_s"])


EXACT_GAP_SAMPLES = 1 << 23
"""Pooled token gaps kept exactly (percentiles as numpy computes them) up to this many
samples (~8.4 M); a larger run folds them into a `quantiles.LogHistogram` (percentiles
within 0.1 %), so its memory stays bounded."""
_SINGLE_FOLD = 1 << 16  # Python floats held before they are packed into an array


class GapLog:
    """Pooled inter-token gaps (vLLM bench's ITL): single values and runs of equal gaps
    shared by a set of requests; split per request class when there are several. Exact
    up to EXACT_GAP_SAMPLES samples, then streamed into log histograms (`values` says
    which it holds: `quantiles.Samples`)."""

    def __init__(self, num_classes: int = 1, exact_max: int | None = None) -> None:
        self.split = num_classes > 1
        self.num_classes = num_classes
        self.exact_max = EXACT_GAP_SAMPLES if exact_max is None else exact_max
        self.single: list[float] = []
        self.single_cls: list[int] = []
        self.packed: list[tuple[np.ndarray, np.ndarray | None]] = []  # packed singles
        self.runs: list[tuple[np.ndarray, tuple[int, ...]]] = []  # (gaps, requests per class)
        self.samples = 0  # samples held exactly (packed singles and runs)
        self.pending = 0  # streaming: gaps of the runs not folded yet
        self.hists = None  # streaming: [all, class 0, class 1, ...] LogHistograms

    def add(self, gap_s: float, cls: int) -> None:
        self.single.append(gap_s)
        if self.split:
            self.single_cls.append(cls)

    def extend(self, gaps_s: list[float], classes: list[int]) -> None:
        """`add` of each gap in turn (one call for a step's gaps)."""
        self.single.extend(gaps_s)
        if self.split:
            self.single_cls.extend(classes)

    def add_run(self, gaps_s: np.ndarray, requests) -> None:
        """Every request in `requests` had each of `gaps_s` once (unless gaps are split by
        class, their number will do)."""
        if self.split:
            counts = tuple(np.bincount([r.class_idx for r in requests],
                                       minlength=self.num_classes).tolist())
            requests = len(requests)
        else:
            requests = requests if isinstance(requests, int) else len(requests)
            counts = (requests,)
        self.runs.append((gaps_s, counts))
        if self.hists is not None:  # streaming: fold runs in batches (one numpy pass)
            self.pending += len(gaps_s)
            if self.pending >= _SINGLE_FOLD:
                self._fold_runs()
            return
        self.samples += len(gaps_s) * requests
        if self.samples > self.exact_max:
            self._stream()

    def maybe_pack(self) -> None:
        """Pack the Python floats gathered so far into arrays once there are many (a
        finishing request calls this); switch to streaming past `exact_max` samples."""
        if len(self.single) >= _SINGLE_FOLD:
            self._pack()

    def _pack(self) -> None:
        if not self.single:
            return
        vals = np.asarray(self.single, dtype=float)
        cls = np.asarray(self.single_cls, dtype=np.int32) if self.split else None
        self.single, self.single_cls = [], []
        if self.hists is not None:
            self._fold_single(vals, cls)
            return
        self.packed.append((vals, cls))
        self.samples += len(vals)
        if self.samples > self.exact_max:
            self._stream()

    def _stream(self) -> None:
        """Fold everything held into histograms; from now on every gap goes there."""
        self.hists = [LogHistogram() for _ in range(1 + (self.num_classes if self.split
                                                         else 0))]
        for vals, cls in self.packed:
            self._fold_single(vals, cls)
        self._fold_runs()
        self.packed, self.samples = [], 0

    def _fold_single(self, vals: np.ndarray, cls) -> None:
        self.hists[0].add(vals)
        if self.split:
            for c in range(self.num_classes):
                self.hists[1 + c].add(vals[cls == c])

    def _fold_runs(self) -> None:
        """Fold the held runs: every gap weighted by the requests that had it."""
        runs, self.runs, self.pending = self.runs, [], 0
        if not runs:
            return
        gaps = np.concatenate([g for g, _ in runs])
        lens = [len(g) for g, _ in runs]
        counts = np.repeat(np.array([c for _, c in runs], dtype=np.int64), lens,
                           axis=0)  # (gaps, classes)
        self.hists[0].add(gaps, counts.sum(axis=1))
        if self.split:
            for c in range(self.num_classes):
                self.hists[1 + c].add(gaps, counts[:, c])

    @property
    def streaming(self) -> bool:
        return self.hists is not None

    def values(self, cls: int | None = None) -> Samples:
        """All pooled gaps (or one class's): every value while exact, else the histogram."""
        if self.hists is not None:
            self._pack()
            self._fold_runs()
            return Samples(hist=self.hists[0 if cls is None else 1 + cls])
        parts = [v if cls is None else v[c == cls] for v, c in self.packed]
        single = np.asarray(self.single, dtype=float)
        if cls is not None:
            single = single[np.asarray(self.single_cls, dtype=int) == cls]
        parts.append(single)
        runs = [(g, w) for g, counts in self.runs
                if (w := sum(counts) if cls is None else counts[cls])]
        if runs:  # each run's gaps once per request (value by value: one pass for all)
            gaps = np.concatenate([g for g, _ in runs])
            per = np.repeat(np.array([w for _, w in runs], dtype=np.int64),
                            [len(g) for g, _ in runs])
            parts.append(np.repeat(gaps, per))
        return Samples(np.concatenate(parts))

    def by_class(self, names: list[str]) -> dict:
        return {n: self.values(i) for i, n in enumerate(names)} if self.split else {}


KIND_NEW, KIND_RESUMED, KIND_PREFILL, KIND_DECODE, KIND_PREEMPTED = range(5)
KINDS = ("new", "resumed", "prefill", "decode", "preempted")
"""Schedule-row kinds: admitted for the first time; re-admitted after a preemption; a
running request's next prefill chunk; a decode; preempted before the step."""
KIND_LOAD, KIND_LOADED = 5, 6
LOAD_KINDS = ("load", "loaded")
"""With a CPU KV tier (`sim.engine.offload`), before the step: a waiting request's load from the
host starts (tokens: loaded; computed_tokens: its GPU hit; blocks: held for it), and its
load has landed (computed_tokens: the prefix now cached on the GPU). Their categories
appear only in a run that loaded."""

SCHEDULE_COLUMNS: dict[str, type] = {
    "step": int,            # row of steps.csv (a preemption: the step it precedes)
    "request_id": int,
    "kind": int,            # KINDS index (written as its name)
    "tokens": int,          # new tokens scheduled (0 for a preemption)
    "position": int,        # place in the step's batch, from 0 (-1 for a preemption)
    "computed_tokens": int, # KV tokens held before the step (after prefix hits); for a
                            # preemption, the computed tokens it loses
    "cached_tokens": int,   # prefix-cache hit taken at admission (new / resumed rows)
    "blocks": int,          # KV blocks held during the step (preemption: before it)
    "blocks_freed": int,    # blocks a preemption returned to the free pool
}


class ScheduleLog:
    """Column store for the schedule log (`--schedule-log`): every scheduling decision,
    so a policy's plans can be checked row by row."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.bulk: list[tuple] = []  # decode-all stretches, stored as arrays

    def add(self, step: int, request_id: int, kind: int, tokens: int, position: int,
            computed: int, cached: int, blocks: int, blocks_freed: int = 0) -> None:
        self.rows.append((step, request_id, kind, tokens, position, computed, cached,
                          blocks, blocks_freed))

    def add_decodes(self, first_step: int, request_ids, computed, blocks) -> None:
        """k decode-all steps from `first_step` on: `computed` and `blocks` are (requests,
        k) arrays of each request's context and blocks held in each step."""
        self.bulk.append((first_step, np.asarray(request_ids, dtype=np.int64),
                          np.asarray(computed, dtype=np.int64),
                          np.asarray(blocks, dtype=np.int64)))

    def frame(self):
        import pandas as pd

        names = list(SCHEDULE_COLUMNS)
        parts = [pd.DataFrame(self.rows, columns=names, dtype=np.int64)
                 if self.rows else pd.DataFrame({n: np.zeros(0, np.int64) for n in names})]
        for first, ids, computed, blocks in self.bulk:
            n, k = computed.shape
            parts.append(pd.DataFrame({
                "step": np.repeat(first + np.arange(k, dtype=np.int64), n),
                "request_id": np.tile(ids, k),
                "kind": np.full(n * k, KIND_DECODE, dtype=np.int64),
                "tokens": np.ones(n * k, dtype=np.int64),
                "position": np.tile(np.arange(n, dtype=np.int64), k),
                "computed_tokens": computed.T.reshape(-1),
                "cached_tokens": np.zeros(n * k, dtype=np.int64),
                "blocks": blocks.T.reshape(-1),
                "blocks_freed": np.zeros(n * k, dtype=np.int64),
            }))
        df = pd.concat(parts, ignore_index=True)
        # preemptions first within their step, then the batch in order
        df = df.sort_values(["step", "position"], kind="stable").reset_index(drop=True)
        codes = df["kind"].to_numpy()
        kinds = KINDS + LOAD_KINDS if len(codes) and codes.max() >= KIND_LOAD else KINDS
        df["kind"] = pd.Categorical.from_codes(codes, categories=list(kinds))
        return df
