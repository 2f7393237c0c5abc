"""The operator's board of one run, as numbers: pure functions of the run's records (the
steps and requests tables, `sim.records.records`) over the run's time, and the observables that
point at a knob. `reports.run_board` draws them.

- `engine_windows`: per time window, waiting and running requests, KV blocks in use, busy
  fraction (the share of the window a step was in flight: it reads 100 % whenever steps
  run back to back, however small they are, so it is not a utilisation), budget use
  (`budget_use`: the tokens the steps scheduled against what their budget allowed, the
  utilisation the board shows), prefill and decode tokens per step.
- `rejected_windows`: requests refused at arrival, per window of their arrival.
- `token_gaps`: every inter-token gap with its time and request class, read off the step
  ends: a request that decoded in every step of its engine from its first token to its
  last has exactly its tokens' times there (`exact`); one that paused (preempted, or
  stalled by a prefill-only step) gets its mean gap (TPOT) spread over its lifetime.
- `latency_windows`: TTFT (by arrival window) and ITL (by token window) percentiles per
  window and request class.
- `observables`: what the series say to do, each a sentence with its evidence; rejections
  first (a request refused at arrival never shows in the latencies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_GAPS = 2_000_000
"""Most token gaps the board keeps: past it, every k-th completed request is read (the
board says so)."""
MAX_STEPS = 20_000_000
"""Most steps the board reads (each ~70 bytes in memory): a longer run is refused."""
STEP_FIELDS = ("start_s", "duration_s", "prefill_tokens", "decodes", "kv_blocks_used",
               "running", "waiting", "replica")
"""The steps columns the board reads."""
_TOL_S = 1e-9


def window_size_s(span_s: float, target: int = 60) -> float:
    """A round window length giving about `target` windows over `span_s` seconds."""
    if not span_s > 0:
        return 1.0
    raw = span_s / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _engines(steps) -> list:
    """Row groups of `steps`, one per engine (the `replica` column, else one)."""
    if "replica" in steps.columns:
        return [g for _, g in steps.groupby("replica", sort=True)]
    return [steps]


def busy_until(starts: np.ndarray, durations: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy seconds of one engine (steps that never overlap, sorted by start) up to each
    time in `t`: whole steps ended by then, plus the running part of the one in progress."""
    if not len(starts):
        return np.zeros(len(t))
    cum = np.concatenate([[0.0], np.cumsum(durations)])
    k = np.searchsorted(starts, t, side="right")  # steps started at or before t
    last = np.maximum(k - 1, 0)
    part = np.where(k > 0, np.clip(t - starts[last], 0.0, durations[last]), 0.0)
    return cum[np.maximum(k - 1, 0)] * (k > 0) + part


def budget_use(tokens, steps, budget: int | None):
    """Budget use: the tokens `steps` steps scheduled (prefill tokens plus decode rows)
    over what they could have held, `steps` x `budget`, in [0, 1] (NaN without a budget or
    without steps). A window of steps each full of the budget reads 1; busy 100 % with
    budget use 10 % is an engine running small steps back to back, far from saturated."""
    t = np.asarray(tokens, dtype=float)
    n = np.asarray(steps, dtype=float)
    if not budget:
        return np.full(t.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, t / (np.maximum(n, 1) * budget), np.nan)


def engine_windows(steps, window_s: float, end_s: float | None = None,
                   budget: int | None = None):
    """Per window [t, t + window_s): mean and max waiting and running requests and KV blocks
    in use over the steps that start in it (summed over engines), busy fraction (time a
    step was in flight / window / engines), budget use (`budget_use` of the window's steps
    against the step `budget`; NaN without one or without steps), and mean prefill and
    decode tokens per step. Windows without a step hold zeros (the engine was idle)."""
    import pandas as pd

    if not window_s > 0:
        raise ValueError(f"window {window_s} s: must be > 0")
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    span = float(end_s if end_s is not None else (ends.max() if len(ends) else 0.0))
    n = max(1, int(math.ceil(span / window_s - 1e-9)))
    edges = np.arange(n + 1) * window_s
    groups = _engines(steps)
    busy = np.zeros(n)
    cols = {k: np.zeros(n) for k in ("waiting_mean", "waiting_max", "running_mean",
                                      "running_max", "kv_blocks_mean", "kv_blocks_max")}
    tok = {k: np.zeros(n) for k in ("prefill_tokens", "decode_tokens", "steps")}
    for g in groups:
        s = g["start_s"].to_numpy()
        d = g["duration_s"].to_numpy()
        order = np.argsort(s, kind="stable")
        s, d = s[order], d[order]
        b = busy_until(s, d, edges)
        busy += np.diff(b)
        w = np.minimum((g["start_s"].to_numpy() // window_s).astype(np.int64), n - 1)
        frame = pd.DataFrame({"w": w, "waiting": g["waiting"].to_numpy(),
                              "running": g["running"].to_numpy(),
                              "kv": g["kv_blocks_used"].to_numpy(),
                              "prefill": g["prefill_tokens"].to_numpy(),
                              "decode": g["decodes"].to_numpy()})
        agg = frame.groupby("w").agg(["mean", "max", "sum", "count"])
        idx = agg.index.to_numpy()
        for name, col in (("waiting", "waiting"), ("running", "running"),
                          ("kv_blocks", "kv")):
            cols[f"{name}_mean"][idx] += agg[(col, "mean")].to_numpy()
            cols[f"{name}_max"][idx] += agg[(col, "max")].to_numpy()
        tok["prefill_tokens"][idx] += agg[("prefill", "sum")].to_numpy()
        tok["decode_tokens"][idx] += agg[("decode", "sum")].to_numpy()
        tok["steps"][idx] += agg[("prefill", "count")].to_numpy()
    per_step = np.maximum(tok["steps"], 1)
    return pd.DataFrame({
        "t_s": edges[:-1], **cols,
        "busy_fraction": busy / (window_s * len(groups)),
        "prefill_tokens_per_step": tok["prefill_tokens"] / per_step,
        "decode_tokens_per_step": tok["decode_tokens"] / per_step,
        "budget_use": budget_use(tok["prefill_tokens"] + tok["decode_tokens"], tok["steps"],
                                 budget),
        "steps": tok["steps"].astype(np.int64),
    })


def rejected_windows(requests, window_s: float, n: int) -> np.ndarray:
    """Requests refused at arrival per window of their arrival (`n` windows)."""
    rej = requests["rejected"].to_numpy(bool) if "rejected" in requests.columns else \
        np.zeros(len(requests), bool)
    w = np.minimum((requests["arrival_s"].to_numpy()[rej] // window_s).astype(np.int64),
                   n - 1)
    return np.bincount(np.maximum(w, 0), minlength=n)[:n].astype(np.int64)


def _served_on(requests, prefill_instances: int) -> np.ndarray | None:
    """The engine (steps' `replica`) that made each request's later tokens (None: one
    engine). P/D steps number the prefill instances first, so decode instance j is
    engine `prefill_instances` + j."""
    if "decode_replica" in requests.columns:
        return requests["decode_replica"].to_numpy() + prefill_instances
    if "replica" in requests.columns:
        return requests["replica"].to_numpy()
    return None


def token_gaps(requests, steps, max_gaps: int = MAX_GAPS, prefill_instances: int = 0) -> tuple:
    """(frame, read_every): one row per inter-token gap of the completed requests with
    time_s (when the later token came), gap_s, request_class and exact (see the module
    docstring); read_every k > 1 when only every k-th request was read (`max_gaps`).
    `prefill_instances`: a P/D run's prefill pool size (summary `fleet`)."""
    import pandas as pd

    req = requests
    done = np.isfinite(req["finish_s"].to_numpy()) & ~req["rejected"].to_numpy(bool)
    gen = req["generated_tokens"].to_numpy(np.int64)
    pick = np.flatnonzero(done & (gen >= 2))
    total = int((gen[pick] - 1).sum())
    every = max(1, math.ceil(total / max_gaps)) if total else 1
    pick = pick[::every]
    served = _served_on(req, prefill_instances)
    parts = []
    engines = _engines(steps)
    ids = [int(g["replica"].iloc[0]) if "replica" in g.columns and len(g) else 0
           for g in engines]
    for eng, g in zip(ids, engines, strict=True):
        mine = pick if served is None else pick[served[pick] == eng]
        if not len(mine):
            continue
        ends = np.sort((g["start_s"] + g["duration_s"]).to_numpy())
        parts.append(_gaps_on(ends, req, mine, handed_over=prefill_instances > 0))
    if not parts:
        return pd.DataFrame({"time_s": [], "gap_s": [], "request_class": [],
                             "exact": np.zeros(0, bool)}), every
    return pd.concat(parts, ignore_index=True), every


def _gaps_on(ends: np.ndarray, req, rows: np.ndarray, handed_over: bool = False):
    """The gaps of requests `rows`, whose later tokens were made by the engine whose
    sorted step ends are `ends`. On one engine a request decoded every step from its
    first token to its last when exactly its count of gaps of step ends lie between; a
    request `handed_over` (P/D: its first token came from a prefill instance, then the KV
    moved) was admitted by its decode engine some steps after its first token, so its
    tokens are the last ends up to its finish when it was never preempted."""
    import pandas as pd

    ft = req["first_token_s"].to_numpy()[rows]
    fin = req["finish_s"].to_numpy()[rows]
    n = req["generated_tokens"].to_numpy(np.int64)[rows] - 1  # gaps per request
    cls = req["request_class"].to_numpy()[rows]
    lo = np.searchsorted(ends, ft + _TOL_S, side="left")  # first step end after the 1st
    hi = np.searchsorted(ends, fin + _TOL_S, side="right")  # past the last token's end
    if handed_over:
        calm = req["preemptions"].to_numpy()[rows] == 0
        exact = ((hi - lo) >= n) & calm
        lo = np.where(exact, hi - n, lo)
    else:
        exact = (hi - lo) == n
    out_t, out_g, out_c, out_x = [], [], [], []
    if exact.any():  # each token at a step end: the gaps are consecutive step ends
        e_lo, e_n = lo[exact], n[exact]
        starts = np.repeat(e_lo, e_n)
        offs = np.arange(e_n.sum()) - np.repeat(np.cumsum(e_n) - e_n, e_n)
        k = starts + offs
        prev = np.where(offs == 0, np.repeat(ft[exact], e_n), ends[np.maximum(k - 1, 0)])
        out_t.append(ends[k])
        out_g.append(ends[k] - prev)
        out_c.append(np.repeat(cls[exact], e_n))
        out_x.append(np.ones(len(k), bool))
    if (~exact).any():  # paused somewhere: its mean gap, spread over its lifetime
        m = ~exact
        f_n = n[m]
        tpot = (fin[m] - ft[m]) / f_n
        offs = np.arange(f_n.sum()) - np.repeat(np.cumsum(f_n) - f_n, f_n)
        out_t.append(np.repeat(ft[m], f_n) + (offs + 1) * np.repeat(tpot, f_n))
        out_g.append(np.repeat(tpot, f_n))
        out_c.append(np.repeat(cls[m], f_n))
        out_x.append(np.zeros(int(f_n.sum()), bool))
    return pd.DataFrame({"time_s": np.concatenate(out_t), "gap_s": np.concatenate(out_g),
                         "request_class": np.concatenate(out_c),
                         "exact": np.concatenate(out_x)})


def _percentiles(frame, key: str, value: str, window_s: float, n: int, classes: list[str]):
    """Per window and class (and `all`): p50, p99 and count of `value` (seconds -> ms)."""
    import pandas as pd

    rows = []
    if len(frame):
        w = np.minimum((frame[key].to_numpy() // window_s).astype(np.int64), n - 1)
        f = pd.DataFrame({"w": w, "c": frame["request_class"].to_numpy(),
                          "v": frame[value].to_numpy() * 1000.0})
        for label, sub in [("all", f), *((c, f[f["c"] == c]) for c in classes)]:
            if not len(sub):
                continue
            g = sub.groupby("w")["v"]
            q = g.quantile([0.5, 0.99]).unstack()
            cnt = g.size()
            for wi in q.index:
                rows.append((label, float(wi * window_s), float(q.loc[wi, 0.5]),
                             float(q.loc[wi, 0.99]), int(cnt.loc[wi])))
    return pd.DataFrame(rows, columns=["request_class", "t_s", "p50_ms", "p99_ms", "count"])


def latency_windows(requests, gaps, window_s: float, end_s: float) -> tuple:
    """(ttft, itl): per window and request class (plus `all`), P50 and P99 in ms and the
    count; TTFT by the request's arrival window, ITL by the window its token came in."""
    n = max(1, int(math.ceil(end_s / window_s - 1e-9)))
    classes = sorted(set(map(str, requests["request_class"])))
    classes = classes if len(classes) > 1 else []
    req = requests[np.isfinite(requests["first_token_s"].to_numpy())]
    ttft = req.assign(ttft_s=req["first_token_s"] - req["arrival_s"])
    return (_percentiles(ttft, "arrival_s", "ttft_s", window_s, n, classes),
            _percentiles(gaps, "time_s", "gap_s", window_s, n, classes))


@dataclass(frozen=True)
class Observable:
    """One thing the series say, with the knob it points at."""

    key: str
    fired: bool
    text: str
    """What was seen, with the numbers."""
    advice: str
    """What to change (empty when nothing is to change)."""
    windows: tuple[float, ...] = ()
    """Start times of the windows it marks on the board, seconds."""


def step_budget(policy_params: dict) -> int | None:
    """Tokens a step may hold under the run's policy (None: no such cap)."""
    for k in ("max_num_batched_tokens", "prefill_budget"):
        v = policy_params.get(k)
        if isinstance(v, int) and v > 0:
            return v
    return None


def observables(steps, requests, windows, ttft_w, itl_w, summary: dict,
                slos_s: dict[str, float], long_quantile: float = 0.9) -> list[Observable]:
    """What the board says to do:
    - requests rejected at arrival (each an error its client saw, absent from every
      latency): what refused them, and the knob that admits them;
    - long prompts waiting while their engine's steps ran under the budget with KV and
      seats to spare (the engine idled): nothing held them but the step size, so a larger
      budget;
    - long prompts waiting while their engine's steps were full of the budget: the budget
      rations their prefill, so a larger budget clears them sooner (at some ITL);
    - requests waiting with budget left while KV blocks or seats ran out: more KV blocks
      or seats, not a larger budget;
    - windows whose P99 ITL is over the ITL SLO: a smaller chunk shortens the steps
      that stall decodes;
    - windows whose P99 TTFT is over the TTFT SLO;
    - busy fraction: how much of the run no step was in flight, with the budget use
      beside it.
    On a fleet or P/D each long prompt is judged by the steps of the engine it waited on
    (the requests' `replica` or `prefill_replica`, the steps' `replica`)."""
    out: list[Observable] = []
    window_s = float(windows["t_s"].iloc[1] - windows["t_s"].iloc[0]) if len(windows) > 1 \
        else None
    budget = step_budget(summary.get("policy_params") or {})
    kv_cap = summary.get("kv_blocks")
    seats = (summary.get("policy_params") or {}).get("max_num_seqs")
    rej = _rejected(requests, summary, window_s)
    if rej is not None:
        out.append(rej)
    out += _long_prompt_wait(steps, requests, budget, kv_cap, seats, long_quantile,
                             window_s)
    itl_slo = slos_s.get("itl")
    if itl_slo is not None:
        out.append(_over("itl", itl_w, itl_slo * 1000.0, "P99 ITL",
                         "a smaller chunk (--max-num-batched-tokens / --chunk) shortens the "
                         "steps that stall decodes", steps, budget))
    ttft_slo = slos_s.get("ttft")
    if ttft_slo is not None:
        out.append(_over("ttft", ttft_w, ttft_slo * 1000.0, "P99 TTFT",
                         "a larger budget, more KV or another replica shortens the queue",
                         steps, budget))
    busy = windows["busy_fraction"].to_numpy()
    if len(busy):
        mean = float(busy.mean())
        idle = tuple(float(t) for t in windows["t_s"][busy < 0.05])
        use = run_budget_use(steps, budget)
        used = (f"; its steps used {pct(use)} of the {budget}-token budget (budget use)"
                if use == use else "")
        out.append(Observable(
            "busy", mean < 0.5,
            f"a step was in flight {mean * 100:.0f} % of the run "
            f"({len(idle)} of {len(busy)} windows under 5 %){used}",
            "the load leaves the GPU idle most of the time: fewer GPUs (or more load per "
            "GPU) costs less" if mean < 0.5 else "", idle))
    return out


def pct(share: float) -> str:
    """A share as a percentage a reader can tell from zero: `0.12 %`, `7.5 %`, `64 %`."""
    v = share * 100
    return f"{v:.2g} %" if v < 10 else f"{v:.0f} %"


def run_budget_use(steps, budget: int | None) -> float:
    """`budget_use` of every step of the run (NaN without a budget or steps)."""
    if not budget or not len(steps):
        return float("nan")
    tokens = float((steps["prefill_tokens"] + steps["decodes"]).sum())
    return float(budget_use([tokens], [len(steps)], budget)[0])


_REJECT_ADVICE = {
    "max_model_len": "raise --max-model-len (as far as the model allows), or route long "
                     "prompts elsewhere",
    "kv_blocks": "more KV blocks (--kv-blocks, or GPU memory) admit the requests that do "
                 "not fit the cache",
    "policy": "the policy's token cap refused them: a larger budget "
              "(--max-num-batched-tokens) or chunked prefill admits them",
}


def _rejected(requests, summary: dict, window_s: float | None) -> Observable | None:
    """Requests refused at arrival: how many, why, and what admits them (None: the records
    carry no rejection column)."""
    from chunksim.sim.records.rejections import rejection_text

    if "rejected" not in requests.columns:
        return None
    rej = requests["rejected"].to_numpy(bool)
    n = int(rej.sum())
    if not n:
        return Observable("rejected", False, "no request was rejected", "")
    facts = {"rejected": n, "completed": int(summary.get("completed") or 0),
             "rejected_reasons": summary.get("rejected_reasons") or {}}
    if not facts["completed"]:
        facts["completed"] = len(requests) - n
    kinds = list(facts["rejected_reasons"]) or ["?"]
    advice = "; ".join(_REJECT_ADVICE[k] for k in kinds if k in _REJECT_ADVICE) or \
        "see each request's reject_reason in requests table"
    t = requests["arrival_s"].to_numpy()[rej]
    if window_s:
        t = np.floor(t / window_s) * window_s
    return Observable("rejected", True,
                      f"{rejection_text(facts)}; they are in no latency on this page",
                      advice, tuple(float(x) for x in np.unique(t)))


def _engine_of_first_step(requests) -> np.ndarray | None:
    """The engine (steps' `replica`) each request waited on for its first step: its
    prefill instance on P/D, its replica on a fleet (None: one engine)."""
    for col in ("prefill_replica", "replica"):
        if col in requests.columns:
            return requests[col].to_numpy()
    return None


def _long_prompt_wait(steps, requests, budget, kv_cap, seats, q: float,
                      window_s: float | None = None) -> list[Observable]:
    """Steps run on its own engine while a long prompt (top decile of prompt length)
    waited for its first schedule: split by why it waited. (Another replica's steps say
    nothing of why this one's queue held it.)"""
    sched_all = requests["first_scheduled_s"].to_numpy()
    done_mask = np.isfinite(sched_all)
    if not done_mask.any() or budget is None or not len(steps):
        return []
    cut = float(np.quantile(requests["prompt_tokens"], q))
    long = done_mask & (requests["prompt_tokens"].to_numpy() >= max(cut, 2))
    arr = requests["arrival_s"].to_numpy()[long]
    sched = sched_all[long]
    engine_of = _engine_of_first_step(requests)
    start = steps["start_s"].to_numpy()
    per_engine = {}
    if engine_of is not None and "replica" in steps.columns:
        rep = steps["replica"].to_numpy()
        for e in np.unique(rep):
            idx = np.flatnonzero(rep == e)
            per_engine[int(e)] = idx[np.argsort(start[idx], kind="stable")]
        engines = engine_of[long]
    else:
        per_engine[0] = np.argsort(start, kind="stable")
        engines = np.zeros(len(arr), np.int64)
    waiting = np.zeros(len(start), bool)
    for a, s, e in zip(arr, sched, engines, strict=True):  # its engine's steps meanwhile
        idx = per_engine.get(int(e))
        if idx is None:
            continue
        lo, hi = np.searchsorted(start[idx], [a, s], side="left")
        waiting[idx[lo:hi]] = True
    if not waiting.any():
        return [Observable("long_wait", False, f"no long prompt (≥ {cut:.0f} tokens) "
                           "waited for a step", "")]
    tokens = (steps["prefill_tokens"] + steps["decodes"]).to_numpy()
    full = tokens >= 0.9 * budget
    kv_full = (steps["kv_blocks_used"].to_numpy() >= 0.95 * kv_cap) if kv_cap else \
        np.zeros(len(start), bool)
    seats_full = (steps["running"].to_numpy() >= seats) if seats else np.zeros(len(start),
                                                                               bool)
    blocked = kv_full | seats_full
    n = int(waiting.sum())
    idle_under = waiting & ~full & ~blocked
    rationed = waiting & full & ~blocked
    held = waiting & blocked
    t = steps["start_s"].to_numpy()
    if window_s:  # mark windows, not steps: a long run has millions of steps
        t = np.floor(t / window_s) * window_s
    obs = []
    share = idle_under.sum() / n
    obs.append(Observable(
        "long_idle", share > 0.2,
        f"long prompts (≥ {cut:.0f} tokens) waited through {n} steps of their engine; "
        f"{share * 100:.0f} % of them ran under the {budget}-token budget with KV and seats "
        "to spare",
        "the engine idled while they queued: a larger budget (--max-num-batched-tokens) "
        "schedules them sooner" if share > 0.2 else "", tuple(np.unique(t[idle_under]))))
    share = rationed.sum() / n
    obs.append(Observable(
        "long_rationed", share > 0.5,
        f"{share * 100:.0f} % of the steps they waited through were full of the budget",
        "the budget rations prefill: a larger one clears long prompts sooner, at the cost "
        "of longer steps (ITL)" if share > 0.5 else "", tuple(np.unique(t[rationed]))))
    share = held.sum() / n
    what = " and ".join(w for w, m in (("KV blocks", kv_full), ("seats", seats_full))
                        if (m & waiting).any()) or "KV blocks or seats"
    obs.append(Observable(
        "long_blocked", share > 0.2,
        f"{share * 100:.0f} % of those steps had {what} full",
        f"{what} held them, not the budget: more --kv-blocks (or GPU memory) / "
        "--max-num-seqs" if share > 0.2 else "", tuple(np.unique(t[held]))))
    return obs


def _over(key: str, frame, slo_ms: float, name: str, advice: str, steps,
          budget) -> Observable:
    """Windows (all classes) whose P99 is over `slo_ms`."""
    allc = frame[frame["request_class"] == "all"] if len(frame) else frame
    over = allc[allc["p99_ms"] > slo_ms] if len(allc) else allc
    if not len(over):
        return Observable(key, False, f"{name} stayed within the {slo_ms:g} ms SLO in every "
                          "window", "")
    worst = float(over["p99_ms"].max())
    extra = ""
    if key == "itl" and len(steps) and budget:
        extra = (f"; the largest step held {int(steps['prefill_tokens'].max())} prefill "
                 f"tokens (budget {budget})")
    return Observable(key, True,
                      f"{name} over the {slo_ms:g} ms SLO in {len(over)} of the {len(allc)} "
                      f"windows with samples (worst {worst:.0f} ms){extra}", advice,
                      tuple(float(x) for x in over["t_s"]))


def build_board(requests, steps, summary: dict, slos_s: dict[str, float],
                window_s: float | None = None) -> dict:
    """Every series and observable of the board of one run (what `reports.run_board`
    draws): windows, ttft, itl, observables, window_s, end_s, kv_capacity, budget,
    slos_ms, gap_facts, rejected and run_budget_use. `windows` carries `rejected`: the
    requests refused at arrival in each window."""
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    fin = requests["finish_s"].to_numpy()
    arrivals = requests["arrival_s"].to_numpy()
    end_s = float(max(ends.max() if len(ends) else 0.0,
                      np.nanmax(fin) if np.isfinite(fin).any() else 0.0,
                      arrivals.max() if len(arrivals) else 0.0))
    ws = window_s or window_size_s(end_s)
    budget = step_budget(summary.get("policy_params") or {})
    windows = engine_windows(steps, ws, end_s, budget)
    windows["rejected"] = rejected_windows(requests, ws, len(windows))
    pool = (summary.get("fleet") or {}).get("prefill_instances") or 0
    gaps, every = token_gaps(requests, steps, prefill_instances=int(pool))
    ttft, itl = latency_windows(requests, gaps, ws, end_s)
    obs = observables(steps, requests, windows, ttft, itl, summary, slos_s)
    kv = summary.get("kv_blocks")
    return {
        "windows": windows, "ttft": ttft, "itl": itl, "observables": obs, "window_s": ws,
        "end_s": end_s, "kv_capacity": kv if isinstance(kv, int) else None,
        "budget": budget, "rejected": int(windows["rejected"].sum()),
        "run_budget_use": run_budget_use(steps, budget),
        "slos_ms": {k: v * 1000.0 for k, v in slos_s.items()},
        "gap_facts": {"gaps": len(gaps), "every": every,
                      "exact": float(gaps["exact"].mean()) if len(gaps) else 1.0},
    }


def measured_windows(arrival_s, ttft_s, itls_s, request_class, window_s: float,
                     end_s: float) -> tuple:
    """(ttft, itl) windows of a measured run (a bench result's per-request arrival, TTFT
    and list of inter-token gaps, seconds), in `latency_windows`' shape, for the board's
    `measured` series: each token's time is arrival + TTFT + the gaps so far."""
    import pandas as pd

    arrival = np.asarray(arrival_s, dtype=float)
    ttft = np.asarray(ttft_s, dtype=float)
    cls = np.asarray(request_class, dtype=object)
    lens = np.array([len(g) for g in itls_s], dtype=np.int64)
    flat = np.concatenate([np.asarray(g, dtype=float) for g in itls_s]) if lens.sum() \
        else np.zeros(0)
    first = np.repeat(arrival + ttft, lens)
    starts = np.cumsum(lens) - lens
    csum = np.cumsum(flat)
    base = np.repeat(np.where(starts > 0, csum[np.maximum(starts - 1, 0)], 0.0), lens)
    requests = pd.DataFrame({"arrival_s": arrival, "first_token_s": arrival + ttft,
                             "request_class": cls})
    gaps = pd.DataFrame({"time_s": first + (csum - base), "gap_s": flat,
                         "request_class": np.repeat(cls, lens)})
    return latency_windows(requests, gaps, window_s, end_s)
