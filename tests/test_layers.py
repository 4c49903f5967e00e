"""The import layers (pyproject.toml, checked by import-linter in `make test`) name every module
of the package: a new module must be given its place there, and the groups of the tree (web/,
wire/, dialects/, audit/, governance/) are only folders whose modules sit on the layers."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
GROUPS = {"catalog", "catalog.web", "catalog.wire", "catalog.dialects", "catalog.audit", "catalog.governance"}


def _layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(
        c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == "slices import one way"
    )
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_every_module_is_on_a_layer():
    layers = _layers()
    graph = grimp.build_graph("catalog", include_external_packages=False)
    placed = [m for m in graph.modules if any(m == layer or m.startswith(layer + ".") for layer in layers)]
    unplaced = sorted(set(graph.modules) - set(placed) - GROUPS)
    assert unplaced == [], f"give these modules a layer in pyproject.toml: {unplaced}"


def test_no_layer_is_inside_another_and_each_exists():
    layers = _layers()
    graph = grimp.build_graph("catalog", include_external_packages=False)
    assert all(layer in graph.modules for layer in layers), set(layers) - graph.modules
    nested = [(a, b) for a in layers for b in layers if b.startswith(a + ".")]
    assert nested == []


def test_a_group_package_imports_only_its_own_modules():
    """The groups' `__init__` modules are not on a layer: they re-export their own modules only."""
    graph = grimp.build_graph("catalog", include_external_packages=False)
    for group in GROUPS - {"catalog"}:
        imported = graph.find_modules_directly_imported_by(group)
        assert all(m.startswith(group + ".") for m in imported), (group, imported)
