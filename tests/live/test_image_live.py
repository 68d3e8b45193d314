"""The DaemonSet's image, built as a user builds it (`make image`: mmdebstrap and podman, no
registry), run by podman with what dashboards/fleet/daemonset.yaml grants and nothing more (its
capabilities, read-only root, no privilege escalation, the runtime's default seccomp filter, its
host mounts read-only, its memory limit, its args), in a network namespace of the test's own as a
pod's; scraped from the host while a lab flow runs."""
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from helpers import CPU_A, CPU_B, ROOT, assert_unprivileged, image_tools_missing, live
from web import metric_sum
from steer.experiment.lab import Lab, LabFlow

pytestmark = [live, pytest.mark.skipif(image_tools_missing() is not None,
                                       reason=str(image_tools_missing()))]
DAEMONSET = os.path.join(ROOT, "dashboards", "fleet", "daemonset.yaml")


def _podman(*args, **kw):
    # runc and cgroupfs, as the other container tests: crun refuses this VM's hybrid cgroups
    return subprocess.run(["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args],
                          capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def image(daemonset_image):
    """`make image` from the suite's package (tests/conftest.py builds it in the background from
    the artifacts tier on), under a tag of the suite's own."""
    size = json.loads(_podman("image", "inspect", daemonset_image).stdout)[0]["Size"]
    print(f"image {daemonset_image}: {size / 2**20:.0f} MiB")
    return daemonset_image


def _run_options(pod: dict, logs) -> tuple[list[str], list[str]]:
    """podman run's options for what the pod spec grants, and the container's args. The kubelet's
    log directories come from LOGS (the test's), every other host path is the host's own."""
    (c,) = pod["containers"]
    sc = c["securityContext"]
    opts = ["--user", f"{sc['runAsUser']}:0", "--cap-drop", "all"]
    opts += ["--cap-add", ",".join(f"CAP_{cap}" for cap in sc["capabilities"]["add"])]
    assert sc["capabilities"]["drop"] == ["ALL"]
    if sc["readOnlyRootFilesystem"]:
        # as a pod: no tmpfs on /tmp or /run that podman would add by itself
        opts += ["--read-only", "--read-only-tmpfs=false"]
    if sc["allowPrivilegeEscalation"] is False:
        opts += ["--security-opt", "no-new-privileges"]
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and not sc.get("privileged")
    opts += ["--memory", c["resources"]["limits"]["memory"].replace("Mi", "m")]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    for m in c["volumeMounts"]:
        host = volumes[m["name"]]
        if host.startswith("/var/log/"):
            host = str(logs / os.path.basename(host))
            os.makedirs(host, exist_ok=True)
        flags = ["ro" if m.get("readOnly") else "rw"]
        if m.get("mountPropagation") == "HostToContainer":
            flags.append("rslave")
        opts += ["--volume", f"{host}:{m['mountPath']}:{','.join(flags)}"]
    return opts, c["args"]


def _containerd_default(tmp) -> str:
    """podman's default seccomp profile as containerd's RuntimeDefault has it for these
    capabilities: both are Docker's, and containerd admits bpf() to holders of CAP_BPF and
    perf_event_open() to CAP_PERFMON, where podman's (and CRI-O's, containers/common) admit
    them to CAP_SYS_ADMIN alone."""
    path = subprocess.run(["podman", "info", "--format",
                           "{{.Host.Security.SECCOMPProfilePath}}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(path) as f:
        profile = json.load(f)
    for rule in profile["syscalls"]:
        if rule.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"] or \
                rule.get("excludes", {}).get("caps") == ["CAP_SYS_ADMIN"]:
            rule["names"] = [n for n in rule["names"] if n not in ("bpf", "perf_event_open")]
    profile["syscalls"] += [
        {"names": [name], "action": "SCMP_ACT_ALLOW", "args": [], "includes": {"caps": [cap]}}
        for name, cap in (("bpf", "CAP_BPF"), ("perf_event_open", "CAP_PERFMON"),
                          ("bpf", "CAP_SYS_ADMIN"), ("perf_event_open", "CAP_SYS_ADMIN"))]
    out = tmp / "containerd-default.json"
    out.write_text(json.dumps(profile))
    return str(out)


def _get(netns: str, url: str) -> str:
    """URL's body from inside NETNS (the pod's network), "" where it fails."""
    r = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                        f"import urllib.request; print(urllib.request.urlopen({url!r}, "
                        "timeout=5).read().decode())"],
                       capture_output=True, text=True, timeout=30)
    return r.stdout if r.returncode == 0 else ""


def test_the_daemonsets_image_runs_with_only_what_the_daemonset_grants(image, tmp_path):
    """The exporter starts in the image with the DaemonSet's five capabilities, answers its
    probes, becomes nobody with none in any thread, runs the default timing mode, counts a lab
    flow's bytes as iperf3 does, and cannot read the host's pins (nobody is not in the steer
    group; it says so) through a bpffs it has read-only."""
    with open(DAEMONSET) as f:
        pod = yaml.safe_load(f)["spec"]["template"]["spec"]
    opts, args = _run_options(pod, tmp_path / "logs")
    # RuntimeDefault: the runtime's own filter, here containerd's (see _containerd_default)
    assert pod["containers"][0]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    opts += ["--security-opt", f"seccomp={_containerd_default(tmp_path)}"]
    (c,) = pod["containers"]
    port = c["ports"][0]["containerPort"]
    probe = c["livenessProbe"]["httpGet"]["path"]
    netns = name = f"steer-image-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        r = _podman("run", "-d", "--name", name, "--network", f"ns:/run/netns/{netns}",
                    "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=1024:1024",
                    *opts, image, *args)
        assert r.returncode == 0, r.stderr
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120   # the startup probe's 24 x 5 s
        while not (healthy := _get(netns, base + probe)):
            running = _podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip()
            assert running == "true" and time.monotonic() < deadline, \
                _podman("logs", name).stderr[-3000:]
            time.sleep(0.5)
        pid = int(_podman("inspect", "-f", "{{.State.Pid}}", name).stdout)
        assert_unprivileged(pid, uid=65534)
        with Lab([LabFlow(CPU_A, CPU_B)], seconds=4) as lab:
            lab.start_servers()
            lab.start_clients()
            (res,) = lab.wait()
        time.sleep(0.5)
        body = _get(netns, base + "/metrics")
        logs = _podman("logs", name)
        assert_unprivileged(pid, uid=65534)
    finally:
        _podman("rm", "-f", "-t", "5", name)
        subprocess.run(["ip", "netns", "del", netns])
    print(logs.stderr[-2000:])
    assert healthy and body, logs.stderr[-3000:]
    assert "Traceback" not in logs.stderr
    mode = re.search(r'^steer_timing_mode_info\{mode="(\w+)"\} 1\.0$', body, re.M)
    assert mode and mode.group(1) == "sampled", mode and mode.group(1)
    # the same check as the host's exporter as nobody (test_exporter_live): the socket's own
    # byte count, read since the flow began after the exporter's start
    got = metric_sum(body, rf'steer_flow_receive_bytes_total\{{[^}}]*sport="{res.sender_port}"[^}}]*\}}')
    print(f"the image's exporter: {got:,.0f} B in the flow's series, iperf3 {res.received_bytes:,} B")
    assert res.received_bytes * 0.98 <= got <= res.received_bytes * 1.02 + 10**6
    readable = re.search(r'^steer_steering_readable\{why="(.*)"\} ([01])\.0$', body, re.M)
    assert readable, body[:2000]


def test_under_podmans_default_filter_the_image_says_why_it_cannot_load(image, tmp_path):
    """podman's and CRI-O's default seccomp profile refuses bpf() to a container without
    CAP_SYS_ADMIN, whatever else it holds: the exporter exits at once with one line that says
    so, not with a traceback or a guess."""
    with open(DAEMONSET) as f:
        pod = yaml.safe_load(f)["spec"]["template"]["spec"]
    opts, args = _run_options(pod, tmp_path / "logs")
    r = _podman("run", "--rm", "--network", "none", "--ulimit", "nofile=1024:20000",
                "--ulimit", "nproc=1024:1024", *opts, image, *args, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("steer export: error: ") and "seccomp filter" in lines[0], lines
    assert "Traceback" not in r.stderr
