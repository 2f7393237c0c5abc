"""The report in a real browser: headless Chromium renders report.html at a phone's width
(390 px) and checks that every image loads, that nothing is fetched from outside the page,
and that the verdict box is on the first screen, within the width. Skips (with the reason)
where no Chromium is installed; `.ci/run` installs Debian's `chromium` where apt-get is
available."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.compare import compare

CHROMIUM = next((p for p in (shutil.which(n) for n in (
    "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p), None)

_PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const v = document.getElementById('verdict');
  const r = v ? v.getBoundingClientRect() : null;
  const cs = v ? getComputedStyle(v) : null;
  const out = {
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    external: performance.getEntriesByType('resource').map(e => e.name)
      .filter(n => !n.startsWith('data:')),
    verdict: r ? {top: r.top, left: r.left, right: r.right, height: r.height,
                  display: cs.display, visibility: cs.visibility,
                  text: v.innerText} : null,
    text: document.body.innerText,
    width: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
  };
  window.parent.postMessage(JSON.stringify(out), '*');
});
</script>"""
# Headless windows are at least 500 px wide: the page goes in a phone-sized iframe.
_FRAME = """<!doctype html><html><body style='margin:0'>
<iframe src='probe.html' width='{w}' height='{h}' style='border:0'></iframe>
<script>window.addEventListener('message', e => {{
  const pre = document.createElement('pre'); pre.id = 'browser-check';
  pre.textContent = e.data; document.body.appendChild(pre); }});</script>
</body></html>"""


def _render(page, width: int = 390, height: int = 844) -> dict:
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    frame = page.with_name("frame.html")
    frame.write_text(_FRAME.format(w=width, h=height))
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--window-size=800,1000", "--virtual-time-budget=10000", "--dump-dom",
           frame.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    m = re.search(r"<pre id=\"browser-check\">(.*?)</pre>", res.stdout, re.S)
    assert m, f"no result from chromium (rc {res.returncode}): {res.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian: apt-get install "
                    "chromium); .ci/run installs it where apt-get is available")
def test_report_renders_on_a_phone(linear_profile, tmp_path):
    app = typer.Typer()
    app.command("compare")(compare)
    app.command("other")(lambda: None)
    out = tmp_path / "report"
    res = CliRunner().invoke(app, [
        "compare", "--profile", linear_profile.path, "-w", "long-prompt", "--duration", "8",
        "--long-arrival", "3", "--long-prompt-tokens", "4096", "--long-output-tokens", "32",
        "--policies", "whole,budget", "--chunks", "512", "--seeds", "0,1", "--workers", "1",
        "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out / "report.html"
    html = page.read_text()
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", html)  # nothing points outside
    got = _render(page)
    assert got["images"] >= 4 and got["broken"] == []
    assert got["external"] == []
    v = got["verdict"]
    assert v is not None and v["display"] != "none" and v["visibility"] == "visible"
    assert v["height"] > 0 and v["left"] >= 0 and v["right"] <= got["width"] + 1
    assert v["top"] < 844  # on the first screen of a 390 x 844 phone
    assert got["width"] == 390
    assert got["page_width"] <= got["width"] + 1  # wide tables scroll in their own box


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian: apt-get install "
                    "chromium); .ci/run installs it where apt-get is available")
def test_run_board_renders_on_a_phone(tmp_path):
    """`sim run --report`'s board: every panel loads, nothing is fetched from outside, and
    what the run says is on the first screen."""
    from chunksim.cli import app as sim

    out = tmp_path / "board"
    res = CliRunner().invoke(sim, [
        "run", "-w", "long-prompt", "--duration", "8", "--long-arrival", "3",
        "--long-prompt-tokens", "4096", "--policy", "budget", "--chunk", "512",
        "--out", str(out), "--report"])
    assert res.exit_code == 0, res.output
    page = out / "report.html"
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page.read_text())
    got = _render(page)
    assert got["images"] == 6 and got["broken"] == []
    assert got["external"] == []
    v = got["verdict"]
    assert v is not None and v["display"] != "none" and v["visibility"] == "visible"
    assert v["top"] < 844 and v["right"] <= got["width"] + 1
    assert got["page_width"] <= got["width"] + 1


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian: apt-get install "
                    "chromium); .ci/run installs it where apt-get is available")
def test_run_board_of_a_run_that_rejects_shows_the_rejections(tmp_path):
    """Three in four requests are longer than --max-model-len: the rendered board says so
    in what the run says, on the first screen, with the flag that admits them, and never
    that every observable is within its bound."""
    from chunksim.cli import app as sim

    out = tmp_path / "board"
    res = CliRunner().invoke(sim, ["run", "-n", "200", "--max-model-len", "700",
                                   "--out", str(out), "--report"])
    assert res.exit_code == 0, res.output
    got = _render(out / "report.html")
    v = got["verdict"]
    assert v is not None and v["top"] < 844 and v["visibility"] == "visible"
    assert re.search(r"148 of 200 requests rejected \(74 %\): 148 by max_model_len", v["text"])
    assert "--max-model-len" in v["text"] and "148 rejected at arrival" in v["text"]
    assert "within its bound" not in got["text"]
    assert "requests rejected\t148 of 200" in got["text"]  # the facts table
    assert got["broken"] == [] and got["images"] == 6
