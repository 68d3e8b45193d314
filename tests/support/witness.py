"""Witnesses that share no code with steer, for the live tests to hold its figures to."""
import os
import re
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

    def count(self, seconds):
        with open(f"{self.base}/trace", "w"):
            pass   # clear
        with open(f"{self.ev}/enable", "w") as f:
            f.write("1")
        time.sleep(seconds)
        with open(f"{self.ev}/enable", "w") as f:
            f.write("0")
        return self._stats()

    def close(self):
        os.rmdir(self.base)


# the TCP payload of each skb net:netif_receive_skb hands up, per source port, for the skbs to
# the destination ports FIRST..LAST: bpftrace, parsing the headers itself (IPv4 options, no IPv6
# extension headers: none on the lab's paths)
_RECEIVED_BT = r"""
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
END { print(@bytes); printf("end\n"); clear(@bytes); }
"""


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
        first = self.proc.stdout.readline()   # "Attaching 1 probe..." once it is in place
        if "Attaching" not in first:
            raise RuntimeError(f"bpftrace did not attach: {first}{self.proc.stderr.read()}")
        # its program: the tracepoint program loaded since (bpftool names no owner here)
        self.prog_ids = {p["id"] for p in bpftool_objects("prog")
                         if p["id"] not in before and p.get("type") == "tracepoint"}

    def _misses(self) -> int:
        from helpers import bpftool_objects
        return sum(p.get("recursion_misses", 0) for p in bpftool_objects("prog")
                   if p["id"] in self.prog_ids)

    def read(self) -> Passed:
        """Its counts so far: SIGINT runs its END, which prints them and a line "end"; the lines
        up to it are read, and bpftrace is killed rather than waited for (it was seen to hang
        in its exit now and then)."""
        import signal
        import threading
        misses = self._misses()   # while its program is loaded: SIGINT unloads it
        self.proc.send_signal(signal.SIGINT)
        lines: list[str] = []

        def _read():
            for line in self.proc.stdout:
                if line.strip() == "end":
                    return
                lines.append(line)

        reader = threading.Thread(target=_read, daemon=True)
        reader.start()
        reader.join(timeout=60)
        ended = not reader.is_alive()
        self.close()
        if not ended:
            raise RuntimeError("bpftrace printed no counts within 60 s of SIGINT")
        passed = Passed((int(p), int(n)) for p, n in re.findall(r"^@bytes\[(\d+)\]: (\d+)$",
                                                                "".join(lines), re.M))
        passed.misses = misses
        return passed

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
