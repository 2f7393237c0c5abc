"""The installed vLLM's own V1 scheduler as a policy (checked against the vLLM version
modelled, `core.vllm_version.VLLM_VERSION`: tests/test_vllm_policy.py).

Every scheduling decision (which requests run, how many tokens each, which are preempted,
what each admission hits in the prefix cache) is made by `vllm.v1.core.sched.scheduler.
Scheduler` of the vLLM version installed, built without a model (`policies.vllm_driver`)
from the knobs `budget` takes (vLLM's flag names) and chunksim's KV cache size (block
size, `--kv-blocks` = vLLM's num_gpu_blocks, prefix caching). chunksim's engine does the
rest as for any policy: step costs, its own KV accounting, metrics and reports. For a user
who needs their exact version's behaviour on a small run (it plans every step: no bulk
decode), and the reference `budget` is compared against (tests/test_vllm_differential.py).

One vLLM scheduler per engine, keyed on the engine's KV cache (`_RUNS`): the policy object
itself stays a frozen set of knobs. Each `plan` first ends vLLM's previous step with what
chunksim's engine did in it (a request sampled iff its output count grew), adds the
requests that arrived since, asks vLLM for a step and translates its `SchedulerOutput` into
a `Plan`, which the engine applies. vLLM's decisions rule; chunksim's KV cache follows them.
The two are kept honest every step: each request's computed tokens, the free blocks and
each admission's prefix hit must agree, else the run stops with `VllmDisagreement` naming
the step (known case: two requests computing the same prefix block at once, which vLLM
caches twice and chunksim once; docs/guide.md).

Not modelled here: speculative decoding, --async-scheduling, the CPU KV tier, P/D
(requests carrying their KV), `--max-num-partial-prefills` and `--class-chunk` (not vLLM's).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import ClassVar

from chunksim.core.kv_cache import NULL_BLOCKS
from chunksim.core.ledger import KVLedger
from chunksim.core.plan import Plan, SchedulerState
from chunksim.policies.budget import TokenBudgetPolicy

# (policies.vllm_driver is imported by the first plan: a run of another policy never loads it)


class VllmDisagreement(ValueError):
    """vLLM's scheduler and chunksim's KV cache no longer describe the same state."""


@dataclass(frozen=True)
class VllmPolicy(TokenBudgetPolicy):
    """The installed vLLM's V1 scheduler, step by step (needs the `vllm` extra)."""

    name: ClassVar[str] = "vllm"
    bulk_decode: ClassVar[bool] = False  # vLLM plans every step
    speculative: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_num_partial_prefills or self.class_chunk_caps:
            raise ValueError(
                "--max-num-partial-prefills and --class-chunk are not vLLM V1 scheduler "
                "knobs; --policy vllm runs vLLM's own scheduler: drop them (or use "
                "--policy budget)")

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        # without chunked prefill vLLM runs with max_model_len = the token budget
        if not self.enable_chunked_prefill and (
                prompt_tokens + output_tokens > self.max_num_batched_tokens):
            return (f"prompt+output {prompt_tokens}+{output_tokens} tokens exceeds the token "
                    f"budget {self.max_num_batched_tokens}, vLLM's max_model_len without "
                    "chunked prefill (raise --max-num-batched-tokens or drop "
                    "--no-enable-chunked-prefill)")
        return None

    def plan(self, state: SchedulerState) -> Plan:
        run = _RUNS.get(state.kv)
        if run is None:
            run = _RUNS[state.kv] = _Run(self, state)
        return run.plan(state)


_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""The vLLM scheduler of each engine, by the engine's KV cache (gone with it)."""


class _Run:
    """One engine's vLLM scheduler and what ties its requests to chunksim's."""

    def __init__(self, policy: VllmPolicy, state: SchedulerState) -> None:
        import chunksim.policies.vllm_driver as d

        self.d = d
        kv = state.kv
        if kv.carried or getattr(kv, "host", None) is not None or state.held_seats:
            raise ValueError(_UNSUPPORTED)
        self.policy = policy
        self.kv = kv
        bs = kv.block_size
        cap = d.NO_CAP if policy.enable_chunked_prefill else policy.max_num_batched_tokens
        try:
            self.sched = d.build_scheduler(policy, kv.num_blocks + NULL_BLOCKS, bs,
                                         kv.prefix_caching, cap)
        except (ValueError, TypeError) as e:  # vLLM's config validation, in its words
            raise ValueError(f"--policy vllm: vLLM refuses these settings: "
                             f"{str(e).splitlines()[0]}") from None
        self.hasher = d.request_hasher(bs)
        self.hash_tokens = getattr(kv, "hash_tokens", 0) or bs
        self.hash_ids: dict[int, int] = {}
        self.requests: dict[str, object] = {}  # vLLM id -> chunksim Request
        self.last = None  # (SchedulerOutput, {id: outputs before the step}) not yet ended
        self.steps = 0

    def _hash_id(self, h) -> int:
        """A workload's prefix hash as a small int (dense, in order seen)."""
        ids = self.hash_ids
        i = ids.get(h)
        if i is None:
            i = ids[h] = len(ids) + 1
            if i >= self.d.TOKEN_SPAN:
                raise ValueError(f"--policy vllm takes at most {self.d.TOKEN_SPAN - 1} distinct "
                                 "prefix hashes in one run")
        return i

    def plan(self, state: SchedulerState) -> Plan:
        if state.held_seats or state.kv.carried:
            raise ValueError(_UNSUPPORTED)
        sched = self.sched
        self._end_step()
        for req in state.waiting:
            rid = str(req.request_id)
            if rid not in self.requests:
                self.requests[rid] = req
                sched.add_request(self.d.make_request(req.spec, self.kv.block_size, self.hasher,
                                               self.hash_tokens, self._hash_id))
        waiting = {str(r.request_id) for r in state.waiting}
        so = sched.schedule()
        reqs = self.requests
        entries = so.num_scheduled_tokens
        scheduled = tuple((reqs[i], n) for i, n in entries.items())
        admitted = tuple(reqs[i] for i in entries if i in waiting)
        preempted = self._victims(state, so.preempted_req_ids or ())
        self.last = (so, {i: reqs[i].num_output_tokens for i in entries} if entries else None)
        if admitted:
            self._check_hits(scheduled, admitted, preempted)
        return Plan(scheduled, admitted, preempted)

    def _victims(self, state: SchedulerState, ids) -> tuple:
        """The requests vLLM preempted, in its order: the last of the running list first
        (FCFS), or the lowest priority, latest arrival first (priority)."""
        if not ids:
            return ()
        victims = [self.requests[i] for i in ids]
        if self.policy.priority_scheduling:
            victims.sort(key=lambda r: (r.spec.priority, r.spec.arrival_s, r.request_id),
                         reverse=True)
        else:
            at = {id(r): n for n, r in enumerate(state.running)}
            victims.sort(key=lambda r: at[id(r)], reverse=True)
        return tuple(victims)

    def _end_step(self) -> None:
        """End vLLM's previous step with what chunksim's engine did in it, then check that
        the two still agree."""
        if self.last is None:
            return
        so, before = self.last
        self.last = None
        if before is None:  # it only preempted: no forward pass
            self.d.finish_step(self.sched, so)
            return
        reqs = self.requests
        sampled = {i: [self.d.sampled_token(reqs[i].request_id)] for i, n in before.items()
                   if reqs[i].num_output_tokens > n}
        self.d.finish_step(self.sched, so, sampled)
        self.steps += 1
        live = self.sched.requests
        for i in before:
            req = reqs[i]
            done = req.num_output_tokens >= req.spec.output_tokens
            theirs = live.get(i)
            if done != (theirs is None or theirs.is_finished()):
                self._disagree(f"request {i} {'finished' if done else 'runs on'} in "
                               "chunksim, not in vLLM")
            if done:
                del reqs[i]
            elif theirs.num_computed_tokens != req.num_computed_tokens:
                self._disagree(f"request {i} has computed {req.num_computed_tokens} tokens "
                               f"in chunksim, {theirs.num_computed_tokens} in vLLM")
        free = self.sched.kv_cache_manager.block_pool.get_num_free_blocks()
        if free != self.kv.free_blocks:
            self._disagree(f"{self.kv.free_blocks} KV blocks free in chunksim, {free} in "
                           "vLLM")

    def _check_hits(self, scheduled, admitted, preempted) -> None:
        """Each admission's prefix hit in chunksim's cache (as the engine will take it, in
        batch order) must be vLLM's."""
        ledger = KVLedger(self.kv)
        first_new = len(scheduled) - len(admitted)
        if preempted or any(r is not a for a, (r, _) in zip(
                admitted, scheduled[first_new:], strict=True)):
            return  # (vLLM admits nothing in a step that preempts; admissions come last)
        for req, n in scheduled[:first_new]:
            ledger.try_grow(req, n)
        for req, n in scheduled[first_new:]:
            ours = ledger.cached(req)
            theirs = self.sched.requests[str(req.request_id)].num_computed_tokens - n
            if ours != theirs:
                self._disagree(f"request {req.request_id} hits {theirs} prefix-cached "
                               f"tokens in vLLM, {ours} in chunksim's cache")
            ledger.try_admit(req, n)

    def _disagree(self, what: str) -> None:
        raise VllmDisagreement(
            f"--policy vllm: vLLM's scheduler and chunksim's KV cache disagree after step "
            f"{self.steps}: {what} (see docs/guide.md, the vllm policy's known differences; "
            "--policy budget runs this workload)")


_UNSUPPORTED = ("--policy vllm does not model --async-scheduling, the CPU KV tier "
                "(--kv-offload-gib) or P/D (--pd): drop them, or use --policy budget")
