"""steer.steering: moving work: XDP steering rules and pins, application/IRQ/RPS affinity, policies
and the auto loop."""
