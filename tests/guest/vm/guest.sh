#!/bin/sh
# Stage 2 of the test guest (tests/guest/vm/run.py), as init of the overlay root: mount what a booted
# system has, make the guest kernel's modules visible, run pytest, print its status, power off.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mkdir -p /lib/modules
mount --bind "$STEER_VM_MODULES" /lib/modules
hostname steer-vm
ip link set lo up
modprobe veth
# the NIC of run.py (a multi-queue virtio-net fed from the host): the one device virtio_net makes
modprobe virtio_net
nic=$(ls /sys/bus/virtio/drivers/virtio_net/*/net 2>/dev/null | head -n 1)
if [ -n "$nic" ] && [ -n "$STEER_VM_NIC_ADDR" ]; then
	ip addr add "$STEER_VM_NIC_ADDR" dev "$nic"
	ip link set "$nic" up
	export STEER_VM_NIC="$nic"
fi
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
export PYTHONDONTWRITEBYTECODE=1 STEER_IN_TEST_GUEST=1
cd "$STEER_VM_REPO" || { echo "STEER_VM_EXIT=98"; echo o > /proc/sysrq-trigger; }
echo "test-vm guest: kernel $(uname -r), $(nproc) CPUs, NIC ${STEER_VM_NIC:-none}"
# the arguments travel comma-separated on the kernel command line
set -f
IFS=,
set -- $STEER_VM_PYTEST
unset IFS
.venv/bin/python -m pytest -ra -p no:cacheprovider --durations=10 "$@"
echo "STEER_VM_EXIT=$?"
sync
echo o > /proc/sysrq-trigger
# the power-off tears virtiofs down, where sleep's binary lives: a sleep started then fails (EIO),
# init exits and the kernel panics before it powers off; wait in the shell itself
while :; do :; done
