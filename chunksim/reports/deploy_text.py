"""The end of every verdict: the commands that deploy the recommendation (`sweep.deploy`)
and what each configuration costs (`sweep.cost`), as console lines and as a report
section."""

from __future__ import annotations

import math
from collections.abc import Sequence

from chunksim.sweep.cost import Cost, GpuPrice
from chunksim.sweep.deploy import Deployment


def _money(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:.2g}"


def price_text(price: GpuPrice) -> str:
    """`$4.00 per GPU-hour (h200-sxm, source, 2026-05)`."""
    if price.name == "given":
        return f"{_money(price.usd_per_hour)} per GPU-hour (--gpu-cost-per-hour)"
    return (f"{_money(price.usd_per_hour)} per GPU-hour ({price.name}: {price.source}, "
            f"{price.date})")


def cost_headers() -> list[str]:
    return ["configuration", "GPUs", "offered req/s", "served req/s", "served output tok/s",
            "$ per M output tok", "GPU-h per day", "$ per day"]


def cost_rows(costs: Sequence[Cost]) -> list[list[str]]:
    return [[c.label, str(c.gpus), f"{c.rate:.3g}", _served(c), f"{c.output_tok_per_s:,.0f}",
             _money(c.usd_per_mtok), f"{c.gpu_hours_per_day:g}", _money(c.usd_per_day)]
            for c in costs]


def _served(c: Cost) -> str:
    if not math.isfinite(c.served_rate):
        return "–"
    return f"{c.served_rate:.3g}" + (f" ({c.rejected_pct:.3g} % rejected)"
                                     if c.rejected_pct > 0 else "")


def _at(c: Cost, at: str) -> str:
    """`12.5 req/s (its capacity)`, or with rejections `740 req/s offered (its capacity),
    88 served (87 % rejected)`."""
    if c.rejected_pct > 0 and math.isfinite(c.served_rate):
        return (f"{c.rate:.3g} req/s offered ({at}), {c.served_rate:.3g} served "
                f"({c.rejected_pct:.3g} % rejected)")
    return f"{c.rate:.3g} req/s ({at})"


def cost_sentence(c: Cost, price: GpuPrice, at: str) -> str:
    """The answer as a cost: `budget 2048 on 1 GPU: $0.41 per million output tokens at
    12.5 req/s (its capacity), 24 GPU-hours a day ($96)`."""
    gpus = f"{c.gpus} GPU{'s' if c.gpus != 1 else ''}"
    return (f"**Cost: {_money(c.usd_per_mtok)} per million output tokens** — {c.label} on "
            f"{gpus} at {_at(c, at)}, {c.output_tok_per_s:,.0f} output tok/s served; "
            f"{c.gpu_hours_per_day:g} GPU-hours a day ({_money(c.usd_per_day)} a day at "
            f"{price_text(price)}).")


def deploy_lines(d: Deployment) -> list[str]:
    """The deployment as Markdown inline lines (commands in `code`)."""
    head = (f"**Deploy {d.label}** ({d.gpus} GPU{'s' if d.gpus != 1 else ''}; flags "
            f"checked against {d.versions})"
            + ("" if d.exact else " — the closest engine flags, not an exact equivalent")
            + ":")
    lines = [head]
    for c in d.vllm:
        lines.append(f"{_count(c)}`{c.text}`")
    if d.sglang:
        lines.append("SGLang equivalent:")
        lines += [f"{_count(c)}`{c.text}`" for c in d.sglang]
    else:
        lines.append("SGLang equivalent: none for this policy.")
    lines.append(f"Check it on the hardware: `{d.bench}`")
    lines += check_lines(d)
    lines += [f"Note: {n}." for n in d.notes]
    return lines


def check_lines(d: Deployment) -> list[str]:
    """What follows the bench line: the `sim validate` line its result goes to, or, for a
    fleet, the one-instance bench that line replays, or what to do instead."""
    if d.validate is None:
        return [f"No validate line: {d.check}."]
    if d.instance_bench is not None:
        return [f"To validate: {d.check}:", f"`{d.instance_bench}`", f"then: `{d.validate}`"]
    return [f"then: `{d.validate}`"]


def _count(c) -> str:
    if c.role == "serve":
        return f"{c.count}× " if c.count > 1 else ""
    return f"{c.count}× {c.role}: "


def print_deploy(d: Deployment | None, costs: Sequence[Cost] = (), price: GpuPrice | None = None,
                 at: str = "", console=None) -> None:
    """The console's closing lines: the deployment, then the costs (a table)."""
    from rich.table import Table

    from chunksim.reports.console import make_console

    con = console or make_console()
    for line in deploy_lines(d) if d is not None else []:
        con.print(line.replace("**", "").replace("`", ""), markup=False, highlight=False,
                  soft_wrap=True)
    if costs and price is not None:
        t = Table(title=f"cost at {price_text(price)}", title_justify="left",
                  show_edge=False, pad_edge=False)
        for col in cost_headers():
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for row in cost_rows(costs):
            t.add_row(*row)
        con.print(t)
        best = next((c for c in costs if d is not None and c.label == d.label), None)
        if best is not None:
            con.print(cost_sentence(best, price, at).replace("**", ""), markup=False,
                      highlight=False)


def deploy_section(doc, d: Deployment | None, costs: Sequence[Cost] = (),
                   price: GpuPrice | None = None, at: str = "") -> None:
    """The report's "Deploy it" section (and "Cost", when a price was given)."""
    if d is not None:
        _deploy_blocks(doc, d)
    if costs and price is not None:
        doc.heading("Cost")
        best = next((c for c in costs if d is not None and c.label == d.label), None)
        if best is not None:
            doc.para(cost_sentence(best, price, at))
        doc.table(cost_headers(), cost_rows(costs))
        doc.para("$ per million output tokens = GPUs × price per GPU-hour ÷ (served output "
                 "tokens/s × 3600) × 10⁶, at the rate offered in the row (a rejected request "
                 "produces no tokens); GPU-hours per day = GPUs × 24; "
                 f"price: {price_text(price)}.")


def _deploy_blocks(doc, d: Deployment) -> None:
    doc.heading("Deploy it")
    lines = deploy_lines(d)
    doc.para(lines[0])
    doc.code("\n".join((f"# {c.count}x {c.role}\n" if c.count > 1 or c.role != "serve"
                        else "") + c.text for c in d.vllm))
    if d.sglang:
        doc.para(f"SGLang equivalent (SGLang {d.versions.split('SGLang ')[-1]}):")
        doc.code("\n".join((f"# {c.count}x {c.role}\n" if c.count > 1 or c.role != "serve"
                            else "") + c.text for c in d.sglang))
    else:
        doc.para("SGLang equivalent: none for this policy.")
    if d.validate is not None and d.instance_bench is None:
        doc.para("Check it on the hardware, then compare the measurement with this "
                 "prediction:")
        doc.code(f"{d.bench}\n{d.validate}")
    else:
        doc.para("Check it on the hardware:")
        doc.code(d.bench)
        if d.validate is None:
            doc.para(f"No validate line: {d.check}.")
        else:
            doc.para(f"To validate, {d.check}:")
            doc.code(f"{d.instance_bench}\n{d.validate}")
    if d.notes:
        doc.bullets(list(d.notes))


def insert_after_verdict(doc, section) -> None:
    """Run `section(doc)` and move the blocks it added to just after the verdict box (the
    end of the document when it has none): the answer's next step reads next to it."""
    start = len(doc.blocks)
    section(doc)
    added = doc.blocks[start:]
    del doc.blocks[start:]
    at = next((i + 1 for i, b in enumerate(doc.blocks) if b[0] == "verdict"), len(doc.blocks))
    doc.blocks[at:at] = added
