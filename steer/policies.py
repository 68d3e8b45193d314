"""The name policy files have used since steer 0.1: `from steer.policies import Decision`. The
policies live in steer.steering.policies; this keeps files written against the old name working."""
from steer.steering.policies import Decision, Policy, PolicyError  # noqa: F401
