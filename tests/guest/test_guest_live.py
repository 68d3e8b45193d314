"""The guest tier as one test of the host's suite, so that `make test` (and CI) runs it: the tests
only a host with two sockets and a kernel without sock_recv_length can run (tests/guest/test_vm_live.py)
inside the qemu guest of tests/guest/vm/run.py. A guest that does not boot, or hangs, fails within its
timeouts with the tail of its console."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import ROOT, live

pytestmark = live

BOOT_TIMEOUT = 120      # seconds; a boot takes ~10 s here
GUEST_TIMEOUT = 900     # a whole guest run: 5.5 min here with both guests at once (2026-11-27)
# a guest in the background runs from the session's start to past the live tier's middle, and
# stands still while the live tier's tests that need the host alone run
BACKGROUND_TIMEOUT = 2400
# a guest in the foreground (the 6.1 guest) is the session's longest task before the live tier:
# its qemu (and virtiofsd, its feeder) run at this nice, so that the tests beside it, those of the
# unit and artifacts tiers and the live tests marked beside_guest, take what CPU its one TCG thread
# leaves and do not set its pace (at the same priority, live tests beside the guests slowed
# their steer starts to 150-270 s in clean clones 167 and 168)
AHEAD_NICE = -5


sys.path.insert(0, os.path.join(ROOT, "tests", "guest", "vm"))
from run import EXIT_GUEST_LOCKUP, LOCKUP_MARKER, qmp_command  # noqa: E402


class GuestRun:
    """tests/guest/vm/run.py started now, its output in files (a pipe nobody reads would fill
    and stop the guest while another test waits for its own). A guest in the background
    (run.py --background) has a QMP socket, by which the live tier's tests that need the host
    alone stop it (pause) and let it go on (resume)."""

    def __init__(self, tmp, name: str, *args: str, background: bool = False):
        self.out, self.err = open(tmp / f"{name}.out", "w+"), open(tmp / f"{name}.err", "w+")
        self.started = time.monotonic()
        self.timeout = BACKGROUND_TIMEOUT if background else GUEST_TIMEOUT
        self.qmp = str(tmp / f"{name}.qmp") if background else None
        extra = ("--background", "--qmp", self.qmp) if background else ()
        self.p = subprocess.Popen([sys.executable, "tests/guest/vm/run.py", "--timeout",
                                   str(self.timeout), "--boot-timeout", str(BOOT_TIMEOUT), *extra,
                                   *args],
                                  cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self.out,
                                  stderr=self.err, text=True,
                                  preexec_fn=None if background else _ahead)
        self.paused = 0.0   # seconds, for the record

    def wait(self) -> subprocess.CompletedProcess:
        # run.py's own --timeout fails first, with the guest's console; this is for a run.py hung
        left = self.timeout + 60 - (time.monotonic() - self.started)
        try:
            self.p.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        print(f"the guest's run took {time.monotonic() - self.started:.0f} s"
              + (f", {self.paused:.0f} s of them paused" if self.qmp else ""))
        self.out.seek(0), self.err.seek(0)
        return subprocess.CompletedProcess(self.p.args, self.p.returncode, self.out.read(),
                                           self.err.read())

    def qmp_command(self, command: str) -> bool:
        """COMMAND sent to the guest's qemu while it runs; False where it has ended (or not
        opened its socket yet: it is booting, at the host's pace). A guest that runs on and does
        not answer is an error: a test that needs the host alone would run beside it."""
        if self.p.poll() is not None or not os.path.exists(self.qmp):
            return False
        try:
            qmp_command(self.qmp, command)
        except OSError:
            if self.p.poll() is not None:
                return False
            raise
        return True

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()   # run.py's children die with it (PR_SET_PDEATHSIG)
            self.p.wait()
        self.out.close()
        self.err.close()


def _ahead() -> None:
    """In the child, before run.py: AHEAD_NICE, where this user may raise a priority."""
    try:
        os.nice(AHEAD_NICE)
    except OSError:
        pass


def _can_boot() -> str | None:
    if os.environ.get("STEER_IN_TEST_GUEST"):
        return "already inside the test guest"
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86 not installed (scripts/setup.sh --vm, which make test runs)"
    return None


# each tier's guest: the test that waits for it, its files' name, run.py's arguments, whether it
# runs in the background. The 6.1 guest runs beside the unit and artifacts tiers and the live
# tests marked beside_guest, ahead of them (AHEAD_NICE), and the rest of the live tier starts
# once it ended: its NIC's feeder sends from this host. Its one TCG thread sets its
# pace (387 s of tests with the other guest idle beside it, 2026-12-01, where the host's tiers
# took ~290 s), so it keeps the tests that need its NIC or its 4 vCPUs' kernel, and the ones
# that need two sockets or a CPU taken offline (MOVED) run in the big host's guest, also a 6.1
# kernel's. That one has no NIC and runs in the background from the session's start: at
# SCHED_IDLE once booted, on CPU time the other tiers leave, stopped (QMP) for each live test
# marked alone; its test waits for it after the live tier.
MOVED = ("test_cross_socket_flow_seen_live", "test_pinned_rule_whose_cpu_goes_offline",
         "test_auto_drops_a_rule_whose_cpu_goes_offline")
_VM_LIVE = "tests/guest/test_vm_live.py"
# the systemd unit's capabilities on Debian 12's own kernel (its libbpf's module-BTF search, its
# perf_event_paranoid of 3), in the big host's guest: ~50 s under TCG
UNIT_CAPS = "tests/live/test_kernel_smoke.py::test_the_units_capabilities_run_what_root_runs"
GUESTS = {"6.1": ("test_guest_tier_passes_in_a_two_socket_61_guest", "6.1",
                  (_VM_LIVE, *(f"--deselect={_VM_LIVE}::{t}" for t in MOVED)), False),
          "big host": ("test_big_host_tier_passes_in_a_guest_of_two_sockets_of_eight_cores", "big",
                       ("--no-nic", "--cores", "8", "tests/guest/test_big_host_live.py",
                        *(f"{_VM_LIVE}::{t}" for t in MOVED), UNIT_CAPS), True)}
RUNS: dict[str, GuestRun] = {}


def start_guests(tmp_path_factory, tests: set[str]) -> None:
    """Boots the guest of each of TESTS (test names) not booted yet. The suite starts them with
    the session (tests/conftest.py); their tests' timeouts allow for TCG's pace already."""
    wanted = {k: v for k, v in GUESTS.items() if v[0] in tests and k not in RUNS}
    if _can_boot() or not wanted:
        return
    tmp = tmp_path_factory.mktemp("guests")
    for key, (_, name, args, background) in wanted.items():
        RUNS[key] = GuestRun(tmp, name, *args, background=background)


def stop_guests() -> None:
    for r in RUNS.values():
        r.stop()
    RUNS.clear()


def pause_background_guests() -> list[GuestRun]:
    """Stops each guest in the background that still runs; the ones stopped."""
    return [r for r in RUNS.values() if r.qmp and r.qmp_command("stop")]


def resume_guests(paused: list[GuestRun], since: float) -> None:
    for r in paused:
        r.paused += time.monotonic() - since
        r.qmp_command("cont")


@pytest.fixture(scope="module")
def guests(tmp_path_factory):
    """The tiers' guests, booted now if the session did not boot them already; stopped at the
    session's end (tests/conftest.py), not the module's: the big host's test comes after the
    live tier."""
    start_guests(tmp_path_factory, {test for test, *_ in GUESTS.values()})
    return RUNS


def _passed_whole(r) -> str:
    assert r.returncode == 0, f"{r.stderr.strip()[-4000:]}\n{r.stdout.strip()[-6000:]}"
    lines = r.stdout.splitlines()
    (final,) = [l for l in lines if re.match(r"=+ .*passed.* in [\d.]+s", l)]
    # where the guest's time went (guest.sh asks pytest for its slowest tests): CI's budget
    slowest = next((i for i, l in enumerate(lines) if re.match(r"=+ slowest", l)), None)
    if slowest is not None:
        end = next((i for i in range(slowest + 1, len(lines)) if lines[i].startswith("==")),
                   len(lines))
        print("\n".join(lines[slowest:end]))
    print(final)
    # every test of the tier has its condition in the guest: a skip there is a broken guest
    assert "skipped" not in final and "failed" not in final, r.stdout[-6000:]
    return final


# above GUEST_TIMEOUT, so that run.py's own timeout fails first, with the guest's console
@pytest.mark.timeout(GUEST_TIMEOUT + 180)
def test_guest_tier_passes_in_a_two_socket_61_guest(guests):
    if why := _can_boot():
        pytest.skip(why)
    # one run decides: the guest no longer locks up since one TCG thread runs its vCPUs (ten runs
    # in a row here, tests/guest/vm/run.py), so a lockup fails as a test does, with run.py's reason
    # (EXIT_GUEST_LOCKUP) and the console's tail
    _passed_whole(guests["6.1"].wait())


@pytest.mark.beside_live
@pytest.mark.timeout(BACKGROUND_TIMEOUT + 180)
def test_big_host_tier_passes_in_a_guest_of_two_sockets_of_eight_cores(guests):
    """The tracer, steer top at 80x24, the sweep's default selection, steer auto and the
    exporter folded by socket on 16 CPUs in two sockets (tests/guest/test_big_host_live.py);
    and the 6.1 tier's tests of two sockets and an offline CPU (MOVED)."""
    if why := _can_boot():
        pytest.skip(why)
    _passed_whole(guests["big host"].wait())


def test_a_guest_kernel_lockup_is_told_apart_from_a_failing_test():
    """What the 6.1 guest printed when it locked up under TCG, and what a test's failure prints."""
    lockup = b"[  893.033689] watchdog: BUG: soft lockup - CPU#3 stuck for 808s! [python:139]"
    assert LOCKUP_MARKER.search(lockup)
    assert not LOCKUP_MARKER.search(b"FAILED tests/guest/test_vm_live.py::test_x - soft lockup")
    assert EXIT_GUEST_LOCKUP not in (0, 1, 2, 3, 4, 5)   # pytest's own exit codes


def test_a_guest_that_does_not_boot_in_time_fails_fast_with_its_console():
    """The bound that keeps a hung boot from eating CI's time: a boot timeout far below a real
    boot stands for a hang."""
    if why := _can_boot():
        pytest.skip(why)
    # a guest of its own size (--cores 1): its files and namespace are not the tiers' guests'
    r = subprocess.run([sys.executable, "tests/guest/vm/run.py", "--boot-timeout", "1",
                        "--cores", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "the guest did not reach its tests within 1 s; the console's last 40 lines:" in r.stderr
    assert len(r.stderr.splitlines()) > 1, r.stderr   # the console tail follows
