"""steer.model: pure data and logic: samples, units, the CPU topology, device IRQs, classes, flow
specs, snapshots."""
