"""constraints.txt, the versions `make` installs within: every package the project asks for
(the server's and each extra's requirements) is pinned there at a version its requirement admits,
so a change to pyproject.toml without `make lock` after it is found here, not on a clean clone."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = "memory-catalog"


def pins(text: str) -> dict[str, Version]:
    """name -> version of `name==version` lines (comments and blank lines skipped); anything else
    (an unpinned line, a URL) is refused: the file pins, it does not choose."""
    found: dict[str, Version] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and name and version and ";" not in line and "@" not in line, f"line {number}: {raw!r}"
        key = canonicalize_name(name)
        assert key not in found, f"line {number}: {name} pinned twice"
        found[key] = Version(version)
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed.extend(extra)
    return [Requirement(text) for text in listed]


def test_every_requirement_of_the_project_is_pinned_at_a_version_it_admits():
    pinned = pins((REPO / "constraints.txt").read_text())
    assert canonicalize_name(PROJECT) not in pinned  # the project itself is installed from the tree
    checked = 0
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        if name == PROJECT:  # an extra naming another of the project's extras
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # not installed on this platform (uvloop on Windows)
        assert name in pinned, f"{requirement.name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pinned[name]}, which {requirement} refuses: "
            "run `make lock`"
        )
        checked += 1
    assert checked >= 40


def test_a_line_that_does_not_pin_is_refused():
    assert pins("# a comment\n\nnumpy==2.3.1\nNumPy_Extra==1.0\n") == {
        "numpy": Version("2.3.1"),
        "numpy-extra": Version("1.0"),
    }
    for bad in ("numpy>=2", "numpy", "numpy @ https://example.com/numpy.whl", "numpy==2.3.1\nnumpy==2.3.2"):
        try:
            pins(bad)
        except AssertionError:
            continue
        raise AssertionError(f"accepted {bad!r}")
