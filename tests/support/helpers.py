"""Shared by the test modules: running the real `steer` command, and the skip conditions of the
live tier (each skip says why)."""
import functools
import os
import shutil
import json
import re
import subprocess
import sys
import time

import pytest

from bench.odds import DISPERSION, sampled_spread

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEER = [sys.executable, "-m", "steer"]

# the CPUs the tests may place lab processes on: a CI runner's taskset or cgroup cpuset can allow
# fewer than are online, and not CPU 0 (one did: only CPU 1 of 0-1)
CPUS = sorted(os.sched_getaffinity(0))
CPU_A = CPUS[0]
CPU_B = CPUS[1] if len(CPUS) > 1 else CPUS[0]   # tests that need it distinct skip with two_cpus
two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs")


# sampled timing is tested at the rate `steer flows --sample-hz` offers for precise windows; at the
# always-on default (99 Hz) the same bounds hold for flows with 10x the CPU time
SAMPLE_HZ = 1000


# A sampled time's spread, and the odds each statistical bound is held to: bench/odds.py (the
# measured dispersion of a sample's weight is described there)
SAMPLE_DISPERSION = DISPERSION


def sampling_bound(seconds: float, hz: int = SAMPLE_HZ, figures: int = 1) -> float:
    """The relative error sampled timing is held to against exact, for a flow that took SECONDS of
    CPU, one of FIGURES such times a test holds at once: 10% for what the two modes charge
    differently (a softirq's work before its first skb goes to that skb's flow in the exact mode,
    to the flow of the skb before it in the sampled), plus what chance may add to seconds*hz
    samples at the suite's odds (bench.odds: at most 1 in 10,000 that the test fails by chance)."""
    return 0.10 + sampled_spread(seconds * hz, figures)


COOKIE = 37   # iperf3's stream cookie: on the data connection, not in its byte count
MSS = 1448           # the lab veth's: 1500 less IPv4, TCP and its timestamp option


LOOPBACK_MSS_V6 = 65464   # the loopback's MTU (65536) less IPv6's 40 bytes, TCP's 20 and its timestamps' 12


def tcp_rx_bound(r, mss: int = MSS) -> int:
    """The most the kernel side can count of lab flow R: what iperf3 received, its cookie, every
    segment of up to MSS bytes its sender retransmitted (counted per skb, a retransmission
    arrives again) and a full receive buffer (what reached the socket after iperf3's server
    stopped reading)."""
    rmem_max = int(open("/proc/sys/net/ipv4/tcp_rmem").read().split()[2])
    return r.received_bytes + COOKIE + r.raw["end"]["sum_sent"]["retransmits"] * mss + rmem_max


def assert_tcp_rx(rx: int, r, how: str, passed) -> None:
    """A lab TCP flow R's kernel-side bytes RX, as its figure's HOW says they were counted: per
    skb, what net:netif_receive_skb handed up, to the byte of PASSED (witness.ReceivedTcpBytes:
    source port -> bytes; witness.matches_witness); by the sockets' counters, at least what iperf3 read. Per skb, iperf3's
    count is no lower bound: on this kernel a reader now and then gets whole skbs that no
    netif_receive_skb event carried (test_timing_live::test_ipv6_flows_in_each_mode)."""
    from witness import matches_witness
    if "per skb" in how:
        assert matches_witness(rx, passed, r.sender_port), (rx, passed, passed.misses, how)
    else:
        assert r.received_bytes <= rx, (rx, r.received_bytes, how)
    assert rx <= tcp_rx_bound(r), (rx, tcp_rx_bound(r))


def steer(*args, env=None, timeout=120, prefix=()):
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.update(env or {})
    return subprocess.run([*prefix, *STEER, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=ROOT)


def assert_one_line_error(r, *fragments, code=1):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def bpftool_objects(kind: str) -> list[dict]:
    """`bpftool -j KIND show` as a list: the kernel's own view of loaded programs or links. bpftool
    walks IDs and then opens each, so an object freed between the two (a steer process exiting
    while the test looks) fails the whole listing; that race is retried, anything else raised."""
    for _ in range(20):
        r = subprocess.run(["bpftool", "-j", kind, "show"], capture_output=True, text=True)
        if r.returncode == 0:
            return json.loads(r.stdout or "[]")
        time.sleep(0.05)
    raise AssertionError(f"bpftool {kind} show failed 20 times: {r.stdout.strip()} {r.stderr.strip()}")


def links_of(prog_ids) -> list[dict]:
    """The BPF links of the programs PROG_IDS (a collection of ids), by bpftool."""
    return [l for l in bpftool_objects("link") if l.get("prog_id") in prog_ids]


# this kernel's (major, minor), for tests that hold only before or after a release
KERNEL_RELEASE = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())


def hold_accuracy_rows(held, rows: list[dict], prefix: str = "") -> list[str]:
    """Each row of a bench.accuracy run that has a ratio, recorded with its bounds by HELD (the
    conftest fixture) and judged: the failures, to assert on after all are recorded."""
    failed = []
    for row in rows:
        if row["ratio"] is None:
            continue
        try:
            held(f"{prefix}{row['scenario']}, {row['mode']}: {row['figure']}", row["ratio"] - 1,
                 *row["bounds"])
        except AssertionError as e:
            # with what else ran on the machine meanwhile (bench.bystanders), to read it by
            beside = row.get("beside")
            failed.append(f"{e} (beside it: {beside})" if beside else str(e))
    return failed


def tracer_programs() -> list[str]:
    """Names of the tracer's programs loaded anywhere in the kernel (bpftool, not steer)."""
    return [p.get("name", "") for p in bpftool_objects("prog")
            if p.get("name", "").startswith("ft_")]


# the share of a CPU the host may take (steal, /proc/stat) in a window where a test judges the
# ns a program costs: the kernel times a BPF program, and the spans around it, by a clock that
# runs on while the host has the CPU, so a preemption inside one run is that run's time
# (tests/live/test_budget_live.py has the measurements)
CALM = 0.005


def attached(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Returns once PROC, a steer command just started, holds a BPF link (its programs are
    loaded and on their hooks): its window opens with its first read of the maps, right after.
    Traffic started then falls in the window; after a fixed sleep it raced steer's start, which
    takes ~1 s here and took several under a host's steal (clean clones 184 and 187, whose
    2 s flows were over before the window opened)."""
    deadline = time.monotonic() + timeout
    fds = f"/proc/{proc.pid}/fd"
    while True:
        assert proc.poll() is None, f"steer exited ({proc.returncode}) before it attached"
        try:
            if any(os.readlink(f"{fds}/{fd}") == "anon_inode:bpf_link" for fd in os.listdir(fds)):
                return
        except FileNotFoundError:
            pass   # an fd closed between the listing and its reading
        assert time.monotonic() < deadline, f"steer attached nothing in {timeout:.0f} s"
        time.sleep(0.02)


def settled(probe, timeout=5.0):
    """PROBE() once it is empty, or what it still returns after TIMEOUT: the kernel frees a
    detached program after an RCU grace period, so bpftool can list it a moment longer."""
    end = time.monotonic() + timeout
    while (left := probe()) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def image_tools_missing() -> str | None:
    """Why the DaemonSet's image cannot be built and run here (`make image` and podman), or
    None: the image test skips with it, and the suite starts no build."""
    if not (shutil.which("podman") and shutil.which("runc") and shutil.which("mmdebstrap")):
        return "podman, runc and mmdebstrap not installed (scripts/setup.sh installs them)"
    return None


@functools.lru_cache(maxsize=None)
def live_skip_reason():
    if os.geteuid() != 0:
        return "live tier needs root (BPF programs, namespaces)"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "kernel has no BTF"
    for tool in ("iperf3", "bpftool"):
        if not shutil.which(tool):
            return f"{tool} not installed (make setup installs it)"
    if not os.path.exists(os.path.join(ROOT, "build", "flowtrace.bpf.o")):
        return "BPF object not built (make)"
    return None


# the live tier: `pytest -m "not live"` leaves it out; conftest skips it, saying why, where it
# cannot run (live_skip_reason)
live = pytest.mark.live
# a live test whose figures time CPU work, idle CPUs or throughput: it needs the host's CPUs to
# itself, and a guest the suite runs in the background (tests/guest/test_guest_live.py) is stopped
# while it runs
alone = pytest.mark.alone
# a live test that times nothing, checks no rate and counts no host-wide figure (not every iperf3,
# not every flow: the 6.1 guest's feeder runs an iperf3 here): it runs beside the 6.1 guest, on the
# CPU its TCG thread leaves (tests/conftest.py, TIER_ORDER)
beside_guest = pytest.mark.beside_guest


SCREENSHOTS = os.path.join(ROOT, "build", "screenshots")


def save_screenshot(ansi: str, name: str, width: int, what: str) -> str:
    """Renders a terminal capture (tmux capture-pane -e) as an SVG under build/screenshots/,
    trailing blank lines cut, and returns its path. README.md shows docs/img/steer-top.svg, a
    copy of one made by tests/live/test_live.py::test_live_view_in_a_terminal on a real run."""
    import io
    from rich.console import Console
    from rich.text import Text
    lines = ansi.rstrip("\n").splitlines()
    while lines and not Text.from_ansi(lines[-1]).plain.strip():
        lines.pop()
    console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor")
    for line in lines:
        console.print(Text.from_ansi(line), overflow="crop", no_wrap=True)
    os.makedirs(SCREENSHOTS, exist_ok=True)
    path = os.path.join(SCREENSHOTS, f"{name}.svg")
    svg = console.export_svg(title=what)
    stamp = time.strftime("%Y-%m-%d")
    svg = svg.replace("<svg ", f"<!-- {what}: captured by tests/live/test_live.py on {stamp}, kernel "
                               f"{os.uname().release}, {os.cpu_count()} CPUs -->\n<svg ", 1)
    with open(path, "w") as f:
        f.write(svg)
    return path


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def screen_until(session: str, cond, timeout: float = 20.0) -> str:
    """tmux SESSION's screen as text, once COND holds of it or TIMEOUT has passed."""
    end = time.monotonic() + timeout
    while True:
        screen = tmux("capture-pane", "-p", "-t", session)
        if cond(screen) or time.monotonic() > end:
            return screen
        time.sleep(0.25)


def task_status(pid: int) -> dict[int, dict[str, str]]:
    """{thread id: its /proc status fields} of every thread of PID: capabilities are per thread."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            out[int(tid)] = dict(re.findall(r"^(\w+):[ \t]*(.*)$", f.read(), re.M))
    return out


def assert_unprivileged(pid: int, uid: int | None = None, gid: int | None = None):
    tasks = task_status(pid)
    assert len(tasks) > 1   # the HTTP server's threads, which used to keep root's capabilities
    gid = uid if gid is None else gid
    for tid, st in tasks.items():
        assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, (tid, st["Name"], st["CapEff"])
        assert st["NoNewPrivs"] == "1", tid
        if uid is not None:
            assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(gid)] * 4, \
                (st["Uid"], st["Gid"])
            assert st["Groups"].strip() == "", st["Groups"]


def fexit_probe_and_our_load(func: str) -> tuple[int | None, int]:
    """steer.kernel.probes' answer for an fexit program on FUNC, and the errno a load of
    flowtrace's own fexit program on FUNC gets alone (0: it loads), after checking the probe's
    encoding on a tp_btf program, which every kernel steer runs on takes."""
    from steer.kernel.errors import KernelError
    from steer.kernel.objects import BpfObject
    from steer.kernel.probes import fexit_errno, tp_btf_errno
    from steer.trace.tracer import flowtrace_object
    assert tp_btf_errno("netif_receive_skb") == 0
    try:
        # the object steer loads on this kernel (flowtrace-nokfunc.bpf.o before 6.2)
        BpfObject(str(flowtrace_object()), only={f"ft_{func}_exit"}, no_pin=True).close()
        ours = 0
    except KernelError as e:
        ours = e.errno
    return fexit_errno(func), ours
