"""What a cgroup path names (systemd units, docker/containerd/CRI-O/podman containers, kubelet
pods under both cgroup drivers) and the kubelet's log directories that name the pods."""
import pytest

from steer.model.workloads import (Workload, parse_cgroup_path, parse_container_log,
                                   parse_pod_log_dir)
from steer.trace.workloads import PodLogs

ID = "4f3c9a1e0b7d2c6a8e5f1b3d9c7a2e4f6b8d0c1a3e5f7b9d2c4a6e8f0b1d3c5a"
ID2 = "0" * 63 + "7"
UID = "7d1c2a3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
UID_ = UID.replace("-", "_")


@pytest.mark.parametrize("path, want", [
    ("/system.slice/nginx.service", Workload(unit="nginx.service")),
    # a user's own units, named with the manager they are delegated from
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service",
     Workload(unit="user@1000.service/foo.service")),
    ("/user.slice/user-1000.slice/session-3.scope", Workload(unit="session-3.scope")),
    ("/init.scope", Workload(unit="init.scope")),
    # docker: systemd and cgroupfs drivers
    (f"/system.slice/docker-{ID}.scope", Workload(f"docker-{ID}.scope", "docker", ID)),
    (f"/docker/{ID}", Workload(runtime="docker", container_id=ID)),
    # docker in docker: the outer container, which named the inner one as it liked
    (f"/docker/{ID2}/docker/{ID}", Workload(runtime="docker", container_id=ID2)),
    (f"/system.slice/docker-{ID2}.scope/system.slice/nginx.service",
     Workload(f"docker-{ID2}.scope", "docker", ID2)),
    # podman, rootful and rootless, and cgroupfs; its monitor names no container
    (f"/machine.slice/libpod-{ID}.scope", Workload(f"libpod-{ID}.scope", "podman", ID)),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope",
     Workload(f"user@1000.service/libpod-{ID}.scope", "podman", ID)),
    (f"/libpod_parent/libpod-{ID}", Workload(runtime="podman", container_id=ID)),
    (f"/machine.slice/libpod-conmon-{ID}.scope", Workload(unit=f"libpod-conmon-{ID}.scope")),
    # the kubelet, systemd driver: Burstable and BestEffort pods one slice down, Guaranteed not
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"cri-containerd-{ID}.scope",
     Workload(f"cri-containerd-{ID}.scope", "containerd", ID, UID)),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope",
     Workload(f"crio-{ID}.scope", "cri-o", ID, UID)),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{ID}.scope",
     Workload(f"docker-{ID}.scope", "docker", ID, UID)),
    # the kubelet, cgroupfs driver: the runtime is not in the name, but for CRI-O's
    (f"/kubepods/burstable/pod{UID}/{ID}", Workload(container_id=ID, pod_uid=UID)),
    (f"/kubepods/pod{UID}/{ID}", Workload(container_id=ID, pod_uid=UID)),
    (f"/kubepods/besteffort/pod{UID}/crio-{ID}", Workload(runtime="cri-o", container_id=ID, pod_uid=UID)),
    # a pod's own cgroup (a process the runtime put there, not in a container)
    (f"/kubepods/burstable/pod{UID}", Workload(pod_uid=UID)),
    # what a delegate names below its own cgroup is its own, whatever the names say: a pod and
    # its container (ids anyone can read in /proc/PID/cgroup), a system unit, a container
    (f"/user.slice/user-1000.slice/user@1000.service/x/kubepods/pod{UID}/{ID}",
     Workload(unit="user@1000.service")),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service",
     Workload(unit="user@1000.service/nginx.service")),
    (f"/user.slice/user-1000.slice/user@1000.service/docker-{ID}.scope",
     Workload(f"user@1000.service/docker-{ID}.scope", "docker", ID)),
    (f"/system.slice/ci-runner.service/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope",
     Workload(unit="ci-runner.service")),
    ("/system.slice/ci-runner.service/nginx.service", Workload(unit="ci-runner.service")),
    (f"/system.slice/docker-{ID2}.scope/kubepods/pod{UID}/{ID}",
     Workload(f"docker-{ID2}.scope", "docker", ID2)),
    (f"/docker/{ID2}/kubepods/pod{UID}/{ID}", Workload(runtime="docker", container_id=ID2)),
    # names nothing
    ("/", None), ("", None), (None, None), ("/foo/bar", None), (f"/scratch/{ID}", None),
    (f"/pod{UID}/{ID}", None), ("/system.slice/nginx.service.d", None),
])
def test_what_a_cgroup_path_names(path, want):
    assert parse_cgroup_path(path) == want


def test_labels_name_what_a_person_knows():
    assert Workload(unit="nginx.service").label == "nginx.service"
    assert Workload(f"docker-{ID}.scope", "docker", ID).label == "docker:4f3c9a1e0b7d"
    assert Workload(container_id=ID).label == "container:4f3c9a1e0b7d"
    # a user's rootless container, told apart from the system's with the same id
    assert Workload(f"user@1000.service/libpod-{ID}.scope", "podman", ID).label == \
        "user@1000.service/podman:4f3c9a1e0b7d"
    assert Workload(unit="user@1000.service/foo.service").label == "user@1000.service/foo.service"
    assert Workload(container_id=ID, pod_uid=UID).label == "pod 7d1c2a3b:4f3c9a1e0b7d"
    w = Workload(container_id=ID, pod_uid=UID).with_pod("web", "nginx-7d9f", "nginx")
    assert w.label == "web/nginx-7d9f:nginx"
    assert Workload(pod_uid=UID).with_pod("web", "nginx-7d9f").label == "web/nginx-7d9f"
    assert Workload().label is None


@pytest.mark.parametrize("name, want", [
    (f"kube-system_coredns-5d78c9869d-abcde_{UID}", ("kube-system", "coredns-5d78c9869d-abcde", UID)),
    (f"web_nginx.v2-0_{UID}", ("web", "nginx.v2-0", UID)),
    (f"web_nginx_{UID}_extra", None), ("web_nginx", None), (f"Web_nginx_{UID}", None),
    (f"web__{UID}", None),
])
def test_pod_log_directory_names(name, want):
    assert parse_pod_log_dir(name) == want


@pytest.mark.parametrize("name, want", [
    (f"coredns-5d78c9869d-abcde_kube-system_coredns-{ID}.log",
     ("coredns-5d78c9869d-abcde", "kube-system", "coredns", ID)),
    # a container name with dashes: the id is the last 64 hex digits
    (f"api-0_shop_side-car-2-{ID}.log", ("api-0", "shop", "side-car-2", ID)),
    (f"api-0_shop_app-{ID}", None), (f"api-0_shop_app-{ID[:-1]}.log", None),
    (f"api-0_shop-{ID}.log", None), ("README", None),
])
def test_container_log_names(name, want):
    assert parse_container_log(name) == want


def _kubelet_logs(root, namespace, pod, uid, container=None, cid=None):
    (root / "pods" / f"{namespace}_{pod}_{uid}").mkdir(parents=True, exist_ok=True)
    (root / "containers").mkdir(exist_ok=True)
    if container:
        (root / "containers" / f"{pod}_{namespace}_{container}-{cid}.log").touch()


def test_pod_logs_name_the_pod_and_the_container(tmp_path):
    _kubelet_logs(tmp_path, "web", "nginx-7d9f", UID, "nginx", ID)
    logs = PodLogs(str(tmp_path))
    w = logs.resolve(Workload(container_id=ID, pod_uid=UID))
    assert (w.namespace, w.pod, w.container) == ("web", "nginx-7d9f", "nginx")
    # the pod's sandbox or a container whose log is not linked: the pod still
    w = logs.resolve(Workload(container_id=ID2, pod_uid=UID))
    assert (w.namespace, w.pod, w.container) == ("web", "nginx-7d9f", None)
    # not a pod: unchanged, and no listing
    assert logs.resolve(Workload(unit="nginx.service")) == Workload(unit="nginx.service")


def test_pod_logs_list_again_at_most_once_a_second(tmp_path):
    now = [0.0]
    logs = PodLogs(str(tmp_path), clock=lambda: now[0])
    w = Workload(container_id=ID, pod_uid=UID)
    assert logs.resolve(w) == w   # no such directories: not a Kubernetes node
    _kubelet_logs(tmp_path, "web", "nginx-7d9f", UID, "nginx", ID)
    now[0] = 0.5
    assert logs.resolve(w) == w   # listed 0.5 s ago
    now[0] = 1.0
    assert logs.resolve(w).label == "web/nginx-7d9f:nginx"
