"""`sim profile import --from vllm-log LOG`: a component profile fitted to a vLLM server's
logged engine steps (chunksim/profiler/vllm_log_fit.py). Torch-free.

The fit's terms become components whose composition reproduces it exactly
(docs/profile-format.md, "Importing a vLLM server log"):

- `framework` -> the JSON's `step_overhead_s` (`framework.step_s`), added to every step;
- `prefill_token` -> `prefill_attn(L, p)` = prefill_token × L / layers, at every prior;
- `decode_token` -> `decode_attn(D, k)` = decode_token × D / layers, at every context;
- `mixed` -> `mixed_attn`, so that a mixed step's cross term is `mixed`;
- `dense`, `embed`, `head` and `fixed` are 0 (their cost is inside the per-token terms).

The grids span what the server could schedule: chunks up to its max_num_batched_tokens,
decode batches up to its max_num_seqs, contexts up to its max_model_len (the log's
settings where stated, else the largest the log shows and the model's maximum position).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from chunksim.decoder.config import ModelConfig
from chunksim.profiler.vllm_log import ServerLog
from chunksim.profiler.vllm_log_fit import TERMS, StepFit, fit_steps


def _row(component: str, value_s: float, **keys) -> dict:
    r = {"component": component, "tokens": 0, "chunk_len": 0, "prior_len": 0,
         "decode_count": 0, "kv_len": 0, "kv_max": 0, "logits": 0, **keys}
    r.update(median_s=value_s, p10_s=value_s, p90_s=value_s, mean_s=value_s, repeats=0)
    return r


def axes_of(log: ServerLog, model: ModelConfig) -> dict[str, list[int]]:
    """The grid axes: what the server could schedule (see the module docstring)."""
    s = log.settings
    max_len = int(s.get("max_model_len") or model.max_position)
    chunk = max(int(s.get("max_num_batched_tokens") or 0),
                max(st.prefill_tokens for st in log.steps), 2)
    decodes = max(int(s.get("max_num_seqs") or 0),
                  max(st.decode_requests for st in log.steps), 3)
    return {"tokens": [1, chunk + decodes], "chunk_len": [1, chunk],
            "prior_len": [0, max(max_len, 1)], "decode_count": [1, 2, decodes],
            "kv_len": [1, max(max_len, 2)], "logits": [0, 1, decodes]}


def component_rows(fit: StepFit, layers: int, axes: dict[str, list[int]]) -> list[dict]:
    """Rows whose composition is the fit: per-layer attention tables linear in tokens, a
    constant mixed-step cross term, zero dense / embed / head / fixed."""
    p, d, x = (fit.coef_s[k] / layers for k in ("prefill_token", "decode_token", "mixed"))
    rows = [_row("fixed", 0.0)]
    rows += [_row(c, 0.0, tokens=n) for c in ("dense", "embed") for n in axes["tokens"]]
    rows += [_row("head", 0.0, logits=n) for n in axes["logits"]]
    rows += [_row("prefill_attn", p * c, chunk_len=c, prior_len=q)
             for c in axes["chunk_len"] for q in axes["prior_len"]]
    rows += [_row("decode_attn", d * n, decode_count=n, kv_len=k, kv_max=k)
             for n in axes["decode_count"] for k in axes["kv_len"]]
    chunks, decodes = joint_axes(p, d, x, axes)
    rows += [_row("mixed_attn", max(p * c + d * n + x, 0.0), chunk_len=c, prior_len=q,
                  decode_count=n, kv_len=k)
             for c in chunks for q in axes["prior_len"]
             for n in decodes for k in axes["kv_len"]]
    return rows


def joint_axes(p: float, d: float, x: float, axes: dict[str, list[int]]
               ) -> tuple[list[int], list[int]]:
    """The joint table's chunk and decode axes. A negative cross term makes the smallest
    mixed steps' joint attention p·C + d·D + x negative, which a table cannot hold: the
    axes then start at the first chunk (then decode count) where it is >= 0. Below that
    the cross term is held at the table's edge, still x, and the step's attention is
    max(0, p·C + d·D + x) as inside; the step counts as extrapolated."""
    c0, n0 = 1, 1
    c_max, n_max = axes["chunk_len"][-1], axes["decode_count"][-1]
    if p * c0 + d * n0 + x < 0 and p > 0:
        c0 = min(math.ceil((-x - d * n0) / p), c_max)
    if p * c0 + d * n0 + x < 0 and d > 0:
        n0 = min(math.ceil((-x - p * c0) / d), n_max)
    chunks = sorted({c0, *(c for c in axes["chunk_len"] if c > c0)})
    decodes = sorted({n0, *(n for n in axes["decode_count"] if n > n0)})
    return chunks, decodes


def import_vllm_log(log: ServerLog, out_csv: Path, model: ModelConfig, dtype: str,
                    device_name: str | None, device_memory_bytes: int | None) -> dict:
    """Fit `log`'s steps, write `out_csv` + JSON; returns the JSON written, with `fit_obj`."""
    if out_csv.suffix != ".csv":
        raise ValueError(f"--out {str(out_csv)!r}: give the CSV path, ending in .csv")
    fit = fit_steps(log.steps, log.path)
    version = log.version or "(version not in the log)"
    source = {"kind": "vllm-log", "log": log.path, "vllm_version": log.version,
              "server": log.settings, "kv_cache_tokens": log.kv_cache_tokens,
              "kv_cache_device": log.device, "steps": len(log.steps),
              "dummy_steps": log.dummy_steps, "fit": fit_entry(fit)}
    meta = write_fit_profile(fit, out_csv, model, dtype,
                             device_name or f"vLLM {version} on {log.device or 'its device'}",
                             device_memory_bytes, axes_of(log, model), source)
    return {**meta, "fit_obj": fit}


def write_fit_profile(fit: StepFit, out_csv: Path, model: ModelConfig, dtype: str,
                      device_name: str, device_memory_bytes: int | None,
                      axes: dict[str, list[int]], source: dict) -> dict:
    """Write the component profile whose composition is `fit` (CSV + JSON, atomically);
    returns the JSON written."""
    from chunksim.latency.profile import load_profile
    from chunksim.profiler.component_write import _model_entry, write_components

    rows = component_rows(fit, model.n_layers, axes)
    meta = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "imported", "device_name": device_name,
        "device_memory_bytes": device_memory_bytes, "dtype": dtype, "threads": None,
        "model": _model_entry(model), "weights_bytes": model.weights_bytes(dtype),
        "kv_bytes_per_token": model.kv_bytes_per_token(dtype),
        "step_overhead_s": fit.coef_s["framework"],
        "framework": {"step_s": fit.coef_s["framework"],
                      "source": "fitted to the server log's step times (vLLM's iteration "
                                "elapsed time: forward pass and sampling; its scheduling "
                                "and output update are not in it)"},
        "components": {"layers": model.n_layers, "timed_layers": None,
                       "in_sequence_scale": 1.0, "tp": 1, "link": None,
                       "mixed_attention": "joint (fitted: one cross term per mixed step)",
                       "decode_spread": "mean only (the log states no contexts)",
                       "grid": axes,
                       "terms": {"attention context": "averaged into the per-token costs "
                                 "over the logged workload (the log states no contexts)",
                                 "dense, embed, head, fixed": "inside the per-token costs "
                                 "and the framework time"}},
        "calibration": None,
        "imported_from": source.get("log"),
        "source": source,
    }
    meta = write_components(out_csv, rows, meta)
    try:
        load_profile(str(out_csv))
    except ValueError as exc:  # pragma: no cover - the rows above fill their grids
        out_csv.unlink(missing_ok=True)
        out_csv.with_suffix(".json").unlink(missing_ok=True)
        raise ValueError(f"{out_csv}: {exc}") from None
    return meta


def fit_entry(fit: StepFit) -> dict:
    """The fit as the JSON records it (milliseconds at the edge)."""
    return {"terms_ms": {k: fit.coef_s[k] * 1e3 for k in TERMS},
            "stderr_ms": {k: fit.stderr_s[k] * 1e3 for k in TERMS},
            "held_at_zero": list(fit.held_at_zero),
            "steps_fitted": fit.steps, "steps_left_out": fit.dropped,
            "residuals": fit.residuals}


def fit_lines(fit: StepFit) -> list[str]:
    """The fit and its residuals, for people."""
    names = {"framework": "framework per step", "prefill_token": "per prefill token",
             "decode_token": "per decode token", "mixed": "mixed-step term"}
    lines = [f"fit over {fit.steps} steps ({fit.dropped} outlying left out):"]
    lines += [f"  {names[k]:<20}{fit.coef_s[k] * 1e3:>10.4f} ms  ± {fit.stderr_s[k] * 1e3:.4f}"
              if k not in fit.held_at_zero else
              f"  {names[k]:<20}{0:>10.4f} ms  (fitted below 0: held at 0)" for k in TERMS]
    lines.append(f"residuals: {'kind':<9}{'steps':>6}{'|err| med %':>13}{'|err| p90 %':>13}"
                 f"{'rms ms':>9}")
    for kind, r in fit.residuals.items():
        lines.append(f"           {kind:<9}{r['steps']:>6}{r['median_abs_error_pct']:>13.1f}"
                     f"{r['p90_abs_error_pct']:>13.1f}{r['rms_error_ms']:>9.3f}")
    return lines
