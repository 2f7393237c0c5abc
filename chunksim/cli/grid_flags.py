"""Flags shared by `sim compare`, `sim capacity` and `sim sweep`, declared once.

The grid commands take lists (`--policies`, `--chunks`) instead of `sim run`'s single
`--policy/--variant/--chunk`, and every other option `sim run` has (`cli.options`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from chunksim.sweep.configs import DEFAULT_CHUNKS, DEFAULT_POLICIES

_G = "Grid"

PoliciesOpt = Annotated[str, typer.Option(
    "--policies", rich_help_panel=_G, help=(
        "Comma list of policies (whole, chunk, budget, sjf), each optionally :VARIANT "
        "(whole:mixed, chunk:two-pass, chunk:alternate)."))]
ChunksOpt = Annotated[str, typer.Option(
    "--chunks", rich_help_panel=_G, help=(
        "Comma list of chunk sizes (chunk: tokens per request per step; budget: tokens per "
        "step). `whole` runs once."))]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=1, rich_help_panel=_G, help=(
        "Local worker processes (default: os.cpu_count()); 1 runs inline."))]
SeedsOpt = Annotated[str | None, typer.Option(
    "--seeds", rich_help_panel=_G, help=(
        "Comma list of workload seeds; every configuration (every probe rate) runs once per "
        "seed and tables show the median [min–max]. Default: compare and capacity run 3 "
        "seeds from --seed (--seed, --seed+1, --seed+2); sweep runs --seed."))]
SloOpt = Annotated[list[str] | None, typer.Option(
    "--slo", rich_help_panel=_G, help=(
        "Bound on a summary key in ms, KEY=MS (repeat), e.g. --slo p99_itl_ms=100 --slo "
        "p99_ttft_ms=2000. median_sched_delay_ms=2000 (Sarathi-Serve) is added unless given "
        "(=off drops it). None given: p99_itl_ms=100, p99_ttft_ms=2000 and "
        "median_sched_delay_ms=2000."))]
MaxRejectOpt = Annotated[float, typer.Option(
    "--max-reject-pct", min=0.0, max=100.0, rich_help_panel=_G, help=(
        "Most requests a run may reject (too long for the token budget, the KV cache or "
        "--max-model-len), % of those that arrived, and still meet the SLOs: a capacity "
        "probe or compared configuration that rejects more on any seed fails. Default 0: a "
        "served deployment returns each rejection as an error."))]
FleetOpt = Annotated[list[str] | None, typer.Option(
    "--fleet", rich_help_panel=_G, help=(
        "A fleet layout to run every configuration on (repeat the flag for several): "
        "LAYOUT[,KEY=VALUE...], LAYOUT = N (N replicas) or pd=P:D (P prefill, D decode "
        "instances); keys router=R, decode-router=R, kv-link=L (the last two P/D only). "
        "E.g. --fleet 4,router=least-tokens --fleet pd=2:2,kv-link=ib-400g. Replaces "
        "--replicas / --pd / --replica-groups. With capacity --gpus / --target-rate: one "
        "entry without a layout (router=R,kv-link=L) for every generated split."))]
SpecTokensOpt = Annotated[str | None, typer.Option(
    "--num-speculative-tokens", rich_help_panel=_G, help=(
        "Comma list of draft tokens per step k (speculative decoding; 0 = off), a grid "
        "axis: every configuration runs with each, e.g. 0,2,4 (needs --speculative-method "
        "and the acceptance; budget and sjf only)."))]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", metavar="ADDRESS", rich_help_panel=_G, help=(
        "Run on Ray (pip install 'chunksim\\[ray]'): 'auto' = a running cluster, 'local' = "
        "start one here, or ray://HOST:PORT."))]

__all__ = ["ChunksOpt", "DEFAULT_CHUNKS", "DEFAULT_POLICIES", "FleetOpt", "MaxRejectOpt",
           "PoliciesOpt",
           "RayOpt", "SpecTokensOpt",
           "SeedsOpt", "SloOpt", "WorkersOpt", "command_line",
           "resolved_command"]


def command_line() -> str | None:
    """The command as typed, for a report's 'Reproduce' section (None when not run from
    the `sim` entry point, e.g. under a test runner)."""
    if Path(sys.argv[0]).name != "sim":
        return None
    return "sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def resolved_command(ctx: typer.Context, resolved: dict[str, object] | None = None) -> str:
    """The running command with every option spelled out, defaults included, so the line
    reproduces the run even if a default changes; `resolved` gives the value an unset
    option took where its default is worked out at run time (e.g. `--block-size`, by the
    profile's device), keyed by its long flag."""
    parts = ["sim", ctx.info_name or "?"]
    for p in ctx.command.params:
        if getattr(p, "param_type_name", "") != "option" or p.name not in ctx.params:
            continue
        name = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        v = ctx.params[p.name]
        if v is None and resolved:
            v = resolved.get(name)
        if v is None or (isinstance(v, (list, tuple)) and not v):
            continue
        if p.is_flag:
            if p.secondary_opts:
                parts.append(name if v else p.secondary_opts[0])
            elif v:
                parts.append(name)
            continue
        for x in (v if p.multiple else [v]):
            parts += [name, shlex.quote(str(getattr(x, "value", x)))]
    return " ".join(parts)
