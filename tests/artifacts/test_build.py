"""Build and layout: the BPF object builds, its BTF matches the Python mirror, and the build
names what is missing when it cannot run."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from steer.abi import flowtrace as abi
from steer.abi import xdp as steer_abi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBJ = os.path.join(ROOT, "build", "flowtrace.bpf.o")
STEER_OBJ = os.path.join(ROOT, "build", "steer.bpf.o")
ALL_MIRRORS = [(OBJ, n, m) for n, m in sorted(abi.MIRRORS.items())] + \
    [(STEER_OBJ, n, m) for n, m in sorted(steer_abi.MIRRORS.items())]


def btf_raw(path):
    return subprocess.run(["bpftool", "btf", "dump", "file", path, "format", "raw"],
                          capture_output=True, text=True, check=True).stdout


def btf_structs(path):
    """{struct name: (size, {member: byte offset})} from the object's BTF, read by bpftool."""
    structs, cur = {}, None
    out = btf_raw(path)
    for line in out.splitlines():
        m = re.match(r"\[\d+\] STRUCT '(\w+)' size=(\d+)", line)
        if m:
            cur = structs.setdefault(m.group(1), (int(m.group(2)), {}))
            continue
        m = re.match(r"\s+'(\w+)' type_id=\d+ bits_offset=(\d+)", line)
        if m and cur is not None:
            cur[1][m.group(1)] = int(m.group(2)) // 8
        elif not line.startswith("\t"):
            cur = None
    return structs


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", ROOT], check=True)
    return OBJ


def test_object_is_bpf_elf(built):
    with open(built, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF"
    assert int.from_bytes(head[18:20], "little") == 247   # EM_BPF


def _undefined_symbols(path):
    out = subprocess.run(["llvm-objdump", "-t", path], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if "*UND*" in line}


def test_the_object_for_kernels_without_kfuncs_has_none(built):
    """flowtrace-nokfunc.bpf.o, what steer loads where the kernel lacks bpf_rdonly_cast (before
    6.2), asks libbpf for no kfunc: libbpf 1.1 would look for one in the modules' BTF, and without
    CAP_SYS_ADMIN fail the whole object (Debian 12's kernel under the systemd unit)."""
    assert "bpf_rdonly_cast" in _undefined_symbols(built)
    assert _undefined_symbols(os.path.join(ROOT, "build", "flowtrace-nokfunc.bpf.o")) == set()


@pytest.mark.parametrize("obj,name,mirror", ALL_MIRRORS, ids=[n for _, n, _ in ALL_MIRRORS])
def test_python_mirror_matches_btf(built, obj, name, mirror):
    structs = btf_structs(obj)
    assert name in structs, f"{name} is not in the BTF of {obj}"
    size, members = structs[name]
    assert ctypes.sizeof(mirror) == size
    py = {n: getattr(mirror, n).offset for n, _ in mirror._fields_}
    assert py == members


def btf_enums(path):
    """{enum name: {enumerator: value}} from the object's BTF."""
    enums, cur = {}, None
    out = btf_raw(path)
    for line in out.splitlines():
        m = re.match(r"\[\d+\] ENUM '(\w+)'", line)
        if m:
            cur = enums.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s+'(\w+)' val=(-?\d+)", line)
        if m and cur is not None:
            cur[m.group(1)] = int(m.group(2))
        elif not line.startswith("\t"):
            cur = None
    return enums


def test_python_enums_match_btf(built):
    enums = btf_enums(OBJ)
    for name, values in abi.ENUMS.items():
        assert enums.get(name) == values, name


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
@pytest.mark.parametrize("header,mirror", [("flowtrace.h", abi), ("steer.h", steer_abi)],
                         ids=["flowtrace.h", "steer.h"])
def test_python_constants_match_the_header(tmp_path, header, mirror):
    """the constants the BTF cannot show (a map's size, a bit in a u8) are read from the header
    itself, by a program compiled against it"""
    names = sorted(mirror.HEADER_CONSTANTS)
    src = tmp_path / "constants.c"
    src.write_text("#include <stdio.h>\n#include <linux/types.h>\n"
                   f'#include "{os.path.join(ROOT, "bpf", header)}"\n'
                   "int main(void) {\n" +
                   "".join(f'\tprintf("%s %lld\\n", "{n}", (long long)({n}));\n' for n in names) +
                   "\treturn 0;\n}\n")
    subprocess.run(["cc", "-o", str(tmp_path / "constants"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "constants")], capture_output=True, text=True,
                         check=True).stdout
    assert dict((n, int(v)) for n, v in (l.split() for l in out.splitlines())) == \
        mirror.HEADER_CONSTANTS


def test_rodata_is_the_config_alone(built):
    """userspace writes .rodata whole as struct ft_config: nothing else may live there"""
    out = subprocess.run(["bpftool", "btf", "dump", "file", built, "format", "raw"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"DATASEC '\.rodata' size=\d+ vlen=(\d+)\n\s+type_id=\d+ offset=(\d+) "
                  r"size=(\d+) \(VAR 'cfg'\)", out)
    assert m and tuple(map(int, m.groups())) == (1, 0, ctypes.sizeof(abi.Config))


@pytest.mark.parametrize("var,value,message", [
    ("CLANG", "no-such-clang", "clang not found"),
    ("BPFTOOL", "no-such-bpftool", "bpftool not found"),
    ("BTF", "/nonexistent/vmlinux", "the kernel has no BTF"),
])
def test_build_names_what_is_missing(tmp_path, var, value, message):
    r = subprocess.run(["make", "-s", "-C", ROOT, f"BUILD={tmp_path}/b", f"{var}={value}"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert message in r.stderr


def test_layout():
    for d in ("bpf", "steer", "dashboards", "tests", "bench"):
        assert os.path.isdir(os.path.join(ROOT, d)), d
    for f in ("setup.cfg", "pyproject.toml", "Makefile", "README.md", ".ci/run"):
        assert os.path.isfile(os.path.join(ROOT, f)), f


def test_ci_runs_the_readme_test_command():
    with open(os.path.join(ROOT, ".ci/run")) as f:
        ci = [l.strip() for l in f if l.strip() and not l.startswith("#") and not l.startswith("set ")
              and not l.startswith("cd ")]
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert ci and all(line in readme for line in ci)


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_unknown_arch_is_refused(tmp_path):
    r = subprocess.run(["make", "-s", "-C", ROOT, f"BUILD={tmp_path}/b", "UNAME_M=sparc64"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "unsupported architecture" in r.stderr


FRAGMENTS = sorted(f for f in os.listdir(os.path.join(ROOT, "bpf", "flowtrace"))
                   if f.endswith(".bpf.h"))


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_each_part_of_flowtrace_compiles_on_its_own(built, fragment, tmp_path):
    """A part of flowtrace includes what it uses and guards itself: included alone, and twice,
    it compiles (its unused helpers aside), so the parts need no order of inclusion."""
    unit = tmp_path / "unit.c"
    unit.write_text(f'#include "flowtrace/{fragment}"\n#include "flowtrace/{fragment}"\n')
    arch = {"x86_64": "x86", "aarch64": "arm64"}[os.uname().machine]
    r = subprocess.run(["clang", "-fsyntax-only", "-g", "-O2", "-Wall", "-Werror",
                        "-Wno-unused-function", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
                        f"-I{ROOT}/build", f"-I{ROOT}/bpf", str(unit)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
