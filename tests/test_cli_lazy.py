"""The lazily loaded `sim` group: `--help` lists every command with its own summary and
imports no command module; running a command loads it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from chunksim.cli import COMMANDS, app, lazy


def test_each_summary_is_the_first_paragraph_of_the_commands_own_help():
    for name, (module, attr) in COMMANDS.items():
        cmd = lazy.load(name, module, attr)
        assert cmd.help, name
        assert lazy.summary(module, name) == cmd.help.split("\n\n")[0], name


def _run_in_fresh_interpreter(argv: list[str], heavy: str, env=None) -> str:
    """stdout of `sim ARGV` run by `cli.main` in a new interpreter, then a line `HEAVY
    [...]`: the modules it imported that `heavy` (a Python expression on a module name
    `m`) picks."""
    code = (f"import sys\nsys.argv = {['sim', *argv]!r}\nfrom chunksim.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY', sorted(m for m in sys.modules if {heavy}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True).stdout


def test_top_level_help_lists_every_command_without_importing_them():
    out = _run_in_fresh_interpreter(
        ["--help"], "m in ('numpy', 'pandas', 'simpy', 'importlib.metadata', "
        "'multiprocessing') or "
        "m.startswith(('chunksim.sim', 'chunksim.cli.run', 'chunksim.cli.capacity'))",
        env={"COLUMNS": "200", "TERM": "dumb", "PATH": ""})
    assert "HEAVY []" in out, out[-500:]
    for name in COMMANDS:
        assert f" {name} " in out, name


def test_a_command_runs_and_an_unknown_one_is_refused():
    runner = CliRunner()
    res = runner.invoke(app, ["workload", "describe", "--json", "-n", "20"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["num_requests"] == 20
    bad = runner.invoke(app, ["rnu"])
    assert bad.exit_code == 2
    assert "rnu" in bad.output


@pytest.mark.parametrize("fleet", [[], ["--profile", "llama-3.1-8b-h200-vllm", "--pd", "1:1"],
                                   ["--replicas", "2"]])
def test_a_run_without_out_imports_no_pandas(fleet):
    """`sim run`'s fixed cost: the profile is read, the run (one engine or a fleet's,
    merged) summarized and printed without pandas, pyarrow or matplotlib (and without the
    pydantic of typer >= 0.29, which builds a validator per option: pyproject keeps typer
    below it). A capacity search's workers, which run such probes, never import them, nor
    multiprocessing (pooled commands only)."""
    out = _run_in_fresh_interpreter(
        ["run", "-n", "3", "--json", *fleet],
        "m.split('.')[0] in ('pandas', 'pyarrow', 'matplotlib', 'pydantic', 'torch', "
        "'multiprocessing')")
    assert "HEAVY []" in out, out[-500:]
    assert json.loads(out.splitlines()[-2])["completed"] == 3


@pytest.mark.parametrize("argv,shows", [
    ([], True), (["--help"], True), (["run", "--help"], True), (["workload"], True),
    (["capacity", "--slo", "p99_itl_ms=100", "--help"], True), (["run", "-n", "1"], False),
    (["workload", "describe"], False), (["compare", "--out", "x"], False)])
def test_which_command_lines_show_help(argv, shows):
    from chunksim.cli import help_format

    assert help_format.asks_help(argv) is shows


def _knob_docs_read(argv: list[str]) -> str:
    """stdout of `sim ARGV` run by `cli.main` in a new interpreter, then a line `DOCS n`:
    how many classes' knob docstrings it read."""
    code = (f"import sys\nsys.argv = {['sim', *argv]!r}\nfrom chunksim.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "from chunksim.core.knobs import field_docs\n"
            "print('DOCS', field_docs.cache_info().currsize)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"COLUMNS": "200", "TERM": "dumb", "PATH": ""},
                          check=True).stdout


def test_a_run_reads_no_knob_docstring_and_its_help_shows_them():
    """A command line that asks for no help builds its options without their help text
    (each knob's docstring, parsed from its module's source); `--help` shows them."""
    out = _knob_docs_read(["run", "-n", "1", "--json"])
    assert out.splitlines()[-1] == "DOCS 0", out[-300:]
    assert json.loads(out.splitlines()[-2])["completed"] == 1
    out = _knob_docs_read(["run", "--help"])
    assert int(out.splitlines()[-1].split()[1]) > 0
    assert "Most requests running at once, the seat cap" in " ".join(out.split())


def test_the_collector_is_off_while_a_command_loads_and_on_while_it_runs():
    """`cli.main` holds garbage collection off while the command's modules load and
    `lazy.load` turns it back on before the command runs: the simulation runs with it."""
    code = ("import gc, sys\nsys.argv = ['sim', 'run', '-n', '2', '--json']\n"
            "import chunksim.cli.lazy as lazy\n"
            "seen = []\nload = lazy.load\n"
            "def spy(*a):\n    seen.append(gc.isenabled())\n    return load(*a)\n"
            "lazy.load = spy\n"
            "import chunksim.sim.run as run\nsimulate = run.simulate\n"
            "def sim(*a, **k):\n    seen.append(gc.isenabled())\n    return simulate(*a, **k)\n"
            "run.simulate = sim\n"
            "from chunksim.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('GC', *seen)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[-1] == "GC False True", out[-300:]
