"""CLI options derived from the library's frozen config dataclasses: a knob is declared once,
as a field with a docstring (`chunksim.core.knobs.knob`), and becomes a typer option here:
flag names and panel from its metadata, help from its docstring.

    @with_run_options          # RunConfig + EngineConfig + every policy's knobs
    @with_workload_options     # WorkloadOptions
    def run(run_cfg: RunConfig, workload_opts: WorkloadOptions, profile: ProfileOpt = None):
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from enum import Enum
from typing import Annotated, Any

import typer

from chunksim.cli import help_format
from chunksim.core.knobs import Flag, field_docs, flag_of
from chunksim.core.speculative import SpecConfig, SpecMethod
from chunksim.latency.profile import DEFAULT_PROFILE
from chunksim.policies import POLICIES, knob_owners
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.engine.offload_config import OffloadConfig
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.records.outputs import OutputConfig
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions

Param = tuple[str, Any, Any]
"""(parameter name, Annotated type with its typer.Option, default)."""

POLICY_PANEL = "Policy"

PolicyChoice = Enum("PolicyChoice", {name: name for name in POLICIES}, type=str)  # type: ignore[misc]
"""`--policy` choices: the registry's families."""

ProfileOpt = Annotated[str | None, typer.Option(
    "--profile", rich_help_panel="Engine and KV cache", help=(
        f"Latency profile: a bundled name (default {DEFAULT_PROFILE}) or a CSV written "
        "by `sim profile` (either kind)."))]


def _option(name: str, hint: Any, default: Any, flag: Flag, doc: str, panel: str | None,
            optional: bool = False) -> Param:
    if flag.cli_type is not None:
        hint = flag.cli_type
    if optional and type(None) not in typing.get_args(hint):
        hint = hint | None
    names = flag.names or ("--" + name.replace("_", "-"),)
    kw: dict[str, Any] = {"help": doc, "rich_help_panel": flag.panel or panel}
    if flag.min_open:  # the bound itself is refused: say x>MIN, as the check does
        kw["callback"] = _above(flag.min)
        kw["help"] = f"{doc} \\[x>{flag.min:g}]"  # escaped: rich markup would eat it
    elif flag.min is not None:
        kw["min"] = flag.min
    if flag.max is not None:
        kw["max"] = flag.max
    if flag.hidden:
        kw["hidden"] = True
    return name, Annotated[hint, typer.Option(*names, **kw)], default


def _above(low: float) -> Callable[[Any], Any]:
    """Option callback refusing values <= `low` in click's words for a range."""

    def check(value: Any) -> Any:
        if value is not None and not value > low:
            raise typer.BadParameter(f"{value} is not in the range x>{low:g}.")
        return value

    return check


def options_of(cls: type, panel: str | None = None, skip: tuple[str, ...] = (),
               types: dict[str, Any] | None = None) -> list[Param]:
    """One option per field of `cls` that declares a flag (`knob`), in field order.
    `types` overrides a field's CLI type (e.g. an Enum of choices)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls) if help_format.wanted() else {}
    out = []
    for f in fields(cls):
        flag = f.metadata.get("flag")
        if flag is None or f.name in skip:
            continue
        hint = (types or {}).get(f.name, hints[f.name])
        default = None if flag.cli_type is not None or f.default is MISSING else f.default
        out.append(_option(f.name, hint, default, flag, docs.get(f.name, ""), panel))
    return out


def _values(cls: type, picked: dict[str, Any]) -> dict[str, Any]:
    """Option values -> field values (`Flag.parse` applied; None for an unset list flag
    keeps the field's default)."""
    out = {}
    for f in fields(cls):
        if f.name not in picked:
            continue
        flag: Flag = f.metadata["flag"]
        v = picked[f.name]
        if isinstance(v, list) and not v:
            v = None
        if v is None and flag.cli_type is not None:
            continue
        out[f.name] = flag.parse(v) if (flag.parse is not None and v is not None) else v
    return out


def _policy_knob_options(skip: tuple[str, ...]) -> list[Param]:
    """Every policy family's knobs, one option each (default None = the family's default;
    help: `_shared_doc`)."""
    owners = knob_owners()
    out = []
    for name, fams in owners.items():
        if name in skip:
            continue
        cls = POLICIES[fams[0]]
        doc = _shared_doc(name, fams) if help_format.wanted() else ""
        hint = typing.get_type_hints(cls)[name]
        out.append(_option(name, hint, None, flag_of(cls, name), doc, POLICY_PANEL,
                           optional=True))
    return out


def _shared_doc(name: str, fams: list[str]) -> str:
    """Help of policy knob `name`: its docstring, prefixed with the families that have it
    when not all do."""
    by_doc: dict[str, list[str]] = {}
    for fam in fams:
        by_doc.setdefault(field_docs(POLICIES[fam]).get(name, ""), []).append(fam)
    if len(by_doc) == 1 and len(fams) == len(POLICIES):
        return next(iter(by_doc))
    return " ".join(f"{', '.join(fs)}: {d}" for d, fs in by_doc.items())


_RUN_SKIP = ("knobs", "engine", "fleet", "offload")
_ENGINE_SKIP = ("seed",)


def _policy_help() -> str:
    lines = [(field_docs(RunConfig).get("policy") or "").rstrip(".") + ":"]
    for name, cls in POLICIES.items():
        first = (cls.__doc__ or "").strip().splitlines()[0].rstrip(".")
        lines.append(f"{name} = {first[:1].lower()}{first[1:]};")
    return " ".join(lines).rstrip(";") + "."


def run_params(single_policy: bool = True) -> list[Param]:
    """`sim run`'s policy, engine and KV options; without `single_policy` (the grid
    commands, which take --policies/--chunks) no --policy, --chunk or --variant."""
    skip = _RUN_SKIP if single_policy else _RUN_SKIP + ("policy", "chunk")
    params = options_of(RunConfig, POLICY_PANEL, skip, {"policy": PolicyChoice})
    if single_policy:
        name, hint, default = params[0]
        _, opt = typing.get_args(hint)
        opt.help = _policy_help() if help_format.wanted() else ""
        params[0] = (name, hint, PolicyChoice(default))
    params += options_of(EngineConfig, "Engine and KV cache", _ENGINE_SKIP)
    # the grid commands take --num-speculative-tokens as a list (`grid_flags`)
    params += options_of(SpecConfig, "Speculative decoding",
                         () if single_policy else ("num_speculative_tokens",),
                         types={"speculative_method": SpecMethod | None})
    params += options_of(FleetConfig, "Fleet")
    params += options_of(OffloadConfig, "Engine and KV cache")
    own = {f.name for f in fields(RunConfig)}
    params += _policy_knob_options(tuple(own) + (() if single_policy else ("variant",)))
    return params


def build_run_config(picked: dict[str, Any]) -> RunConfig:
    """Parsed options -> RunConfig (policy knobs left unset stay out of `knobs`)."""
    run = _values(RunConfig, picked)
    if "policy" in run:
        run["policy"] = PolicyChoice(run["policy"]).value
    engine = EngineConfig(**_values(EngineConfig, picked),
                          speculative=SpecConfig(**_values(SpecConfig, picked)))
    fleet = FleetConfig(**_values(FleetConfig, picked))
    offload = OffloadConfig(**_values(OffloadConfig, picked))
    knobs = {}
    for name, fams in knob_owners().items():  # a knob's flag is the same in every family
        if name not in run:
            knobs.update(_values(POLICIES[fams[0]], {name: picked.get(name)}))
    knobs = {k: v for k, v in knobs.items() if v is not None}  # unset: the family's default
    return RunConfig(**run, engine=engine, fleet=fleet, offload=offload, knobs=knobs)


def load_run_profile(profile: str | None, run_cfg: RunConfig):
    """The profile a command runs on: --profile, or under --replica-groups the first
    group's (which stands for the fleet in summaries); refuses both at once, since
    --profile would then price nothing."""
    from chunksim.latency.profile import load_profile

    groups = run_cfg.fleet.groups
    if groups is None:
        return say_calibration(load_profile(profile))
    if profile is not None:
        raise ValueError(f"--profile {profile} and --replica-groups "
                         f"{run_cfg.fleet.replica_groups} both choose the profile; name each "
                         "group's profile in --replica-groups (PROFILE:COUNT,...) and drop "
                         "--profile")
    from chunksim.sim.fleet_run import group_profile

    return say_calibration(group_profile(groups[0][0]))


def say_calibration(profile):
    """Say on stderr that a profile carries a `sim calibrate` fit, which prices every
    step of the run (a calibrated profile's name need not say so); the profile back."""
    from chunksim.validate.match import calibration_note

    note = calibration_note(profile.provenance)
    if note:
        typer.echo(f"note: {profile.path}: {note}", err=True)
    return profile


def bundle(params: list[Param], build: Callable[[dict[str, Any]], Any], kw: str) -> Callable:
    """Decorator adding `params` to a command's signature and passing `kw=build(values)`."""
    names = [name for name, _, _ in params]

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        if kw not in sig.parameters:
            raise TypeError(f"{fn.__name__} must take a `{kw}` parameter")
        own = [p for p in sig.parameters.values() if p.name != kw]
        clash = {p.name for p in own} & set(names)
        if clash:
            raise TypeError(f"{fn.__name__} parameters {sorted(clash)} clash with {kw} flags")
        extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
                 for n, a, d in params]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            picked = {n: kwargs.pop(n) for n in names if n in kwargs}
            return fn(*args, **{kw: build(picked)}, **kwargs)

        # Typer reads the signature and the type hints: give it resolved objects for both.
        wrapper.__signature__ = sig.replace(parameters=own + extra)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
        del wrapper.__wrapped__
        return wrapper

    return deco


def with_run_options(fn: Callable) -> Callable:
    """Add `sim run`'s policy/engine options; the command receives `run_cfg: RunConfig`."""
    return bundle(run_params(True), build_run_config, "run_cfg")(fn)


def with_grid_run_options(fn: Callable) -> Callable:
    """As `with_run_options` minus --policy/--chunk/--variant (grid commands)."""
    return bundle(run_params(False), build_run_config, "run_cfg")(fn)


def with_workload_options(fn: Callable) -> Callable:
    """Add every workload option; the command receives `workload_opts: WorkloadOptions`."""
    return bundle(options_of(WorkloadOptions, "Workload"),
                  lambda picked: WorkloadOptions(**_values(WorkloadOptions, picked)),
                  "workload_opts")(fn)


def with_output_options(fn: Callable) -> Callable:
    """Add --format and --steps; the command receives `output_cfg: OutputConfig`."""
    return bundle(options_of(OutputConfig, "Outputs"),
                  lambda picked: OutputConfig(**_values(OutputConfig, picked)),
                  "output_cfg")(fn)
