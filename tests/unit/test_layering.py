"""The layering: modules that only compute on samples, topologies and flow specs import without the
libbpf side of the kernel package (steer.kernel's libbpf, objects, maps, links, btf, perf) and without
the loaders that use it, so they run
and are tested anywhere, without root."""
import re
import subprocess
import sys

from helpers import ROOT

PURE = ["steer.model.samples", "steer.trace.programs", "steer.trace.check", "steer.kernel.signals", "steer.model.units", "steer.kernel.privileges", "steer.model.topology", "steer.model.classify",
        "steer.model.flowspec", "steer.model.flows", "steer.model.interval", "steer.model.reports", "steer.model.placement", "steer.model.totals", "steer.model.busyflows", "steer.model.flowarrays", "steer.model.ledger", "steer.model.numeric", "steer.experiment.report", "steer.steering.policies", "steer.steering.auto", "steer.steering.methods", "steer.present.view",
        "steer.present.live", "steer.present.exporter", "steer.trace.profile",
        "steer.cli.manual", "steer.model.irqs", "steer.experiment.devsettings"]
GATEWAY_AND_LOADERS = ["steer.kernel.libbpf", "steer.kernel.objects", "steer.kernel.maps",
                       "steer.kernel.links", "steer.kernel.btf", "steer.kernel.perf", "steer.trace.counters", "steer.trace.tracer", "steer.steering.xdp", "steer.steering.affinity", "steer.experiment.lab",
                       "steer.experiment.sweep", "steer.trace.netdevs"]


def test_pure_modules_import_without_the_gateway():
    code = (f"import sys\nimport {', '.join(PURE)}\n"
            f"print(' '.join(m for m in {GATEWAY_AND_LOADERS!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported by a pure module: {r.stdout.strip()}"


# The floors of the tree (docs/development.md): a module imports from its own floor or below,
# never above, and no set of modules imports each other round. Imports inside functions count.
FLOORS = {"abi": 0, "defaults": 0, "model": 0, "kernel": 1, "trace": 2, "steering": 2, "policies": 2,
          "experiment": 3, "present": 3, "cli": 4, "__main__": 5, "__init__": 0}


def _imports():
    """{module: {steer modules it imports}} over steer/, by ast."""
    import ast
    from pathlib import Path
    root = Path(ROOT) / "steer"
    mods = {".".join(("steer",) + p.relative_to(root).with_suffix("").parts): p
            for p in root.rglob("*.py")}
    mods = {m[:-len(".__init__")] if m.endswith(".__init__") else m: p for m, p in mods.items()}
    out = {}
    for mod, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{mod}: relative import (steer imports by absolute name)")
            names = ([node.module] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            deps |= {n for n in names if n in mods and n != mod and n != "steer"}
        out[mod] = deps
    return out


def _floor(mod):
    parts = mod.split(".")
    return FLOORS[parts[1] if len(parts) > 1 else "__init__"]


def test_imports_point_down_or_sideways():
    up = [f"{m} (floor {_floor(m)}) imports {d} (floor {_floor(d)})"
          for m, deps in _imports().items() for d in deps if _floor(d) > _floor(m)]
    assert not up, up


def test_no_import_cycle():
    graph = _imports()
    cycles = []
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_every_module_has_a_floor():
    assert all(_floor(m) is not None for m in _imports())


def test_only_the_kernel_package_calls_into_c():
    """ctypes for calls (CDLL, syscalls) only in steer.kernel, the one gateway; the ABI mirrors
    use it for struct layouts alone."""
    from pathlib import Path
    for path in (Path(ROOT) / "steer").rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("steer/kernel/"):
            continue
        assert "CDLL" not in text and "use_errno" not in text, rel
        if re.search(r"^\s*(import ctypes|from ctypes import)", text, re.M):
            assert rel.startswith("steer/abi/"), rel


def test_no_kernel_module_is_a_dozen_concerns():
    """Each module of steer.kernel holds one concern: none over 400 lines, and only the C
    library's module (libc.py) knows syscall numbers."""
    from pathlib import Path
    for path in (Path(ROOT) / "steer" / "kernel").glob("*.py"):
        text = path.read_text()
        assert text.count("\n") <= 400, (path.name, text.count("\n"))
        if path.name != "libc.py":
            assert "SYSCALLS" not in text and ".syscall(" not in text, path.name


def test_the_floor_rule_catches_an_upward_import(tmp_path):
    assert _floor("steer.model.flows") < _floor("steer.present.view") < _floor("steer.cli.main")


def test_the_command_line_parses_without_the_machinery():
    """Building the parser and refusing an argument load neither numpy, rich nor
    prometheus_client, nor the tracer: every `steer` call pays for its parser, and one that
    pays for the machinery too answered `steer --help` in 0.45 s instead of 0.12 s (and ten
    times that in the emulated guests of the suite)."""
    heavy = ["numpy", "rich", "prometheus_client", "steer.trace.tracer", "steer.present.view",
             "steer.present.exporter", "steer.steering.verdict", "steer.model.flows"]
    code = ("import sys\nfrom steer.cli.main import build_parser, main\nbuild_parser()\n"
            "try:\n    main(['pin', '--cpu', 'x'])\nexcept SystemExit:\n    pass\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert "--cpu" in r.stderr, r.stderr
    assert r.stdout.strip() == "", f"loaded to parse a command line: {r.stdout.strip()}"


LONGEST = 80   # lines a function may take, its signature and closing line included
# "path:function" -> why it stays longer
LONG_ON_PURPOSE = {
    "bpf/flowtrace/sampling.bpf.h:ft_sample":
        "the verifier walks it whole: cut into inline steps (charge the kernel side, charge the "
        "reader), the compiler's code took the verifier past its million instructions with "
        "profiling on (E2BIG), where the one body passes",
}


def _c_functions(path):
    """(name, lines) of each function defined in a C file of bpf/: a body opens with "{" alone
    at the start of a line and closes with "}" at the start of one, its signature above."""
    lines = path.read_text().split("\n")
    out, sig = [], None
    for i, line in enumerate(lines):
        if line == "{" and sig is None:
            j = i - 1
            while j > 0 and "(" not in lines[j]:
                j -= 1
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].rstrip().endswith((";", "*/", "}")) \
                    and not lines[j - 1].startswith(("#", "SEC(")):
                j -= 1
            m = re.search(r"(\w+)\s*\(\s*(\w*)", " ".join(lines[j:i]))
            # int BPF_PROG(ft_x, ...): the program's name is the macro's first argument
            sig = (m.group(2) if m.group(1).startswith("BPF_") else m.group(1)), j
        elif line.startswith("}") and sig is not None:
            out.append((sig[0], i - sig[1] + 1))
            sig = None
    return out


def test_no_function_is_longer_than_a_screen():
    """Functions in steer/ and bpf/ stay within LONGEST lines, each cut into named steps, but
    those LONG_ON_PURPOSE names with why."""
    import ast
    from pathlib import Path
    long = {}
    for path in (Path(ROOT) / "steer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1 + len(node.decorator_list)
                if n > LONGEST:
                    long[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = n
    for path in sorted((Path(ROOT) / "bpf").rglob("*.[ch]")):
        for name, n in _c_functions(path):
            if n > LONGEST:
                long[f"{path.relative_to(ROOT).as_posix()}:{name}"] = n
    assert set(long) <= set(LONG_ON_PURPOSE), long
    assert len(LONG_ON_PURPOSE) <= 3


def test_the_length_rule_sees_a_long_c_function(tmp_path):
    body = "\n".join(f"\tx += {i};" for i in range(LONGEST))
    (tmp_path / "f.c").write_text(f"static int\nlong_one(int x)\n{{\n{body}\n\treturn x;\n}}\n")
    assert _c_functions(tmp_path / "f.c") == [("long_one", LONGEST + 5)]
