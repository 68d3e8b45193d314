"""The layering: modules that only compute on samples, topologies and flow specs import without the
kernel gateway (steer.kernel, ctypes over libbpf) and without the loaders that use it, so they run
and are tested anywhere, without root."""
import subprocess
import sys

from helpers import ROOT

PURE = ["steer.samples", "steer.programs", "steer.check", "steer.interrupts", "steer.units", "steer.privileges", "steer.topology", "steer.classify",
        "steer.flowspec", "steer.flows", "steer.report", "steer.policies", "steer.auto", "steer.view",
        "steer.live", "steer.exporter", "steer.profile",
        "steer.manual", "steer.irqs", "steer.devsettings"]
GATEWAY_AND_LOADERS = ["steer.kernel", "steer.counters", "steer.tracer", "steer.steering", "steer.affinity", "steer.lab",
                       "steer.sweep", "steer.netdevs"]


def test_pure_modules_import_without_the_gateway():
    code = (f"import sys\nimport {', '.join(PURE)}\n"
            f"print(' '.join(m for m in {GATEWAY_AND_LOADERS!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported by a pure module: {r.stdout.strip()}"
