"""The kernel package's own behaviour where it needs no privileges: a stop request that arrives
while libbpf is calling back into Python is not lost (steer.kernel.signals); the kernel text
that sampled timing tells receive contexts apart by, read from a kallsyms file (steer.kernel.perf)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT
from steer.kernel import signals as interrupts
from steer.kernel import errors, libbpf
from steer.kernel.perf import kernel_text_ranges, paranoid_refusal


def _python(code: str) -> subprocess.CompletedProcess:
    """CODE run by a Python process of its own, with steer importable."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))


def _open_missing(lib, tmp_path):
    """A libbpf call that logs (the file is not there) and so runs steer's print callback."""
    return lib.bpf_object__open_file(str(tmp_path / "missing.bpf.o").encode(), None)


@pytest.mark.parametrize("handler", [
    lambda signum, frame: interrupts.interrupt(frame),   # steer's own (cli, benches)
    signal.default_int_handler,                          # raising where it runs: the callback holds it
], ids=["steer's handler", "python's default"])
def test_a_stop_signal_inside_libbpfs_print_callback_is_raised_when_libbpf_returns(
        handler, monkeypatch, tmp_path):
    """Ctrl-C or SIGTERM whose handler runs while libbpf is in steer's print callback (a program
    load prints hundreds of lines) would be dropped by ctypes, and the process would run on with
    its tracer attached: the libbpf call raises the KeyboardInterrupt when it returns."""
    lib = libbpf.libbpf()
    real = libbpf.libc

    class SignalledLibc:
        """The signal comes in the callback: its handler runs at the callback's next bytecode."""
        def vsnprintf(self, *args):
            os.kill(os.getpid(), signal.SIGUSR1)
            return real.vsnprintf(*args)

    old = signal.signal(signal.SIGUSR1, handler)
    monkeypatch.setattr(libbpf, "libc", SignalledLibc())
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)   # where ctypes reports a drop
    try:
        with pytest.raises(KeyboardInterrupt):
            _open_missing(lib, tmp_path)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert not unraisable
    monkeypatch.undo()
    assert _open_missing(lib, tmp_path) is None   # raised once, not again
    assert any("missing.bpf.o" in line for line in errors.libbpf_log)


def test_interrupt_raises_outside_a_callback_and_holds_inside_one():
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt(sys._getframe())

    @interrupts.called_from_c
    def callback():
        interrupts.interrupt(sys._getframe())   # at its first bytecode or deeper: held
        return "returned"

    assert callback() == "returned"
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_held()
    interrupts.raise_held()   # once


def test_a_stop_during_an_import_ends_with_the_status_main_returns():
    """A stop whose handler runs inside exec() of a string (dataclasses make their methods so
    at import): CPython 3.11 would end the process by SIGINT, with no message, even after code
    caught the KeyboardInterrupt; steer's StopRequested is not marked so."""
    code = ("import os, signal, sys\n"
            "from steer.kernel.signals import interrupt\n"
            "signal.signal(signal.SIGUSR1, lambda signum, frame: interrupt(frame))\n"
            "try:\n"
            "    exec('import os, signal; os.kill(os.getpid(), signal.SIGUSR1)')\n"
            "except KeyboardInterrupt:\n"
            "    print('caught')\n")
    r = _python(code)
    assert (r.returncode, r.stdout) == (0, "caught\n"), (r.returncode, r.stderr)


def test_a_stop_the_interpreter_wraps_still_ends_as_a_stop(monkeypatch):
    """Ctrl-C while a module's dataclass is made: CPython 3.11 raises a RuntimeError from the
    KeyboardInterrupt of a field's __set_name__ (CI saw its traceback, exit 1, once in 40 stops
    of steer flows). main() must still return 128 + the signal; a RuntimeError of its own still
    propagates."""
    from steer.cli import common, main as cli

    class Stops:
        def __set_name__(self, owner, name):
            raise interrupts.StopRequested

    def importing(args):
        class DeviceState:   # what `import steer.steering.xdp` runs
            rules = Stops()
        return 0

    def failing(args):
        raise RuntimeError("a bug")

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(common, "STOP_SIGNAL", [signal.SIGINT])
    try:
        monkeypatch.setattr(cli, "_run", importing)
        assert cli.main(["flows"]) == 128 + signal.SIGINT
        monkeypatch.setattr(cli, "_run", failing)
        with pytest.raises(RuntimeError, match="a bug"):
            cli.main(["flows"])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def test_a_stop_inside_an_imports_module_lock_callback_is_raised_after_it():
    """The stop's handler runs inside importlib's weakref callback that ends every import (CI saw
    steer flows run on after SIGTERM, "Exception ignored in: <function _get_module_lock.<locals>
    .cb>", once in about 200 stops): the import raises it once the callback has returned. A
    tracer sends the signal as that callback begins, so its handler runs inside it every time."""
    code = ("import os, signal, sys\n"
            "from steer.kernel.signals import interrupt\n"
            "signal.signal(signal.SIGUSR1, lambda signum, frame: interrupt(frame, signum))\n"
            "sent = []\n"
            "def tracer(frame, event, arg):\n"
            "    if (event == 'call' and frame.f_code.co_name == 'cb' and not sent\n"
            "            and frame.f_code.co_filename == '<frozen importlib._bootstrap>'):\n"
            "        sent.append(1)\n"
            "        os.kill(os.getpid(), signal.SIGUSR1)\n"
            "sys.settrace(tracer)\n"
            "try:\n"
            "    import fractions, time\n"
            "    time.sleep(5)   # the signal comes again from a thread, within milliseconds\n"
            "    print('imported', sent)\n"
            "except KeyboardInterrupt:\n"
            "    print('caught', sent)\n")
    r = _python(code)
    assert (r.returncode, r.stdout, r.stderr) == (0, "caught [1]\n", "")


def test_a_stop_inside_a_del_is_raised_after_it(monkeypatch):
    """Python drops what a __del__ raises as it drops a weakref callback's."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    class Signals:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGUSR1)
            len("the handler runs here, inside __del__")

    old = signal.signal(signal.SIGUSR1, lambda signum, frame: interrupts.interrupt(frame, signum))
    try:
        with pytest.raises(KeyboardInterrupt):
            Signals()
            time.sleep(5)   # the signal comes again from a thread, within milliseconds
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert not unraisable


@pytest.mark.skipif(os.geteuid() != 0, reason="switching ids needs root")
def test_dropping_privileges_checks_the_ids_the_process_ends_with():
    """A setresuid() that changes nothing (a seccomp filter can make it return 0) must not leave
    the exporter root while it says it is nobody: the ids are read back."""
    code = ("import os\n"
            "from steer.kernel import errors, privileges\n"
            "os.setresuid = lambda *ids: None\n"
            "try:\n"
            "    privileges.drop_privileges((65534, 65534))\n"
            "    print('dropped', os.getresuid())\n"
            "except errors.KernelError as e:\n"
            "    print('refused:', e)\n")
    r = _python(code)
    assert r.stdout.startswith("refused: switching to uid 65534, gid 65534: the process has uids "
                               "(0, 0, 0)"), (r.stdout, r.stderr)


KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000100 d net_rx_action_data
ffffffff81000200 t net_rx_action
ffffffff81000200 t __pfx_x
ffffffff81000300 r some_rodata
ffffffff81000400 T __net_rx_action
ffffffff81000500 W handle_softirqs
ffffffff81000500 T handle_softirqs_alias
ffffffff81000580 T next_after_alias
ffffffff81000600 T napi_threaded_poll
ffffffffc0001000 t veth_poll\t[veth]
ffffffffc0001080 t veth_xdp_rcv\t[veth]
ffffffffc0002000 t last_one\t[x]
"""


def test_kernel_text_ranges_end_at_the_next_text_symbol_above(tmp_path):
    """A name matches whole (not a prefix, a suffix or a data symbol's); its end is the next text
    symbol at a higher address (the same address and non-text lines are skipped); the first of a
    group that is there; (0, 0) for a group with none, or whose symbol is last and has no end."""
    p = tmp_path / "kallsyms"
    p.write_text(KALLSYMS)
    got = kernel_text_ranges([["net_rx_action"], ["napi_threaded_poll_loop", "napi_threaded_poll"],
                              ["handle_softirqs", "__do_softirq"], ["veth_poll"], ["last_one"],
                              ["missing", "net_rx"]], str(p))
    assert got == [(0xffffffff81000200, 0xffffffff81000400),
                   (0xffffffff81000600, 0xffffffffc0001000),
                   (0xffffffff81000500, 0xffffffff81000580),
                   (0xffffffffc0001000, 0xffffffffc0001080),
                   (0, 0), (0, 0)]


def test_kernel_text_ranges_without_addresses_is_one_clear_error(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text("0000000000000000 T _stext\n0000000000000000 t net_rx_action\n"
                 "0000000000000000 T tcp_v4_rcv\n")
    with pytest.raises(errors.KernelError, match="CAP_SYSLOG"):
        kernel_text_ranges([["net_rx_action"]], str(p))


def test_the_sampler_has_a_group_of_names_for_every_range_of_kernel_text():
    """ft_config.text holds FT_TEXT_RANGES ranges; tracer.TEXT_SYMBOLS names each one's
    functions (a range with no group would stay (0, 0), and the sampler would silently never
    tell that context: the RPS IPIs of bench.accuracy's scenario 9 among them)."""
    from steer.abi import flowtrace as abi
    from steer.trace.tracer import TEXT_SYMBOLS
    assert sorted(TEXT_SYMBOLS) == list(range(abi.FT_TEXT_RANGES))
    assert all(TEXT_SYMBOLS[i] and all(isinstance(n, str) and n for n in TEXT_SYMBOLS[i])
               for i in TEXT_SYMBOLS)
    assert TEXT_SYMBOLS[abi.FT_TEXT_RPS_IPI] == ["net_rps_send_ipi"]


@pytest.mark.parametrize("level,caps,said", [
    ("3", "000000c400000000", True),      # the systemd unit's CAP_BPF, CAP_PERFMON, CAP_SYSLOG
    ("4", "0000000000000000", True),
    ("3", "000001ffffffffff", False),     # root: CAP_SYS_ADMIN opens them at any level
    ("2", "000000c400000000", False),     # 2 and below: CAP_PERFMON is enough
    ("-1", "0000000000000000", False),
    ("x", "000000c400000000", False),     # unreadable: no guess
])
def test_a_perf_event_refused_is_put_down_to_paranoia_only_above_2_without_sys_admin(
        tmp_path, level, caps, said):
    paranoid, status = tmp_path / "paranoid", tmp_path / "status"
    paranoid.write_text(level + "\n")
    status.write_text(f"Name:\tsteer\nCapInh:\t0000000000000000\nCapEff:\t{caps}\n")
    why = paranoid_refusal(str(paranoid), str(status))
    assert bool(why) == said, why
    if said:
        assert why.startswith(f"kernel.perf_event_paranoid is {level}:") and "CAP_SYS_ADMIN" in why
