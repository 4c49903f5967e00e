"""What this process may use of the machine: the CPU cores its workers and model lanes are
counted from, and the memory its workers must fit in.

Two things hold a process to fewer cores than the machine has. Its CPU affinity (a container's
CPU set, `taskset`) names the cores it may run on. Its control groups' CPU quota (a container's
CPU limit: `docker run --cpus 2`, Kubernetes' `resources.limits.cpu`) leaves its affinity alone
and instead lets it run for at most so much CPU time in each period, across all the cores: a
process limited to 2 CPUs on a 64-core host sees 64 cores, and 64 workers would share two cores'
time (and hold 64 models' memory). So the cores a process may use are the fewer of the two: its
affinity's count, and its quota in cores rounded up (1.5 CPUs: 2). A memory limit (`docker run
--memory`, `limits.memory`) is the same kind of setting: the kernel stops the group's processes
when together they pass it.

The limits are read as the kernel shows them to the process: `/proc/self/cgroup` names the
process's group in each hierarchy, `/proc/self/mountinfo` where each hierarchy is mounted (and
which of its groups the mount's root is, as in a container), and the group's files hold the
limit: `cpu.max` and `memory.max` under cgroup v2 (`max 100000`: none; `200000 100000`: two
CPUs), `cpu.cfs_quota_us` with `cpu.cfs_period_us`, and `memory.limit_in_bytes`, under v1 (a quota
of -1, a limit of about 2**63: none). A group's ancestors limit it too, so every group from the
process's up to the mount's root is read and the smallest limit wins. Anything missing or
unreadable counts as no limit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

ROOT = Path("/")
Limit = TypeVar("Limit", int, float)
V1_NO_LIMIT = 1 << 62  # cgroup v1 shows no memory limit as the page counter's largest value (~2**63)


@dataclass(frozen=True)
class Limits:
    """What this process may use, read once: its affinity's count of cores, its CPU quota in
    cores and its memory limit in bytes (None: no limit)."""

    affinity: int
    cpu_quota: float | None
    memory: int | None

    @property
    def cores(self) -> int:
        """The affinity's count, at most the CPU quota rounded up; at least 1."""
        if self.cpu_quota is None:
            return max(1, self.affinity)
        return max(1, min(self.affinity, math.ceil(self.cpu_quota)))


def limits(root: Path | None = None) -> Limits:
    """This process's limits, each read once. (`root`: where `/proc` and the cgroup mounts are
    looked for; tests give a directory made to look like them.)"""
    return Limits(_affinity(), cpu_quota(root), memory_limit(root))


def usable_cores(root: Path | None = None) -> int:
    """The CPU cores this process may use: its affinity's count (every core where that is unknown),
    at most its control groups' CPU quota rounded up; at least 1."""
    return Limits(_affinity(), cpu_quota(root), None).cores


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_quota(root: Path | None = None) -> float | None:
    """The CPU time this process's control groups allow it, in cores (1.5: one and a half cores'
    time each period), the smallest along its groups and their ancestors; None when no group
    limits it or the limits cannot be read."""
    return min(_limits(root, "cpu", _v2_quota, _v1_quota), default=None)


def memory_limit(root: Path | None = None) -> int | None:
    """The bytes of memory this process's control groups allow it and its children (a container's
    memory limit: cgroup v2's `memory.max`, v1's `memory.limit_in_bytes`), the smallest along its
    groups and their ancestors; None when no group limits it below the machine's memory or the
    limits cannot be read."""
    limit = min(_limits(root, "memory", _v2_memory, _v1_memory), default=None)
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system that says
        return limit
    return limit if limit is not None and limit < machine else None


def _limits(
    root: Path | None,
    controller: str,
    v2: Callable[[Path], Limit | None],
    v1: Callable[[Path], Limit | None],
) -> Iterator[Limit]:
    """Each limit a group of this process or an ancestor sets through `controller` (`v2` reads a
    cgroup v2 group's, `v1` a v1 group's; None: none set there)."""
    root = ROOT if root is None else root
    try:
        groups = (root / "proc/self/cgroup").read_text().splitlines()
        mounts = list(_mounts((root / "proc/self/mountinfo").read_text()))
    except OSError:
        return
    for line in groups:
        number, _, rest = line.partition(":")
        controllers, _, group = rest.partition(":")
        if not number or not group:
            continue
        if number == "0" and not controllers:  # cgroup v2: one hierarchy, every controller
            found = [(m, v2) for m in mounts if m.fstype == "cgroup2"]
        elif controller in controllers.split(","):  # cgroup v1: the controller's own hierarchy
            found = [(m, v1) for m in mounts if m.fstype == "cgroup" and controller in m.options]
        else:
            continue
        for mount, read in found:
            for directory in mount.groups(root, group):
                value = read(directory)
                if value is not None:
                    yield value


@dataclass(frozen=True)
class _Mount:
    fs_root: str  # the group the mount shows as its root (a container's own group, say)
    point: str  # where it is mounted
    fstype: str
    options: frozenset[str]  # the super block's options: a v1 hierarchy's controllers

    def groups(self, root: Path, group: str) -> Iterator[Path]:
        """The directories of `group` and its ancestors under this mount, down to the mount's root
        (where the group is not under the mount's root, as with a container's group seen from the
        host's view of its own mount, or a group outside the process's cgroup namespace, named with
        `..`: only the mount's root)."""
        base = root / self.point.lstrip("/")
        relative = PurePosixPath(group).relative_to("/") if group.startswith("/") else PurePosixPath(group)
        if ".." in relative.parts:
            yield base
            return
        fs_root = PurePosixPath(self.fs_root.lstrip("/"))
        if fs_root.parts:
            if relative.parts[: len(fs_root.parts)] != fs_root.parts:
                yield base
                return
            relative = PurePosixPath(*relative.parts[len(fs_root.parts) :])
        parts = relative.parts
        for end in range(len(parts), -1, -1):
            yield base.joinpath(*parts[:end])


def _mounts(text: str) -> Iterator[_Mount]:
    """The cgroup mounts of a mountinfo table (`proc(5)`: `… root mount-point options [tags] -
    fstype source super-options`)."""
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 5 or len(fields) < dash + 4:
            continue
        fstype = fields[dash + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        options = frozenset(fields[dash + 3].split(","))
        yield _Mount(fields[3], point, fstype, options)


def _v2_quota(group: Path) -> float | None:
    try:
        quota, _, period = (group / "cpu.max").read_text().strip().partition(" ")
        if quota == "max":
            return None
        return _ratio(quota, period or "100000")
    except (OSError, ValueError):
        return None


def _v1_quota(group: Path) -> float | None:
    try:
        quota = (group / "cpu.cfs_quota_us").read_text().strip()
        period = (group / "cpu.cfs_period_us").read_text().strip()
        return _ratio(quota, period)
    except (OSError, ValueError):
        return None


def _v2_memory(group: Path) -> int | None:
    try:
        text = (group / "memory.max").read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _v1_memory(group: Path) -> int | None:
    try:
        limit = int((group / "memory.limit_in_bytes").read_text().strip())
    except (OSError, ValueError):
        return None
    return limit if 0 < limit < V1_NO_LIMIT else None  # v1 writes "no limit" as a huge number


def _ratio(quota: str, period: str) -> float | None:
    """Cores' worth of time: quota over period (None for no limit: a quota of -1 or below, or a
    period of 0)."""
    used, each = int(quota), int(period)
    if used <= 0 or each <= 0:
        return None
    return used / each
