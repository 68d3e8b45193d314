"""steer.kernel: the one gateway to the kernel, by concern: libbpf (libbpf, objects, maps, btf,
links), perf events (perf), the C library's syscalls (libc), namespaces, kernel filesystems
(mounts), capabilities (privileges), this process (process), signals in callbacks (signals), and
what failed (errors). Nothing outside this package calls into C."""
