"""The layering, checked on the source: every package imports only packages below it, and
typer, matplotlib and torch appear only where the layering puts them. Imports inside
functions count too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "chunksim"

LAYERS: list[set[str]] = [
    {"core", "atomic", "progress"},  # vocabulary and small utilities
    {"latency"},
    {"policies"},
    {"sim"},  # the engine
    {"workloads", "decoder"},
    {"sweep", "live"},
    {"profiler"},
    {"validate"},
    {"reports"},
    {"cli"},
]
"""Bottom first. A package may import its own modules and any package of a lower layer;
packages of one layer do not import each other."""

ALLOWED = {  # third-party package -> the chunksim packages that may import it
    "typer": {"cli"},
    "matplotlib": {"reports"},
    "torch": {"decoder", "live", "profiler", "validate"},
}

RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

SIM_ALLOWED = {  # part of sim -> the parts of sim it may import besides itself
    "records": set(),
    "engine": {"records"},
    "metrics": {"records"},
    "fleet": {"engine", "records"},
    "build": {"engine", "records", "metrics", "fleet.config"},
    "run_summary": {"engine", "records", "metrics", "build"},
    "fleet_run": {"engine", "records", "metrics", "fleet", "build", "run_summary"},
    "run": {"engine", "records", "metrics", "fleet", "build", "fleet_run", "run_summary"},
}
"""Inside sim: the records at the bottom, one replica's engine on them, the fleet on the
engine, the metrics on the records alone; `build` assembles an engine (reading the fleet's
knobs, `fleet.config`), `run_summary` and `fleet_run` sit on it and `run` is the entry
point. A part is a subpackage or a top-level module; an allowed name is a part or one
module of a part. The table itself has no loop (`test_sim_parts_form_no_loop`)."""


def _dotted(path: Path) -> str:
    """The dotted module name of a source file (a package's `__init__` is the package)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {_dotted(p) for p in ROOT.rglob("*.py")}
"""Every module and package of chunksim, by dotted name (what `from X import Y` may name)."""


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file, at any depth (under
    `if TYPE_CHECKING:` too: a loop of annotations is still a loop). `from package import
    module` imports the module (`from chunksim.sim.engine import fast_forward` imports
    chunksim.sim.engine.fast_forward), and the package only where it also names something the
    package's `__init__` defines (a submodule needs its package initialized whatever it
    imports, so that edge alone closes no loop of its own)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            named = [f"{node.module}.{a.name}" for a in node.names]
            modules = [m for m in named if m in MODULES]
            if len(modules) < len(named):  # (names the package's own __init__ defines)
                out.append((node.lineno, node.module))
            out += [(node.lineno, m) for m in modules]
    return out


SOURCES = sorted(p for p in ROOT.rglob("*.py") if "data" not in p.relative_to(ROOT).parts)


def test_every_package_has_a_layer():
    packages = {_package(p) for p in SOURCES} - {"__init__"}
    assert packages <= set(RANK), f"give {sorted(packages - set(RANK))} a layer in LAYERS"


def _violations() -> list[str]:
    bad = []
    for path in SOURCES:
        pkg = _package(path)
        if pkg == "__init__":
            continue
        for line, mod in _imports(path):
            parts = mod.split(".")
            where = f"{path.relative_to(ROOT.parent)}:{line} imports {mod}"
            if parts[0] == "chunksim" and len(parts) > 1:
                dep = parts[1]
                if dep != pkg and RANK[dep] >= RANK[pkg]:
                    bad.append(f"{where} (layer {RANK[pkg]} -> {RANK[dep]})")
            elif parts[0] in ALLOWED and pkg not in ALLOWED[parts[0]]:
                bad.append(f"{where} ({parts[0]} belongs in {sorted(ALLOWED[parts[0]])})")
    return bad


def test_imports_point_downward_only():
    assert _violations() == []


@pytest.mark.parametrize("lib", sorted(ALLOWED))
def test_heavy_libraries_stay_in_their_layer(lib):
    users = {_package(p) for p in SOURCES for _, m in _imports(p) if m.split(".")[0] == lib}
    assert users <= ALLOWED[lib]


def _sim_part(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    if rel.parts[0] != "sim" or len(rel.parts) < 2 or rel.name == "__init__.py" == rel.parts[1]:
        return None
    return rel.parts[1].removesuffix(".py")


def _sim_violations() -> list[str]:
    bad = []
    for path in SOURCES:
        part = _sim_part(path)
        if part is None:
            continue
        for line, mod in _imports(path):
            parts = mod.split(".")
            if parts[:2] != ["chunksim", "sim"] or len(parts) < 3 or parts[2] == part:
                continue
            allowed = SIM_ALLOWED.get(part, set())
            if parts[2] not in allowed and ".".join(parts[2:4]) not in allowed:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {mod} "
                           f"(sim.{part} may import {sorted(allowed)})")
    return bad


def test_every_part_of_sim_has_a_row():
    parts = {_sim_part(p) for p in SOURCES} - {None}
    assert parts == set(SIM_ALLOWED), f"give {sorted(parts ^ set(SIM_ALLOWED))} a row"


def test_parts_of_sim_import_only_what_they_may():
    assert _sim_violations() == []


def _looping_parts(table: dict[str, set[str]]) -> set[str]:
    """The parts of `table` that no order puts after everything they may import (those on
    a loop, and those above one): empty when the table has no loop."""
    allowed = {part: {name.split(".")[0] for name in names} for part, names in table.items()}
    placed: set[str] = set()
    while ready := {p for p in allowed if p not in placed and allowed[p] <= placed}:
        placed |= ready
    return set(allowed) - placed


def test_sim_parts_form_no_loop():
    """No two parts of sim may import each other, through any others either."""
    assert _looping_parts(SIM_ALLOWED) == set()


def test_the_loop_check_catches_a_planted_loop():
    planted = {**SIM_ALLOWED, "records": {"engine.core"}}
    assert {"records", "engine"} <= _looping_parts(planted)


def test_the_sim_check_catches_a_backward_import(monkeypatch):
    """Planted imports of the fleet and of the engine from the records are reported, so
    the test above can fail; an import from below sim (the latency layer's coverage) is
    not."""
    fake = ROOT / "sim" / "records" / "_planted_for_test.py"
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", [*SOURCES, fake])
    original = Path.read_text

    def read_text(self, *a, **kw):
        if self == fake:
            return ("from chunksim.latency.coverage import beyond_grid\n"
                    "def f():\n    from chunksim.sim.fleet.fleet import Fleet\n"
                    "    from chunksim.sim.engine.engine import Engine\n")
        return original(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    found = [v for v in _sim_violations() if "_planted_for_test" in v]
    assert len(found) == 2, found
    assert "_planted_for_test.py:3 imports chunksim.sim.fleet.fleet" in found[0]
    assert "_planted_for_test.py:4 imports chunksim.sim.engine.engine" in found[1]


def test_the_check_catches_an_upward_import(monkeypatch):
    """A planted upward import is reported, so the test above can fail."""
    fake = ROOT / "core" / "_planted_for_test.py"
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", [*SOURCES, fake])
    original = Path.read_text

    def read_text(self, *a, **kw):
        if self == fake:
            return "def f():\n    import typer\n    from chunksim.cli import app\n"
        return original(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    found = _violations()
    assert any("_planted_for_test.py:3 imports chunksim.cli" in v for v in found)
    assert any("_planted_for_test.py:2 imports typer" in v for v in found)


_module = _dotted


def _module_cycles(sources: list[Path]) -> list[list[str]]:
    """Cycles in the module import graph (imports inside functions included)."""
    names = {_module(p): p for p in sources}
    graph = {m: sorted({mod for _, mod in _imports(p) if mod in names and mod != m})
             for m, p in names.items()}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for d in graph[m]:
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return cycles


def test_no_module_imports_itself_through_others():
    """Inside a package too, imports form no loop (sim.run and the fleet run once did)."""
    assert _module_cycles(SOURCES) == []


def test_the_cycle_check_catches_a_planted_loop(monkeypatch):
    fake = ROOT / "sim" / "_planted_for_test.py"
    original = Path.read_text

    def read_text(self, *a, **kw):
        if self == fake:
            return "from chunksim.sim.run import simulate\n"
        if self == ROOT / "sim" / "run.py":
            return original(self, *a, **kw) + "\nimport chunksim.sim._planted_for_test\n"
        return original(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert any("chunksim.sim._planted_for_test" in c for c in _module_cycles([*SOURCES, fake]))


def test_the_cycle_check_resolves_from_package_import_module(monkeypatch):
    """A loop closed by `from chunksim.sim import module` (the module named as an
    attribute of its package, as engine.py once imported fast_forward while fast_forward
    imported engine) is found too."""
    fake = ROOT / "sim" / "_planted_for_test.py"
    original = Path.read_text

    def read_text(self, *a, **kw):
        if self == fake:
            return "from chunksim.sim.engine.engine import Engine\n"
        if self == ROOT / "sim" / "engine" / "engine.py":
            return original(self, *a, **kw) + "\nfrom chunksim.sim import _planted_for_test\n"
        return original(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(sys.modules[__name__], "MODULES",
                        MODULES | {"chunksim.sim._planted_for_test"})
    cycles = _module_cycles([*SOURCES, fake])
    assert ["chunksim.sim._planted_for_test", "chunksim.sim.engine.engine",
            "chunksim.sim._planted_for_test"] in [c[-3:] for c in cycles] or any(
        c[0] == c[-1]
        and {"chunksim.sim.engine.engine", "chunksim.sim._planted_for_test"} <= set(c)
        for c in cycles), cycles


def test_from_package_import_module_is_read_as_the_module():
    """`_imports` reads `from chunksim.sim.engine import fast_forward` as an import of the
    module, and `from chunksim.sim.engine.engine import Engine` as one of the module."""
    fake = ROOT / "sim" / "_read_for_test.py"
    original = Path.read_text
    text = ("from chunksim.sim.engine import fast_forward\n"
            "from chunksim.sim.engine.engine import Engine\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_text",
                   lambda self, *a, **kw: text if self == fake else original(self, *a, **kw))
        got = _imports(fake)
    assert got == [(1, "chunksim.sim.engine.fast_forward"), (2, "chunksim.sim.engine.engine")]


def test_an_engine_is_assembled_in_one_place():
    """`sim.build.build_engine` is the only constructor call of the simulator's `Engine`."""
    calls = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Engine"):
                calls.append(str(path.relative_to(ROOT)))
    assert calls == ["sim/build.py"]
