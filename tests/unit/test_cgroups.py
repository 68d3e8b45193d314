"""Readers' cgroups: the cgroup2 mount found in mountinfo, ids (directory inodes) to paths."""
import os

from steer.model.flows import attach_workloads, build_snapshot
from steer.model.samples import Capabilities, CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.model.topology import read_topology
from steer.trace.cgroups import CgroupResolver, cgroup2_mount
from steer.trace.workloads import PodLogs, WorkloadResolver

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")

HYBRID = """\
25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
28 25 0:25 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
29 28 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
30 28 0:27 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,name=systemd
"""
PURE = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw\n"


def test_the_cgroup2_mount_on_hybrid_and_pure_v2_hosts(tmp_path):
    for text, want in ((HYBRID, "/sys/fs/cgroup/unified"), (PURE, "/sys/fs/cgroup"),
                       ("25 30 0:22 / /sys rw - sysfs sysfs rw\n", None)):
        (tmp_path / "mountinfo").write_text(text)
        assert cgroup2_mount(str(tmp_path / "mountinfo")) == want
    assert cgroup2_mount(str(tmp_path / "none")) is None


def test_ids_resolve_to_paths_and_new_cgroups_are_found_on_a_later_walk(tmp_path):
    now = [0.0]
    kubepods = tmp_path / "kubepods.slice" / "kubepods-pod1234.slice" / "cri-containerd-ab12.scope"
    kubepods.mkdir(parents=True)
    r = CgroupResolver(str(tmp_path), clock=lambda: now[0])
    assert r(tmp_path.stat().st_ino) == "/"
    assert r(kubepods.stat().st_ino) == "/kubepods.slice/kubepods-pod1234.slice/cri-containerd-ab12.scope"
    late = tmp_path / "system.slice" / "nginx.service"
    late.mkdir(parents=True)
    assert r(late.stat().st_ino) is None          # not walked again within a second
    now[0] = 1.5
    assert r(late.stat().st_ino) == "/system.slice/nginx.service"
    assert r(0) is None and r(None) is None and CgroupResolver("")(5) is None


def test_a_cgroup_walked_before_it_was_removed_stays_named(tmp_path):
    now = [0.0]
    gone = tmp_path / "machine.slice" / "libpod-ab12.scope"
    gone.mkdir(parents=True)
    ino = gone.stat().st_ino
    r = CgroupResolver(str(tmp_path), clock=lambda: now[0])
    r.prime()
    new = tmp_path / "system.slice"   # made before the removal: tmpfs gives inodes again
    new.mkdir()                       # (cgroup2's 64-bit ids are not given again)
    gone.rmdir()
    now[0] = 5.0
    assert r(new.stat().st_ino) == "/system.slice"   # a walk after the removal
    assert r(ino) == "/machine.slice/libpod-ab12.scope"


def test_a_flows_reader_carries_its_cgroup_into_the_json(tmp_path):
    flow = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    unit = tmp_path / "system.slice" / "iperf3.service"
    unit.mkdir(parents=True)
    after = TraceSample(10**9, {(flow, 1): FlowCpuSample(
        flow, 1, rx_bytes=10, rx_skbs=1, app_calls=1, app_pid=7, app_comm="iperf3",
        app_cgroup=unit.stat().st_ino)}, (CpuSample(0), CpuSample(1)), 1, 1024)
    snap = build_snapshot(None, after, read_topology(VM),
                          Capabilities("available", "available", "available", "unavailable"))
    assert snap.flows[0].as_json()["app_cgroup"] is None
    (f,) = attach_workloads(snap, WorkloadResolver(CgroupResolver(str(tmp_path)),
                                                 PodLogs(str(tmp_path / "no-logs")))).flows
    j = f.as_json()
    assert (j["app_cgroup"], j["app_cgroup_id"]) == ("/system.slice/iperf3.service", unit.stat().st_ino)
    assert (j["app_unit"], j["app_workload"], j["app_pod"], j["app_container"]) == \
        ("iperf3.service", "iperf3.service", None, None)
