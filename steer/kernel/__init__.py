"""steer.kernel: the kernel gateway: libbpf through ctypes and raw syscalls, capabilities, signals."""
