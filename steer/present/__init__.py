"""steer.present: what people see: terminal tables, the live view, the Prometheus collector, profile
charts."""
