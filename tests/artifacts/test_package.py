"""The package a user installs: a wheel built from the checkout carries the BPF objects and runs
from any directory of a venv that has no checkout on its path; the build names what is missing."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT, live


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(out), ROOT], capture_output=True, text=True, cwd=out)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("steer-*.whl")
    return whl


def test_wheel_carries_the_objects_the_license_and_no_test_tools(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"steer/bpf/flowtrace.bpf.o", "steer/bpf/flowtrace-nokfunc.bpf.o",
            "steer/bpf/steer.bpf.o"} <= names
    assert any(n.endswith("/LICENSE") for n in names)
    requires = [l for l in meta.splitlines() if l.startswith("Requires-Dist:")]
    runtime = [l for l in requires if "extra ==" not in l]
    assert sorted(r.split()[1].split(">")[0].lower().replace("_", "-") for r in runtime) == \
        ["numpy", "prometheus-client", "pyroute2", "rich"], requires
    assert any("matplotlib" in l and 'extra == "sweep"' in l for l in requires), requires
    assert "License: GPL-2.0-only" in meta


@live
def test_installed_wheel_runs_from_any_directory(wheel, tmp_path):
    """A fresh venv with the wheel and nothing of the checkout: the runtime dependencies come from
    the suite's venv through a path entry (no network here), steer from the wheel alone."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # a plain path entry: the suite's editable steer (a .pth finder there) is not processed
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STEER_BPF_DIR")}
    where = subprocess.run([str(py), "-c", "import steer.kernel.objects as k; print(k.bpf_dir())"],
                           capture_output=True, text=True, cwd=elsewhere, env=env, check=True)
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    r = subprocess.run([str(venv / "bin" / "steer"), "--version"], capture_output=True, text=True,
                       cwd=elsewhere, env=env)
    assert r.returncode == 0 and r.stdout.startswith("steer "), r
    r = subprocess.run([str(venv / "bin" / "steer"), "flows", "--duration", "1", "--json"],
                       capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert '"capabilities"' in r.stdout


def test_wheel_build_without_clang_says_so(tmp_path):
    env = dict(os.environ, CLANG="/nonexistent/clang")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-w", str(tmp_path), ROOT], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode != 0
    assert "steer: cannot build the BPF objects a steer package carries: error: clang not found " \
           "(apt-get install clang llvm)" in r.stdout + r.stderr


def _dpkg_installed(pkg: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


@live
@pytest.mark.skipif(_dpkg_installed("steer"), reason="a steer package is installed here; "
                    "the test installs and purges its own and leaves a user's alone")
def test_debian_package_installs_runs_and_purges_clean(debian_package):
    """make deb, then apt-get install it: /usr/bin/steer loads the packaged objects from /, the unit
    verifies against the installed binary and man page, the runbook the alerts link to is there
    uncompressed; the installed Debian dependencies meet setup.cfg's minimum versions; purge leaves
    no file of the package behind."""
    deb = debian_package
    files = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                           check=True).stdout
    carried = set(re.findall(r"/steer/bpf/(\S+\.bpf\.o)$", files, re.M))
    assert carried == {"flowtrace.bpf.o", "flowtrace-nokfunc.bpf.o", "steer.bpf.o"}, carried
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "STEER_BPF_DIR", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env["DEBIAN_FRONTEND"] = "noninteractive"
    r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", str(deb)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    try:
        from steer import __version__
        v = subprocess.run(["/usr/bin/steer", "--version"], capture_output=True, text=True,
                           cwd="/", env=env)
        assert v.returncode == 0 and v.stdout.split() == ["steer", __version__], v
        where = subprocess.run(["/usr/bin/python3", "-c", "import steer.kernel.objects as k; print(k.bpf_dir())"],
                               capture_output=True, text=True, cwd="/", env=env, check=True)
        assert where.stdout.strip() == "/usr/lib/python3/dist-packages/steer/bpf", where.stdout
        flows = subprocess.run(["/usr/bin/steer", "flows", "--duration", "1", "--json"],
                               capture_output=True, text=True, cwd="/", env=env, timeout=120)
        assert flows.returncode == 0, flows.stderr
        assert '"capabilities"' in flows.stdout
        for path in ("/lib/systemd/system/steer-exporter.service", "/etc/default/steer-exporter",
                     "/usr/share/man/man1/steer.1.gz", "/usr/share/bash-completion/completions/steer",
                     "/usr/share/doc/steer/runbook.md", "/usr/share/steer/rules/steer.rules.yml",
                     "/usr/share/steer/dashboards/steer-overview.json",
                     "/usr/share/steer/dashboards/steer-flows.json",
                     "/usr/lib/sysusers.d/steer.conf"):   # the user the exporter becomes
            assert os.path.isfile(path), path
        assert subprocess.run(["getent", "passwd", "steer"], capture_output=True).returncode == 0
        postinst = subprocess.run(["dpkg-deb", "--info", str(deb), "postinst"],
                                  capture_output=True, text=True).stdout
        assert re.search(r"^\s*systemd-sysusers .*steer\.conf$", postinst, re.M), postinst
        if shutil.which("systemd-analyze"):
            unit = subprocess.run(["systemd-analyze", "verify",
                                   "/lib/systemd/system/steer-exporter.service"],
                                  capture_output=True, text=True, env=env)
            assert unit.returncode == 0 and not unit.stderr.strip(), unit.stderr
        # the versions setup.cfg declares are the ones Debian 12 provides
        deps = subprocess.run(["/usr/bin/python3", "-c", (
            "import importlib.metadata as m, json\n"
            "print(json.dumps({r.split('>=')[0]: [r.split('>=')[1], m.version(r.split('>=')[0])]"
            " for r in m.requires('steer') if 'extra' not in r}))")],
            capture_output=True, text=True, cwd="/", env=env, check=True)
        for name, (minimum, installed) in json.loads(deps.stdout).items():
            assert _version(installed) >= _version(minimum), (name, minimum, installed)
    finally:
        purge = subprocess.run(["apt-get", "purge", "-y", "-q", "steer"], capture_output=True,
                               text=True, env=env, timeout=300)
    assert purge.returncode == 0, purge.stderr
    assert not _dpkg_installed("steer")
    left = [p for p in re.findall(r" \.(/\S+)$", files, re.M)
            if not p.endswith("/") and os.path.lexists(p)]
    assert left == [], left
    for path in ("/usr/share/steer", "/usr/lib/python3/dist-packages/steer", "/etc/default/steer-exporter"):
        assert not os.path.lexists(path), path


def _version(text: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def test_debian_version_and_image_tag_follow_steer_version():
    """One version: the package's (debian/changelog, native), and the image the fleet files name."""
    from steer import __version__
    first = open(os.path.join(ROOT, "debian", "changelog")).readline()
    assert re.match(r"steer \(([^)]+)\) ", first).group(1) == __version__, first
    daemonset = open(os.path.join(ROOT, "dashboards", "fleet", "daemonset.yaml")).read()
    image = subprocess.run(["make", "--no-print-directory", "-s", "-n", "-C", ROOT, "image"],
                           capture_output=True, text=True, check=True).stdout
    for name, text in (("daemonset.yaml", daemonset), ("make image", image)):
        tags = set(re.findall(r"steer:(\d+\.\d+\.\d+)", text))
        assert tags == {__version__}, (name, tags)
