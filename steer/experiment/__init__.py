"""steer.experiment: the papers' experiment: the lab (namespaces and iperf3), the sweep, its report
and figures, host and device settings."""
