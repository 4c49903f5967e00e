"""The import layers (pyproject.toml, checked by import-linter in `make test`) name every module
of the package: a new module must be given its place there, and the groups of the tree (access/,
audit/, dialects/, governance/, web/, wire/) are only folders whose modules sit on the layers. No
two top-level parts of the package import each other."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
GROUPS = {
    "catalog",
    "catalog.access",
    "catalog.audit",
    "catalog.dialects",
    "catalog.governance",
    "catalog.web",
    "catalog.wire",
}


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


def test_no_two_parts_of_the_package_import_each_other():
    """The top-level folders and modules of catalog/ import one way: where one imports another,
    that one imports nothing of it. A folder whose modules sat on layers far apart (the audit
    recorder low, the auditors' slice high) imported and was imported by the same folders; each
    such part has a package of its own (catalog.recorder, catalog.access, catalog.lineage)."""
    graph = grimp.build_graph("catalog", include_external_packages=False)

    def part(module: str) -> str | None:
        return module.split(".")[1] if module.count(".") >= 1 else None

    edges: dict[str, dict[str, tuple[str, str]]] = {}
    for module in graph.modules:
        source = part(module)
        if source is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = part(imported)
            if target is not None and target != source:
                edges.setdefault(source, {}).setdefault(target, (module, imported))
    both_ways = sorted(
        (a, b, edges[a][b], edges[b][a]) for a in edges for b in edges[a] if a < b and a in edges.get(b, {})
    )
    assert both_ways == [], both_ways
