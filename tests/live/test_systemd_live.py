"""The packaged systemd unit under a real systemd: PID 1 of a podman container whose root is this
host's (read-only, an overlay on top), in a network namespace of the test's own. The unit is the
file the package installs, as written; a drop-in only points ExecStart at this checkout (Debian's
python3 with the checkout on PYTHONPATH, where the package has /usr/bin/steer)."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import ROOT, live

pytestmark = [live, pytest.mark.skipif(
    not (shutil.which("podman") and shutil.which("runc") and os.path.exists("/lib/systemd/systemd")),
    reason="podman, runc and systemd not installed (scripts/setup.sh installs them)")]
UNIT = os.path.join(ROOT, "dashboards", "fleet", "steer-exporter.service")
LISTEN = "127.0.0.1:9723"   # the unit's default, inside the test's namespace


def _podman(*args, **kw):
    # runc and cgroupfs, as test_cgroups_live's container: crun refuses this VM's hybrid cgroups
    return subprocess.run(["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args],
                          capture_output=True, text=True, **kw)


def _scrape(netns: str) -> str:
    """/metrics in NETNS; "" where it fails."""
    r = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                        f"import urllib.request; print(urllib.request.urlopen("
                        f"'http://{LISTEN}/metrics', timeout=5).read().decode())"],
                       capture_output=True, text=True, timeout=30)
    return r.stdout if r.returncode == 0 else ""


def _started(name: str, netns: str) -> str:
    """The exporter's first scrape once systemd has it running; fails with its journal."""
    deadline = time.monotonic() + 90
    while not (body := _scrape(netns)):
        active = _podman("exec", name, "systemctl", "is-active", "steer-exporter").stdout
        assert time.monotonic() < deadline and active.strip() in ("active", "activating"), \
            _podman("exec", name, "journalctl", "-u", "steer-exporter", "--no-pager").stdout
        time.sleep(0.5)
    return body


def _write(name: str, path: str, text: str) -> None:
    r = _podman("exec", "-i", name, "sh", "-c",
                f"mkdir -p {os.path.dirname(path)} && cat > {path}", input=text)
    assert r.returncode == 0, r.stderr


def test_the_unit_runs_the_default_mode_under_systemd():
    """Started by systemd with the unit's sandbox (ProtectKernel*, DynamicUser, its three ambient
    capabilities), the exporter runs sampled timing, the default: it reads the kernel's symbol
    addresses, which ProtectKernelTunables (/proc/kallsyms hidden) and ProtectKernelLogs
    (CAP_SYSLOG taken) made it fall back from to exact timing, which hooks every syscall.
    (The unit's LoadCredential= advice for TLS files is not checked here: systemd 252 as PID 1
    of this container hands no unit its credentials, not even a root one.)"""
    netns = f"steer-systemd-{os.getpid()}"
    name = netns
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        # /tmp and /run empty (systemd mode would copy the host's in), the checkout where it is
        # (and rlimits this host allows: podman's defaults exceed them, as in test_cgroups_live)
        r = _podman("run", "-d", "--rm", "--name", name, "--privileged", "--systemd=always",
                    "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=1024:1024",
                    "--network", f"ns:/run/netns/{netns}",
                    "--mount", "type=tmpfs,destination=/tmp,notmpcopyup",
                    "--mount", "type=tmpfs,destination=/run,notmpcopyup",
                    "--volume", f"{ROOT}:{ROOT}:ro", "--rootfs", "/:O",
                    "/lib/systemd/systemd", "--unit=basic.target")
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 90
        while True:
            state = _podman("exec", name, "systemctl", "is-system-running").stdout.strip()
            if state in ("running", "degraded"):
                break
            assert time.monotonic() < deadline, (state, _podman("logs", name).stdout[-2000:])
            time.sleep(0.5)
        with open(UNIT) as f:
            unit = f.read()
        dropin = ("[Service]\n"
                  f"Environment=PYTHONPATH={ROOT}\n"
                  f"BindReadOnlyPaths={ROOT}\n"
                  "ExecStart=\n"
                  "ExecStart=/usr/bin/python3 -m steer export --listen ${STEER_LISTEN} "
                  "$STEER_OPTIONS\n")
        _write(name, "/etc/systemd/system/steer-exporter.service", unit)
        _write(name, "/etc/systemd/system/steer-exporter.service.d/checkout.conf", dropin)
        for cmd in (("daemon-reload",), ("start", "steer-exporter")):
            r = _podman("exec", name, "systemctl", *cmd)
            assert r.returncode == 0, r.stderr
        body = _started(name, netns)
        journal = _podman("exec", name, "journalctl", "-u", "steer-exporter",
                          "--no-pager").stdout
        pid = _podman("exec", name, "systemctl", "show", "-P", "MainPID",
                      "steer-exporter").stdout.strip()
        status = _podman("exec", name, "cat", f"/proc/{pid}/status").stdout
    finally:
        _podman("rm", "-f", "-t", "0", name)
        subprocess.run(["ip", "netns", "del", netns])
    print(journal[-3000:])
    mode = re.search(r'^steer_timing_mode_info\{mode="(\w+)"\} 1\.0$', body, re.M)
    assert mode and mode.group(1) == "sampled", (mode and mode.group(1), journal[-3000:])
    # the unit's user and capabilities: a dynamic uid, nothing beyond CAP_BPF, CAP_PERFMON and
    # CAP_SYSLOG (bits 39, 38, 34) at most, and the drop at start-up leaves none effective
    uid = int(status.split("Uid:")[1].split()[0])
    assert uid != 0, status
    bounding = int(re.search(r"^CapBnd:\s+(\w+)$", status, re.M).group(1), 16)
    assert bounding & ~(1 << 39 | 1 << 38 | 1 << 34) == 0, hex(bounding)
