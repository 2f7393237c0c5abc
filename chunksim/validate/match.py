"""Whether a profile describes the engine a results file measured: its model and, where
the file records one, its device. A mismatch is not an error (a user may want to see how
far another card's profile is off) but the comparison then measures the wrong thing,
so it is said first. Pure."""

from __future__ import annotations

import re

from chunksim.latency.calibrated import Calibration

_FILLER = {"meta", "instruct", "chat", "hf", "it", "base", "made", "up", "model", "models"}
_DEVICE = re.compile(r"\b(?:[abhlv]\d{2,3}|gh200|gb200|mi\d{3}x?|cpu|xeon|epyc)\b")


def model_tokens(name: str) -> set[str]:
    """A model name's words and sizes: `meta-llama/Llama-3.1-8B-Instruct` ->
    {llama, 3.1, 8b}; an organisation, `Meta-` and an `-Instruct` suffix say nothing of
    the weights' shape."""
    text = str(name).lower()
    words = set(re.findall(r"\d+(?:\.\d+)?[a-z]?|[a-z]+", text))
    return words - _FILLER


def device_token(name) -> str | None:
    """The accelerator a name speaks of (h200, b200, a100, mi300x, cpu ...), or None."""
    if not isinstance(name, str):
        return None
    text = name.lower().replace("_", " ").replace("-", " ")
    found = _DEVICE.search(text)
    if found is None:
        return None
    tok = found.group(0)
    return "cpu" if tok in ("xeon", "epyc") else tok


def _profile_model(provenance: dict) -> str | None:
    m = provenance.get("model")
    name = m.get("name") if isinstance(m, dict) else m
    return name if isinstance(name, str) and name else None


def mismatches(provenance: dict, settings: dict, profile: str, results: str) -> list[str]:
    """One sentence per difference between the profile and the results file's own record
    (its `model_id`, and `device`/`gpu`/`hardware` where it writes one)."""
    out = []
    pm = _profile_model(provenance)
    rm = settings.get("model_id")
    if pm and isinstance(rm, str) and rm:
        a, b = model_tokens(pm), model_tokens(rm)
        if a and b and not (a <= b or b <= a):
            out.append(f"the profile {profile} times {pm}, but {results} measured {rm}: "
                       "the comparison is of another model; give a profile of that model")
    pd = device_token(provenance.get("device_name") or provenance.get("device"))
    rd_raw = next((settings[k] for k in ("device", "gpu", "hardware")
                   if isinstance(settings.get(k), str)), None)
    rd = device_token(rd_raw)
    if pd and rd and pd != rd:
        out.append(f"the profile {profile} was timed on {pd.upper()}, but {results} ran on "
                   f"{rd_raw}: the comparison is of another device; give a profile of it")
    return out


def calibration_note(provenance: dict) -> str | None:
    """The line that says a profile carries a `sim calibrate` fit, which every step
    prices; None for an uncalibrated profile."""
    cal = Calibration.from_provenance(provenance)
    if cal is None or cal.identity:
        return None
    fit = provenance.get("serving_calibration_fit") or {}
    flagged = len(fit.get("warnings") or [])
    warn = f"; its fit carries {flagged} warning(s)" if flagged else ""
    return (f"calibration applied (sim calibrate): +{cal.framework_s * 1e3:.3f} ms framework "
            f"time per step, compute x{cal.compute_scale:.3f}, memory x{cal.memory_scale:.3f}"
            f"{warn}")
