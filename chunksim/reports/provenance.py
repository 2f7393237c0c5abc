"""The profile's provenance as report rows (what was measured, where, when, with what)."""

from __future__ import annotations

import json

from chunksim.core.vllm_version import VLLM_VERSION

_FIELDS = ("device", "device_name", "dtype", "threads", "torch_version", "attention_backend",
           "created", "step_overhead_s", "points", "elapsed_s")


def provenance_rows(label: str, path: str, sha256: str, provenance: dict) -> list[list[str]]:
    rows = [["label", label], ["file", path.rsplit("/", 1)[-1]], ["sha256", sha256]]
    for k in _FIELDS:
        if provenance.get(k) is not None:
            rows.append([k, str(provenance[k])])
    for k in ("model", "grid"):
        if provenance.get(k):
            v = provenance[k]
            rows.append([k, ", ".join(f"{a}={json.dumps(b)}" for a, b in v.items())
                         if isinstance(v, dict) else str(v)])
    return rows


def run_facts() -> str:
    """`chunksim 0.1.0 · commit abc1234 · 2025-01-01 12:00 UTC`: what made the page, when.
    The time honours SOURCE_DATE_EPOCH, so a pinned build gives pinned bytes."""
    import datetime
    import os
    import subprocess
    from importlib import metadata
    from pathlib import Path

    try:
        version = metadata.version("chunksim")
    except metadata.PackageNotFoundError:
        version = "unknown"
    commit = None
    try:
        out = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short=12",
                              "HEAD"], capture_output=True, text=True, timeout=5, check=False)
        if out.returncode == 0:
            commit = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch
            and epoch.isdigit() else datetime.datetime.now(datetime.timezone.utc))
    return (f"chunksim {version} · commit {commit or 'unknown (not a git checkout)'} · "
            f"made {when:%Y-%m-%d %H:%M} UTC")


def is_demo_profile(path: str, provenance: dict) -> bool:
    """A bundled profile measured on a CPU (the toy `tiny` model)."""
    from pathlib import Path

    bundled = Path(__file__).resolve().parent.parent / "data" / "profiles"
    try:
        inside = Path(path).resolve().parent == bundled
    except OSError:
        inside = False
    return inside and str(provenance.get("device", "")).lower() == "cpu"


DEMO_BANNER = (
    "**Demo numbers.** This page was made from the bundled CPU profile of a toy model "
    "(`tiny`): it shows how the policies behave, not what your GPU will do; do not paste its "
    "milliseconds into a design. Profile your own model on your GPU, e.g. `sim profile "
    "--model llama-3.1-8b --device cuda --out profiles/my-gpu.csv`, then rerun with "
    "`--profile profiles/my-gpu.csv`.")


def database_banner(provenance: dict) -> str:
    """The banner of a profile imported from a kernel database (not measured here)."""
    src = provenance.get("source") or {}
    fw = provenance.get("framework") or {}
    what = (f"{src.get('package', 'a kernel database')} {src.get('package_version', '')} "
            f"({src.get('backend', '?')} {src.get('data_version', '?')} kernel data on "
            f"{src.get('system', '?')}; the scheduling modelled is vLLM "
            f"{VLLM_VERSION}'s)").replace("  ", " ")
    framework = (f" plus a per-step framework time of {fw['step_s'] * 1e3:g} ms "
                 f"({fw.get('source', 'source not recorded')})"
                 if isinstance(fw.get("step_s"), (int, float)) else "")
    return (f"**Imported costs, not measured on this device.** This page's step costs come "
            f"from {what}: kernel times the database measured or modelled{framework}, "
            f"composed by chunksim. They were not timed by chunksim on the GPU the profile "
            f"names; check them against your engine's own step times (`sim validate`) before "
            f"sizing a deployment on them.")


EAGER_BANNER = (
    "**Eager-mode costs.** This profile was timed by chunksim's own PyTorch model in eager "
    "mode (no CUDA graphs, one attention call per sequence): a serving engine with CUDA "
    "graphs and varlen attention runs small decode steps several times faster, so latency "
    "and capacity figures here are pessimistic. For engine-grade costs use an imported "
    "profile, e.g. `--profile llama-3.1-8b-h200-vllm`.")


def profile_banner(path: str, provenance: dict) -> str | None:
    """The warning every report page of this profile carries, None for a profile measured
    by chunksim on the device it names, as a serving engine runs it: the CPU demo
    profile's, an imported profile's (not measured on its device), or an eager one's."""
    if is_demo_profile(path, provenance):
        return DEMO_BANNER
    if provenance.get("device") in ("imported", "modelled"):  # from a kernel database
        return database_banner(provenance)
    if provenance.get("device") == "cuda" and not provenance.get("cuda_graphs"):
        return EAGER_BANNER
    return None


def closing_sections(doc, profile, command: str | None) -> None:
    """The sections every report ends with: the profile's provenance, the metric
    definitions, and the command that reproduces the page."""
    from chunksim.reports.definitions import DEFINITIONS

    doc.heading("Profile provenance")
    doc.table(["field", "value"], provenance_rows(profile.label, profile.path, profile.sha256,
                                                  profile.provenance), numeric=False)
    doc.heading("Metric definitions")
    doc.definitions(list(DEFINITIONS))
    if command:
        doc.heading("Reproduce")
        doc.code(command)
