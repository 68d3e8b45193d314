# steer: build the BPF objects, and the two entry points of README.md.
#
#   make            build/flowtrace.bpf.o (CO-RE, needs clang, bpftool, libbpf-dev and kernel BTF)
#   make demo       install what is missing, then run `steer demo` on the built-in lab (root)
#   make test       install what is missing, then run the whole test suite (root for the live tiers)
#   make test-vm    the live tests again inside a qemu guest: 2 sockets, Debian's 6.1 kernel (root)
#   make test-kernels  the smoke test in a guest of each of KERNELS, then docs/kernels.md (root)
#   make deb        the Debian package, $(DIST)/steer_<version>_<arch>.deb (debhelper, dh-python)
#   make image      the DaemonSet's image, $(IMAGE), in podman's store (mmdebstrap, podman; root)
#   make V=1        show the compiler commands

BUILD   ?= build
CLANG   ?= clang
BPFTOOL ?= $(shell command -v bpftool || echo /usr/sbin/bpftool)
BTF     ?= /sys/kernel/btf/vmlinux
VENV    ?= .venv
DIST    ?= dist
PYTHON  := $(VENV)/bin/python

# __TARGET_ARCH_* selects the pt_regs layout and the syscall numbers in the BPF code
UNAME_M := $(shell uname -m)
ARCH := $(patsubst x86_64,x86,$(patsubst aarch64,arm64,$(UNAME_M)))
ifeq ($(filter x86 arm64,$(ARCH)),)
$(error unsupported architecture '$(UNAME_M)': steer knows the receive syscall numbers of x86_64 and aarch64 only)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
BPF_CFLAGS := -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_$(ARCH) -I$(BUILD) -Ibpf

.PHONY: all clean deb demo image test test-kernels test-vm setup
all: $(BPF_OBJS) $(BUILD)/flowtrace-nokfunc.bpf.o

$(BUILD):
	$(Q)mkdir -p $@

# vmlinux.h from the running kernel's BTF: CO-RE relocates field offsets at load time, so an object
# built here runs on other kernels that have BTF too
$(BUILD)/vmlinux.h: | $(BUILD)
	@test -r $(BTF) || { echo "error: $(BTF) missing: the kernel has no BTF (CONFIG_DEBUG_INFO_BTF=y is needed)" >&2; exit 1; }
	@command -v $(BPFTOOL) >/dev/null || { echo "error: bpftool not found (apt-get install bpftool)" >&2; exit 1; }
	$(Q)$(BPFTOOL) btf dump file $(BTF) format c > $@.tmp && mv $@.tmp $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c bpf/%.h $(wildcard bpf/*.bpf.h bpf/*/*.bpf.h) $(BUILD)/vmlinux.h
	@command -v $(CLANG) >/dev/null || { echo "error: clang not found (apt-get install clang llvm)" >&2; exit 1; }
	@test -r /usr/include/bpf/bpf_helpers.h || { echo "error: libbpf headers not found (apt-get install libbpf-dev)" >&2; exit 1; }
	@echo "  BPF   $@"
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

# flowtrace without the kfuncs it uses where the kernel has them, for kernels that have not
# (before 6.2): see bpf/run_clock.bpf.h
$(BUILD)/flowtrace-nokfunc.bpf.o: bpf/flowtrace.bpf.c bpf/flowtrace.h $(wildcard bpf/*.bpf.h bpf/*/*.bpf.h) $(BUILD)/vmlinux.h
	@echo "  BPF   $@"
	$(Q)$(CLANG) $(BPF_CFLAGS) -DRUN_CLOCK_NO_KFUNCS -c $< -o $@

setup:
	$(Q)scripts/setup.sh

demo: setup
	$(Q)$(VENV)/bin/steer demo

# the suite includes the guest tier (tests/guest/test_guest_live.py), whose qemu setup.sh --vm installs
test:
	$(Q)scripts/setup.sh --vm
	$(Q)$(PYTHON) -m pytest -ra --durations=15 tests

# VM_TESTS: pytest arguments for the guest, comma-separated (default in tests/guest/vm/run.py)
test-vm: setup
	$(Q)scripts/setup.sh --vm
	$(Q)$(PYTHON) tests/guest/vm/run.py $(subst $(comma), ,$(VM_TESTS))

comma := ,

# Debian's cloud kernels of bullseye, bookworm and trixie (tests/guest/vm/run.py KERNELS); each runs
# tests/live/test_kernel_smoke.py, which keeps the guest's steer check for the table; one kernel
# failing does not stop the others, and fails the target at the end
KERNELS ?= 5.10 6.1 6.12
test-kernels: setup
	$(Q)scripts/setup.sh --vm
	$(Q)failed=; for k in $(KERNELS); do \
		$(PYTHON) tests/guest/vm/run.py --kernel $$k tests/live/test_kernel_smoke.py || failed="$$failed $$k"; \
	done; \
	$(PYTHON) tests/guest/vm/kernels.py --host > docs/kernels.md && echo "docs/kernels.md written"; \
	if [ -n "$$failed" ]; then echo "test-kernels: failed on$$failed" >&2; exit 1; fi

# built in a copy of the tree, because dpkg-buildpackage writes beside and inside its source;
# dpkg-buildpackage names any missing Build-Depends (apt-get build-dep . installs them); the PATH
# keeps a pyenv or venv python out of it, as the package is for Debian's own python3
DEB_TREE := $(BUILD)/deb/steer
deb:
	$(Q)rm -rf $(BUILD)/deb && mkdir -p $(DEB_TREE) $(DIST)
	$(Q)tar -c --exclude=./build --exclude=./.venv --exclude=./.git --exclude=./dist \
		--exclude='*.egg-info' --exclude=__pycache__ . | tar -x -C $(DEB_TREE)
	$(Q)cd $(DEB_TREE) && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -us -uc -b $(if $(Q),>../build.log 2>&1 || { tail -20 ../build.log >&2; exit 1; })
	$(Q)cp $(BUILD)/deb/*.deb $(DIST)/ && ls $(DIST)/*.deb

# The image dashboards/fleet/daemonset.yaml names: Debian 12 with the package of `make deb`, the
# exporter's optional modules (YAML and bcrypt for --web-config) and what they need, nothing else
# (no apt, no shell tools beyond Debian's essential set, no docs). mmdebstrap builds the root from
# the Debian archive and podman imports it: no base image and no registry. To your registry:
#   podman push $(IMAGE) YOUR-REGISTRY/steer:<version>
VERSION := $(patsubst (%),%,$(word 2,$(shell head -1 debian/changelog)))
IMAGE   ?= registry.example/steer:$(VERSION)
MIRROR  ?= http://deb.debian.org/debian
# DEB=path: image that package instead of making one (the suite's, built once)
DEB     ?=
image: $(if $(DEB),,deb)
	$(Q)mkdir -p $(BUILD) && rm -f $(BUILD)/image.tar
	$(Q)mmdebstrap $(if $(Q),--quiet,--verbose) --variant=essential --mode=root \
		--include=systemd-standalone-sysusers,python3-yaml,python3-bcrypt \
		--include="$(abspath $(or $(DEB),$(DIST)/steer_$(VERSION)_$(shell dpkg --print-architecture).deb))" \
		--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
		bookworm $(BUILD)/image.tar "deb $(MIRROR) bookworm main" \
		"deb $(MIRROR) bookworm-updates main" \
		"deb $(patsubst %/debian,%/debian-security,$(MIRROR)) bookworm-security main"
	$(Q)podman import --quiet --change 'ENTRYPOINT ["/usr/bin/steer"]' \
		--change 'CMD ["export", "--listen", "0.0.0.0:9723"]' --change 'EXPOSE 9723/tcp' \
		$(BUILD)/image.tar $(IMAGE) >/dev/null
	$(Q)rm -f $(BUILD)/image.tar && echo "$(IMAGE)"

clean:
	$(Q)rm -rf $(BUILD)
