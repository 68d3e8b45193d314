"""Shared by the benchmarks: A/B alternation, statistics, and the JSON + markdown output."""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def parser(description: str, pairs: int | None = None, seconds: float | None = None,
           modes: bool = False) -> argparse.ArgumentParser:
    """The options every benchmark has, plus --pairs and --seconds where given a default, and
    --modes for those that compare tracer modes."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="a quick run that checks the benchmark works (CI), not a measurement")
    p.add_argument("--out", default=RESULTS, help="directory for NAME.json and NAME.md")
    if pairs is not None:
        p.add_argument("--pairs", type=int, default=pairs, help="A/B pairs measured")
    if seconds is not None:
        p.add_argument("--seconds", type=float, default=seconds, help="traffic per run")
    if modes:
        p.add_argument("--modes", type=_modes, default=",".join(TRACER_DEFAULT_MODES),
                       help="comma-separated tracer modes to compare with none, of "
                            f"{', '.join(TRACER_MODES)}")
    return p


def _modes(text: str) -> list[str]:
    modes = [m for m in text.split(",") if m]
    bad = [m for m in modes if m not in TRACER_MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(TRACER_MODES)}, not {text!r}")
    return modes


def build_c(name: str) -> str:
    """bench/NAME.c compiled to build/NAME (again when the source is newer); the path."""
    exe = os.path.join(os.path.dirname(HERE), "build", name)
    src = os.path.join(HERE, f"{name}.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        cc = next((c for c in ("cc", "clang", "gcc") if shutil.which(c)), None)
        if cc is None:
            raise SystemExit("no C compiler (apt-get install clang)")
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
    return exe


def lab_flow():
    """The benches' lab flow: the reader on another core than the sender (where the receive
    softirq runs) where two CPUs are usable, the common placement on real receivers."""
    from steer.experiment.lab import LabFlow, usable_cpus
    cpus = usable_cpus()
    return LabFlow(cpus[0], cpus[-1])


def run(main) -> None:
    """A benchmark's entry point: what steer refuses (no iperf3, a CPU this process may not use,
    no BTF...) ends it with steer's one-line message and exit 1, not a traceback."""
    from steer.kernel.errors import KernelError
    from steer.experiment.lab import LabError
    from steer.kernel.privileges import PrivilegeError
    from steer.steering.xdp import SteerError
    from steer.trace.tracer import TracerError
    from steer.kernel.signals import handle_sigint, interrupt
    import signal

    def stop(signum, frame):
        try:
            interrupt(frame, signum)   # the labs' and tracers' own teardown, as for Ctrl-C
        except KeyboardInterrupt:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a second one must not cut it
            raise

    # a bench started in the background (`... &`, nohup) ignores SIGINT: SIGTERM must tear its
    # lab down too, or its namespaces and iperf3s outlive it
    name = os.path.basename(sys.argv[0]).removesuffix(".py")
    try:   # the handlers go in inside it: a stop from the first moment they are in ends here
        signal.signal(signal.SIGTERM, stop)
        handle_sigint()
        code = main()
    except (KernelError, LabError, PrivilegeError, SteerError, TracerError) as e:
        sys.exit(f"{name}: {e}")
    except KeyboardInterrupt:
        sys.exit(f"{name}: stopped before the measurement ended; nothing was written")
    sys.exit(code)


def require_root() -> None:
    """Every benchmark starts here: as root, and on every online CPU, whatever mask the shell
    it was started from had (both ends of bench.rr on one CPU measure something else)."""
    if os.geteuid() != 0:
        sys.exit("benchmarks load BPF programs and make namespaces: run as root")
    from steer.kernel.process import widen_to_online_cpus
    line = widen_to_online_cpus()
    if line:
        print(line)


# the tracer configurations the cost benchmarks compare with no tracer at all: the default that
# every command runs (sampled timing, socket counters: nothing per read, the per-packet programs
# in windows of 50 ms every 500), the same always on its hooks (`--windows off`), with a program
# per read (`--app-hook tracepoint`: calls counted, UDP on kernels without fexit), and the exact
# mode (`--timing exact`)
TRACER_MODES = {"sampled": {"timing": "sampled"},
                # the default as on a kernel that allows fexit on udp_recvmsg: no program per read
                # of any TCP socket (where fexit is refused, "sampled" reads UDP by a tracepoint
                # that every read passes)
                "sampled-no-udp-tracepoint": {"timing": "sampled",
                                              "refuse": "ft_udp_recv_length"},
                "sampled-tracepoint": {"timing": "sampled", "app_hook": "tracepoint"},
                # the default: the sampled mode on its per-packet hooks 50 ms of every 500
                "sampled-windows": {"timing": "sampled", "windows": "50/500"},
                # the default without the program that counts the expiries a kernel withholds
                # from the sampler (bpf/flowtrace/withheld.bpf.h): what it costs, side by side
                "sampled-windows-no-withheld": {"timing": "sampled", "windows": "50/500",
                                                "refuse": "ft_sample_withheld"},
                "exact": {"timing": "exact"},
                # `steer flows --latency`: the default mode and the latency programs beside it
                "sampled-latency": {"timing": "sampled", "latency": True},
                # steer profile (on demand, not always on): the sampled tracer at its default
                # rate and ten times that, each sample also classifying its kernel stack
                "profile-1khz": {"timing": "sampled", "profile": True, "sample_hz": 999},
                "profile-10khz": {"timing": "sampled", "profile": True, "sample_hz": 9999}}
TRACER_DEFAULT_MODES = ("sampled-windows", "sampled", "exact")   # what --modes compares


SETTLE_SECONDS = 0.2   # after attaching, before a window starts
_loaded: dict = {}     # mode -> its Tracer, loaded once and detached between windows


class traced:
    """with traced(mode): the tracer of MODE (a TRACER_MODES key, or None for none) attached and
    read once a second by a thread, as the exporter and steer auto read it.

    Each mode's tracer is loaded once, at its first window, and only attached and detached after
    that: a window measures the cost of running, not of loading (BTF, verifier, kallsyms: a second
    of CPU), so windows can be short and many, which is what beats this VM's noise."""

    def __init__(self, mode: str | None):
        self.mode = mode
        self.tracer = None

    def __enter__(self):
        import threading
        if self.mode:
            self.tracer = load_tracer(self.mode)
            self.tracer.attach()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        time.sleep(SETTLE_SECONDS)
        return self

    def _read(self):
        while self.tracer and not self._stop.wait(1.0):
            self.tracer.sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.tracer:
            self.tracer.detach()


def start_tracer(mode: str):
    """A Tracer of MODE (a TRACER_MODES key), started; its "refuse" programs left out as on a
    kernel that refuses them."""
    from steer.trace.tracer import REFUSE_ENV, Tracer
    from steer.trace.windows import parse_windows
    options = dict(TRACER_MODES[mode])
    if "windows" in options:
        options["windows"] = parse_windows(options["windows"])
    before = os.environ.get(REFUSE_ENV)
    os.environ[REFUSE_ENV] = options.pop("refuse", "")
    try:
        return Tracer(**options).start()
    finally:
        if before is None:
            os.environ.pop(REFUSE_ENV)
        else:
            os.environ[REFUSE_ENV] = before


def load_tracer(mode: str):
    """MODE's tracer, loaded (at the first call) and detached."""
    if mode not in _loaded:
        _loaded[mode] = start_tracer(mode)
        _loaded[mode].detach()
    return _loaded[mode]


def unload_tracers() -> None:
    while _loaded:
        _loaded.popitem()[1].stop()


def alternate(a, b, pairs: int) -> list[tuple[float, float]]:
    """PAIRS measurements of A and B, in ABBA order so that a slow drift of the machine (thermal,
    caches, other load) does not favour either side."""
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            va = a()
            vb = b()
        else:
            vb = b()
            va = a()
        out.append((va, vb))
        print(f"  pair {i + 1}/{pairs}: A {va:.4g}  B {vb:.4g}  B/A {vb / va if va else float('nan'):.3f}",
              flush=True)
    return out


def compare_modes(run, pairs: int, what: str, modes: list[str] | None = None) -> tuple[dict, dict]:
    """RUN(mode) for every tracer mode against RUN(None), PAIRS pairs each: the ratio statistics
    and the raw pairs, by mode. The modes take turns, a pair each (AB, then BA at the next turn),
    rather than one block of pairs after another: the machine drifts over minutes (here a
    block's baseline moved by 4%), and blocks in turn gave a mode that does strictly less work a
    lower ratio than the full one, with intervals that did not overlap."""
    modes = modes or list(TRACER_DEFAULT_MODES)
    runs: dict[str, list] = {m: [] for m in modes}
    try:
        for mode in modes:
            load_tracer(mode)   # before the first window, which would otherwise pay for it
        print(f"{what}: {pairs} pairs per mode, A = no tracer, B = {', '.join(modes)} in turn")
        for i in range(pairs):
            for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
                if i % 2 == 0:
                    va, vb = run(None), run(mode)
                else:
                    vb, va = run(mode), run(None)
                runs[mode].append((va, vb))
                print(f"  pair {i + 1}/{pairs} {mode}: A {va:.4g}  B {vb:.4g}  "
                      f"B/A {vb / va if va else float('nan'):.3f}", flush=True)
    finally:
        unload_tracers()
    return {m: ratio_stats(runs[m]) for m in modes}, runs


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": statistics.median(values), "min": min(values),
            "max": max(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    """B/A per pair, then median and spread: the ratio is the result, not the raw values. The
    median, because this VM's noise has heavy tails (single windows at 0.6 or 1.6), with its 95%
    confidence interval by bootstrap (seeded: the same pairs give the same interval)."""
    ratios = [b / a for a, b in pairs if a]
    out = stats(ratios)
    if len(ratios) > 1:
        rng = random.Random(0)
        medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                         for _ in range(BOOTSTRAP))
        out["median_ci95"] = [medians[int(0.025 * BOOTSTRAP)], medians[int(0.975 * BOOTSTRAP) - 1]]
    return out


BOOTSTRAP = 4000   # resamples for a confidence interval


def host() -> dict:
    """Where a result was measured: the kernel, the CPUs, the hypervisor and the commit."""
    def out(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                                  cwd=os.path.dirname(__file__)).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    return {"kernel": os.uname().release, "cpus": os.cpu_count(),
            "vm": out("systemd-detect-virt", "--vm"), "container": out("systemd-detect-virt", "--container"),
            "commit": out("git", "rev-parse", "--short", "HEAD")}


def where(date: str, h: dict | None) -> str:
    """When and where a result was measured, as the results' pages say it: "2026-11-28, kernel
    6.18.44, 2 CPUs, a kvm VM (docker container), commit 1158791"."""
    if not h:
        return date[:10]
    return (f"{date[:10]}, kernel {h.get('kernel')}, {h.get('cpus')} CPUs"
            + (f", a {h['vm']} VM" if h.get("vm") not in (None, "none") else "")
            + (f" ({h['container']} container)" if h.get("container") not in (None, "none") else "")
            + (f", commit {h['commit']}" if h.get("commit") else ""))


def rss_kb(pid: int | str = "self") -> int:
    """Resident memory of process PID (this one by default), in kB."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def write(name: str, out_dir: str, data: dict, table: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    data = {"benchmark": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": host(), **data}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(data, f, indent=1)
    if "\nMeasured " not in table:   # the page that includes it then names the machine
        table = table.rstrip() + f"\n\nMeasured {where(data['date'], data['host'])}.\n"
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(table.rstrip() + "\n")
    print(table)


def fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec)


def fmt_ci(r: dict) -> str:
    """'0.98 (0.96-1.00)': a ratio_stats median with its 95% interval."""
    if "median_ci95" not in r:
        return fmt(r.get("median"))
    lo, hi = r["median_ci95"]
    return f"{fmt(r.get('median'))} ({fmt(lo)}-{fmt(hi)})"


def mode_rows(results: dict, runs: dict, spec: str, scale: float = 1.0) -> list[str]:
    """One table row per tracer mode: the medians without and with it (each divided by SCALE,
    formatted by SPEC), the ratio's median with its interval, its min and max."""
    def median(values):
        m = stats(values).get("median")
        return None if m is None else m / scale
    return [f"| {mode} | {fmt(median([a for a, _ in runs[mode]]), spec)} | "
            f"{fmt(median([b for _, b in runs[mode]]), spec)} | "
            f"{fmt_ci(r)} | {fmt(r.get('min'))} | {fmt(r.get('max'))} |"
            for mode, r in results.items()]
