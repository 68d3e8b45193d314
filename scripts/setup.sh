#!/usr/bin/env bash
# Install what steer needs on Debian 12, idempotently: system packages, a venv with steer in it,
# and the BPF build. Called by `make demo` and `make test`; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang/llvm/bpftool/libbpf-dev build the CO-RE objects; libbpf1 is loaded at run time; iperf3 and
# iproute2 drive the lab; libbpf-tools (softirqs), bpftrace, tmux and prometheus (server and promtool) are
# independent witnesses in the tests; debhelper, dh-python and the python3-* packages build
# `make deb` (its Build-Depends), which the suite installs and purges; podman and runc run a real
# container whose reader the workload tests name (runc: crun refuses a hybrid cgroup host), and
# the DaemonSet's image, which mmdebstrap builds (`make image`)
PACKAGES=(clang llvm libbpf-dev libbpf1 bpftool bpftrace iperf3 iproute2 ethtool libbpf-tools tmux prometheus
          redis-server redis-tools podman runc mmdebstrap
          debhelper dh-python python3-all python3-setuptools python3-pyroute2 python3-rich
          python3-prometheus-client python3-numpy openssl
          python3 python3-venv python3-pip make)
# `make test-vm` boots a second kernel under qemu (tests/guest/vm/run.py); kmod's depmod indexes its
# modules, and the guest's modprobe is the host's
if [[ ${1:-} == --vm ]]; then
  PACKAGES+=(qemu-system-x86 kmod)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages ${missing[*]}; run as root (sudo make ...) to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# the user the exporter becomes when started as root, whose group reads the pinned rules' maps: the
# package's sysusers.d entry, made here for a checkout
if ! getent passwd steer >/dev/null && [[ $(id -u) -eq 0 ]]; then
  echo "setup: creating the system user steer (debian/steer.sysusers)"
  if command -v systemd-sysusers >/dev/null; then
    systemd-sysusers "$PWD/debian/steer.sysusers"
  else
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin --comment "steer exporter" steer
  fi
  getent passwd steer >/dev/null || { echo "setup: could not create the user steer" >&2; exit 1; }
fi

# the venv follows the python3 on PATH; it is rebuilt when setup.cfg changes
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
if [[ ! -f .venv/.installed || setup.cfg -nt .venv/.installed || pyproject.toml -nt .venv/.installed ]]; then
  echo "setup: installing steer into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test,sweep,web]'
  touch .venv/.installed
fi

make --no-print-directory
