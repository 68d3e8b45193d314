"""steer benchmarks: one command each (python -m bench.NAME), ratios measured side by side."""
