import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # tests/sysfs.py and friends
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench.packets


def _widen_affinity() -> str | None:
    """Run the suite on every online CPU its cpuset allows: a mask inherited from a CI machine's
    init would otherwise skip every test that needs two CPUs (steering, the sweep, the timing
    bounds). STEER_TEST_KEEP_AFFINITY=1 keeps the mask, to test steer itself under a narrow one."""
    if os.environ.get("STEER_TEST_KEEP_AFFINITY") == "1":
        return None
    from steer.model.topology import widen_to_online_cpus
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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked live is skipped, with the reason, where the live tier cannot run: before its
    fixtures, which bring up labs and tracers."""
    if item.get_closest_marker("live"):
        from helpers import live_skip_reason
        why = live_skip_reason()
        if why:
            pytest.skip(why)
