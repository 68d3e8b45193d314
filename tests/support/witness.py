"""Witnesses that share no code with steer, for the live tests to hold its figures to."""
import os
import re
import time

from steer.kernel.gateway import ensure_tracefs


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
