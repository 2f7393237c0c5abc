"""vLLM's own V1 scheduler, driven step by step without a model, beside chunksim's `budget`.

vLLM's `Scheduler` (`vllm.v1.core.sched.scheduler`) needs no GPU, weights or workers: given
a model config (a folder holding only `config.json`), a scheduler, a cache and a KV-cache
config, `schedule()` then `update_from_output(ModelRunnerOutput(...))` with fake sampled
tokens is one engine step. Its decisions never read the wall clock.

This module builds that scheduler from chunksim's knobs (`build_scheduler`), feeds it a
chunksim `Workload` with each request made visible at the step chunksim's engine saw it
arrive (`vllm_steps`), and normalises both schedules to the same per-step record (`Step`;
`chunksim_steps` reads chunksim's schedule log), so the two can be compared step by step
(tests/test_vllm_differential.py). Building the scheduler and translating requests is
`policies.vllm_driver`'s, shared with the `vllm` policy.

vLLM is imported lazily; without it, the ModuleNotFoundError of `vllm` propagates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chunksim.policies.vllm_driver import (
    build_scheduler,
    finish_step,
    make_request,
    prompt_tokens,
    request_hasher,
    sampled_token,
    vllm_classes,
)

__all__ = ["SAME_INSTANT_S", "Step", "build_scheduler", "chunksim_steps", "first_difference",
           "prompt_tokens", "vllm_steps"]

SAME_INSTANT_S = 1e-9
"""Arrivals this close to a step's start are taken as arrived by it."""


@dataclass(frozen=True)
class Step:
    """One engine step's scheduling decisions, normalised."""

    scheduled: tuple[tuple[int, int], ...]
    """(request id, new tokens) in batch order."""
    preempted: tuple[int, ...]
    """Requests preempted before the step, sorted."""
    hits: tuple[tuple[int, int], ...]
    """(request id, prefix-cache tokens hit) of the requests admitted or resumed in the
    step, sorted by id."""
    padded: tuple[int, ...] = field(default=(), compare=False)
    """Requests vLLM admitted as a 1-token decode padded to 1 + k tokens (its uniform
    speculative decode batch), which chunksim does not model."""


def vllm_steps(scheduler, specs, starts, *, extra_steps: int = 64,
               accept: Callable[[int], int] | None = None) -> list[Step]:
    """Drive `scheduler` over requests `specs` (chunksim `RequestSpec`s, those chunksim
    admitted), step i seeing every request that arrived by `starts[i]` (chunksim's step
    start times, so arrivals align step for step; within `SAME_INSTANT_S` of a start
    counts as by it, since an engine woken by an arrival may record its start rounded
    down by an ulp). After the last start it runs on (everything visible) until it has
    nothing left, at most `extra_steps` more.

    With speculative decoding, every request that sampled proposes the scheduler's k drafts
    after the step, and `accept(d)`, called for each decode that verifies d > 0 drafts in
    batch order, says how many the target accepts (default: none)."""
    block_size = scheduler.block_size
    hasher = request_hasher(block_size)
    k = scheduler.num_spec_tokens
    pending = sorted(specs, key=lambda s: (s.arrival_s, s.request_id))
    out: list[Step] = []
    nxt = 0
    step = 0
    while True:
        now = starts[step] + SAME_INSTANT_S if step < len(starts) else float("inf")
        while nxt < len(pending) and pending[nxt].arrival_s <= now:
            scheduler.add_request(make_request(pending[nxt], block_size, hasher))
            nxt += 1
        if step >= len(starts) and (not scheduler.has_unfinished_requests()
                                    or step >= len(starts) + extra_steps):
            return out
        preempted: list[int] = []
        while True:
            waiting_before = {r.request_id for r in scheduler.waiting}
            so = scheduler.schedule()
            preempted += (int(i) for i in so.preempted_req_ids or ())
            if so.num_scheduled_tokens or not so.preempted_req_ids:
                break
            # it preempted and scheduled nothing (a victim that was the request itself,
            # under priority): no forward pass, and it plans again at once, as chunksim's
            # engine does within one step
            finish_step(scheduler, so)
        ids = list(so.num_scheduled_tokens)
        reqs = [scheduler.requests[i] for i in ids]
        hits = []
        for rid, r in zip(ids, reqs, strict=True):
            if rid in waiting_before:  # num_computed_tokens already includes this step's
                hits.append((int(rid), r.num_computed_tokens - so.num_scheduled_tokens[rid]))
        drafts = so.scheduled_spec_decode_tokens
        padded = tuple(sorted(int(i) for i in ids if i in waiting_before and i in drafts))
        out.append(Step(tuple((int(i), so.num_scheduled_tokens[i]) for i in ids),
                        tuple(sorted(preempted)), tuple(sorted(hits)), padded))
        sampled = {}
        for i, r in zip(ids, reqs, strict=True):
            d = len(drafts.get(i, ()))
            # drafts computed count toward num_computed_tokens until the rejected ones
            # are given back (update_from_output)
            if r.num_computed_tokens - d < r.num_tokens:
                continue  # still in its prompt
            m = (accept or (lambda d: 0))(d) if d else 0
            sampled[i] = [sampled_token(i)] * (m + 1)
        finish_step(scheduler, so, sampled)
        if k:  # the drafts proposed after the step, by every request that sampled
            live = [i for i in ids if i in sampled and i in scheduler.requests]
            scheduler.update_draft_token_ids(vllm_classes()["DraftTokenIds"](
                live, [[sampled_token(i)] * k for i in live]))
        step += 1


def chunksim_steps(log) -> list[Step]:
    """chunksim's schedule log (`simulate(..., schedule_log=True)`) as `Step`s."""
    steps: dict[int, tuple[list, list, list]] = {}
    for row in log.sort_values(["step", "position"]).itertuples():
        sched, pre, hits = steps.setdefault(int(row.step), ([], [], []))
        rid = int(row.request_id)
        if row.kind == "preempted":
            pre.append(rid)
            continue
        sched.append((rid, int(row.tokens)))
        if row.kind in ("new", "resumed"):
            hits.append((rid, int(row.cached_tokens)))
    n = max(steps) + 1 if steps else 0
    return [Step(tuple(s), tuple(sorted(p)), tuple(sorted(h)))
            for s, p, h in (steps.get(i, ([], [], [])) for i in range(n))]


def first_difference(ours: list[Step], theirs: list[Step]) -> str | None:
    """Where two schedules first differ, in words (None: they agree on every step)."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            parts = [f"{name}: chunksim {getattr(a, name)} vs vLLM {getattr(b, name)}"
                     for name in ("scheduled", "preempted", "hits")
                     if getattr(a, name) != getattr(b, name)]
            return f"step {i}: " + "; ".join(parts)
    if len(ours) != len(theirs):
        return (f"chunksim ran {len(ours)} steps, vLLM {len(theirs)} (first extra: "
                f"{(ours + theirs)[min(len(ours), len(theirs))]})")
    return None
