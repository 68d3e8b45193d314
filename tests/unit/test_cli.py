"""The command line: bad input and missing preconditions give one line and a non-zero exit."""
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest

from helpers import ROOT, assert_one_line_error, live, steer
from steer.model.topology import parse_cpulist


BAD_ARGUMENTS = [
    (["flows", "--duration", "0"], "--duration: must be greater than 0"),
    (["flows", "--duration", "abc"], "not a number"),
    (["flows", "--max-flows", "-3"], "--max-flows"),
    (["flows", "--counters", "l3"], "invalid choice"),
    (["flows", "--app-hook", "counters", "--timing", "exact"], "--app-hook counters needs --timing sampled"),
    (["top", "--interval", "0"], "--interval"),
    (["nonsense"], "invalid choice"),
    ([], "required"),
    # what argparse cannot check: every command's own parse errors exit 2 as well
    (["pin", "proto=xyz", "--cpu", "0", "--dev", "lo"], "proto must be tcp or udp"),
    (["pin", "dport=99999", "--cpu", "0", "--dev", "lo"], "dport must be a port number"),
    (["pin", "dport=80", "--cpu", "zero", "--dev", "lo"], "--cpu"),
    (["pin", "dport=80", "--cpu", "0", "--dev", "lo", "--method", "ethtool"], "invalid choice"),
    (["pin", "dport=80", "--cpu", "0", "--dev", "lo", "--method", "rps", "--find", "0"],
     "--find: must be greater than 0"),
    (["pin", "dport=80", "--cpu", "0", "--dev", "lo", "--method", "irq", "--queue", "-1"],
     "--queue: must be at least 0"),
    (["check", "--dev", "a/b"], "--dev"),
    (["unpin", "sport=-1", "--dev", "lo"], "FLOWSPEC 'sport=-1'"),
    (["app", "--pid", "1", "--cpu", "1-"], "--cpu"),
    (["app", "--pid", "2147483647", "--cpu", "1"], "--pid: must be at least 1 and at most 4,194,304"),
    (["irq", "--dev", "lo", "--cpu", ","], "--cpu"),
    (["rps", "--dev", "lo", "--cpu", "x"], "--cpu"),
    (["demo", "--flow", "zero:1"], "expected KCPU:APPCPU"),
    (["export", "--listen", "127.0.0.1"], "expected HOST:PORT"),
    (["export", "--listen", ":70000"], "expected HOST:PORT"),
    (["auto", "--dev", "lo", "--listen", "nowhere"], "expected HOST:PORT"),
    (["sweep", "--out", "/nonexistent", "--port", "0"], "--port: must be at least 1 and at most 65,535"),
    (["sweep", "--out", "/nonexistent", "--dev", "lo"], "--dev and --server-cmd go together"),
    (["sweep", "--out", "/nonexistent", "--cpus", "a-b"], "--cpus"),
    (["sweep", "--out", "/nonexistent", "--flows", "1,x"], "not a list of flow counts"),
    (["sweep", "--out", "/nonexistent", "--flows", "0"], "flow counts go from 1 to 64"),
    (["sweep", "--out", "/nonexistent", "--dev", "lo", "--server-cmd", "x", "--flows", "1,8"],
     "--flows is for the lab"),
    (["sweep", "--out", "/nonexistent", "--port", "65530", "--flows", "8"], "ports past 65535"),
    (["sweep", "--out", "/nonexistent", "--paper", "--flows", "1,8"], "--paper measures one flow"),
    (["sweep", "--out", "/nonexistent", "--method", "irq"], "the lab's veth has none"),
    (["sweep", "--out", "/nonexistent", "--pause", "on,off"], "--pause switches a NIC's"),
    (["sweep", "--out", "/nonexistent", "--pause", "on,maybe"], "not a list of on and off"),
    (["sweep", "--out", "/nonexistent", "--offloads", "gro"], "is not FEATURE=on|off"),
    (["sweep", "--out", "/nonexistent", "--offloads", "gro=on,gro=on"], "given twice"),
    (["irq", "--dev", "lo", "--queue", "-1", "--cpu", "0"], "--queue: must be at least 0"),
    # numbers as people mistype them, and as an attacker would (Hypothesis tries the rest,
    # test_arguments.py): each a one-line usage error, before anything is loaded
    (["pin", "proto=tcp", "--cpu", "\u0661", "--dev", "lo"], "--cpu: not a whole number"),
    (["pin", "proto=tcp", "--cpu", "9999", "--dev", "lo"], "--cpu: must be at least 0 and at most 8,191"),
    (["app", "--pid", "1", "--cpu", "0-1000000000"], "beyond any Linux kernel's"),
    (["flows", "--duration", "inf"], "--duration: not a number: 'inf'"),
    (["flows", "--duration", "nan"], "--duration: not a number: 'nan'"),
    (["top", "--interval", "1e9"], "--interval: must be greater than 0 and at most 3,600"),
    (["flows", "--max-flows", "4294967297"], "--max-flows: must be at least 1"),
    (["flows", "--windows", "30/100"], "--windows: 30/100: the cycle must be a whole multiple"),
    (["top", "--windows", "fast"], "--windows: 'off' or WINDOW/CYCLE in milliseconds"),
    (["flows", "--windows", "50/500", "--timing", "exact"], "--windows needs --timing sampled"),
    (["export", "--user", "no-such-user-x"], "no user 'no-such-user-x'"),
    (["export", "--user", "nobody", "--keep-privileges"], "the one gives up what the other keeps"),
    (["export", "--user", "0:65534"], "root with another group than root's"),
    (["export", "--user", "4294967295"], "uid 4294967295 is not an id"),   # (uid_t)-1: unchanged
    (["export", "--user", "nobody:4294967295"], "gid 4294967295 is not an id"),
    (["export", "--user", "\u0666\u0665\u0665\u0663\u0664"], "no user"),   # Arabic-Indic 65534
    (["export", "--listen", ":\u0669\u0667\u0662\u0663"], "expected HOST:PORT"),
    (["auto", "--dev", "lo", "--hold=-inf"], "--hold: not a number"),
    (["top", "--min-rate", "1e400"], "--min-rate"),
    # names that would become paths: checked against the kernel's own rules first
    (["irq", "--dev", "../../etc", "--cpu", "0"], "--dev: '../../etc' is not a device name"),
    (["rps", "--dev", "lo", "--netns", "..", "--cpu", "0"], "--netns: '..' is not a namespace name"),
    (["sweep", "--out", "/nonexistent", "--dev", "eth0:1"], "--dev: 'eth0:1' is not a device name"),
    (["profile", "--sample-hz", "0"], "--sample-hz"),
    (["profile", "--frequency", "0"], "--sample-hz/--frequency"),
    (["profile", "--duration", "0"], "--duration"),
]


def _drop_every_capability() -> None:
    """capset(2) with every set empty: root without a capability, as setpriv makes it."""
    import ctypes
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                  # effective, permitted, inheritable, x2
    if ctypes.CDLL(None, use_errno=True).capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def forked_steer(args, drop_capabilities: bool) -> subprocess.CompletedProcess:
    """`steer ARGS` as a process of its own, forked from this one rather than a new interpreter
    (0.3 s of CPU each, 180 of them beside the guests): main() from the modules already
    imported, its exit status, stdout and stderr as the interpreter would give them (an
    uncaught exception's traceback, SystemExit's message)."""
    import tempfile
    import traceback
    from steer.cli.main import main
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:   # the child: never back into pytest
            code = 70
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                if drop_capabilities:
                    _drop_every_capability()
                try:
                    code = main(list(args))
                except SystemExit as e:
                    if isinstance(e.code, int) or e.code is None:
                        code = e.code or 0
                    else:
                        print(e.code, file=sys.stderr)
                        code = 1
            except BaseException:   # noqa: BLE001 - as the interpreter ends on one
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["steer", *args], os.waitstatus_to_exitcode(status),
                                           out.read().decode(), err.read().decode())


@pytest.fixture(scope="module")
def bad_argument_runs():
    """Every command line of BAD_ARGUMENTS run once as-is and once without capabilities, each a
    process of its own (forked_steer: a new interpreter for each took a minute of CPU beside
    the guests; `steer` itself as a program is run by the tests around this one)."""
    runs = [(tuple(args), privileged) for args, _ in BAD_ARGUMENTS for privileged in (True, False)]
    drop = os.geteuid() == 0   # else: the unprivileged user we are
    return {r: forked_steer(r[0], drop and not r[1]) for r in runs}


@pytest.mark.parametrize("args,fragment", BAD_ARGUMENTS)
@pytest.mark.parametrize("privileged", [True, False], ids=["as-is", "no-capabilities"])
def test_bad_arguments(args, fragment, privileged, bad_argument_runs):
    """exit 2 and the argument named, also for a user who may not do the rest: the arguments
    are checked before the privileges"""
    r = bad_argument_runs[(tuple(args), privileged)]
    assert_one_line_error(r, fragment, code=2)
    assert "--help" in r.stderr


def test_readme_command_table_names_every_command_in_one_table():
    """the README's table of commands is one markdown table (a blank line would end it) with a
    row for every command the parser has"""
    import argparse
    from steer.cli.main import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    start = lines.index("| command | what it does |")
    table = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        table.append(line.split("`")[1].split()[1])   # | `steer NAME ...` | ... |
    assert sorted(table) == sorted(sub.choices)


HELP_BRIEF = 200   # characters of an option's --help text, its default included: two lines


def test_help_explains_every_option():
    """Every option of every command has a help text of a line or two, states its default once,
    and never as "None"; and `steer COMMAND --help` works."""
    import argparse
    import re
    from steer.cli.main import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    problems = []
    for name, parser in sub.choices.items():
        fmt = parser._get_formatter()
        for a in parser._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            what = f"{name} {'/'.join(a.option_strings) or a.dest}"
            if not a.help or a.help == argparse.SUPPRESS:
                problems.append(f"{what}: no help")
                continue
            text = fmt._expand_help(a)
            if len(re.findall(r"\(default[ :]", text)) > 1 or "default: None" in text:
                problems.append(f"{what}: {text!r}")
            if len(text) > HELP_BRIEF:
                problems.append(f"{what}: {len(text)} characters in --help (the detail goes "
                                f"after a blank line, for steer(1)): {text!r}")
    assert not problems, "\n".join(problems)
    assert sorted(sub.choices) == sorted(set(sub.choices))
    for cmd in sub.choices:
        r = steer(cmd, "--help")
        assert r.returncode == 0 and r.stdout.startswith("usage: "), (cmd, r.stderr)


def test_topology_json_is_this_machine():
    r = steer("topology", "--json")
    assert r.returncode == 0
    cpus = json.loads(r.stdout)["cpus"]
    with open("/sys/devices/system/cpu/online") as f:
        online = parse_cpulist(f.read())
    assert [c["cpu"] for c in cpus if c["online"]] == online
    assert len(cpus) == len([d for d in os.listdir("/sys/devices/system/cpu")
                             if d.startswith("cpu") and d[3:].isdigit()])


def test_topology_unreadable_root(tmp_path):
    assert_one_line_error(steer("topology", "--sysfs", str(tmp_path)), "cannot read the CPU topology")


def _without_caps():
    """Run as root but with every capability dropped, or as the unprivileged user we are."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) missing: cannot drop capabilities")
    return ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--")


def test_a_forked_steer_without_capabilities_is_refused_as_the_program_is():
    """forked_steer's dropped capabilities are dropped: what the program says without them
    (the test below), the fork says too, and with them it parses on to the same command."""
    if os.geteuid() != 0:
        pytest.skip("as root only: an unprivileged user has no capability to drop")
    r = forked_steer(["flows", "--duration", "1"], True)
    assert_one_line_error(r, "CAP_BPF", "CAP_PERFMON", "run as root")
    r = forked_steer(["flows", "--duration", "0"], False)
    assert_one_line_error(r, "--duration: must be greater than 0", code=2)


def test_no_privilege_names_the_missing_capabilities():
    r = steer("flows", "--duration", "1", prefix=_without_caps())
    assert_one_line_error(r, "CAP_BPF", "CAP_PERFMON", "run as root")


def _dropping(*caps):
    """Root with only CAPS taken away (CAP_SYS_ADMIN too: it stands in for BPF and PERFMON)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to take single capabilities away")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) missing: cannot drop capabilities")
    drop = ",".join(f"-{c}" for c in (*caps, "sys_admin"))
    return ("setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--")


def test_an_exporter_started_as_root_becomes_the_first_default_user_that_exists(monkeypatch):
    """steer, else nobody; none for a process that is not root, keeps its privileges or may not
    switch (it stays as it is and says so)."""
    from steer.cli import export
    monkeypatch.setattr(export, "DEFAULT_USERS", ("no-such-user-x", "nobody"))
    assert export.default_user(0, keep_privileges=False, can_switch=True) == "nobody"
    assert export.default_user(1000, keep_privileges=False, can_switch=True) is None
    assert export.default_user(0, keep_privileges=True, can_switch=True) is None
    assert export.default_user(0, keep_privileges=False, can_switch=False) is None
    monkeypatch.setattr(export, "DEFAULT_USERS", ("no-such-user-x",))
    assert export.default_user(0, keep_privileges=False, can_switch=True) is None
    # --user root: no switch (and a warning), but never root with another group
    assert export.run_as("root") is None and export.run_as("0") is None


@pytest.mark.parametrize("cmd, dropped, named", [
    (("flows", "--duration", "1"), ("bpf",), "tracing needs CAP_BPF:"),
    (("flows", "--duration", "1"), ("perfmon",), "tracing needs CAP_PERFMON:"),
    (("pin", "proto=tcp,dport=5201", "--cpu", "0", "--dev", "lo"), ("net_admin",),
     "steering needs CAP_NET_ADMIN:"),
    (("pin", "proto=tcp,dport=5201", "--cpu", "0", "--dev", "lo"), ("bpf",),
     "steering needs CAP_BPF:"),
    (("rps", "--dev", "lo", "--cpu", "0"), (), "changing RPS needs CAP_SYS_ADMIN"),
    (("export", "--user", "nobody", "--duration", "1"), ("setuid",),
     "--user nobody needs CAP_SETUID:"),
])
def test_each_missing_capability_is_named(cmd, dropped, named):
    """Each capability taken away alone is the one the message names, and nothing else."""
    r = steer(*cmd, prefix=_dropping(*dropped))
    assert_one_line_error(r, named)
    others = {"CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN", "CAP_SETUID"} - {named.split("needs ")[1].rstrip(":")}
    assert not any(o in r.stderr for o in others), r.stderr


@live
def test_objects_not_built(tmp_path):
    r = steer("flows", "--duration", "1", env={"STEER_BPF_DIR": str(tmp_path)})
    assert_one_line_error(r, "is not built", "make")


def test_sweep_without_matplotlib_says_how_to_get_it(tmp_path):
    """matplotlib is the [sweep] extra: without it every other command runs, and sweep says in
    one line what to install."""
    code = ("import sys; sys.modules['matplotlib'] = None; from steer.cli.main import main; "
            f"sys.exit(main(['sweep', '--out', {str(tmp_path / 'out')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert_one_line_error(r, "matplotlib, which is not installed", "steer[sweep]",
                          "python3-matplotlib", "--no-figures draws none")
    # --no-figures goes past it, to the next check: an --out that holds a sweep already
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text("{}")
    r = subprocess.run([sys.executable, "-c", code.replace("'sweep',", "'sweep', '--no-figures',")],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert_one_line_error(r, "already holds a sweep")


@live
def test_no_btf():
    r = steer("flows", "--duration", "1", "--btf", "/nonexistent/vmlinux")
    assert_one_line_error(r, "no kernel BTF at /nonexistent/vmlinux")


@live
def test_hardware_counters_without_pmu_are_refused_or_work():
    """Asking for the hardware events explicitly: works on a PMU host, one line elsewhere."""
    r = steer("flows", "--duration", "0.2", "--json", "--counters", "hardware")
    if r.returncode == 0:
        caps = json.loads(r.stdout)["capabilities"]
        assert caps["llc"].startswith("available") and caps["counters"].startswith("available")
    else:
        assert_one_line_error(r, "--counters hardware: cache-misses")


@live
def test_demo_refuses_a_cpu_that_does_not_exist():
    r = steer("demo", "--flow", "0:4096", "--duration", "1")
    assert_one_line_error(r, "CPU 4096 does not exist")


@live
def test_bpffs_is_mounted_when_missing(tmp_path):
    """ensure_bpffs mounts a bpffs where there is none (in a private mount namespace here)."""
    code = ("import sys; from steer.kernel.mounts import ensure_bpffs, BPF_FS_MAGIC; "
            "from steer.kernel.libc import fs_magic; "
            f"p = ensure_bpffs('{tmp_path}/bpf'); assert fs_magic(p) == BPF_FS_MAGIC; "
            f"ensure_bpffs('{tmp_path}/bpf'); print('ok')")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", code],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.stdout.strip() == "ok", r.stderr


@live
def test_listen_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = steer("export", "--listen", f"127.0.0.1:{port}", "--duration", "1")
    assert_one_line_error(r, f"--listen 127.0.0.1:{port}", "in use")


@live
def test_listen_colon_port_means_every_address():
    """":PORT" listens on every address, as Go exporters read it: IPv4 and IPv6 loopback both
    answer (the only addresses a test may use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "steer", "export", "--listen", f":{port}",
                          "--duration", "20"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in p.stdout.readline()
        for host in ("127.0.0.1", "[::1]"):
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
                assert r.status == 200 and b"steer_capability_info" in r.read()
    finally:
        p.terminate()
        p.communicate(timeout=30)


@pytest.mark.parametrize("text, msg", [
    ('[[rule]]\nflow = "proto=tcp"\ncpu = "one"\n', "cpu must be a CPU number, not 'one'"),
    ("[[rule]\n", "not valid TOML"),
    (None, "unknown policy 'nope'"),
])
def test_auto_refuses_a_bad_policy_before_touching_anything(private_tmp, text, msg):
    path = "nope"
    if text is not None:
        path = str(private_tmp / "p.toml")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
    r = steer("auto", "--policy", path, "--dev", "lo", "--duration", "1")
    assert_one_line_error(r, msg)
    if shutil.which("bpftool") and os.geteuid() == 0:
        out = subprocess.run(["bpftool", "net", "show", "dev", "lo"], capture_output=True,
                             text=True).stdout
        assert "steer_xdp" not in out


def test_auto_expect_from_what_is_not_a_sweep_is_one_line(tmp_path):
    """--expect-from is read before anything is attached: a directory without a sweep, or a
    file that is not one, is one line and exit 1, as a policy file's trouble is."""
    r = steer("auto", "--dev", "lo", "--expect-from", str(tmp_path), "--duration", "1")
    assert_one_line_error(r, f"--expect-from {tmp_path}/results.json: No such file")
    (tmp_path / "results.json").write_text('{"cells": []}')
    r = steer("auto", "--dev", "lo", "--expect-from", str(tmp_path), "--duration", "1")
    assert_one_line_error(r, "no one-flow cell with a throughput")


def test_the_man_page_gives_each_options_detail():
    """An option whose help has a detail (after a blank line) shows it in steer(1), and its
    brief in --help."""
    from steer.cli.main import build_parser
    from steer.cli.manual import commands, man_page
    parser = build_parser()
    page = " ".join(man_page(parser).replace("\\-", "-").split())
    detailed = [(name, a) for name, (_, p) in commands(parser).items() for a in p._actions
                if a.help and "\n\n" in a.help]
    assert len(detailed) >= 20
    for name, a in detailed:
        brief, detail = a.help.split("\n\n", 1)
        assert " ".join(detail.replace("%%", "%").split()).split(" (default")[0] in page, \
            (name, a.option_strings)
    r = steer("export", "--help")
    assert "exporter-toolkit web config file" in r.stdout and "tls_server_config" not in r.stdout
