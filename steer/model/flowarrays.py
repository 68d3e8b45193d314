"""The flow map as arrays: one row per (flow, CPU) entry, as the map's batch reads return them.

Under connection churn (a port scan, a frontend's short connections) most of the map's entries
are new at every read. An object per entry (FlowCpuSample, FlowId) costs ~6 KB of the exporter's
memory and ~50 us of its time an entry; a row here costs the entry's 268 bytes and no Python
object, and the exporter makes objects only for the series it shows (steer.model.ledger).
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from steer.abi import flowtrace as abi
from steer.model.numeric import np
from steer.model.samples import PROTO_NUMBERS, FlowCpuSample, FlowId, address_text, proto_name

KEY_SIZE = np.dtype(abi.FlowCpuKey).itemsize
FLOW_SIZE = np.dtype(abi.FlowKey).itemsize   # the flow part of a (flow, CPU) key, its first bytes
VALUE = np.dtype(abi.FlowStats)
# keys compare as their bytes (numpy sorts and searches void arrays by memcmp)
KEY = np.dtype((np.void, KEY_SIZE))
FLOW = np.dtype((np.void, FLOW_SIZE))
FLOW_FIELDS = np.dtype(abi.FlowKey)
_COMM = VALUE.fields["app_comm"][1]   # its offset: the field's own dtype is awkward (S1 x 16)
_FLOW_STRUCT = struct.Struct("16s16sHHBBH")


@dataclass(frozen=True)
class FlowArrays:
    """Entries of the flow map: KEY keys and VALUE values, row for row."""
    keys: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_raw(cls, batches) -> "FlowArrays":
        """From (keys, values, count) batches of packed entries (BpfMap.raw_batches)."""
        keys, values = [], []
        for kbuf, vbuf, n in batches:
            keys.append(np.frombuffer(kbuf, dtype=KEY, count=n))
            values.append(np.frombuffer(vbuf, dtype=VALUE, count=n))
        if not keys:
            return cls(np.empty(0, KEY), np.empty(0, VALUE))
        return cls(np.concatenate(keys), np.concatenate(values))

    @classmethod
    def of_entries(cls, entries: dict) -> "FlowArrays":
        """From a TraceSample's entries ((FlowId, CPU) -> FlowCpuSample), as the map held them:
        what the unit tests' tracers give."""
        keys, values = bytearray(), bytearray()
        for (flow, cpu), s in entries.items():
            keys += pack_key(flow, cpu)
            values += bytes(pack_value(s))
        return cls(np.frombuffer(bytes(keys), dtype=KEY).copy(),
                   np.frombuffer(bytes(values), dtype=VALUE).copy())

    def comms(self) -> np.ndarray:
        """Each row's reader comm, as 16 bytes."""
        raw = self.values.view(np.uint8).reshape(len(self), VALUE.itemsize)
        return np.ascontiguousarray(raw[:, _COMM:_COMM + 16]).view("S16").ravel()


def flows_of(keys: np.ndarray) -> np.ndarray:
    """The flow part (FLOW) of KEY keys."""
    raw = keys.view(np.uint8).reshape(len(keys), KEY_SIZE)
    return np.ascontiguousarray(raw[:, :FLOW_SIZE]).view(FLOW).ravel()


def cpus_of(keys: np.ndarray) -> np.ndarray:
    return keys.view(np.dtype(abi.FlowCpuKey))["cpu"].astype(np.int64)


_MIX = np.uint64(0x9E3779B97F4A7C15)   # the golden ratio's 64-bit multiplier (Fibonacci hashing)


def flow_hashes(flows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each FLOW flow, for sets where two flows in 2^64 may count as one (as a
    Python hash would): numbers sort and search several times faster than 40-byte keys."""
    words = flows.view(np.uint64).reshape(len(flows), FLOW_SIZE // 8)
    h = np.zeros(len(flows), np.uint64)
    with np.errstate(over="ignore"):
        for i in range(words.shape[1]):
            h = (h ^ words[:, i]) * _MIX
            h ^= h >> np.uint64(29)
    return h


def flow_fields(flows: np.ndarray) -> np.ndarray:
    """FLOW flows as FlowKey records: saddr, daddr, sport, dport, proto, family."""
    return flows.view(FLOW_FIELDS)


def flow_id(flow: np.void | bytes) -> FlowId:
    saddr, daddr, sport, dport, proto, family, _ = _FLOW_STRUCT.unpack(bytes(flow))
    return FlowId(proto_name(proto), address_text(saddr, family), sport,
                  address_text(daddr, family), dport)


def pack_key(flow: FlowId, cpu: int) -> bytes:
    family = socket.AF_INET6 if ":" in flow.src or ":" in flow.dst else socket.AF_INET
    width = 16 if family == socket.AF_INET6 else 4
    k = abi.FlowCpuKey(cpu=cpu)
    k.flow.saddr[:width] = socket.inet_pton(family, flow.src)
    k.flow.daddr[:width] = socket.inet_pton(family, flow.dst)
    k.flow.sport, k.flow.dport = flow.sport, flow.dport
    k.flow.proto = PROTO_NUMBERS.get(flow.proto, 0)
    k.flow.family = 6 if family == socket.AF_INET6 else 4   # as flowtrace.h numbers them
    return bytes(k)


def pack_value(s: FlowCpuSample) -> abi.FlowStats:
    v = abi.FlowStats()
    for name, _ in abi.FlowStats._fields_:
        if name == "app_comm":
            v.app_comm = s.app_comm.encode()[:15]
        elif name == "app_cgroup":
            v.app_cgroup = s.app_cgroup
        elif hasattr(s, name) and isinstance(getattr(s, name), int):
            setattr(v, name, getattr(s, name))
    return v
