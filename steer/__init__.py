"""steer: per-flow receive placement, traced with eBPF and steered to better cores."""
__version__ = "0.1.0"
