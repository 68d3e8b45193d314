"""The packaged systemd unit under a real systemd: PID 1 of a podman container whose root is this
host's (read-only, an overlay on top), in a network namespace of the test's own. The unit is the
file the package installs, as written; a drop-in only points ExecStart at this checkout (Debian's
python3 with the checkout on PYTHONPATH, where the package has /usr/bin/steer), and for TLS adds
the lines the unit's comment gives."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import ROOT, beside_guest, live

pytestmark = [live, beside_guest, pytest.mark.skipif(
    not (shutil.which("podman") and shutil.which("runc") and os.path.exists("/lib/systemd/systemd")),
    reason="podman, runc and systemd not installed (scripts/setup.sh installs them)")]
UNIT = os.path.join(ROOT, "dashboards", "fleet", "steer-exporter.service")
LISTEN = "127.0.0.1:9723"   # the unit's default, inside the test's namespace


def _podman(*args, **kw):
    # runc and cgroupfs, as test_cgroups_live's container: crun refuses this VM's hybrid cgroups
    return subprocess.run(["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args],
                          capture_output=True, text=True, **kw)


def _scrape(netns: str, scheme: str = "http", ca: str | None = None) -> str:
    """/metrics in NETNS (over TLS, the server's certificate checked against CA); "" where it
    fails."""
    context = f"ssl.create_default_context(cafile={ca!r})" if ca else "None"
    r = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                        f"import ssl, urllib.request; print(urllib.request.urlopen("
                        f"'{scheme}://{LISTEN}/metrics', timeout=5, context={context})"
                        f".read().decode())"],
                       capture_output=True, text=True, timeout=30)
    return r.stdout if r.returncode == 0 else ""


def _started(name: str, netns: str, scheme: str = "http", ca: str | None = None) -> str:
    """The exporter's first scrape once systemd has it running; fails with its journal."""
    deadline = time.monotonic() + 90
    while not (body := _scrape(netns, scheme, ca)):
        active = _podman("exec", name, "systemctl", "is-active", "steer-exporter").stdout
        assert time.monotonic() < deadline and active.strip() in ("active", "activating"), \
            _podman("exec", name, "journalctl", "-u", "steer-exporter", "--no-pager").stdout
        time.sleep(0.5)
    return body


def _write(name: str, path: str, text: str) -> None:
    r = _podman("exec", "-i", name, "sh", "-c",
                f"mkdir -p {os.path.dirname(path)} && cat > {path}", input=text)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def container():
    """systemd booted as PID 1 of a container in a network namespace of its own: (name, netns).
    Its mounts are made shared, as systemd makes a host's at boot (as PID 1 of a container it
    leaves them private, and the credentials it mounts for a unit never reach the unit)."""
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
        r = _podman("exec", name, "mount", "--make-rshared", "/")
        assert r.returncode == 0, r.stderr
        yield name, netns
    finally:
        _podman("rm", "-f", "-t", "0", name)
        subprocess.run(["ip", "netns", "del", netns])


def _run_unit(name: str, netns: str, service: str, scheme: str = "http",
              ca: str | None = None) -> tuple[str, str, str]:
    """The package's unit with the drop-in SERVICE lines ([Service]) started; its first scrape,
    its journal and its main process' /proc status. Stopped after."""
    with open(UNIT) as f:
        unit = f.read()
    dropin = f"[Service]\nEnvironment=PYTHONPATH={ROOT}\nBindReadOnlyPaths={ROOT}\n{service}"
    _write(name, "/etc/systemd/system/steer-exporter.service", unit)
    _write(name, "/etc/systemd/system/steer-exporter.service.d/checkout.conf", dropin)
    try:
        for cmd in (("daemon-reload",), ("restart", "steer-exporter")):
            r = _podman("exec", name, "systemctl", *cmd)
            assert r.returncode == 0, r.stderr
        body = _started(name, netns, scheme, ca)
        pid = _podman("exec", name, "systemctl", "show", "-P", "MainPID",
                      "steer-exporter").stdout.strip()
        status = _podman("exec", name, "cat", f"/proc/{pid}/status").stdout
    finally:
        journal = _podman("exec", name, "journalctl", "-u", "steer-exporter",
                          "--no-pager").stdout
        _podman("exec", name, "systemctl", "stop", "steer-exporter")
    print(journal[-3000:])
    return body, journal, status


# ExecStart at this checkout's steer, where the package has /usr/bin/steer
CHECKOUT_EXEC = "ExecStart=\nExecStart=/usr/bin/python3 -m steer export --listen ${STEER_LISTEN} $STEER_OPTIONS\n"


def test_the_unit_runs_the_default_mode_under_systemd(container):
    """Started by systemd with the unit's sandbox (ProtectKernel*, DynamicUser, its three ambient
    capabilities), the exporter runs sampled timing, the default: it reads the kernel's symbol
    addresses, which ProtectKernelTunables (/proc/kallsyms hidden) and ProtectKernelLogs
    (CAP_SYSLOG taken) made it fall back from to exact timing, which hooks every syscall."""
    body, journal, status = _run_unit(*container, CHECKOUT_EXEC)
    mode = re.search(r'^steer_timing_mode_info\{mode="(\w+)"\} 1\.0$', body, re.M)
    assert mode and mode.group(1) == "sampled", (mode and mode.group(1), journal[-3000:])
    # the unit's user and capabilities: a dynamic uid, nothing beyond CAP_BPF, CAP_PERFMON and
    # CAP_SYSLOG (bits 39, 38, 34) at most, and the drop at start-up leaves none effective
    uid = int(status.split("Uid:")[1].split()[0])
    assert uid != 0, status
    bounding = int(re.search(r"^CapBnd:\s+(\w+)$", status, re.M).group(1), 16)
    assert bounding & ~(1 << 39 | 1 << 38 | 1 << 34) == 0, hex(bounding)


def test_tls_files_reach_the_dynamic_user_as_the_units_comment_says(container, tmp_path):
    """The unit's comment hands the web config and its TLS files to the dynamic user as
    credentials (LoadCredential=), from root's 0600 files it could not read itself: with its
    lines as written, the exporter serves /metrics over TLS with that certificate."""
    from tls import make_pki
    pki = make_pki(tmp_path)
    name, netns = container
    with open(UNIT) as f:
        comment = [line.removeprefix("#").strip() for line in f if line.startswith("#   ")]
    given = [line for line in comment if line.startswith(("LoadCredential=", "ExecStart="))]
    assert sum(line.startswith("LoadCredential=") for line in given) == 3, comment
    files = {"web.yml": "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
             "server.crt": pki["server_crt"].read_text(), "server.key": pki["server_key"].read_text()}
    for line in given:
        if line.startswith("LoadCredential="):
            credential, source = line.removeprefix("LoadCredential=").split(":", 1)
            _write(name, source, files[credential])
            assert _podman("exec", name, "chmod", "0600", source).returncode == 0
    service = "\n".join(line.replace("/usr/bin/steer ", "/usr/bin/python3 -m steer ")
                         for line in given) + "\n"
    body, journal, status = _run_unit(name, netns, service, "https", str(pki["ca_crt"]))
    assert "steer_timing_mode_info" in body, journal[-3000:]
    assert "serving https://" in journal, journal[-3000:]
    assert int(status.split("Uid:")[1].split()[0]) != 0, status
