"""`sim compare` as one library call: every configuration under every seed, the capacity
search when asked, and the verdict, from settings already parsed. The command parses its
flags, calls `compare_answer`, and prints and writes what comes back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chunksim.latency.profile import Profile
from chunksim.progress import ProgressBar
from chunksim.sim.run import RunConfig
from chunksim.sweep.capacity import CapacityEntry, capacity_search, search_params, window_note
from chunksim.sweep.capacity_io import entry_document, verdict_document
from chunksim.sweep.compare import Comparison, run_comparison
from chunksim.sweep.configs import Config
from chunksim.sweep.runner import Runner
from chunksim.sweep.verdict import Verdict, decide
from chunksim.workloads.options import WorkloadOptions


@dataclass
class CompareAnswer:
    """What `sim compare` reports."""

    full: Comparison
    """Every configuration (the tables name the ones that completed nothing)."""
    comp: Comparison
    """The configurations that completed a request: the verdict, search and figures."""
    entries: list[CapacityEntry] | None
    """Each configuration's capacity search (None: not searched)."""
    window: str | None
    """How long each capacity probe was (None: not searched)."""
    verdict: Verdict
    failed: list[str]
    """One sentence per configuration that completed no request."""

    def document(self, profile: Profile, slos: Mapping[str, float],
                 max_reject_pct: float) -> dict:
        """comparison.json (less the deployment and cost, which the command adds)."""
        doc = {
            "workload": self.comp.summaries[0].get("workload"),
            "seeds": self.comp.seeds,
            "profile": {"label": profile.label, "sha256": profile.sha256,
                        "provenance": profile.provenance},
            "verdict": verdict_document(self.verdict),
            "rows": self.full.json_rows(),
        }
        if self.entries is not None:
            doc["capacity"] = {"window": self.window, "configurations": [
                entry_document(e, slos, self.comp.seeds, max_reject_pct)
                for e in self.entries]}
        return doc


def completing(comp: Comparison) -> tuple[list[int], list[str]]:
    """Indices of the configurations that completed a request, and a sentence for each
    other one (it stays in the tables, with no latency). ValueError when none did."""
    done = [i for i, s in enumerate(comp.summaries) if s["completed"]]
    failed = []
    for i, s in enumerate(comp.summaries):
        if not s["completed"]:
            why = ", ".join(f"{n} by {k}" for k, n in s.get("rejected_reasons", {}).items())
            msg = (f"{comp.configs[i].label} completed no request (all {s['rejected']} "
                   f"rejected: {why})")
            if not done:
                raise ValueError(f"{msg}, and no configuration did; see "
                                 "requests' reject_reason in `sim run --out`")
            failed.append(msg)
    return done, failed


def compare_answer(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                   slos: Mapping[str, float], slos_given: bool, search: bool,
                   max_rate: float, max_reject_pct: float, seeds: Sequence[int],
                   runner: Runner, keep_records: bool = True,
                   progress: ProgressBar | None = None) -> CompareAnswer:
    """Run every configuration under every seed on `runner`, search each one's capacity
    under `slos` when `search`, and decide the verdict."""
    full = run_comparison(configs, workload, run, runner, keep_records=keep_records,
                          progress=progress, seeds=seeds)
    done, failed = completing(full)
    comp = full.subset(done)
    entries, window = None, None
    if search:
        params = search_params(workload, max_rate, profile=runner.profile, run=run)
        entries = capacity_search(comp.configs, workload, run, slos, runner, params,
                                  progress, seeds=seeds, max_reject_pct=max_reject_pct)
        best = max(entries, key=lambda e: e.max_rate)
        window = window_note(params, workload,
                             best.at_max["completed"] if best.at_max else None)
    caps = ([(e.max_rate, e.capacity_range) for e in entries] if entries is not None
            else None)
    verdict = decide(comp.configs, comp.runs, slos, slos_given, comp.seeds, caps,
                     max_reject_pct)
    return CompareAnswer(full, comp, entries, window, verdict, failed)
