"""What a reader's cgroup path says about the workload it belongs to: the systemd unit, the
container (docker, containerd, CRI-O, podman) and, on a Kubernetes node, the pod.

Pure: names in, names out. Each runtime and each cgroup driver writes its own names, and a
container's id (64 hex digits) and a pod's UID are all a path carries; the pod's name, namespace
and the container's name come from the kubelet's log directories (steer.trace.workloads reads
them, with the file-name parsers here):

    systemd driver  /kubepods.slice/kubepods-burstable.slice/
                        kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope
                    (crio-<id>.scope under CRI-O, docker-<id>.scope under cri-dockerd;
                     Guaranteed pods sit right under kubepods.slice: kubepods-pod<uid>.slice)
    cgroupfs driver /kubepods/burstable/pod<uid>/<id>        (CRI-O: crio-<id>)
    docker          /system.slice/docker-<id>.scope          /docker/<id> (cgroupfs)
    podman          .../libpod-<id>.scope                    /libpod_parent/libpod-<id>
    kubelet logs    /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log
                    /var/log/containers/<pod>_<namespace>_<container>-<id>.log

Pod and namespace names are DNS names (no "_"), which is what lets the log names be split. A
container's own processes sit in its scope; its runtime's monitor (conmon, the shim) in another,
which names no container.

Who may name a cgroup decides what its name is trusted for. Only root creates cgroups outside a
delegated subtree; a delegate (a user's systemd manager, a service with Delegate=yes, a container
with a cgroup namespace) names whatever it likes below its own cgroup, including
"kubepods/pod<uid>/<id>" with another pod's uid and a container id read from any
/proc/PID/cgroup, or "nginx.service". So the outermost unit or container on the path wins, and
what lies below it is its own: a pod is one only where no unit or container lies above its
kubepods hierarchy; a container nested in another is the outer one's (docker in docker); a
unit below a service is that service's. A user's manager (user@UID.service) is the one delegate
whose inside is named, prefixed with it: "user@1000.service/foo.service", which no system unit
can be (a unit name has no "/"), and its rootless containers carry the prefix in their label.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

_ID = r"[0-9a-f]{64}"
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# a systemd scope per container, as each runtime names it under the systemd cgroup driver
_SCOPES = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman"}
_SCOPE = re.compile(rf"(docker|cri-containerd|crio|libpod)-({_ID})\.scope")
_CGROUPFS_CONTAINER = re.compile(rf"(?:(crio|libpod|docker)-)?({_ID})")
_POD_SLICE = re.compile(rf"kubepods(?:-[a-z]+)?-pod({_UID})\.slice")
_POD_DIR = re.compile(rf"pod({_UID})")
_UNIT = re.compile(r"[^/]+\.(service|scope)")
_MANAGER = re.compile(r"user@\d+\.service")   # a user's systemd manager: its subtree is delegated
# the kubelet's log names: <namespace>_<pod>_<uid> and <pod>_<namespace>_<container>-<id>.log
_POD_LOG_DIR = re.compile(rf"([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9.-]*)_({_UID})")
_CONTAINER_LOG = re.compile(rf"([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9-]*)-({_ID})\.log")


@dataclass(frozen=True)
class Workload:
    """What a cgroup path names. Each field None where the path does not say (a plain process
    has a unit at most; a container outside Kubernetes no pod)."""
    unit: str | None = None           # the outermost systemd unit: "nginx.service" (in a user's
                                      # manager: "user@1000.service/foo.service")
    runtime: str | None = None        # docker, containerd, cri-o, podman (None: a kubelet
                                      # cgroupfs name, which does not say)
    container_id: str | None = None   # 64 hex digits
    pod_uid: str | None = None        # with dashes, as the API and the log directories write it
    pod: str | None = None            # from the kubelet's log directories
    namespace: str | None = None
    container: str | None = None      # the container's name in its pod

    @property
    def manager(self) -> str | None:
        """The user's systemd manager ("user@1000.service") whose delegated subtree this is."""
        return self.unit.split("/", 1)[0] if self.unit and "/" in self.unit else None

    @property
    def label(self) -> str | None:
        """The shortest name a person knows it by: namespace/pod:container on Kubernetes, the
        runtime and short id of another container (a user's own with its manager), else the
        unit."""
        if self.pod:
            return f"{self.namespace}/{self.pod}" + (f":{self.container}" if self.container else "")
        if self.pod_uid:
            return f"pod {self.pod_uid[:8]}" + (f":{self.container_id[:12]}" if self.container_id else "")
        if self.container_id:
            short = f"{self.runtime or 'container'}:{self.container_id[:12]}"
            return f"{self.manager}/{short}" if self.manager else short
        return self.unit

    def with_pod(self, namespace: str, pod: str, container: str | None = None) -> "Workload":
        return replace(self, namespace=namespace, pod=pod, container=container or self.container)


def parse_cgroup_path(path: str | None) -> Workload | None:
    """The workload that the cgroup v2 PATH ("/system.slice/nginx.service") names, None for
    none (the root, or a path that names nothing known). The outermost unit or container wins
    (the module's docstring says why); below a pod's cgroup, its container."""
    if not path or path == "/":
        return None
    parts = [p for p in path.split("/") if p]
    uid = None
    kube = False
    for i, part in enumerate(parts):
        if _MANAGER.fullmatch(part):
            return _in_manager(part, parts[i + 1:])
        m = _SCOPE.fullmatch(part)
        if m:
            return Workload(part, _SCOPES[m.group(1)], m.group(2), uid)
        if _UNIT.fullmatch(part):
            return Workload(unit=part, pod_uid=uid)
        kube = kube or part.startswith("kubepods")
        m = (_POD_SLICE.fullmatch(part) or _POD_DIR.fullmatch(part)) if kube and not uid else None
        if m:
            uid = m.group(1).replace("_", "-")
            continue
        m = _CGROUPFS_CONTAINER.fullmatch(part)
        if m and i and (uid or parts[i - 1] in ("docker", "libpod_parent")):
            prefix = m.group(1) or ("docker" if parts[i - 1] == "docker" else None)
            return Workload(runtime={"crio": "cri-o", "libpod": "podman",
                                     "docker": "docker"}.get(prefix),
                            container_id=m.group(2), pod_uid=uid)
    return Workload(pod_uid=uid) if uid else None


def _in_manager(manager: str, below: list[str]) -> Workload:
    """What a user's manager's subtree BELOW names: its outermost unit or rootless container,
    prefixed with the manager; the manager itself where it names none."""
    for part in below:
        m = _SCOPE.fullmatch(part)
        if m:
            return Workload(f"{manager}/{part}", _SCOPES[m.group(1)], m.group(2))
        if _UNIT.fullmatch(part):
            return Workload(unit=f"{manager}/{part}")
    return Workload(unit=manager)


def parse_pod_log_dir(name: str) -> tuple[str, str, str] | None:
    """(namespace, pod, uid) from a directory name under /var/log/pods, None if it is not one."""
    m = _POD_LOG_DIR.fullmatch(name)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def parse_container_log(name: str) -> tuple[str, str, str, str] | None:
    """(pod, namespace, container, container id) from a file name under /var/log/containers,
    None if it is not one."""
    m = _CONTAINER_LOG.fullmatch(name)
    return (m.group(1), m.group(2), m.group(3), m.group(4)) if m else None
