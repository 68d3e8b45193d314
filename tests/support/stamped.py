"""A sender that writes its send time into each message, and a reader that sleeps in a known
pattern between reads and records each message's send-to-read delay by its own clock: the truth
steer's arrival-to-read delays (--latency) are held to. Both read CLOCK_MONOTONIC, the clock of
bpf_ktime_get_ns(), on one host. No steer import: it runs inside the lab's namespaces.

    stamped.py send tcp|udp ADDR PORT SECONDS INTERVAL_US
    stamped.py read tcp|udp ADDR PORT SECONDS PATTERN_MS OUT.json

ADDR is IPv4 or IPv6 (a colon in it).
The reader writes [[read time ns, delay ns], ...] for every message, in the order read. Between
its bursts of reads it sleeps PATTERN_MS's sleeps in turn ("0.5,1,2,4"; a 0 blocks in the read
instead, so the delay is the path alone: the send, the stack, the wake-up and the copy)."""
import json
import socket
import struct
import sys
import time

MESSAGE = 64          # bytes: the send time (8) and padding
READ = 4096           # a TCP read: 64 messages, so that a read's copies end close to its return
STAMP = struct.Struct("@Q")


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def send(proto: str, addr: str, port: int, seconds: float, interval_us: float) -> None:
    pad = b"\0" * (MESSAGE - STAMP.size)
    if proto == "tcp":
        s = socket.create_connection((addr, port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # a message a segment, now
        out = s.sendall
    else:
        s = socket.socket(_family(addr), socket.SOCK_DGRAM)
        s.connect((addr, port))
        out = s.send
    # sends at least INTERVAL_US apart, never in a burst to catch up after a preemption: the
    # tracer takes at most one skb per flow in each of its gates (100 us at first)
    gap = interval_us / 1e6
    end = time.monotonic() + seconds
    due = time.monotonic()
    while due < end:
        try:
            out(STAMP.pack(time.monotonic_ns()) + pad)
        except ConnectionRefusedError:   # UDP: the reader not bound yet, or gone
            pass
        except (BrokenPipeError, ConnectionResetError):
            break
        due = max(due + gap, time.monotonic() + gap / 2)
        time.sleep(max(due - time.monotonic(), 0))
    s.close()


def read(proto: str, addr: str, port: int, seconds: float, pattern: list[float], out: str) -> None:
    got: list[tuple[int, int]] = []
    if proto == "tcp":
        ls = socket.socket(_family(addr), socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(1)
        print("listening", flush=True)
        s, _ = ls.accept()
    else:
        s = socket.socket(_family(addr), socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((addr, port))
        print("listening", flush=True)
    buf = b""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        pause = pattern[i % len(pattern)] / 1e3
        i += 1
        if pause:
            time.sleep(pause)
            s.setblocking(False)
        else:
            s.settimeout(0.5)
        while True:   # drain what waits (a 0 pause: one blocking read)
            try:
                data = s.recv(READ if proto == "tcp" else MESSAGE)
            except (BlockingIOError, socket.timeout):
                break
            now = time.monotonic_ns()
            if not data:
                end = 0
                break
            if proto == "udp":
                got.append((now, now - STAMP.unpack_from(data)[0]))
            else:
                buf += data
                whole = len(buf) // MESSAGE * MESSAGE
                got += [(now, now - STAMP.unpack_from(buf, o)[0]) for o in range(0, whole, MESSAGE)]
                buf = buf[whole:]
            if not pause:
                break
    s.close()
    with open(out, "w") as f:
        json.dump(got, f)


if __name__ == "__main__":
    what, proto, addr, port, seconds = sys.argv[1:6]
    if what == "send":
        send(proto, addr, int(port), float(seconds), float(sys.argv[6]))
    else:
        read(proto, addr, int(port), float(seconds), [float(x) for x in sys.argv[6].split(",")],
             sys.argv[7])
