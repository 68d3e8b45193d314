"""A reader's workload from its cgroup v2 id: the path (steer.trace.cgroups), what the path
names (steer.model.workloads) and, on a Kubernetes node, the pod's namespace and name and the
container's name from the kubelet's log directories, the node's own files (no API server).

The kubelet writes /var/log/pods/<namespace>_<pod>_<uid>/ for each pod and links
/var/log/containers/<pod>_<namespace>_<container>-<id>.log for each container, as log
collectors read them. Both are listed again only when an id or a UID is not found, at most once
a second, and hold at most MAX_ENTRIES names each. The DaemonSet mounts /var/log/pods and
/var/log/containers read-only; STEER_KUBELET_LOGS names another directory holding both.
"""
from __future__ import annotations

import os
import time

from steer.model.workloads import (Workload, parse_cgroup_path, parse_container_log,
                                   parse_pod_log_dir)
from steer.trace.cgroups import RESCAN_INTERVAL, CgroupResolver

# where the kubelet's pods/ and containers/ log directories are: a container that mounts the
# node's elsewhere says so in STEER_KUBELET_LOGS
LOG_ROOT_ENV = "STEER_KUBELET_LOGS"
LOG_ROOT = "/var/log"
MAX_ENTRIES = 100_000     # a listing stops there: the index stays bounded whatever the node holds
MAX_CACHED = 65_536       # workloads remembered by cgroup id


class PodLogs:
    """The kubelet's log directories, indexed: pod UID -> (namespace, pod), container id ->
    (namespace, pod, container)."""

    def __init__(self, root: str | None = None, clock=time.monotonic):
        self.root = root if root is not None else os.environ.get(LOG_ROOT_ENV) or LOG_ROOT
        self._clock = clock
        self._pods: dict[str, tuple[str, str]] = {}
        self._containers: dict[str, tuple[str, str, str]] = {}
        self._listed = None

    def _names(self, sub: str) -> list[str]:
        try:
            with os.scandir(os.path.join(self.root, sub)) as it:
                names = []
                for e in it:
                    names.append(e.name)
                    if len(names) >= MAX_ENTRIES:
                        break
                return names
        except OSError:
            return []   # not a Kubernetes node, or not mounted into the container

    def _list(self) -> None:
        pods, containers = {}, {}
        for name in self._names("pods"):
            p = parse_pod_log_dir(name)
            if p:
                pods[p[2]] = (p[0], p[1])
        for name in self._names("containers"):
            c = parse_container_log(name)
            if c:
                containers[c[3]] = (c[1], c[0], c[2])
        self._pods, self._containers, self._listed = pods, containers, self._clock()

    def _due(self) -> bool:
        return self._listed is None or self._clock() - self._listed >= RESCAN_INTERVAL

    def _lookup(self, w: Workload) -> Workload | None:
        if w.container_id in self._containers:
            return w.with_pod(*self._containers[w.container_id])
        if w.pod_uid in self._pods:
            return w.with_pod(*self._pods[w.pod_uid])
        return None

    def resolve(self, w: Workload) -> Workload:
        """W with its pod's namespace and name, and its container's name, where the logs say."""
        if not w.pod_uid:
            return w
        got = self._lookup(w)
        if (got is None or (w.container_id and not got.container)) and self._due():
            self._list()
            got = self._lookup(w)
        return got or w


class WorkloadResolver:
    """cgroup v2 id -> (path, Workload or None); (None, None) for an id not (or no longer) in
    the hierarchy."""

    def __init__(self, cgroups: CgroupResolver | None = None, pods: PodLogs | None = None):
        self.cgroups = cgroups or CgroupResolver()
        self.pods = pods or PodLogs()
        self._cache: dict[int, tuple[str, Workload | None]] = {}

    def prime(self) -> None:
        """Walk the cgroups now, so that those that end before they are asked about are named."""
        self.cgroups.prime()

    def __call__(self, cgroup_id: int | None) -> tuple[str | None, Workload | None]:
        if not cgroup_id:
            return None, None
        hit = self._cache.get(cgroup_id)
        if hit and (hit[1] is None or hit[1].pod or not hit[1].pod_uid):
            return hit   # a pod whose logs were not there yet is looked up again
        path = self.cgroups(cgroup_id)
        if path is None:
            return None, None
        w = parse_cgroup_path(path)
        if w is not None:
            w = self.pods.resolve(w)
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()   # ids of cgroups long gone: a new start costs a lookup each
        self._cache[cgroup_id] = (path, w)
        return path, w
