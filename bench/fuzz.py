"""Parser fuzzing at scale: N random and mutated packets (default 1,000,000) through the XDP
steering program with BPF_PROG_TEST_RUN. Every packet that is not a well-formed packet of a
steered flow (by the independent reference parser in bench/packets.py) must come back XDP_PASS,
and every packet must come back unchanged.

    sudo .venv/bin/python -m bench.fuzz [--packets 1000000] [--seed 1]
"""
from __future__ import annotations

import time

from steer.model.flowspec import FlowSpec
from steer.kernel.links import prog_test_run
from steer.steering.xdp import load_unattached

from .common import parser, require_root, run, write
from .packets import FUZZ_SPECS, fuzz_packets, reference_tuple

XDP_PASS, XDP_REDIRECT = 2, 4
CHUNK = 50_000   # packets generated at a time: memory stays small at any N


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--packets", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.packets = 20_000
    specs = [FlowSpec.parse(s) for s in FUZZ_SPECS]
    obj, table = load_unattached()
    counts = {"passed": 0, "steered": 0, "wrong_verdict": 0, "modified": 0}
    first_failure = None
    t0 = time.monotonic()
    try:
        table.pin_many([(s, 0) for s in specs])
        fd = obj.prog_fd("steer_xdp")
        done, chunk_no = 0, 0
        while done < args.packets:
            n = min(CHUNK, args.packets - done)
            for pkt in fuzz_packets(n, seed=args.seed * 1000 + chunk_no):
                ret, out, _ = prog_test_run(fd, pkt)
                t = reference_tuple(pkt)
                steered = t is not None and any(s.matches(*t) for s in specs)
                if ret != (XDP_REDIRECT if steered else XDP_PASS):
                    counts["wrong_verdict"] += 1
                    first_failure = first_failure or pkt.hex()
                if out != pkt:
                    counts["modified"] += 1
                    first_failure = first_failure or pkt.hex()
                counts["steered" if ret == XDP_REDIRECT else "passed"] += 1
            done += n
            chunk_no += 1
            print(f"  {done:,} packets", flush=True)
        kernel = table.counters()
    finally:
        obj.close()
    secs = time.monotonic() - t0
    ok = counts["wrong_verdict"] == 0 and counts["modified"] == 0
    table_md = "\n".join([
        f"### Parser fuzzing ({args.packets:,} packets, seed {args.seed}, {secs:.0f} s)", "",
        "| packets | XDP_PASS | steered | wrong verdict | modified | program counters |",
        "|---|---|---|---|---|---|",
        f"| {args.packets:,} | {counts['passed']:,} | {counts['steered']:,} | {counts['wrong_verdict']} | "
        f"{counts['modified']} | passed {kernel['passed']:,}, unparsed {kernel['unparsed']:,}, "
        f"redirected {kernel['redirected']:,} |"])
    write("fuzz", args.out, {"packets": args.packets, "seed": args.seed, "counts": counts,
                             "kernel_counters": kernel, "first_failure": first_failure,
                             "seconds": secs, "smoke": args.smoke}, table_md)
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
