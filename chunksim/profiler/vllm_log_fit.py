"""Fit a component profile's step costs to a vLLM server's logged engine steps. Pure
(numpy), torch-free.

Each logged step gives its prefill tokens C, decode tokens D and its elapsed time t. The
fit is least squares on

    t = framework + prefill_token × C + decode_token × D + mixed × [C > 0 and D > 0]

- `framework`: the per-step time every step pays whatever its size;
- `prefill_token`, `decode_token`: seconds per prefill and per decode token;
- `mixed`: what a step holding both costs beyond its prefill and decode parts (the joint
  mixed-step term; negative when running them together saves time).

A framework or per-token cost that fits below 0 is noise around 0 (a model so small that
a few more decodes cost nothing measurable, say): it is held at 0 and the other terms are
fitted again; the fit records which (`held_at_zero`).

The log does not state contexts, so attention's growth with context is inside the
per-token costs, averaged over the logged workload; the residuals show what that leaves.
Steps whose relative residual in a first fit lies beyond `OUTLIER_MADS` (scaled) median
absolute deviations of their kind's (a first call at a new shape, a machine hiccup) are
left out of the fit and counted, unless leaving them out would leave a term unidentified.
A log that cannot identify a term is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunksim.profiler.vllm_log import Step

TERMS = ("framework", "prefill_token", "decode_token", "mixed")
MIN_STEPS = 3
"""Fewest steps of a kind (with prefill tokens, with decode tokens, mixed) a fit needs."""
OUTLIER_MADS = 8.0


@dataclass(frozen=True)
class StepFit:
    """Fitted coefficients (seconds), their standard errors, and the residuals."""

    coef_s: dict[str, float]
    stderr_s: dict[str, float]
    steps: int
    dropped: int
    residuals: dict[str, dict]
    """Per step kind (prefill, decode, mixed, all): steps, median / P90 of |error| %,
    RMS error ms, over the steps kept."""
    held_at_zero: tuple[str, ...] = ()
    """Costs that fitted below 0 and are held at 0 (the others refitted without them)."""

    def predict_s(self, prefill_tokens, decode_tokens) -> np.ndarray:
        return _design(np.asarray(prefill_tokens, float),
                       np.asarray(decode_tokens, float)) @ self._vector()

    def _vector(self) -> np.ndarray:
        return np.array([self.coef_s[k] for k in TERMS])


def _design(c: np.ndarray, d: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(c), c, d, ((c > 0) & (d > 0)).astype(float)])


def fit_steps(steps: list[Step], source: str) -> StepFit:
    """Fit the four terms to `steps`; ValueError (one sentence naming `source`) when the
    steps cannot identify a term."""
    c = np.array([s.prefill_tokens for s in steps], float)
    d = np.array([s.decode_tokens for s in steps], float)
    t = np.array([s.elapsed_s for s in steps], float)
    _identifiable(c, d, source)
    x = _design(c, d)
    beta = _lstsq(x, t)
    keep = _inliers((t - x @ beta) / np.maximum(t, 1e-12), _kinds(c, d))
    if keep.sum() < len(t):
        try:
            _identifiable(c[keep], d[keep], source)
        except ValueError:
            keep[:] = True  # too few steps of a kind to leave any out
    xk, tk = x[keep], t[keep]
    held: list[str] = []
    beta = _lstsq(xk, tk)
    while True:  # a cost below 0 is noise around 0: hold it there, fit the others
        free = [i for i in range(len(TERMS)) if TERMS[i] not in held]
        neg = [i for i in free if TERMS[i] != "mixed" and beta[i] < 0]
        if not neg:
            break
        held.append(TERMS[min(neg, key=lambda i: beta[i])])
        free = [i for i in range(len(TERMS)) if TERMS[i] not in held]
        beta = np.zeros(len(TERMS))
        beta[free] = _lstsq(xk[:, free], tk)
    r = tk - xk @ beta
    free = [i for i in range(len(TERMS)) if TERMS[i] not in held]
    dof = max(len(tk) - len(free), 1)
    se = np.zeros(len(TERMS))
    se[free] = np.sqrt(np.maximum(np.diag(
        float(r @ r) / dof * np.linalg.pinv(xk[:, free].T @ xk[:, free])), 0.0))
    coef = dict(zip(TERMS, (float(b) for b in beta), strict=True))
    pred = xk @ beta
    kinds = _kinds(c, d)[keep]
    res = {}
    for kind in ("prefill", "decode", "mixed", "all"):
        m = np.ones(len(tk), bool) if kind == "all" else kinds == kind
        if not m.any():
            continue
        err = np.abs(pred[m] - tk[m]) / np.maximum(tk[m], 1e-12) * 100
        res[kind] = {"steps": int(m.sum()),
                     "median_abs_error_pct": float(np.median(err)),
                     "p90_abs_error_pct": float(np.percentile(err, 90)),
                     "rms_error_ms": float(np.sqrt(np.mean((pred[m] - tk[m]) ** 2)) * 1e3)}
    return StepFit(coef, dict(zip(TERMS, (float(v) for v in se), strict=True)),
                   int(keep.sum()), int((~keep).sum()), res, tuple(held))


def _kinds(c: np.ndarray, d: np.ndarray) -> np.ndarray:
    return np.where((c > 0) & (d > 0), "mixed", np.where(c > 0, "prefill", "decode"))


def _inliers(rel: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Steps whose relative residual lies within OUTLIER_MADS median absolute deviations
    of their kind's median (kinds differ in spread: a prefill's cost varies with its
    context, which the log does not state)."""
    keep = np.ones(len(rel), bool)
    for kind in np.unique(kinds):
        m = kinds == kind
        med = np.median(rel[m])
        mad = float(np.median(np.abs(rel[m] - med)))
        if mad > 0:
            keep[m] = np.abs(rel[m] - med) <= OUTLIER_MADS * 1.4826 * mad
    return keep


def _lstsq(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, t, rcond=None)[0]


def _identifiable(c: np.ndarray, d: np.ndarray, source: str) -> None:
    mixed = (c > 0) & (d > 0)
    checks = (
        (int((c > 0).sum()), "with prefill tokens", "per-token prefill cost",
         "serve some prompts"),
        (int((d > 0).sum()), "with decode tokens", "per-token decode cost",
         "serve requests with more than one output token"),
        (int(mixed.sum()), "mixing prefill and decode tokens", "joint mixed-step term",
         "serve requests that arrive while others decode"),
    )
    for n, what, term, fix in checks:
        if n < MIN_STEPS:
            raise ValueError(f"{source}: {n} step(s) {what} (a fit needs "
                             f"{MIN_STEPS}), so the {term} cannot be fitted; {fix}")
    x = _design(c, d)
    if np.linalg.matrix_rank(x) < len(TERMS):
        raise ValueError(f"{source}: the steps' token counts do not vary enough to "
                         f"tell the per-step framework time from the per-token costs (every "
                         f"step of a kind has the same size); serve prompts and batches of "
                         f"varied sizes")
