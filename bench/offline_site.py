"""The server's dependencies for a machine without network, as one packed site-packages folder
built for that machine's Python: what the benchmarks need to run there (`bench/cluster.py --load`
on a machine of many cores, say).

Here, where the package index is reachable:

    .venv/bin/python bench/offline_site.py --python 3.12 [--skip numpy onnxruntime ...] [--extra bench]
        [--into site.tar.xz]

There, in a copy of this tree holding the file (its name is ignored by git), with the Python
that holds the distributions left out:

    mkdir -p /tmp/site && tar xJf site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site
    python3 -m pip install --no-index --no-deps --no-build-isolation -e .
    python3 bench/cluster.py --load --scale 1,2,4,8,16 --clients 4
    python3 bench/peer.py --no-memnos FILE.json ...   # with --extra bench

The packages are the server's dependencies (`pyproject.toml`'s, read here, so the list cannot
drift), and those of each `--extra` (`bench`: LangGraph's store and psycopg, the peer of
`bench/peer.py`), with all of theirs, resolved for that Python on manylinux x86-64 within
`constraints.txt` (the versions the tests last passed on), installed into a folder and packed with
xz (a fifth smaller than the wheels: the model's and PostgreSQL's files compress better so than in
a wheel's zip). `--skip` leaves out distributions the other machine's Python holds already (large
ones: NumPy, ONNX Runtime), which it then imports from its own site-packages. The tree is
installed there in place (`-e`, offline), which maps its `sql/` and `policies/` to the packages
the server reads them as; the build system's requirements are packed too (`setuptools>=77`), and
with the site first on `PYTHONPATH` the install builds with them, not with an older setuptools of
that Python's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def requirements(pyproject: Path = REPO / "pyproject.toml", extras: Sequence[str] = ()) -> list[str]:
    """The server's own dependencies, as its pyproject.toml states them, with its build system's
    and those of its `extras` (an extra that names the project itself, `memory-catalog[docs]`,
    brings that extra's)."""
    with pyproject.open("rb") as f:
        toml = tomllib.load(f)
    project = toml["project"]
    optional = project.get("optional-dependencies", {})
    # the build backend's own (setuptools): the tree is installed there in place without network,
    # by whatever setuptools the site puts first on the path
    found = [*toml.get("build-system", {}).get("requires", []), *project["dependencies"]]
    wanted, seen = list(extras), set()
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        if extra not in optional:
            known = ", ".join(optional)
            raise SystemExit(f"offline_site: pyproject.toml has no extra {extra!r} (it has {known})")
        seen.add(extra)
        for requirement in optional[extra]:
            parsed = Requirement(requirement)
            if canonicalize_name(parsed.name) == canonicalize_name(project["name"]):
                wanted.extend(parsed.extras)
            else:
                found.append(requirement)
    return found


def wheel_name(path: Path) -> str:
    """The distribution a wheel file holds, its name as packaging compares names."""
    return str(parse_wheel_filename(path.name)[0])


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args, "--quiet"], check=True)


def build(python: str, skip: set[str], into: Path, extras: Sequence[str] = ()) -> None:
    target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    target += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    with tempfile.TemporaryDirectory(prefix="offline-site") as tmp:
        wheels, site = Path(tmp) / "wheels", Path(tmp) / "site"
        print(f"downloading the server's dependencies for Python {python}", flush=True)
        # within the versions the tests last passed on (the Makefile's constraints.txt)
        pins = ["-c", str(REPO / "constraints.txt")]
        pip("download", "--dest", str(wheels), *target, *pins, *requirements(extras=extras))
        kept = [w for w in sorted(wheels.glob("*.whl")) if wheel_name(w) not in skip]
        left_out = sorted({wheel_name(w) for w in wheels.glob("*.whl")} - {wheel_name(w) for w in kept})
        size = sum(w.stat().st_size for w in kept) / 2**20
        print(f"{len(kept)} wheels, {size:.1f} MiB; left out: {', '.join(left_out) or 'none'}")
        # each wheel as it is (its dependencies are among them, or left out on purpose), no
        # bytecode: this Python's would not serve that one
        pip("install", "--no-deps", "--no-compile", "--target", str(site), *target, *map(str, kept))
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts naming this interpreter
        print(f"packing {into}", flush=True)
        with tarfile.open(into, "w:xz") as tar:
            for path in sorted(site.iterdir()):
                tar.add(path, arcname=path.name)
    print(f"{into}: {into.stat().st_size / 2**20:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description="the server's dependencies for a machine without network")
    parser.add_argument("--python", default="3.12", help="the other machine's Python (major.minor)")
    parser.add_argument("--into", type=Path, default=REPO / "site.tar.xz")
    parser.add_argument("--skip", nargs="*", default=[], help="distributions the other machine holds")
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        help="an extra of pyproject.toml whose dependencies come too (bench: for bench/peer.py)",
    )
    args = parser.parse_args()
    build(args.python, {str(canonicalize_name(name)) for name in args.skip}, args.into, args.extra)


if __name__ == "__main__":
    main()
