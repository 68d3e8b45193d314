"""What a user sets on the command line, its defaults and its limits: one home that the machinery
(tracer, views, exporter, web server, verdicts) and the command line's parser both read.

Light on purpose: parsing a command line imports this and argparse, not numpy, rich or
prometheus_client, so that `steer --help`, a refused argument or `steer reset` answers at once
(0.1 s here, where building the parser from the machinery's modules took 0.45 s; ten times that
in a guest under emulation).
"""

# the tracer's timing (steer.trace.programs has the modes)
DEFAULT_TIMING = "auto"    # sampled where the kernel runs its core, else exact, else counts
DEFAULT_SAMPLE_HZ = 99     # per CPU, as always-on profilers sample (99, not 100: out of step with
                           # work on a 100 Hz beat). Each sample costs a timer interrupt and
                           # ~2.5 us of program on this VM (bench.event_cost; a stack walk, where
                           # the kernel leaves no cheaper sign, ~18 us). A flow at 10% of a CPU
                           # over a 15 s scrape interval gets ~150 samples: ~8% error
MAX_SAMPLE_HZ = 20000      # the kernel throttles perf sampling well before 100 kHz per CPU
PROFILE_HZ = 999           # steer profile, per busy CPU: ~1,000 samples a second, out of step
                           # with the tick

# the tracer's flow map
DEFAULT_MAX_FLOWS = 16384   # (flow, CPU) entries: ~300 bytes each in the kernel, ~5 MB in all
MAX_FLOWS_LIMIT = 1 << 22   # ~1.2 GB of kernel memory: beyond it is a typo, not a plan
DEFAULT_IDLE_TIMEOUT = 60.0  # seconds without a packet or a read before an entry is dropped: every
                             # short connection (a scrape, a health check) would otherwise sit in
                             # the map until the LRU pushes it out, and cost every later read

# the hardware (or software stand-in) counters beside the flows
COUNTER_MODES = ("auto", "hardware", "software", "off")

# the views (steer flows, top, demo)
DEFAULT_LIMIT = 20            # flows printed by `steer flows`
DEFAULT_MIN_RATE = 10_000     # bit/s: slower flows are idle, hidden unless asked for
SORTS = {"rate": "rate", "kernel": "kernel CPU time", "app": "app CPU time", "class": "class",
         "workload": "workload"}

# the exporter. 9723: marked FREE in the Prometheus wiki's "Default port allocations" (a stored
# copy of the page read 2026-11-23); 9435, steer's default before, is Cloudflare's ebpf_exporter's,
# the exporter most likely to run beside steer on an eBPF host
DEFAULT_LISTEN = "127.0.0.1:9723"
DEFAULT_TOP_K = 20
# the labels of per-flow series: the whole 5-tuple, or the receiving service alone (no peer
# address or port), whose series do not come and go with every connection
FLOW_LABEL_SETS = {"five-tuple": ["proto", "src", "sport", "dst", "dport"],
                   "service": ["proto", "dst", "dport"],
                   "workload": ["workload", "namespace", "pod", "container"]}
DEFAULT_FLOW_LABELS = "five-tuple"
# what the cpu label of the per-CPU series names: each CPU, or the CPUs of a last-level cache or
# of a socket summed (a 2 x 64-core host with SMT has 256 CPUs: see docs/guide/exporter.md)
CPU_LABELS = ("cpu", "llc", "socket")
DEFAULT_CPU_LABELS = "cpu"

# the exporter's web server
DEFAULT_WORKERS = 4
DEFAULT_TIMEOUT = 10.0          # seconds to read a request (TLS handshake included) or write a reply

# a move's verdict (steer.steering.verdict)
TOLERANCE = 0.05           # a change smaller than this share of the before figure is no change
