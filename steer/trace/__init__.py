"""steer.trace: the tracer: which programs each mode loads, loading them, reading their maps, PMU
counters, devices, profiles, steer check."""
