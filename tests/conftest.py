"""The suite in tiers, one folder each: unit/ (no privileges, seconds); artifacts/ (what the
build makes: objects, packages, man page, dashboards, docs; not named build/, which pytest
skips); live/ (the real programs and real traffic, root); guest/ (a qemu guest of another
kernel and two sockets). support/ holds the helpers and the fixture sysfs trees. The live
marker stays what says whether a test needs root (`-m "not live"`): a few tests in the live
files check pure parts of them and run anywhere."""
import os
import signal
import sys

import pytest

TIERS = ("unit", "artifacts", "live", "guest")
# the order the tiers run in: the guests boot with the session and run beside the first two
# (guests_from_the_start), and beside the live tests marked beside_guest, which time nothing and
# need no CPU to themselves (they take the CPU the 6.1 guest's single TCG thread leaves, where the
# session would otherwise wait for that guest: 37-50 s of clean clones); the rest of the live
# tier, which times real traffic, starts once the 6.1 guest ended. The big host's guest runs on
# in the background (at idle priority, stopped for each live test marked alone), and its test,
# marked beside_live, waits for it at the end
TIER_ORDER = ("artifacts", "unit", "beside_guest", "guest", "live", "beside_live")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))   # helpers, sysfs
# a test module may use another's helpers (the dashboards' expressions, a free port, a fixture
# flow), in whichever tier it is
sys.path[1:1] = [os.path.join(os.path.dirname(__file__), t) for t in TIERS]
sys.path.insert(1 + len(TIERS), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench


def _widen_affinity() -> str | None:
    """Run the suite on every online CPU its cpuset allows: a mask inherited from a CI machine's
    init would otherwise skip every test that needs two CPUs (steering, the sweep, the timing
    bounds). STEER_TEST_KEEP_AFFINITY=1 keeps the mask, to test steer itself under a narrow one."""
    if os.environ.get("STEER_TEST_KEEP_AFFINITY") == "1":
        return None
    from steer.kernel.process import widen_to_online_cpus
    line = widen_to_online_cpus()
    return line and line + " (STEER_TEST_KEEP_AFFINITY=1 keeps it)"


_WIDENED = _widen_affinity()   # before any test module computes its CPUs

# A suite started in the background by a shell without job control (`nohup make test &`, some CI
# runners) inherits SIGINT ignored, and an ignored signal stays ignored across exec: every steer a
# test stops with SIGINT, as a user's Ctrl-C, would run on until its timeout. Handled, it is reset
# to the default in each child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config):
    return _WIDENED


def pytest_configure(config):
    """Each run leaves its record (tests/support/record.py): every test's outcome and time, the
    time of each tier, and a history across runs that a failure is set beside."""
    from record import Recorder
    config.pluginmanager.register(Recorder(), "steer-record")


def pytest_sessionstart(session):
    """The checkout's own modules byte-compiled once, before any test or guest starts: each steer
    a test starts (hundreds in the live tier, and under TCG in the guests) then reads them, where
    it compiled its imports again each time under PYTHONDONTWRITEBYTECODE, as the guests run
    (tests/guest/vm/guest.sh): ~0.2 CPU-s a start here. __pycache__ is ignored by git, and a
    source newer than its cache is compiled as before."""
    import compileall
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for tree in ("steer", "bench", os.path.join("tests", "support")):
        compileall.compile_dir(os.path.join(root, tree), quiet=2)


def pytest_collection_modifyitems(config, items):
    """A test outside the tier folders is an error: a new file goes where its tier is."""
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        rel = os.path.relpath(str(item.path), here).split(os.sep)
        if rel[0] not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in one of tests/{{{','.join(TIERS)}}}/")
    both = [item.nodeid for item in items
            if item.get_closest_marker("beside_guest") and item.get_closest_marker("alone")]
    if both:
        raise pytest.UsageError(f"{both[0]}: a test that needs the CPUs alone cannot run beside "
                                "the guest")
    # stable: each module's tests stay together and in their order
    items.sort(key=lambda item: TIER_ORDER.index(_place(item, here)))


def _place(item, here: str) -> str:
    """Where ITEM runs in TIER_ORDER: its marker's place, or its tier's."""
    for marker in ("beside_live", "beside_guest"):
        if item.get_closest_marker(marker):
            return marker
    return os.path.relpath(str(item.path), here).split(os.sep)[0]


_PAUSED = pytest.StashKey[tuple]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked live is skipped, with the reason, where the live tier cannot run: before its
    fixtures, which bring up labs and tracers. One marked alone runs with every guest in the
    background stopped, from its fixtures' setup to their teardown (a guest that runs on and
    does not answer fails the test's setup)."""
    if item.get_closest_marker("live"):
        from helpers import live_skip_reason
        why = live_skip_reason()
        if why:
            pytest.skip(why)
    guests = sys.modules.get("test_guest_live")   # imported where the session has guests
    if guests and item.get_closest_marker("alone"):
        import time
        item.stash[_PAUSED] = (guests.pause_background_guests(), time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    paused, since = item.stash.get(_PAUSED, ((), 0))
    if paused:
        sys.modules["test_guest_live"].resume_guests(paused, since)


@pytest.fixture
def held(record_property):
    """hold(name, value, low, high): assert LOW <= VALUE <= HIGH, and record the figure with its
    bounds in the run's record (tests/support/record.py), passed or not, so that the history
    shows each statistical bound against what its figure does over many runs."""
    from record import HELD

    def hold(name: str, value: float, low: float, high: float) -> None:
        record_property(HELD, {"name": name, "value": round(float(value), 6),
                               "low": round(float(low), 6), "high": round(float(high), 6)})
        assert low <= value <= high, f"{name}: {value:+.4f} outside {low:+.4f}..{high:+.4f}"
    return hold


@pytest.fixture
def private_tmp():
    """A directory that nobody but this user could have written, nor any directory above it (a
    policy file must live in one; pytest's tmp_path is below /tmp, which everyone may write)."""
    import shutil
    import tempfile
    from pathlib import Path
    d = tempfile.mkdtemp(prefix=".steer-test-", dir=os.path.expanduser("~"))
    yield Path(d)
    shutil.rmtree(d)


@pytest.fixture(scope="session")
def debian_package(request, tmp_path_factory):
    """`make deb` of the checkout, once a session: the package test installs it, the image test
    builds the DaemonSet's image from it. Where the session holds the image test, that image's
    build starts here, in the background (daemonset_image)."""
    import subprocess
    from helpers import ROOT
    tmp = tmp_path_factory.mktemp("deb")
    r = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "deb", f"BUILD={tmp}/build",
                        f"DIST={tmp}/dist"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (deb,) = (tmp / "dist").glob("steer_*.deb")
    if any(item.path.name == "test_image_live.py" for item in request.session.items):
        _start_image_build(deb, tmp_path_factory)
        request.addfinalizer(_end_image_build)
    return deb


# `make image` of the suite's package, started by debian_package (the artifacts tier, beside the
# guests) and taken by the image test (the live tier): ~45 CPU-s of mmdebstrap and podman that no
# test times, done while the guests run rather than as the live tier's longest setup (33-39 s)
_image_build: dict = {}


def _start_image_build(deb, tmp_path_factory) -> None:
    import subprocess
    import time
    from helpers import ROOT, image_tools_missing, live_skip_reason
    if image_tools_missing() or live_skip_reason():
        return   # the image test skips, and says why
    tag = f"localhost/steer-test-{os.getpid()}:latest"
    build = tmp_path_factory.mktemp("image")
    log = open(build / "make-image.log", "w+")
    proc = subprocess.Popen(["make", "--no-print-directory", "-C", ROOT, "image", f"BUILD={build}",
                             f"DEB={deb}", f"IMAGE={tag}"], stdout=log, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    _image_build.update(tag=tag, log=log, started=time.monotonic(), proc=proc)


def _end_image_build() -> None:
    import signal
    import subprocess
    proc = _image_build.get("proc")
    if proc and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc:
        subprocess.run(["podman", "rmi", "-f", _image_build["tag"]], capture_output=True)


@pytest.fixture(scope="session")
def daemonset_image(debian_package):
    """The tag of the DaemonSet's image, built from the suite's package (removed at the end of
    the session); a failed build fails the test that asks, with make's output."""
    import time
    b = _image_build
    assert b, "no image build was started (debian_package starts it)"
    code = b["proc"].wait(timeout=900)
    b["log"].seek(0)
    out = b["log"].read()
    assert code == 0, out[-4000:]
    print(f"make image: done {time.monotonic() - b['started']:.0f} s after it started")
    return b["tag"]


@pytest.fixture(scope="session", autouse=True)
def guests_from_the_start(request, tmp_path_factory):
    """The guest tier's qemu guests boot with the session, when it holds their tests, and run
    beside the tiers ordered before theirs (TIER_ORDER): artifacts and unit, which keep one of
    this host's two CPUs busy at most and time nothing, while each guest's TCG thread takes
    what is left, and the live tests marked beside_guest. The rest of the live tier, whose
    bounds time real traffic, starts after the 6.1 guest ended, with the big host's guest in
    the background."""
    names = {item.originalname for item in request.session.items
             if item.path.parent.name == "guest"}
    if not names:
        yield
        return
    # the module pytest imported (by its base name, as every test module here): one registry
    from test_guest_live import start_guests, stop_guests
    start_guests(tmp_path_factory, names)
    try:
        yield
    finally:
        stop_guests()
