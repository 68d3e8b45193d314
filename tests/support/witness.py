"""Witnesses that share no code with steer, for the live tests to hold its figures to."""
import bisect
import os
import re
import threading
import time

from steer.kernel.mounts import ensure_tracefs


class TraceEvents:
    """net:netif_receive_skb of one device, counted per CPU by tracefs (a tracing instance of
    our own, so the global trace buffer is left alone): a witness that shares no code with steer."""

    def __init__(self, dev):
        base = os.path.join(ensure_tracefs(), "instances", f"steertest{os.getpid()}")
        os.makedirs(base, exist_ok=True)
        self.base = base
        with open(f"{base}/buffer_size_kb", "w") as f:
            f.write("64")
        ev = f"{base}/events/net/netif_receive_skb"
        with open(f"{ev}/filter", "w") as f:
            f.write(f'name == "{dev}" && len > 1000')   # data segments, not ACKs or handshakes
        self.ev = ev

    def _stats(self):
        out = {}
        for cpu in sorted(os.listdir(f"{self.base}/per_cpu")):
            with open(f"{self.base}/per_cpu/{cpu}/stats") as f:
                text = f.read()
            n = sum(int(m) for m in re.findall(r"^(?:entries|overrun): (\d+)", text, re.M))
            out[int(cpu[3:])] = n
        return out

    def start(self):
        """Counting from now (counts of an earlier span cleared)."""
        with open(f"{self.base}/trace", "w"):
            pass   # clear
        with open(f"{self.ev}/enable", "w") as f:
            f.write("1")

    def stop(self):
        """The skbs counted per CPU since start()."""
        with open(f"{self.ev}/enable", "w") as f:
            f.write("0")
        return self._stats()

    def count(self, seconds):
        self.start()
        time.sleep(seconds)
        return self.stop()

    def close(self):
        os.rmdir(self.base)


# the TCP payload of each skb net:netif_receive_skb hands up, per source port, for the skbs to
# the destination ports FIRST..LAST: bpftrace, parsing the headers itself (IPv4 options, no IPv6
# extension headers: none on the lab's paths). Its map is read from the kernel, not printed: see
# ReceivedTcpBytes.read
_RECEIVED_BT = r"""
BEGIN { printf("ready\n"); }
tracepoint:net:netif_receive_skb
{
  $skb = (struct sk_buff *)args->skbaddr;
  $nh = $skb->head + $skb->network_header;
  if ($skb->protocol == 0x0008) {
    if (*(uint8 *)($nh + 9) != 6) { return; }
    $l4 = $nh + (*(uint8 *)$nh & 0xf) * 4;
    $len = ((uint32)*(uint8 *)($nh + 2) << 8 | *(uint8 *)($nh + 3)) - (*(uint8 *)$nh & 0xf) * 4;
  } else {
    if ($skb->protocol != 0xdd86 || *(uint8 *)($nh + 6) != 6) { return; }
    $l4 = $nh + 40;
    $len = (uint32)*(uint8 *)($nh + 4) << 8 | *(uint8 *)($nh + 5);
  }
  $dport = (uint32)*(uint8 *)($l4 + 2) << 8 | *(uint8 *)($l4 + 3);
  if ($dport < FIRST || $dport > LAST) { return; }
  $sport = (uint32)*(uint8 *)$l4 << 8 | *(uint8 *)($l4 + 1);
  @bytes[$sport] = sum($len - (*(uint8 *)($l4 + 12) >> 4) * 4);
}
"""

# bpftrace's name in the kernel for its map @bytes
_BYTES_MAP = "AT_bytes"


# the most payload one skb of the lab's veth carries (GRO's 64 KB)
MAX_SKB_PAYLOAD = 65536


class Passed(dict):
    """Source port -> bytes, and how many events the witness's program missed (`misses`)."""
    misses = 0


def matches_witness(rx: int, passed: Passed, sport: int) -> bool:
    """RX, counted per skb at net:netif_receive_skb, is what the witness PASSED counted for SPORT:
    to the byte, or above it by at most a full skb for each event its program missed. bpftrace's
    tracepoint programs are perf-event ones, which the kernel skips (and counts as recursion
    misses) on a CPU where a BPF map operation of a system call is under way (steer reading its
    maps); steer's tp_btf programs are not skipped there: CI run 95 saw one 64 KB skb more."""
    want = passed.get(sport)
    return want is not None and 0 <= rx - want <= passed.misses * MAX_SKB_PAYLOAD


class ReceivedTcpBytes:
    """The TCP payload that net:netif_receive_skb handed up, per source port, to destination
    port DPORT (to LAST: a range), counted by bpftrace (Debian's) from the start until read():
    the same hook as exact timing's byte count, read by a program that shares no code with
    steer."""

    def __init__(self, dport: int, last: int | None = None):
        import subprocess
        from helpers import bpftool_objects
        script = _RECEIVED_BT.replace("FIRST", str(dport)).replace("LAST", str(last or dport))
        before = {p["id"] for p in bpftool_objects("prog")}
        self.proc = subprocess.Popen(["bpftrace", "-e", script],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # "Attaching 2 probes..." comes before they are loaded; BEGIN runs once all are in place
        said = [self.proc.stdout.readline(), self.proc.stdout.readline()]
        if said[-1] != "ready\n":
            self.close()
            raise RuntimeError(f"bpftrace did not attach: {''.join(said)}{self.proc.stderr.read()}")
        # its program: the tracepoint program loaded since (bpftool names no owner here)
        progs = [p for p in bpftool_objects("prog")
                 if p["id"] not in before and p.get("type") == "tracepoint"]
        self.prog_ids = {p["id"] for p in progs}
        self.map_ids = {m for p in progs for m in p.get("map_ids", [])}

    def _misses(self) -> int:
        from helpers import bpftool_objects
        return sum(p.get("recursion_misses", 0) for p in bpftool_objects("prog")
                   if p["id"] in self.prog_ids)

    def _bytes(self) -> dict[int, int]:
        """@bytes as the kernel holds it: a per-CPU hash, source port -> bytes, summed over
        CPUs."""
        import json
        import subprocess
        from helpers import bpftool_objects
        for m in bpftool_objects("map"):
            if m["id"] not in self.map_ids or m.get("name") != _BYTES_MAP:
                continue
            dump = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m["id"])],
                                             capture_output=True, text=True, check=True).stdout)

            def le(hexbytes: list[str]) -> int:
                return int.from_bytes(bytes(int(b, 16) for b in hexbytes), "little")

            return {le(e["key"]): sum(le(v["value"]) for v in e["values"]) for e in dump}
        raise RuntimeError(f"bpftrace's program has no map {_BYTES_MAP} "
                           f"(maps {sorted(self.map_ids)})")

    def read(self) -> Passed:
        """Its counts so far, read from its map in the kernel while its program is loaded, and
        bpftrace killed: its own way out (SIGINT, END, print) hung now and then on a loaded VM,
        printing nothing within 60 s (CI, 2026-11-29, with 13 tracers beside it)."""
        try:
            passed = Passed(self._bytes())
            passed.misses = self._misses()
        finally:
            self.close()
        return passed

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ReaderBytes:
    """The bytes a reader took, by the kernel's count of what its read() calls returned (rchar,
    /proc/PID/io; iperf3 reads its data sockets with read()), stamped on the wall clock every
    PERIOD seconds by a thread of its own from start() to stop(): the reader's goodput over any
    span of that time, interpolated between the stamps."""

    def __init__(self, pid: int, period: float = 0.05):
        self.pid, self.period = pid, period
        self.stamps: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rchar(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/io") as f:
                return int(next(line.split()[1] for line in f if line.startswith("rchar:")))
        except (OSError, StopIteration):
            return None   # the reader has ended

    def _run(self):
        while not self._stop.is_set():
            n = self._rchar()
            if n is None:
                return
            self.stamps.append((time.time(), n))
            self._stop.wait(self.period)

    def start(self) -> "ReaderBytes":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def at(self, when: float) -> float:
        """The reader's bytes at WHEN, between the stamps around it (which must exist)."""
        i = bisect.bisect_left(self.stamps, (when, -1))
        if i == 0 or i == len(self.stamps):
            raise ValueError(f"{when:.3f} is outside the stamps "
                             f"({self.stamps[0][0]:.3f} .. {self.stamps[-1][0]:.3f})")
        (t0, n0), (t1, n1) = self.stamps[i - 1], self.stamps[i]
        return n0 + (n1 - n0) * (when - t0) / (t1 - t0)

    def rate(self, start: float, end: float) -> float:
        """Bytes a second read from START to END (wall clock)."""
        return (self.at(end) - self.at(start)) / (end - start)
