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


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "chunksim":  # `from chunksim import atomic`
                out += [(node.lineno, f"chunksim.{a.name}") for a in node.names]
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
