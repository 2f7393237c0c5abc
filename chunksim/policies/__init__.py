"""Scheduling policies, each one file: a frozen dataclass whose fields are its knobs and
whose `plan(state) -> Plan` is pure. `POLICIES` is the registry (adding a policy is a new
file plus one line here); `make_policy` builds one from the knobs a user gave."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from chunksim.core.knobs import flag_name
from chunksim.core.plan import Plan, Policy, SchedulerState
from chunksim.core.vllm_version import Device
from chunksim.policies.budget import TokenBudgetPolicy
from chunksim.policies.chunk import FixedChunkPolicy
from chunksim.policies.sjf import ShortestJobFirstPolicy
from chunksim.policies.vllm import VllmPolicy
from chunksim.policies.whole import WholePrefillPolicy

__all__ = ["Plan", "Policy", "SchedulerState", "POLICIES", "VARIANTS", "make_policy",
           "chosen_defaults", "knob_owners", "TokenBudgetPolicy", "FixedChunkPolicy",
           "ShortestJobFirstPolicy", "VllmPolicy", "WholePrefillPolicy"]

POLICIES: dict[str, type] = {
    "whole": WholePrefillPolicy,
    "chunk": FixedChunkPolicy,
    "budget": TokenBudgetPolicy,
    "sjf": ShortestJobFirstPolicy,
    "vllm": VllmPolicy,
}
"""Every policy family by its `--policy` name, in display order."""

VARIANTS: dict[str, tuple[str, ...]] = {
    name: getattr(cls, "variants", ()) for name, cls in POLICIES.items()}
"""Each family's variants, the default first (empty: the family has none)."""


def knob_owners() -> dict[str, list[str]]:
    """Each policy knob (field name) -> the families that have it, in registry order."""
    owners: dict[str, list[str]] = {}
    for name, cls in POLICIES.items():
        for f in fields(cls):
            owners.setdefault(f.name, []).append(name)
    return owners


def _family(name: str) -> type:
    try:
        return POLICIES[str(name)]
    except KeyError:
        raise ValueError(f"--policy {name!r} is unknown; choose one of "
                         f"{', '.join(POLICIES)}") from None


def _resolve(name: str, knobs: Mapping[str, Any], chunk: int | None) -> dict[str, Any]:
    """The knobs given (None = not given) for family `name`, --chunk mapped onto the
    family's chunk knob; a knob the family lacks is refused, naming who has it."""
    cls = _family(name)
    own = {f.name for f in fields(cls)}
    given = {k: v for k, v in knobs.items() if v is not None}
    owners_of = knob_owners()
    for k in given:
        if k not in own:
            owners = owners_of.get(k)
            if not owners:
                raise ValueError(f"{k!r} is no policy knob; knobs: {', '.join(owners_of)}")
            flags = ", ".join(flag_name(cls, f) for f in sorted(own))
            raise ValueError(
                f"{flag_name(POLICIES[owners[0]], k)} does not apply to --policy {name} "
                f"(it is a knob of {', '.join(owners)}); --policy {name} takes {flags}")
    if chunk is not None:
        target = cls.chunk_knob
        if target is None:
            raise ValueError(
                f"--chunk does not apply to --policy {name}: it runs whole prompts (cap a "
                "step with --max-num-batched-tokens)")
        if given.get(target, chunk) != chunk:
            raise ValueError(
                f"--chunk {chunk} and {flag_name(cls, target)} {given[target]} disagree: for "
                f"--policy {name} they are the same knob; give one")
        given[target] = chunk
    return given


def chosen_defaults(name: str, knobs: Mapping[str, Any] = {}, chunk: int | None = None,
                    device_name: Device | str | None = None) -> dict[str, dict[str, Any]]:
    """The device-dependent defaults this run took (knobs the user left unset):
    {knob: {"value": v, "why": reason}}, for the summary and the console."""
    cls = _family(name)
    given = _resolve(name, knobs, chunk)
    return {k: {"value": v, "why": why}
            for k, (v, why) in cls.device_defaults(device_name, given).items() if k not in given}


def make_policy(name: str, knobs: Mapping[str, Any] = {}, chunk: int | None = None,
                device_name: Device | str | None = None) -> Policy:
    """Build family `name` from the knobs given (None = the modelled system's default, which
    may depend on the profiled device; see `chosen_defaults`)."""
    cls = _family(name)
    given = _resolve(name, knobs, chunk)
    for k, (v, _) in cls.device_defaults(device_name, given).items():
        given.setdefault(k, v)
    return cls(**given)
