"""A flow's reader carries its cgroup and the workload it names: a real iperf3 server moved into
cgroups this test makes in the host's cgroup2 hierarchy, named as each runtime and the kubelet
name them (checked against the kernel's own /proc/PID/cgroup), and one in a real podman
container."""
import json
import os
import shutil
import subprocess
import time

import pytest

from cgroups import made_cgroup, made_cgroups, move
from helpers import CPU_A, ROOT, STEER, attached, live
from steer.experiment.lab import NETNS_DIR, RECEIVER_ADDR, Lab, LabFlow
from steer.trace.cgroups import as_text, cgroup2_mount

MOUNT = cgroup2_mount()
pytestmark = [live, pytest.mark.skipif(MOUNT is None, reason="no cgroup2 hierarchy mounted")]


@pytest.fixture
def cgroup():
    """A cgroup of this test's own, named as a kubelet names a container's (systemd driver)."""
    with made_cgroup(f"cri-containerd-{os.getpid():x}.scope") as c:
        yield c


@pytest.mark.parametrize("env,timing", [({}, []), ({}, ["--timing", "exact"]),
                                        ({"STEER_TEST_REFUSE": "optional"}, [])],
                         ids=["default", "exact", "every-optional-refused"])
def test_a_readers_cgroup_is_in_flows_json(cgroup, env, timing):
    rel, path = cgroup
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=2) as lab:
        lab.start_servers()
        pid = lab.receiver_pid(lab.flows[0].port)
        move(path, pid)
        with open(f"/proc/{pid}/cgroup") as f:   # the kernel's word on where the reader is
            truth = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        p = subprocess.Popen([*STEER, "flows", "--duration", "3", "--json", *timing],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT, **env), cwd=ROOT)
        attached(p)
        lab.start_clients()
        out, err = p.communicate(timeout=60)
        (res,) = lab.wait(timeout=30)
    assert p.returncode == 0, err
    assert truth == rel
    f = next(f for f in json.loads(out)["flows"] if f["sport"] == res.sender_port)
    assert f["app_pid"] == pid and f["app_cgroup"] == rel, f
    assert f["app_cgroup_id"] == os.stat(path).st_ino


ID = "5e" * 32
UID = "0b7c6d5e-4f3a-4b2c-9d1e-8f7a6b5c4d3e"
# each runtime's and driver's name of a container's cgroup, under a parent of this test's own
# (as a kubelet inside a container, kind's or k3d's, nests its hierarchy); what steer names it
LAYOUTS = {
    "kubelet-systemd": (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                        f"{UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope",
                        dict(app_pod="api-5f7c9", app_namespace="shop", app_container="server",
                             app_container_runtime="containerd", app_pod_uid=UID,
                             app_workload="shop/api-5f7c9:server")),
    "kubelet-cgroupfs": (f"kubepods/besteffort/pod{UID}/crio-{ID}",
                         dict(app_pod="api-5f7c9", app_namespace="shop", app_container="server",
                              app_container_runtime="cri-o", app_unit=None)),
    "docker": (f"system.slice/docker-{ID}.scope",
               dict(app_pod=None, app_container_runtime="docker", app_unit=f"docker-{ID}.scope",
                    app_workload=f"docker:{ID[:12]}")),
    "podman": (f"machine.slice/libpod-{ID}.scope",
               dict(app_pod=None, app_container_runtime="podman", app_workload=f"podman:{ID[:12]}")),
    "systemd-unit": ("system.slice/steer-reader.service",
                     dict(app_unit="steer-reader.service", app_container_id=None,
                          app_workload="steer-reader.service")),
    # a pod and container named inside a user's manager, which any user may do (container ids
    # are in every /proc/PID/cgroup): the user's, not the pod, which kubepods is only where no
    # unit or container lies above it
    "forged-pod": (f"user.slice/user-1000.slice/user@1000.service/x/kubepods/pod{UID}/{ID}",
                   dict(app_pod=None, app_pod_uid=None, app_container_id=None,
                        app_unit="user@1000.service", app_workload="user@1000.service")),
    # what any user with a delegated subtree can name a cgroup: bytes that are not UTF-8, and a
    # line separator; as text, the byte written \xff
    "not-utf-8": ("user.slice/\udcff\u2028reader.scope",
                  dict(app_unit="\\xff\u2028reader.scope", app_workload="\\xff\u2028reader.scope")),
}


def _steer(args, logs) -> subprocess.Popen:
    """steer ARGS in the background, reading the kubelet's log directories under LOGS."""
    return subprocess.Popen([*STEER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT, STEER_KUBELET_LOGS=str(logs)))


def _kubelet_logs(root):
    """The kubelet's log directories for one pod of one container under ROOT, as a node has
    them."""
    (root / "pods" / f"shop_api-5f7c9_{UID}" / "server").mkdir(parents=True)
    (root / "containers").mkdir()
    (root / "containers" / f"api-5f7c9_shop_server-{ID}.log").symlink_to(
        root / "pods" / f"shop_api-5f7c9_{UID}" / "server" / "0.log")
    return root


@pytest.fixture
def kubelet_logs(tmp_path):
    return _kubelet_logs(tmp_path)


@pytest.fixture(scope="module")
def layout_run(tmp_path_factory):
    """One lab flow per layout of LAYOUTS, each read by an iperf3 moved into a cgroup named as
    that layout's runtime names one, all in one window of one steer flows --json: each flow is
    named from its own reader's cgroup, whatever the others' (one run a layout took 30 s).
    {layout: (steer's flow, the reader's pid, the cgroup's path)}, and steer's exit and stderr."""
    logs = _kubelet_logs(tmp_path_factory.mktemp("kubelet"))
    with made_cgroups([rel for rel, _ in LAYOUTS.values()]) as cgroups, \
            Lab([LabFlow(CPU_A, CPU_A) for _ in LAYOUTS], seconds=2) as lab:
        lab.start_servers()
        pids = [lab.receiver_pid(f.port) for f in lab.flows]
        for (_, path), pid in zip(cgroups, pids):
            move(path, pid)
        p = _steer(["flows", "--duration", "3", "--json"], logs)
        attached(p)
        lab.start_clients()
        out, err = p.communicate(timeout=60)
        results = lab.wait(timeout=30)
    flows = json.loads(out)["flows"] if p.returncode == 0 else []
    by_layout = {}
    for layout, (cgroup, _), pid, res in zip(LAYOUTS, cgroups, pids, results):
        by_layout[layout] = (next((f for f in flows if f["sport"] == res.sender_port), None),
                             pid, cgroup)
    return by_layout, p.returncode, err


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_readers_pod_container_or_unit_is_named_in_flows_json(layout, layout_run):
    """A real iperf3 reader moved into a cgroup named as LAYOUT's runtime names a container's:
    steer flows --json names its pod (from the kubelet's log directories), container and unit."""
    by_layout, code, err = layout_run
    assert code == 0, err
    f, pid, cgroup = by_layout[layout]
    want = LAYOUTS[layout][1]
    assert f is not None, "no flow of this layout's reader"
    assert f["app_pid"] == pid and f["app_cgroup"] == as_text(cgroup), f
    for key, value in want.items():
        assert f[key] == value, (key, f)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_static_rule_naming_a_pod_steers_that_pods_flows_only(kubelet_logs, private_tmp):
    """steer auto --policy with `pod = "shop/*"`: of two lab flows, the one whose reader sits in
    the pod's cgroup is placed by the rule (dry run: logged, not attached), the other not."""
    from helpers import CPU_B
    policy = private_tmp / "pods.toml"
    policy.write_text(f'[[rule]]\npod = "shop/*"\ncpu = {CPU_B}\n')
    with made_cgroup(LAYOUTS["kubelet-systemd"][0]) as (_, path), \
            Lab([LabFlow(CPU_A, CPU_A), LabFlow(CPU_A, CPU_A)], seconds=8) as lab:
        lab.start_servers()
        pod_port, other_port = (f.port for f in lab.flows)
        move(path, lab.receiver_pid(pod_port))
        p = _steer(["auto", "--dry-run", "--policy", str(policy), "--dev", "veth-rx",
                    "--netns", lab.rx, "--interval", "1", "--duration", "7", "--confirm", "1"],
                   kubelet_logs)
        attached(p)
        lab.start_clients()
        out, err = p.communicate(timeout=60)
        lab.wait(timeout=30)
    assert p.returncode == 0, err
    moves = [line for line in err.splitlines() if "kernel CPU" in line]
    print(err)
    assert any(f":{pod_port}" in m and "static rule pod=shop/*" in m and f"CPU {CPU_B}" in m
               for m in moves), err
    assert not any(f":{other_port}" in m for m in moves), err


def test_steer_top_names_the_readers_pod(kubelet_logs):
    """The live view (off a terminal: a plain table per interval) shows a reader in a
    kubelet-named cgroup as namespace/pod:container, in place of its process."""
    with made_cgroup(LAYOUTS["kubelet-cgroupfs"][0]) as (_, path), \
            Lab([LabFlow(CPU_A, CPU_A)], seconds=4) as lab:
        lab.start_servers()
        move(path, lab.receiver_pid(lab.flows[0].port))
        p = _steer(["top", "--interval", "1", "--duration", "4"], kubelet_logs)
        attached(p)
        lab.start_clients()
        out, err = p.communicate(timeout=60)
        lab.wait(timeout=30)
    assert p.returncode == 0, err
    rows = [line for line in out.splitlines() if "198.18.0.2:5201" in line]
    assert rows and any("shop/api-5f7c9:server" in r for r in rows), out


def _podman(*args, **kw):
    # runc: crun refuses a host with cgroup v1 controllers beside a cgroup2 hierarchy holding one
    # (this VM: hugetlb); cgroupfs: no systemd to ask for a scope
    return subprocess.run(["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args],
                          capture_output=True, text=True, **kw)


@pytest.mark.skipif(not (shutil.which("podman") and shutil.which("runc")),
                    reason="podman and runc not installed (scripts/setup.sh installs them)")
def test_a_reader_in_a_real_podman_container_is_named_by_its_container():
    """iperf3's server in a real podman container (the host's root as its read-only image,
    an overlay on top; the lab's receiving namespace as its network): steer flows --json names
    its container by the id podman gives it, though the container ended before the window did."""
    name = f"steer-test-{os.getpid()}"
    with Lab([], seconds=3) as lab:
        server = subprocess.Popen(
            ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm",
             "--name", name, "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=1024:1024",
             "--network", f"ns:{NETNS_DIR}/{lab.rx}", "--rootfs", "/:O",
             "taskset", "-c", str(CPU_A), "iperf3", "-s", "-1", "-p", "5201"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while b":5201" not in subprocess.run(["ip", "netns", "exec", lab.rx, "ss", "-ltn"],
                                                 capture_output=True).stdout:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()
                time.sleep(0.2)
            cid = _podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
            p = subprocess.Popen([*STEER, "flows", "--duration", "4", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
            attached(p)
            client = subprocess.run(["ip", "netns", "exec", lab.tx, "taskset", "-c", str(CPU_A),
                                     "iperf3", "-c", RECEIVER_ADDR, "-p", "5201", "-t", "2", "-J"],
                                    capture_output=True, text=True, timeout=60)
            # the server serves one client and the container goes (--rm), cgroup and all,
            # within steer flows' window: steer named it from its walk at the start
            server.communicate(timeout=30)
            out, err = p.communicate(timeout=60)
        finally:
            _podman("rm", "-f", name)
    assert p.returncode == 0, err
    sport = json.loads(client.stdout)["start"]["connected"][0]["local_port"]
    f = next(f for f in json.loads(out)["flows"] if f["sport"] == sport and f["dport"] == 5201)
    print(f"container {cid[:12]}: {f['app_cgroup']}, {f['app_workload']}, {f['rx_bytes']} B")
    assert len(cid) == 64
    assert f["app_comm"] == "iperf3" and f["app_container_id"] == cid
    assert f["app_container_runtime"] == "podman" and f["app_workload"] == f"podman:{cid[:12]}"
    assert f["app_cgroup"].endswith(f"/libpod-{cid}")
