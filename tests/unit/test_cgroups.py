"""Readers' cgroups: the cgroup2 mount found in mountinfo, ids (directory inodes) to paths."""
import os

import fakes

from steer.model.flows import build_snapshot
from steer.model.reports import attach_workloads
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample
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
                          Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, "")))
    assert snap.flows[0].as_json()["app_cgroup"] is None
    (f,) = attach_workloads(snap, WorkloadResolver(CgroupResolver(str(tmp_path)),
                                                 PodLogs(str(tmp_path / "no-logs")))).flows
    j = f.as_json()
    assert (j["app_cgroup"], j["app_cgroup_id"]) == ("/system.slice/iperf3.service", unit.stat().st_ino)
    assert (j["app_unit"], j["app_workload"], j["app_pod"], j["app_container"]) == \
        ("iperf3.service", "iperf3.service", None, None)


def test_a_cgroup_name_that_is_not_utf8_is_text_in_flows_and_scrapes(tmp_path):
    """Any user with a delegated subtree can name a cgroup with bytes that are not UTF-8 (and
    with U+2028): its path and unit come back as text (the byte as \\xff), which a scrape with
    --flow-labels workload encodes and Prometheus' parser reads back, and the views escape the
    rest."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from steer.model.names import printable
    from steer.present.exporter import SteerCollector
    hostile = os.path.join(os.fsencode(tmp_path), b"user.slice", b"\xff\xe2\x80\xa8x.scope")
    os.makedirs(hostile)
    r = CgroupResolver(str(tmp_path))
    path = r(os.stat(hostile).st_ino)
    assert path == "/user.slice/\\xff\u2028x.scope"
    path.encode("utf-8")
    resolver = WorkloadResolver(cgroups=r, pods=PodLogs(str(tmp_path / "no-logs")))
    _, workload = resolver(os.stat(hostile).st_ino)
    assert workload.label == "\\xff\u2028x.scope"
    assert printable(workload.label) == "\\xff\\u2028x.scope"
    flow = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 8080)
    reader = dict(app_pid=7, app_comm="x", app_cgroup=os.stat(hostile).st_ino, app_calls=1,
                  app_ns=1000)

    def sample(t, n):
        e = {(flow, 1): FlowCpuSample(flow, 1, rx_bytes=n, kernel_ns=n, app_bytes=n, **reader)}
        return TraceSample(t * 10**9, e, (CpuSample(0), CpuSample(1)), 1, 1024)

    caps = Capabilities(Figure(WORKS, ""), Figure(WORKS, "sock_recv_length"), Figure(WORKS, ""),
                        Figure(MISSING, "no PMU"), Figure(WORKS, "sampled: 99 Hz"))
    tracer = fakes.FakeTracer([sample(0, 0), sample(1, 100), sample(2, 200)], caps)
    c = SteerCollector(tracer, read_topology(VM), flow_labels="workload", workloads=resolver)
    list(c.collect())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    text = generate_latest(reg).decode()
    labels = {s.labels.get("workload") for fam in text_string_to_metric_families(text)
              for s in fam.samples if s.name == "steer_flow_receive_bytes_total"}
    assert labels == {"\\xff\u2028x.scope"}


def test_a_slow_walk_is_taken_out_of_the_scrape_and_spaced_by_its_length(tmp_path, monkeypatch):
    """A walk that took long (a delegated subtree of thousands of cgroups) runs in a thread of
    its own: the caller (a scrape) gets no path at once and the walk's answer after it; the next
    walk waits ten times the last one's length."""
    from steer.trace import cgroups
    now = [0.0]
    r = CgroupResolver(str(tmp_path), clock=lambda: now[0], background=True)
    real = r._walk_once

    def slow_walk():   # two seconds of the clock
        real()
        now[0] += 2.0
    monkeypatch.setattr(r, "_walk_once", slow_walk)
    r.prime()
    assert r._took == 2.0 and r._took >= cgroups.SYNC_WALK
    late = tmp_path / "user.slice" / "x.scope"
    late.mkdir(parents=True)
    now[0] = 10.0
    assert r(late.stat().st_ino) is None   # not within 20 s of the last walk's start
    now[0] = 22.0
    assert r(late.stat().st_ino) is None   # walking, in its thread
    r.walking.join(timeout=10)
    assert r(late.stat().st_ino) == "/user.slice/x.scope"
    assert r._next_walk == 22.0 + 2.0 / cgroups.WALK_SHARE
    quick = CgroupResolver(str(tmp_path), background=True)
    assert quick(late.stat().st_ino) == "/user.slice/x.scope" and quick.walking is None
