"""A stand-in for the tracer (the TraceSource protocol) where no BPF runs: unit tests of what
reads it, and bench.scale_cpus on fixture machines."""
from steer.model.samples import TraceSample


class FakeTracer:
    """Hands out the samples it is given, one per read, as a Tracer hands out map reads."""

    def __init__(self, samples, capabilities):
        self.capabilities = capabilities
        self._samples = iter(samples)

    def sample(self) -> TraceSample:
        return next(self._samples)

    def program_stats(self):
        return {"ft_sample": (5000, 10)}
