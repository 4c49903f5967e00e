"""The cores a process may use: its affinity, at most its control groups' CPU quota (a container's
CPU limit); and its memory limit, which the default number of workers fits. Both are read from
files laid out as the kernel shows them (`/proc/self/cgroup`, `/proc/self/mountinfo` and the
groups' files), so each layout is checked without a container."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import pytest

from catalog import machine
from catalog.cli import workers_said
from catalog.machine import cpu_quota, limits, memory_limit, usable_cores
from catalog.search.embedder import default_lanes
from catalog.settings import WORKER_MEMORY, Settings

V2_MOUNT = (
    "30 23 0:26 {root} /sys/fs/cgroup rw,nosuid,nodev,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
)
V1_MOUNT = (
    "31 25 0:27 {root} /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:10 - cgroup cgroup rw,memory\n"
)
V2 = V2_MOUNT.format(root="/")
CPU_MAX = "/sys/fs/cgroup/cpu.max"
OTHER_MOUNTS = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


def machine_root(tmp_path: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    """A directory laid out like `/` for `machine`: the process's groups, the mounts, the files."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/mountinfo").write_text(OTHER_MOUNTS + mountinfo)
    for name, text in files.items():
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def affinity() -> int:
    return len(os.sched_getaffinity(0))


def v1_quota(group: str, quota: int) -> dict[str, str]:
    """A cgroup v1 group's quota files (`group`: its directory under the cpu hierarchy's mount)."""
    return {
        f"/sys/fs/cgroup/cpu,cpuacct{group}cpu.cfs_quota_us": f"{quota}\n",
        f"/sys/fs/cgroup/cpu,cpuacct{group}cpu.cfs_period_us": "100000\n",
    }


# (the process's groups, the mounts, the groups' files, the quota to be read)
CPU_LIMITS = {
    # docker run --cpus 1.5 (cgroup v2): the container's group is the mount's root
    "v2 container": ("0::/\n", V2, {CPU_MAX: "150000 100000\n"}, 1.5),
    "v2 no limit": ("0::/\n", V2, {CPU_MAX: "max 100000\n"}, None),
    # a systemd service in a slice: the slice is limited to 1 CPU, the service's own group not at all
    "v2 an ancestor's limit": (
        "0::/limited.slice/catalog.service\n",
        V2,
        {
            "/sys/fs/cgroup/limited.slice/cpu.max": "100000 100000\n",
            "/sys/fs/cgroup/limited.slice/catalog.service/cpu.max": "max 100000\n",
        },
        1.0,
    ),
    "v2 the smallest on the way up": (
        "0::/a/b\n",
        V2,
        {"/sys/fs/cgroup/a/cpu.max": "400000 100000\n", "/sys/fs/cgroup/a/b/cpu.max": "50000 100000\n"},
        0.5,
    ),
    # cgroup v1 seen from inside a container: the mount's root is the container's group
    "v1 container": (
        "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n",
        V1_MOUNT.format(root="/docker/abc"),
        v1_quota("/", 200000),
        2.0,
    ),
    # the process in a group of its own inside the container: found under the mount's root
    "v1 a group below a container's root": (
        "4:cpu,cpuacct:/docker/abc/inner\n",
        V1_MOUNT.format(root="/docker/abc"),
        {**v1_quota("/", 200000), **v1_quota("/inner/", 100000)},
        1.0,
    ),
    # a group outside the process's cgroup namespace is named with '..': never read above the mount
    "v2 a group outside the namespace": (
        "0::/../../other\n",
        V2,
        {CPU_MAX: "300000 100000\n", "/sys/cpu.max": "100000 100000\n", "/cpu.max": "100000 100000\n"},
        3.0,
    ),
    "v1 a quota of -1": ("4:cpu,cpuacct:/\n", V1_MOUNT.format(root="/"), v1_quota("/", -1), None),
    "no group files": ("0::/\n", V2, {}, None),
    "unreadable cpu.max": ("0::/\n", V2, {CPU_MAX: "garbage\n"}, None),
    "a period of 0": ("0::/\n", V2, {CPU_MAX: "100000 0\n"}, None),
}


@pytest.mark.parametrize("case", CPU_LIMITS)
def test_the_cpu_limit_and_the_cores_it_leaves(tmp_path: Path, case: str):
    groups, mounts, files, quota = CPU_LIMITS[case]
    root = machine_root(tmp_path, groups, mounts, files)
    assert cpu_quota(root) == quota
    # rounded up, at least one, never above the affinity
    assert usable_cores(root) == (affinity() if quota is None else max(1, min(affinity(), math.ceil(quota))))


def test_without_proc_there_is_no_limit(tmp_path: Path):
    assert cpu_quota(tmp_path) is None
    assert usable_cores(tmp_path) == affinity()


def test_the_default_workers_and_model_lanes_follow_the_cpu_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = machine_root(tmp_path, "0::/\n", V2, {CPU_MAX: "100000 100000\n"})
    monkeypatch.setattr(machine, "ROOT", root)
    assert Settings(workers=0).workers_for(limits()) == 1
    assert Settings(workers=3).workers_for(limits()) == 3  # a number asked for is kept
    assert default_lanes() == 1


def test_a_containers_memory_limit_is_read_from_memory_max(tmp_path: Path):
    files = {"/sys/fs/cgroup/memory.max": f"{1 << 30}\n", CPU_MAX: "max 100000\n"}
    assert memory_limit(machine_root(tmp_path, "0::/\n", V2, files)) == 1 << 30


@pytest.mark.parametrize(
    "text", ["max\n", "garbage\n", f"{1 << 62}\n"]
)  # the last: above the machine's memory
def test_no_memory_limit_below_the_machines_memory_is_none(tmp_path: Path, text: str):
    assert memory_limit(machine_root(tmp_path, "0::/\n", V2, {"/sys/fs/cgroup/memory.max": text})) is None


def test_a_cgroup_v1_memory_limit_and_its_no_limit(tmp_path: Path):
    mounts = "33 25 0:29 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory\n"
    limited = machine_root(
        tmp_path / "a",
        "5:memory:/pod/c\n",
        mounts,
        {"/sys/fs/cgroup/memory/pod/memory.limit_in_bytes": "536870912\n"},
    )
    assert memory_limit(limited) == 512 << 20  # the ancestor's
    unlimited = machine_root(
        tmp_path / "b",
        "5:memory:/\n",
        mounts,
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"},
    )
    assert memory_limit(unlimited) is None


def test_the_default_workers_fit_a_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # two CPUs' time but memory for one worker: one worker
    files = {CPU_MAX: "200000 100000\n", "/sys/fs/cgroup/memory.max": f"{WORKER_MEMORY + (100 << 20)}\n"}
    monkeypatch.setattr(machine, "ROOT", machine_root(tmp_path, "0::/\n", V2, files))
    assert Settings(workers=0).workers_for(limits()) == 1
    assert Settings(workers=2).workers_for(limits()) == 2  # a number asked for is kept


def test_the_start_says_what_held_the_default_and_warns_of_a_number_past_the_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    files = {CPU_MAX: "100000 100000\n", "/sys/fs/cgroup/memory.max": f"{1 << 30}\n"}  # 1 CPU, 1 GiB
    monkeypatch.setattr(machine, "ROOT", machine_root(tmp_path, "0::/\n", V2, files))
    [(level, message, fields)] = workers_said(Settings(workers=0), limits())
    assert level == logging.INFO
    assert message == (
        "1 worker process(es), one per CPU core this process may use "
        "(CPU limit 1; memory limit 1.00 GiB, 512 MiB a worker)"
    )
    assert fields == {"workers": 1, "cores": 1, "cpu_limit": 1.0, "memory_limit": 1 << 30}
    assert workers_said(Settings(workers=1), limits()) == []  # a number within the limits: nothing to say
    cores, memory = workers_said(Settings(workers=3), limits())
    assert cores[0] == memory[0] == logging.WARNING
    assert cores[1] == "3 workers on 1 CPU core(s): more workers than cores gain nothing"
    assert memory[1].startswith("3 workers may need about 1.5 GiB; this process's memory limit is 1.00 GiB")
