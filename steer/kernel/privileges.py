"""Which Linux capabilities this process holds, and the one-line refusal when it lacks one."""
from __future__ import annotations


class PrivilegeError(Exception):
    """A capability is missing; str() is the one line to show."""


# capability bits (include/uapi/linux/capability.h)
CAP_SETGID, CAP_SETUID, CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 6, 7, 12, 21, 38, 39
CAP_NAMES = {CAP_NET_ADMIN: "CAP_NET_ADMIN", CAP_SYS_ADMIN: "CAP_SYS_ADMIN",
             CAP_PERFMON: "CAP_PERFMON", CAP_BPF: "CAP_BPF", CAP_SETUID: "CAP_SETUID",
             CAP_SETGID: "CAP_SETGID"}


def effective_caps(status: str = "/proc/self/status") -> int:
    with open(status) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def seccomp_filtered(status: str = "/proc/self/status") -> bool:
    """Whether a seccomp filter sits on this process (a container runtime's default profile)."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return line.split()[1] == "2"
    except OSError:
        pass
    return False


# why bpf() can fail with EPERM for a process that holds CAP_BPF
SECCOMP_BPF = ("a seccomp filter is on this process, and a container runtime's default profile "
               "admits bpf() and perf_event_open() to CAP_SYS_ADMIN alone (podman's and "
               "CRI-O's; containerd's admits CAP_BPF and CAP_PERFMON): see docs/guide/fleet.md")


def missing_caps(needed: list[int], caps: int | None = None) -> list[str]:
    """Capabilities among NEEDED that this process lacks; CAP_SYS_ADMIN stands in for BPF and
    PERFMON, as on kernels before 5.8."""
    caps = effective_caps() if caps is None else caps
    has = lambda c: bool(caps >> c & 1)  # noqa: E731
    if has(CAP_SYS_ADMIN):
        needed = [c for c in needed if c not in (CAP_BPF, CAP_PERFMON)]
    return [CAP_NAMES[c] for c in needed if not has(c)]


def require_caps(needed: list[int], what: str) -> None:
    missing = missing_caps(needed)
    if missing:
        raise PrivilegeError(f"{what} needs {' and '.join(missing)}: run as root "
                          f"(or grant {', '.join(missing)})")
