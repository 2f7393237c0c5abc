"""--help at 80 columns and in a pipe: every option name whole on one line (so `grep` finds
it), no line wider than the terminal, each option's gist by default and its whole help
with --help-all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.cli.help_format import first_sentence, gist, option_lines

ROOT = Path(__file__).resolve().parents[1]
NAME = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=40).map(lambda s: "--" + s)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.lists(NAME, min_size=1, max_size=4).map(", ".join),
                          st.sampled_from(["", "<int>", "<a|b|c|dddddddddddddddddddddd>"]),
                          st.text("abc de.", max_size=300)), min_size=1, max_size=8),
       st.integers(40, 120))
def test_option_lines_keep_every_name_whole_and_fit_the_width(entries, width):
    lines = option_lines(entries, width)
    shown = [names for names, _ in lines if names]
    for names, _, _ in entries:
        for n in names.split(", "):
            assert any(n in re.split(r", ", line) for line in shown), n
    for names, rest in lines:
        longest = max((len(n) for e in entries for n in e[0].split(", ")), default=0)
        assert len(names + rest) <= max(width, longest + 40)
        if len(names) > width:  # only a single name wider than the box overflows it
            assert ", " not in names


def test_short_help_is_the_gist_of_the_first_sentence():
    text = ("Latency profile: a bundled name (default tiny) or a CSV. Extra sentence, "
            "e.g. this one.")
    assert first_sentence(text) == "Latency profile: a bundled name (default tiny) or a CSV."
    assert gist(text) == "Latency profile: a bundled name"
    assert gist("KV capacity in blocks (default: from the profile).") == "KV capacity in blocks"
    assert first_sentence("Use e.g. this. Then.") == "Use e.g. this."
    assert gist("Mean rate, req/s (default 4). With --trace: rescale. [x>0]") == \
        "Mean rate, req/s [x>0]"  # the range the flag enforces stays


def _help(*args: str, columns: int | None = 80) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    env["TERM"] = "dumb"
    res = subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _flags(cmd: str) -> list[str]:
    from typer.main import get_group

    from chunksim.cli import app

    group = get_group(app)
    command = group.get_command(None, cmd)
    return [o for p in command.params if not getattr(p, "hidden", False)
            for o in (*p.opts, *p.secondary_opts)
            if o.startswith("--")]


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["run", "compare", "capacity", "sweep"])
@pytest.mark.parametrize("columns", [80, None])  # a terminal's 80 columns; a pipe
def test_every_flag_name_is_whole_on_a_line_that_fits(cmd, columns):
    out = _help(cmd, "--help", columns=columns)
    words = set(re.findall(r"--[a-z0-9-]+", out))
    missing = [f for f in _flags(cmd) if f not in words]
    assert not missing, missing
    assert max(len(ln) for ln in out.splitlines()) <= 80
    assert len(out.splitlines()) < 300  # the short form; --help-all has the rest
    if cmd == "run":
        found = [ln for ln in out.splitlines() if "speculative" in ln]
        assert any("--speculative-method " in ln for ln in found)
        assert any("--num-speculative-tokens " in ln for ln in found)
        assert not re.search(r"--num-speculative-toke(?!ns)", out)


@pytest.mark.slow
def test_help_all_shows_each_options_whole_help():
    short, full = _help("run", "--help"), _help("run", "--help-all")
    assert "--help-all shows the whole text" in short
    flat = " ".join(full.replace("│", " ").split())
    assert "Large for long runs." in flat and "Large for long runs." not in \
        " ".join(short.replace("│", " ").split())
    assert len(full.splitlines()) > len(short.splitlines())
