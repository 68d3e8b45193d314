"""HTTP helpers of the tests that run an exporter and a Prometheus server on 127.0.0.1."""
import json
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout=10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.status == 200
        return r.read()


def wait_http(url: str, proc, timeout=30):
    """URL's body once it answers; fails at once if PROC (what serves it) exits first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[:4]} exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            return http_get(url, timeout=2)
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def query(prom: str, expr: str, at: float | None = None) -> list:
    """The result of the PromQL EXPR on the Prometheus server at PROM (its base URL)."""
    args = {"query": expr}
    if at is not None:
        args["time"] = f"{at:.3f}"
    out = json.loads(http_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode(args)))
    assert out["status"] == "success", out
    return out["data"]["result"]


def prometheus(config_dir, targets: list[str], port: int, extra: str = "",
               interval: str = "1s") -> subprocess.Popen:
    """Debian's prometheus scraping TARGETS every INTERVAL (its scrape timeout too), its config
    and data under CONFIG_DIR (a pathlib.Path); EXTRA: more top-level lines of its configuration."""
    (config_dir / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {interval}, evaluation_interval: 1s}}\n" + extra +
        "scrape_configs:\n  - job_name: steer\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
    return subprocess.Popen(["prometheus", f"--config.file={config_dir}/prometheus.yml",
                             f"--storage.tsdb.path={config_dir}/data",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_all(procs, timeout=10) -> None:
    """Terminate PROCS, all at once, and kill what is still there after TIMEOUT."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def metric_sum(body: str, name: str) -> float:
    """The sum of NAME's samples (NAME a regular expression, labels optional) in BODY."""
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", body, re.M))
