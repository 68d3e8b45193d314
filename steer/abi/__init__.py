"""steer.abi: what the BPF programs and Python share: mirrors of the C structs and constants
(checked against the objects' BTF)."""
