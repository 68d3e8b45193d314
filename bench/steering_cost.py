"""Steering cost: XDP nanoseconds per packet (BPF_PROG_TEST_RUN, repeated in the kernel) with 0 to
10,000 rules that do not match, and lab throughput with the program attached (generic XDP) and
1, 100, 10,000 non-matching rules (B) against no program (A), alternated.

    sudo .venv/bin/python -m bench.steering_cost [--pairs 5] [--seconds 4]
"""
from __future__ import annotations

from steer.model.flowspec import FlowSpec
from steer.experiment.lab import Lab
from steer.kernel.links import prog_test_run
from steer.steering.xdp import XdpSteering, load_unattached

from .common import (alternate, fmt, lab_flow, parser, ratio_stats, require_root, run, stats,
                     write)
from .packets import ETH_IP, eth, ipv4, tcp

REPEAT = 200_000   # runs per test-run call: long enough that the kernel's timer resolution vanishes


def nonmatching(n: int) -> list[tuple[FlowSpec, int]]:
    """N exact rules for flows that never arrive (198.18.1.0/24 senders, ports 1..)."""
    return [(FlowSpec(proto="tcp", src=f"198.18.1.{1 + i % 250}", sport=1 + i // 250,
                      dst="198.18.0.2", dport=9), 0) for i in range(n)]


def ns_per_packet(counts, wildcard_masks: int = 0) -> dict:
    pkt = eth(ipv4("198.18.0.1", "198.18.0.2", 6, tcp(40000, 5201, b"x" * 1400)), ETH_IP)
    out = {}
    for n in counts:
        obj, table = load_unattached()
        try:
            rules = nonmatching(n)
            # wildcard rules on other masks make the program look up once per mask
            rules += [(FlowSpec(proto="udp", dport=9000 + i) if i % 2 else
                       FlowSpec(proto="udp", sport=9000 + i, dport=1), 0)
                      for i in range(wildcard_masks)]
            table.pin_many(rules)
            ret, after, ns = prog_test_run(obj.prog_fd("steer_xdp"), pkt, repeat=REPEAT)
            assert ret == 2 and after == pkt   # XDP_PASS, untouched
            out[n] = ns
        finally:
            obj.close()
    return out


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=5, seconds=4.0)
    args = p.parse_args(argv)
    require_root()
    counts = [0, 1, 100, 10_000]
    thr_counts = [1, 100, 10_000]
    if args.smoke:
        args.pairs, args.seconds, thr_counts = 1, 1.0, [100]
    exact = ns_per_packet(counts)
    wild = ns_per_packet([0], wildcard_masks=2)
    thr = {}
    flow = lab_flow()
    with Lab([flow], seconds=args.seconds) as lab:
        def run(n):
            steering = None
            if n is not None:
                steering = XdpSteering(lab.rx_dev, lab.rx_netns, mode="generic",
                                       pinned=False).open()
                steering.table.pin_many(nonmatching(n))
            try:
                lab.start(args.seconds)
                (res,) = lab.wait(timeout=args.seconds + 30)
            finally:
                if steering:
                    steering.close()
            if res.error:
                raise SystemExit(f"iperf3: {res.error}")
            return res.raw["end"]["sum_received"]["bits_per_second"]
        for n in thr_counts:
            print(f"throughput, A = no XDP program, B = generic XDP with {n:,} non-matching rules")
            pairs = alternate(lambda: run(None), lambda n=n: run(n), args.pairs)
            thr[n] = {"ratio": ratio_stats(pairs), "a_bps": stats([a for a, _ in pairs]),
                      "b_bps": stats([b for _, b in pairs])}
    rows = [f"| {n:,} exact | {exact[n]} |" for n in counts] + \
        [f"| 0 exact + 2 wildcard masks (3 lookups) | {wild[0]} |"]
    trows = [f"| {n:,} | {fmt(t['a_bps'].get('median', 0) / 1e9, '.2f')} | "
             f"{fmt(t['b_bps'].get('median', 0) / 1e9, '.2f')} | {fmt(t['ratio'].get('median'))} | "
             f"{fmt(t['ratio'].get('min'))} | {fmt(t['ratio'].get('max'))} |" for n, t in thr.items()]
    table = "\n".join([
        "### Steering cost", "",
        f"XDP program per packet (BPF_PROG_TEST_RUN, {REPEAT:,} runs, a 1,454-byte TCP packet that "
        "matches no rule):", "", "| rules installed | ns per packet |", "|---|---|", *rows, "",
        f"Lab throughput ({args.pairs} pairs x {args.seconds:g} s, sender CPU {flow.kernel_cpu}, "
        f"reader CPU {flow.app_cpu}); "
        "generic XDP includes the kernel's cost of running XDP on skbs (linearising GSO skbs):", "",
        "| non-matching rules | no program Gbit/s | with program Gbit/s | ratio median | min | max |",
        "|---|---|---|---|---|---|", *trows])
    write("steering_cost", args.out, {"ns_per_packet_exact": exact, "ns_per_packet_wildcard": wild,
                                      "throughput": thr, "pairs": args.pairs,
                                      "seconds": args.seconds, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
