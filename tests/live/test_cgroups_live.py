"""A flow's reader carries its cgroup: a real iperf3 server moved into a cgroup this test makes in
the host's cgroup2 hierarchy, checked against the kernel's own /proc/PID/cgroup."""
import json
import os
import subprocess
import time

import pytest

from helpers import CPU_A, ROOT, STEER, live
from steer.experiment.lab import Lab, LabFlow
from steer.trace.cgroups import cgroup2_mount

MOUNT = cgroup2_mount()
pytestmark = [live, pytest.mark.skipif(MOUNT is None, reason="no cgroup2 hierarchy mounted")]


@pytest.fixture
def cgroup():
    """A cgroup of this test's own, named as a kubelet names a container's (systemd driver),
    removed after (its processes gone first)."""
    rel = f"steer-test-{os.getpid()}.slice/cri-containerd-{os.getpid():x}.scope"
    path = os.path.join(MOUNT, rel)
    os.makedirs(path)
    yield "/" + rel, path
    for d in (path, os.path.dirname(path)):
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.1)   # the last process is still leaving


@pytest.mark.parametrize("env,timing", [({}, []), ({}, ["--timing", "exact"]),
                                        ({"STEER_TEST_REFUSE": "optional"}, [])],
                         ids=["default", "exact", "every-optional-refused"])
def test_a_readers_cgroup_is_in_flows_json(cgroup, env, timing):
    rel, path = cgroup
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=2) as lab:
        lab.start_servers()
        pid = lab.receiver_pid(lab.flows[0].port)
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        with open(f"/proc/{pid}/cgroup") as f:   # the kernel's word on where the reader is
            truth = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        p = subprocess.Popen([*STEER, "flows", "--duration", "3", "--json", *timing],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT, **env), cwd=ROOT)
        time.sleep(0.8)
        lab.start_clients()
        out, err = p.communicate(timeout=60)
        (res,) = lab.wait(timeout=30)
    assert p.returncode == 0, err
    assert truth == rel
    f = next(f for f in json.loads(out)["flows"] if f["sport"] == res.sender_port)
    assert f["app_pid"] == pid and f["app_cgroup"] == rel, f
    assert f["app_cgroup_id"] == os.stat(path).st_ino
