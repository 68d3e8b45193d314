"""The package a user installs: a wheel built from the checkout carries the BPF objects and runs
from any directory of a venv that has no checkout on its path; the build names what is missing."""
import os
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
    assert {"steer/bpf/flowtrace.bpf.o", "steer/bpf/steer.bpf.o"} <= names
    assert any(n.endswith("/LICENSE") for n in names)
    requires = [l for l in meta.splitlines() if l.startswith("Requires-Dist:")]
    runtime = [l for l in requires if "extra ==" not in l]
    assert sorted(r.split()[1].split(">")[0].lower().replace("_", "-") for r in runtime) == \
        ["prometheus-client", "pyroute2", "rich"], requires
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
    where = subprocess.run([str(py), "-c", "import steer.kernel as k; print(k.bpf_dir())"],
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
