"""`sim validate --against`: the console table, the figure of predicted and measured CDFs
overlaid (TTFT, ITL, TPOT, E2E) and the page that shows both (validation.html)."""

from __future__ import annotations

import html
import io
from pathlib import Path

import numpy as np

from chunksim import atomic
from chunksim.reports.validation_table import _fmt

SHOWN = ("mean", "median", "p99")
"""The statistics the table shows (validation.json also has P90)."""
METRICS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2el", "E2E"))
THROUGHPUT = (("request_throughput", "requests/s"), ("output_throughput", "output tok/s"),
              ("total_token_throughput", "total tok/s"))


def rows(report: dict) -> list[tuple[str, str, str, str]]:
    """(figure, predicted, measured, error %) for the table, P50 spelled P50."""
    out = []
    m = report["metrics"]
    for key, name in METRICS:
        for stat in SHOWN:
            row = m[f"{stat}_{key}_ms"]
            label = f"{'P50' if stat == 'median' else stat.upper() if stat != 'mean' else 'mean'}"
            err = row["error_pct"]
            out.append((f"{label} {name} (ms)", _fmt(row["predicted"]), _fmt(row["measured"]),
                        "—" if err is None else f"{err:+.1f}"))
    for key, name in THROUGHPUT:
        row = m[key]
        err = row["error_pct"]
        out.append((name, _fmt(row["predicted"]), _fmt(row["measured"]),
                    "—" if err is None else f"{err:+.1f}"))
    return out


def print_against(report: dict, console=None) -> None:
    """The predicted-vs-measured table and where the arrivals came from."""
    from rich.table import Table

    from chunksim.reports.console import make_console

    console = console or make_console()
    t = Table(title=f"{report['policy']} · {report['results'].rsplit('/', 1)[-1]} · "
                    f"{report['profile_label']}")
    for col, just in (("figure", "left"), ("predicted", "right"), ("measured", "right"),
                      ("error %", "right")):
        t.add_column(col, justify=just)
    for r in rows(report):
        t.add_row(*r)
    console.print(t)
    console.print(f"{report['requests']} requests ({report['results_format']} results; "
                  f"{report['failed_in_results']} failed left out); arrivals "
                  f"{report['arrivals']}", markup=False, highlight=False)
    for note in [timing(report), *report.get("notes", [])]:
        console.print(f"note: {note}", markup=False, highlight=False)


def timing(report: dict) -> str:
    """Where the measured times were taken: client-side for a bench tool's file; a
    generic file's own times otherwise, whose origin it does not record."""
    inc = report.get("measured_includes")
    if inc:
        return f"measured figures include {inc}"
    return ("measured figures are the file's own times (it does not record whether a "
            "client or the engine took them)")


CDF_POINTS = 2001
"""A CDF of more samples than this is drawn through this many quantiles: the curve is
the same to the eye, and a million-token bench draws in a moment."""


def _quantiles(values) -> np.ndarray:
    """Sorted values to draw, or evenly spaced quantiles of a large or streamed sample
    (`sim.records.quantiles.Samples` keeps a histogram, not values, past a size)."""
    if getattr(values, "exact", True) is False:
        return (values.percentile(np.linspace(0, 100, CDF_POINTS)) if len(values)
                else np.zeros(0))
    x = np.asarray(values, dtype=float)
    x = np.sort(x[np.isfinite(x)])
    if len(x) > CDF_POINTS:
        x = np.quantile(x, np.linspace(0, 1, CDF_POINTS))
    return x


def _cdf(ax, values, scale: float, label: str, style: str) -> None:
    x = _quantiles(values) * scale
    if len(x):
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), style, label=label, lw=1.4)


def _series(v) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    from chunksim.sim.metrics.metrics import per_request

    sim = per_request(v.sim.requests)
    run = v.run
    multi = run.output_tokens > 1
    tpot = (run.e2el_s[multi] - run.ttft_s[multi]) / (run.output_tokens[multi] - 1)
    itl = np.concatenate(run.itl_s) if run.itl_s is not None and len(run.itl_s) else None
    return {"ttft": (sim["ttft"], run.ttft_s), "itl": (v.sim.itl_s, itl),
            "tpot": (sim["tpot"], tpot), "e2el": (sim["e2el"], run.e2el_s)}


def plot_against(v, out_dir: str | Path) -> list[Path]:
    """validation.png (2 x 2 CDFs, predicted dashed over measured) and validation.html."""
    from chunksim.reports import style

    plt = style.pyplot()
    out = Path(out_dir)
    series = _series(v)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (key, name) in zip(axes.flat, METRICS, strict=True):
        pred, meas = series[key]
        if meas is not None:
            _cdf(ax, meas, 1e3, "measured", "-")
        else:
            ax.text(0.5, 0.5, "the results file has no token gaps", ha="center",
                    transform=ax.transAxes)
        _cdf(ax, pred, 1e3, "predicted", "--")
        ax.set(xlabel=f"{name} (ms)", ylabel="CDF", title=name)
        if key in ("itl", "ttft") and len(pred) and _quantiles(pred)[0] > 0:
            ax.set_xscale("log")
        ax.legend()
    r = v.report
    fig.suptitle(f"{r['policy']} · {r['results'].rsplit('/', 1)[-1]} · {r['profile_label']}",
                 fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic.write_bytes(out / "validation.png", buf.getvalue())
    atomic.write_text(out / "validation.html", page(r))
    return [out / "validation.png", out / "validation.html"]


def page(report: dict) -> str:
    """The report page: the table, where the arrivals came from, and the CDF figure."""
    e = html.escape
    body = "".join(f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td><td>{e(d)}</td></tr>"
                   for a, b, c, d in rows(report))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>validation</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "td,th{padding:2px 10px;text-align:right}td:first-child{text-align:left}"
        "</style></head><body>"
        f"<h1>Predicted vs measured: {e(report['results'].rsplit('/', 1)[-1])}</h1>"
        f"<p>{e(report['policy'])} on {e(report['profile_label'])}; {report['requests']} "
        f"requests ({e(report['results_format'])} results); arrivals "
        f"{e(report['arrivals'])}. Error = (predicted − measured) / measured; "
        f"{e(timing(report))}.</p>"
        + "".join(f"<p><b>warning:</b> {e(w)}</p>" for w in report.get("warnings", []))
        + "".join(f"<p>note: {e(n)}</p>" for n in report.get("notes", [])) +
        "<table><tr><th>figure</th><th>predicted</th><th>measured</th><th>error %</th></tr>"
        f"{body}</table>"
        "<p><img src='validation.png' alt='predicted and measured CDFs of TTFT, ITL, TPOT "
        "and E2E' width='100%'></p></body></html>\n")


def _errors(errors: dict, stat: str = "mean") -> str:
    parts = []
    for name, errs in errors.items():
        shown = ", ".join(f"{k.split('_')[1].upper().replace('E2EL', 'E2E')} "
                          f"{errs[k]:+.1f} %" for k in (f"{stat}_ttft_ms", f"{stat}_tpot_ms",
                                                        f"{stat}_e2el_ms") if k in errs)
        parts.append(f"{name}: {shown}")
    return "; ".join(parts)


def print_calibration(record: dict, console=None) -> None:
    """The fitted parameters, the error of the mean TTFT, TPOT and E2E before and after
    on the fitted runs and on the held-out one, and the held-out P99s (the fit's warnings
    go to stderr, from the command)."""
    from chunksim.reports.console import make_console

    console = console or make_console()
    c = record["calibration"]
    p = lambda s: console.print(s, markup=False, highlight=False)  # noqa: E731
    p(f"fitted {', '.join(record['fitted'])}: framework time "
      f"{c['framework_s'] * 1e3:.3f} ms/step, compute scale {c['compute_scale']:.3f}, "
      f"memory scale {c['memory_scale']:.3f} ({record['evaluations']} simulations)")
    p(f"fitted runs, before: {_errors(record['fit_error_before_pct'])}")
    p(f"fitted runs, after:  {_errors(record['fit_error_after_pct'])}")
    p(f"held out, before:    {_errors(record['held_out_error_before_pct'])}")
    p(f"held out, after:     {_errors(record['held_out_error_after_pct'])}")
    p(f"held out P99, before: {_errors(record['held_out_error_before_pct'], 'p99')}")
    p(f"held out P99, after:  {_errors(record['held_out_error_after_pct'], 'p99')}")
