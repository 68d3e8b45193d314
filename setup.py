"""The build step setup.cfg cannot say: a wheel (or the Debian package) carries the compiled BPF
objects as package data, steer/bpf/*.bpf.o, built here with the Makefile (clang, llvm, bpftool,
libbpf-dev and the build host's kernel BTF; CO-RE makes the objects run on other kernels with
BTF). An editable install finds them in build/ of the checkout instead (`make`)."""
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

# the objects steer loads; build/floor.bpf.o and build/truth.bpf.o are the benchmarks' own, not installed
OBJECTS = ("flowtrace.bpf.o", "flowtrace-nokfunc.bpf.o", "steer.bpf.o")


class build_py_with_bpf(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here = os.path.dirname(os.path.abspath(__file__))
        # a clean build every time: objects left by an earlier build (pip builds in the source
        # tree) would hide a missing compiler and carry another kernel's vmlinux.h
        with tempfile.TemporaryDirectory(prefix="steer-bpf-") as out:
            r = subprocess.run(["make", "--no-print-directory", "-C", here, f"BUILD={out}",
                                *(os.path.join(out, o) for o in OBJECTS)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                lines = (r.stderr + r.stdout).splitlines()
                # the Makefile's own "error: X not found (apt-get install Y)", not make's summary
                why = next((l for l in lines if l.startswith("error:")),
                           lines[-1] if lines else "make failed")
                raise SystemExit(f"steer: cannot build the BPF objects a steer package carries: {why}")
            dest = os.path.join(self.build_lib, "steer", "bpf")
            os.makedirs(dest, exist_ok=True)
            for o in OBJECTS:
                shutil.copy2(os.path.join(out, o), dest)


setup(cmdclass={"build_py": build_py_with_bpf})
