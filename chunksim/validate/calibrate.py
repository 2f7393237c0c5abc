"""`sim calibrate`: fit a per-step framework time and two scales (`latency.calibrated`)
so that the simulator reproduces measured runs, check the fit on data it did not see,
and write the calibrated profile. No torch, no scipy: a few parameters,
Levenberg-Marquardt and a compass search (numpy).

Objective: the squared log ratio, predicted over measured, of the mean, median and P90
of TTFT, TPOT and E2E and of the mean TTFT and TPOT of each third of the requests by
prompt length and by arrival time, over every fitted run, each run's requests replayed
at their measured arrivals (`_features`). Parameters: the framework time in units of the
uncalibrated run's mean step (kept >= 0), and each scale's log.

Held out: with several runs, one run (`hold_out`, default the last) is left out of the
fit; with one run, its later part (`tail_fraction` of the requests, by arrival) is: both
replay the whole run (its requests' arrivals and lengths are inputs), the fit reads the
earlier requests' measured figures only and the check the later ones'.

Identifiability is judged before fitting, on the model itself: the change of the
residuals when each parameter moves (finite differences at the start point). A
parameter whose change is (nearly) one the other fitted parameters can make too is not
identifiable from these runs, and the fit is refused: the same measure, taken over each
run alone (held-out ones too), names the run that sets the parameter apart most.

Before any of it, the runs must be separate measurements (`check_runs`): a file given
twice, or one run split in two files on one clock, is refused. After the fit, a
parameter at its bound or a run left far off is flagged (`Fit.warnings`), in the output
and in the written profile's provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from chunksim import atomic
from chunksim.latency.calibrated import KEY, Calibration
from chunksim.latency.profile import Profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.validate.against import workload_of
from chunksim.validate.results import MeasuredRun

PARAMS = ("framework", "compute", "memory")
"""The fittable parameters, as `--fit` names them."""
FIT_METRICS = ("ttft", "tpot", "e2el")
FIT_STATS = ("mean", "median", "p90")
COLLINEAR_BELOW = 0.15
"""A parameter is refused when the part of its effect on the residuals that the other
fitted parameters cannot reproduce is below this share of it (sine of the angle between
its column of the sensitivity matrix and the others' span)."""
NO_EFFECT_BELOW = 1e-3
"""... or when moving it (a mean step of framework time, 22 % on a scale) changes the
residuals by less than this (RMS log ratio)."""
WHY = {
    "framework": "the per-step framework time cannot be told apart from the scales",
    "compute": "the compute scale (on each step's prefill part) cannot be identified",
    "memory": "the memory scale (on each step's decode part) cannot be identified",
}
"""The refusal's first words, per parameter; what follows is the measure and which data
set the parameter apart (`_refusal`)."""
FAR_OFF_PCT = 20.0
"""After the fit, a run whose mean TTFT, TPOT or E2E is still further off than this
(signed error, %) is flagged: the fitted parameters do not explain that run."""
SCALE_BOUND = -3.0
"""The lowest log scale the search may reach (a scale of 0.05)."""
AT_BOUND = 0.05
"""A fitted parameter this close to its bound (framework time in mean steps, a scale
in log units: 5 %) ended there: the search stops near a bound it presses against."""


def parse_fit(text: str) -> tuple[str, ...]:
    """`--fit framework,compute,memory` -> the names, in PARAMS order."""
    names = [t.strip().lower() for t in str(text).replace(" ", ",").split(",") if t.strip()]
    bad = [n for n in names if n not in PARAMS]
    if bad or not names:
        raise ValueError(f"--fit {text!r}: name one or more of {', '.join(PARAMS)}")
    return tuple(p for p in PARAMS if p in names)


@dataclass
class Case:
    """One replay to score: a run's requests (or its first part), and which requests'
    figures are read."""

    name: str
    run: MeasuredRun
    """The requests replayed."""
    read: np.ndarray
    """Boolean mask over `run`'s requests whose figures are compared."""


def _per_request(ttft, e2el, out, prompt, arrival) -> dict[str, np.ndarray]:
    """TTFT, TPOT (NaN for one-token requests) and E2E per request, seconds; and the
    request's prompt length and arrival (the bins of `_features`)."""
    ttft, e2el, out = (np.asarray(a, dtype=float) for a in (ttft, e2el, out))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2el, "prompt": np.asarray(prompt),
            "arrival": np.asarray(arrival, dtype=float)}


def _stats(per: dict[str, np.ndarray]) -> dict[str, float]:
    out = {}
    for m in FIT_METRICS:
        v = per[m][np.isfinite(per[m])]
        if not len(v):
            continue
        out[f"mean_{m}_ms"] = float(np.mean(v)) * 1e3
        out[f"median_{m}_ms"] = float(np.median(v)) * 1e3
        out[f"p90_{m}_ms"] = float(np.percentile(v, 90)) * 1e3
    return out


BINS = 3
"""Requests are split into this many groups by prompt length and by arrival time."""


def _bins(x: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(x, kind="stable")
    return [g for g in np.array_split(order, BINS) if len(g)]


def _features(per: dict[str, np.ndarray], groups) -> dict[str, float]:
    """The fitted figures: the summary statistics, and the mean TTFT and TPOT of each
    prompt-length third and of each arrival-time third (what tells a step's fixed cost
    from its size-dependent cost: long prompts make long prefills, busy stretches large
    batches). Means over groups, not single requests: one request's figure jumps when a
    small change of a step time moves an arrival into another step."""
    out = _stats(per)
    by_prompt, by_arrival = groups
    for name, gs in (("prompt", by_prompt), ("arrival", by_arrival)):
        for j, g in enumerate(gs):
            for m in ("ttft", "tpot"):
                v = per[m][g]
                v = v[np.isfinite(v)]
                if len(v):
                    out[f"{name}{j}_mean_{m}_ms"] = float(np.mean(v)) * 1e3
    return out


@dataclass
class Scored:
    """One side's figures of a case: per read request and the fitted features."""

    per: dict[str, np.ndarray]
    stats: dict[str, float]


def measured_stats(case: Case) -> Scored:
    r, k = case.run, case.read
    per = _per_request(r.ttft_s[k], r.e2el_s[k], r.output_tokens[k], r.prompt_tokens[k],
                       r.arrival_s[k])
    return Scored(per, _features(per, (_bins(per["prompt"]), _bins(per["arrival"]))))


def _with(profile: Profile, cal: Calibration) -> Profile:
    prov = {k: v for k, v in profile.provenance.items() if k != KEY}
    if not cal.identity:
        prov[KEY] = cal.as_dict()
    return replace(profile, provenance=prov)


def predicted_stats(case: Case, profile: Profile, cfg: RunConfig,
                    cal: Calibration) -> tuple[Scored, dict]:
    """The simulator's figures for the case's read requests, and the run summary."""
    result, summary = simulate(workload_of(case.run, case.name), _with(profile, cal), cfg)
    frame = result.requests
    if frame["rejected"].any():
        n = int(frame["rejected"].sum())
        raise ValueError(f"{case.name}: the simulator rejected {n} measured request(s) that "
                         "the engine served; give the engine's --max-model-len / --kv-blocks")
    arrival = frame["arrival_s"].to_numpy()
    k = case.read
    per = _per_request(frame["first_token_s"].to_numpy()[k] - arrival[k],
                       frame["finish_s"].to_numpy()[k] - arrival[k],
                       frame["generated_tokens"].to_numpy()[k],
                       frame["prompt_tokens"].to_numpy()[k], arrival[k])
    # the measured side's groups (the same requests, ordered the same way)
    return Scored(per, _features(per, (_bins(per["prompt"]), _bins(per["arrival"])))), summary


def case_residuals(case: Case, meas: Scored, profile: Profile, cfg: RunConfig,
                   cal: Calibration) -> np.ndarray:
    """log(predicted / measured) of every fitted feature of one case."""
    pred, _ = predicted_stats(case, profile, cfg, cal)
    out = []
    for k, m in meas.stats.items():
        p = pred.stats.get(k, 0.0)
        if m > 0 and p > 0:
            out.append(math.log(p / m))
    return np.asarray(out)


def residuals(cases: list[Case], measured: list[Scored], profile: Profile, cfg: RunConfig,
              cal: Calibration) -> np.ndarray:
    """log(predicted / measured) of every fitted feature of every case."""
    parts = [case_residuals(c, m, profile, cfg, cal)
             for c, m in zip(cases, measured, strict=True)]
    return np.concatenate(parts) if parts else np.zeros(0)


REPORT_STATS = (*FIT_STATS, "p99")
"""The statistics whose error is reported (P99 too, which the fit does not read: one
request's figure, too jumpy to fit, but what an SLO bounds)."""


def errors_pct(cases: list[Case], measured: list[Scored], profile: Profile, cfg: RunConfig,
               cal: Calibration) -> dict[str, dict[str, float]]:
    """{case: {key: signed error %}} of the mean, median, P90 and P99 of TTFT, TPOT, E2E."""
    out = {}
    for case, meas in zip(cases, measured, strict=True):
        pred, _ = predicted_stats(case, profile, cfg, cal)
        m, p = _report_stats(meas.per), _report_stats(pred.per)
        out[case.name] = {k: (p[k] - m[k]) / m[k] * 100.0 for k in _report_keys()
                          if k in m and k in p and m[k] > 0}
    return out


def _report_keys() -> list[str]:
    return [f"{s}_{m}_ms" for m in FIT_METRICS for s in REPORT_STATS]


def _report_stats(per: dict[str, np.ndarray]) -> dict[str, float]:
    out = _stats(per)
    for m in FIT_METRICS:
        v = per[m][np.isfinite(per[m])]
        if len(v):
            out[f"p99_{m}_ms"] = float(np.percentile(v, 99)) * 1e3
    return out


def pattern_search(f, x0: np.ndarray, directions: np.ndarray, step: np.ndarray,
                   lower: np.ndarray, min_step: np.ndarray,
                   max_evals: int = 150) -> tuple[np.ndarray, float, int]:
    """Compass search along the columns of `directions`: try +- step along each, move
    to the first improvement, halve the steps when none improves; stop when every step
    is below `min_step`. No derivatives, so robust where the objective is slightly
    rugged; along the sensitivity's principal directions it follows a diagonal valley
    that a search along the parameters' own axes would stall in."""
    x = np.maximum(np.asarray(x0, dtype=float), lower)
    fx, evals = f(x), 1
    step = np.asarray(step, dtype=float).copy()
    while evals < max_evals and (step >= min_step).any():
        moved = False
        for i in range(directions.shape[1]):
            for sign in (1.0, -1.0):
                y = np.maximum(x + sign * step[i] * directions[:, i], lower)
                if np.array_equal(y, x):
                    continue
                fy = f(y)
                evals += 1
                if fy < fx:
                    x, fx, moved = y, fy, True
                    break
        if not moved:
            step = step / 2
    return x, fx, evals


def gauss_newton(residual, x0: np.ndarray, h: np.ndarray, lower: np.ndarray,
                 iterations: int = 12) -> tuple[np.ndarray, float, int]:
    """Levenberg-Marquardt on `residual(x)` (a vector) from x0, the Jacobian by forward
    differences of `h`, x kept >= `lower`; (x, mean squared residual, evaluations)."""
    x = np.maximum(np.asarray(x0, dtype=float), lower)
    r = residual(x)
    cost = float(np.mean(r ** 2))
    evals, lam = 1, 1e-2
    for _ in range(iterations):
        J = np.empty((len(r), len(x)))
        for i in range(len(x)):
            xi = x.copy()
            xi[i] += h[i]
            J[:, i] = (residual(xi) - r) / h[i]
            evals += 1
        g, A = J.T @ r, J.T @ J
        improved = False
        for _ in range(4):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            xn = np.maximum(x + step, lower)
            rn = residual(xn)
            evals += 1
            cn = float(np.mean(rn ** 2))
            if cn < cost:
                x, r, lam, improved = xn, rn, lam / 3, True
                done = cost - cn <= 1e-6 * cost
                cost = cn
                break
            lam *= 4
        if not improved or done:
            break
    return x, cost, evals


@dataclass
class Fit:
    """What `calibrate` found."""

    calibration: Calibration
    fitted: tuple[str, ...]
    fit_cases: list[str]
    held_out: list[str]
    fit_error_before_pct: dict
    fit_error_after_pct: dict
    held_out_error_before_pct: dict
    held_out_error_after_pct: dict
    residuals: list[float]
    """log(predicted / measured) of every fitted figure at the optimum."""
    evaluations: int
    identifiability: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    """A bound the fit ended at, a run it leaves far off (`_warnings`)."""

    def provenance(self, runs: list[MeasuredRun]) -> dict:
        """The record written into the calibrated profile's JSON."""
        return {
            "runs": [{"path": r.path, "format": r.format, "requests": len(r),
                      "arrivals": r.arrivals, "load": run_load(r)} for r in runs],
            "warnings": list(self.warnings),
            "fitted": list(self.fitted),
            "method": "Levenberg-Marquardt, then coordinate search, on log(predicted/"
                      "measured) of the mean, median, P90 of TTFT, TPOT, E2E and the mean "
                      "TTFT, TPOT by thirds of prompt length and of arrival time",
            "fit_cases": self.fit_cases,
            "held_out": self.held_out,
            "fit_error_before_pct": self.fit_error_before_pct,
            "fit_error_after_pct": self.fit_error_after_pct,
            "errors_of": "signed % of the mean, median, P90 and P99 of TTFT, TPOT, E2E",
            "held_out_error_before_pct": self.held_out_error_before_pct,
            "held_out_error_after_pct": self.held_out_error_after_pct,
            "residuals": self.residuals,
            "evaluations": self.evaluations,
            "identifiability": self.identifiability,
        }


def split_cases(runs: list[MeasuredRun], hold_out: int | None = None,
                tail_fraction: float = 1 / 3) -> tuple[list[Case], list[Case]]:
    """(fit cases, held-out cases): one run held out when there are several, else the
    later `tail_fraction` of the single run's requests."""
    names = [f"run{i}:{Path(r.path).name}" for i, r in enumerate(runs)]
    if len(runs) >= 2:
        h = len(runs) - 1 if hold_out is None else hold_out
        if not 0 <= h < len(runs):
            raise ValueError(f"--hold-out {hold_out}: there are {len(runs)} runs, 0.."
                             f"{len(runs) - 1}")
        fit = [Case(names[i], r, np.ones(len(r), dtype=bool))
               for i, r in enumerate(runs) if i != h]
        return fit, [Case(names[h], runs[h], np.ones(len(runs[h]), dtype=bool))]
    if hold_out not in (None, 0):
        raise ValueError(f"--hold-out {hold_out}: with one run the later part of it is held "
                         "out; give more runs to hold one out")
    if not 0 < tail_fraction < 1:
        raise ValueError(f"--tail-fraction {tail_fraction} must be in (0, 1)")
    run = runs[0]
    n = len(run)
    cut = int(round(n * (1 - tail_fraction)))
    if cut < 10 or n - cut < 10:
        raise ValueError(f"{run.path} has {n} requests: too few to hold out its later part "
                         f"({tail_fraction:.0%}) and fit on the rest (at least 10 each); give "
                         "a longer run or a second run")
    head = np.arange(n) < cut
    # both replay the whole run (the later requests' arrivals and lengths load the engine
    # while the earlier ones finish); the fit reads only the earlier requests' figures
    return ([Case(f"{names[0]}[:{cut}]", run, head)],
            [Case(f"{names[0]}[{cut}:]", run, ~head)])


def _calibration(x: np.ndarray, fitted: tuple[str, ...], f_ref: float) -> Calibration:
    vals = {"framework": 0.0, "compute": 1.0, "memory": 1.0}
    for name, v in zip(fitted, x, strict=True):
        vals[name] = float(abs(v) * f_ref if name == "framework" else math.exp(v))
    return Calibration(vals["framework"], vals["compute"], vals["memory"])


def identifiability(cases, measured, profile, cfg, fitted, f_ref,
                    base: np.ndarray) -> tuple[dict[str, dict], np.ndarray]:
    """Per fitted parameter: how much moving it changes the residuals (RMS) and the share
    of that change the other fitted parameters cannot reproduce; and the sensitivity
    matrix (residuals x parameters)."""
    h = 0.2
    x0 = np.zeros(len(fitted))
    cols = []
    for i in range(len(fitted)):
        x = x0.copy()
        x[i] = 1.0 if fitted[i] == "framework" else h
        r = residuals(cases, measured, profile, cfg, _calibration(x, fitted, f_ref))
        cols.append((r - base) / (x[i]))
    J = np.stack(cols, axis=1) if cols else np.zeros((len(base), 0))
    return _judge(J, fitted), J


def _unique_share(J: np.ndarray, i: int, keep: list[int]) -> float:
    c = J[:, i]
    norm = float(np.linalg.norm(c))
    others = J[:, [j for j in keep if j != i]]
    if norm == 0:
        return 0.0
    if not others.shape[1]:
        return 1.0
    coef, *_ = np.linalg.lstsq(others, c, rcond=None)
    return float(np.linalg.norm(c - others @ coef)) / norm


def _judge(J: np.ndarray, fitted: tuple[str, ...]) -> dict[str, dict]:
    """Each parameter's effect and unique share; the least identifiable one below the
    bar is refused first and the others judged again without it (a pair that mimic each
    other is one refusal, not two)."""
    keep = list(range(len(fitted)))
    out: dict[str, dict] = {}
    while keep:
        shares = {i: _unique_share(J, i, keep) for i in keep}
        rms = {i: float(np.linalg.norm(J[:, i])) / math.sqrt(max(len(J), 1)) for i in keep}
        bad = [i for i in keep if rms[i] < NO_EFFECT_BELOW or shares[i] < COLLINEAR_BELOW]
        for i in keep:
            out[fitted[i]] = {"effect_rms": rms[i], "unique_share": shares[i],
                              "identifiable": True}
        if not bad:
            break
        worst = min(bad, key=lambda i: (rms[i] >= NO_EFFECT_BELOW, shares[i]))
        out[fitted[worst]]["identifiable"] = False
        keep.remove(worst)
    return out


def _same_requests(a: MeasuredRun, b: MeasuredRun) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(getattr(a, k), getattr(b, k))
        for k in ("arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "e2el_s"))


def check_runs(runs: list[MeasuredRun]) -> None:
    """Refuse runs that are not separate measurements: one file (or its copy) passed
    twice, or one run split into two files on one clock. A split run's later file would
    replay from an empty engine while its first requests really arrived into the queue
    the earlier ones left, so the fit would read a warm engine as a slow one."""
    names = [f"run{i}:{Path(r.path).name}" for i, r in enumerate(runs)]
    for i, a in enumerate(runs):
        for j in range(i + 1, len(runs)):
            b = runs[j]
            if _same_requests(a, b):
                same = ("the same file" if Path(a.path).resolve() == Path(b.path).resolve()
                        else "the same requests, arrivals and timings")
                raise ValueError(
                    f"--against {a.path} and --against {b.path} are one run ({same}, "
                    f"{len(a)} requests): a run given twice adds nothing to fit and, held "
                    "out, checks the fit against its own data; give each run once")
    clocked = sorted((r.clock_origin_s, i) for i, r in enumerate(runs)
                     if r.clock_origin_s is not None)
    for k, (t_a, i) in enumerate(clocked):
        a = runs[i]
        end_a = t_a + float(np.max(a.arrival_s + a.e2el_s))
        t_b, j = next(((t, j) for t, j in clocked[k + 1:] if t > t_a), (math.inf, -1))
        if t_b < end_a:
            busy = int(np.sum(t_a + a.arrival_s + a.e2el_s > t_b))
            raise ValueError(
                f"{names[j]} starts {t_b - t_a:.3f} s after {names[i]} on the same clock, "
                f"while {busy} of {names[i]}'s requests were still in flight: one run split "
                f"in two files (or two runs that shared the engine). Replayed apart, the "
                f"later part would start from an empty engine though its requests arrived "
                f"into a queue; join the files into one run (its later part is held out by "
                f"--tail-fraction), or give runs measured one after the other")


def run_load(run: MeasuredRun) -> str:
    """A run's offered rate and mean requests in flight (Little's law on the measured
    E2E): where it sits between idle and queued."""
    span = float(run.arrival_s[-1] - run.arrival_s[0]) if len(run) > 1 else 0.0
    rate = (len(run) - 1) / span if span > 0 else math.inf
    busy = float(np.max(run.arrival_s + run.e2el_s) - run.arrival_s[0])
    inflight = float(np.sum(run.e2el_s)) / busy if busy > 0 else float(len(run))
    r = f"{rate:.3g} req/s" if math.isfinite(rate) else "all at once"
    return f"{r}, {inflight:.2g} in flight on average"


def _refusal(name: str, share: float, per_case: dict[str, float], loads: dict[str, str],
             rest: list[str]) -> str:
    """Why `name` is refused and which of the runs set it apart, from the identifiability
    measure (the unique share of its effect) taken over each run alone."""
    head = (f"{WHY[name]} in these runs: {share:.0%} of its effect on the fitted figures is "
            f"its own (the rest the other parameters make too; it needs "
            f"{COLLINEAR_BELOW:.0%})")
    if len(per_case) >= 2:
        ranked = sorted(per_case.items(), key=lambda kv: -kv[1])
        (best, s_best), (worst, s_worst) = ranked[0], ranked[-1]
        data = (f"; of the runs, {best} ({loads[best]}) sets it apart most ({s_best:.0%}) and "
                f"{worst} ({loads[worst]}) least ({s_worst:.0%}): add runs at a load like "
                f"{best}'s")
    else:
        (only, s_only), = per_case.items() if per_case else (("this run", share),)
        data = (f"; {only} ({loads.get(only, 'its load')}) alone cannot set it apart "
                f"({s_only:.0%}): add a run at another load, and this refusal, if it "
                "stands, names the run that sets it apart most")
    fix = f"; or fit only what the runs identify: --fit {','.join(rest)}" if rest else ""
    return head + data + fix


def _diagnose(cases, measured, profile, cfg, fitted, f_ref, refused,
              idf) -> list[str]:
    """The refusal's sentences: per refused parameter, its unique share over every run
    (fitted and held out), each run's alone."""
    h = 0.2
    x0 = np.zeros(len(fitted))
    base = [case_residuals(c, m, profile, cfg, Calibration())
            for c, m in zip(cases, measured, strict=True)]
    cols: list[list[np.ndarray | None]] = []  # per parameter, per case: its column
    for i in range(len(fitted)):
        x = x0.copy()
        x[i] = 1.0 if fitted[i] == "framework" else h
        cal = _calibration(x, fitted, f_ref)
        moved = [case_residuals(c, m, profile, cfg, cal)
                 for c, m in zip(cases, measured, strict=True)]
        # a figure that vanished when the parameter moved leaves that case out
        cols.append([(r - b) / x[i] if len(r) == len(b) else None
                     for r, b in zip(moved, base, strict=True)])
    rest = [n for n in fitted if n not in refused]
    loads = {c.name: run_load(c.run) for c in cases}
    out = []
    for name in refused:
        # judged against the parameters the runs do identify (what `--fit` would keep)
        i = fitted.index(name)
        keep = sorted([fitted.index(n) for n in rest] + [i])
        per_case = {}
        for k, c in enumerate(cases):
            if any(cols[j][k] is None for j in keep):
                continue
            J = np.stack([cols[j][k] for j in keep], axis=1)
            per_case[c.name] = _unique_share(J, keep.index(i), list(range(len(keep))))
        out.append(_refusal(name, idf[name]["unique_share"], per_case, loads, rest))
    return out


def _warnings(x: np.ndarray, fitted: tuple[str, ...], cal: Calibration,
              errors: dict[str, dict[str, float]]) -> list[str]:
    """What a written fit should not hide: a parameter that ended at its bound (the
    best fit lies past it, so the value is not a minimum), and a run the fit leaves far
    off (the parameters do not explain it)."""
    out = []
    for v, name in zip(x, fitted, strict=True):
        if name == "framework" and v <= AT_BOUND:
            out.append(f"the framework time ended at its bound: {cal.framework_s * 1e3:.3f} "
                       "ms per step, where 0 is the least it can be; the runs ask for less "
                       "per-step time than the profile prices already, which no framework "
                       "time can give, so the fit is the best within bounds, not a minimum")
        elif name != "framework" and v <= SCALE_BOUND + AT_BOUND:
            value = getattr(cal, f"{name}_scale")
            out.append(f"the {name} scale ended at its bound: {value:.3f}, where "
                       f"{math.exp(SCALE_BOUND):.3f} is the least it can be; the runs ask "
                       "for a faster step part still: is the profile of this engine?")
    for case, errs in errors.items():
        far = {k: v for k, v in errs.items()
               if k.startswith("mean_") and abs(v) > FAR_OFF_PCT}
        if far:
            k, v = max(far.items(), key=lambda kv: abs(kv[1]))
            metric = k.split("_")[1].upper().replace("E2EL", "E2E")
            out.append(f"after the fit, {case} is still {v:+.0f} % off on mean {metric} "
                       f"(more than {FAR_OFF_PCT:.0f} %): the fitted parameters do not "
                       "explain that run")
    return out


def calibrate(runs: list[MeasuredRun], profile: Profile, cfg: RunConfig,
              fitted: tuple[str, ...] = PARAMS, hold_out: int | None = None,
              tail_fraction: float = 1 / 3, max_evals: int = 80, say=None) -> Fit:
    """Fit `fitted` to `runs`, holding one run (or the later part of one run) out;
    `say(line)`, where given, hears when the fit proper starts (after the runs and the
    parameters were found fit to fit: a refusal comes alone)."""
    if not runs:
        raise ValueError("sim calibrate needs at least one --against RESULTS")
    if KEY in profile.provenance:
        raise ValueError(f"profile {profile.path} is calibrated already; calibrate from the "
                         "profile it was made from")
    if cfg.fleet.active:
        raise ValueError("sim calibrate replays one engine; drop --replicas / --pd")
    check_runs(runs)
    fit_cases, held = split_cases(runs, hold_out, tail_fraction)
    measured = [measured_stats(c) for c in fit_cases]
    held_measured = [measured_stats(c) for c in held]
    ident = Calibration()
    _, summary = predicted_stats(fit_cases[0], profile, cfg, ident)
    f_ref = max(float(summary.get("mean_step_ms") or 0.0) / 1e3, 1e-6)
    base = residuals(fit_cases, measured, profile, cfg, ident)
    idf, jac = identifiability(fit_cases, measured, profile, cfg, fitted, f_ref, base)
    refused = [n for n in fitted if not idf[n]["identifiable"]]
    if refused:
        seen = {id(c.run) for c in fit_cases}  # a single run's tail: the same run
        every = fit_cases + [c for c in held if id(c.run) not in seen]
        every_measured = [measured_stats(c) for c in every]
        raise ValueError("cannot calibrate: " + "; ".join(
            _diagnose(every, every_measured, profile, cfg, fitted, f_ref, refused, idf)))

    if say is not None:
        say(f"fitting {', '.join(fitted)} to {len(runs)} run(s) "
            f"({sum(len(r) for r in runs)} requests) ...")

    def residual(x: np.ndarray) -> np.ndarray:
        return residuals(fit_cases, measured, profile, cfg, _calibration(x, fitted, f_ref))

    def objective(x: np.ndarray) -> float:
        return float(np.sum(residual(x) ** 2))

    # Levenberg-Marquardt first (the predictions are nearly linear in the parameters for
    # a fixed schedule), then a compass search from its optimum along the sensitivity's
    # principal directions: the objective is slightly rugged (a step time that moves an
    # arrival into another step changes the schedule after it), which stalls derivative
    # steps near the optimum
    h = np.asarray([0.1 if n == "framework" else 0.05 for n in fitted])
    lower = np.asarray([0.0 if n == "framework" else SCALE_BOUND for n in fitted])
    x, _, evals = gauss_newton(residual, np.zeros(len(fitted)), h, lower)
    lam, vecs = np.linalg.eigh(jac.T @ jac)
    step = 0.05 / np.sqrt(np.maximum(lam, 1e-12))  # each move: ~5 % on the residuals
    step = np.minimum(step, 1.0)
    x, _, more = pattern_search(objective, x, vecs, step, lower, step / 32,
                                max_evals=max_evals)
    evals += more
    cal = _calibration(x, fitted, f_ref)
    res = residuals(fit_cases, measured, profile, cfg, cal)
    fit_after = errors_pct(fit_cases, measured, profile, cfg, cal)
    held_after = errors_pct(held, held_measured, profile, cfg, cal)
    return Fit(
        calibration=cal, fitted=tuple(fitted), fit_cases=[c.name for c in fit_cases],
        held_out=[c.name for c in held],
        fit_error_before_pct=errors_pct(fit_cases, measured, profile, cfg, ident),
        fit_error_after_pct=fit_after,
        held_out_error_before_pct=errors_pct(held, held_measured, profile, cfg, ident),
        held_out_error_after_pct=held_after,
        residuals=[float(v) for v in res], evaluations=evals, identifiability=idf,
        warnings=_warnings(x, fitted, cal, {**fit_after, **held_after}))


def write_calibrated(profile: Profile, fit: Fit, runs: list[MeasuredRun],
                     out_csv: str | Path) -> tuple[Path, Path]:
    """The profile's table (bytes unchanged, so its content hash still holds) at
    `out_csv`, and its provenance plus the calibration and the fit's record beside it."""
    out = Path(out_csv)
    if out.suffix != ".csv":
        raise ValueError(f"--out {out_csv}: a profile is a .csv file (its provenance is "
                         "written beside it as .json)")
    if out.resolve() == Path(profile.path).resolve():
        raise ValueError(f"--out {out_csv} is the profile being calibrated; write a new file")
    prov = dict(profile.provenance)
    prov[KEY] = fit.calibration.as_dict()
    prov["serving_calibration_fit"] = fit.provenance(runs)
    prov["calibrated_from"] = profile.path
    atomic.write_bytes(out, Path(profile.path).read_bytes())
    atomic.write_json(out.with_suffix(".json"), prov)
    return out, out.with_suffix(".json")
