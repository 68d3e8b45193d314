"""The receiving device's settings a sweep varies (`--pause`, `--offloads`): Ethernet flow control
(pause frames, which the NDM'13 follow-up swept on and off) and the offloads that decide how many
wire packets one skb carries up the stack (GRO, LRO) or leaves with (TSO, GSO).

A setting names only what it changes; every other feature stays as the sweep found it, so each
cell's device is "as found, plus its setting". Settings are applied with ethtool in the device's
network namespace, read back (a driver may accept a request and do something else), and the found
state is put back after the sweep.

The parsing and naming here are pure; only the functions that run ethtool touch the host.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import time

from steer.experiment.ethtool import ethtool

# the features a setting may name, with the names ethtool -k shows them by. gro-hw is the NIC's
# own aggregation (bnxt, mlx5, virtio-net's guest offloads): with it on, GRO off still gets
# aggregated packets
OFFLOADS = {"gro": "generic-receive-offload", "gro-hw": "rx-gro-hw", "lro": "large-receive-offload",
            "tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload"}
# ethtool -K takes the old short names, and a feature's own name for the newer ones
_SET_NAME = {"gro-hw": "rx-gro-hw"}
ON_OFF = ("on", "off")
# a pause or offload change may make the driver reset the device, and pause with autonegotiation
# renegotiates the link: a 40 GbE link takes a few seconds to come back
LINK_WAIT_SECONDS = 30.0


class SettingError(Exception):
    pass


def parse_pause(text: str) -> list[str]:
    """'on,off' -> ['on', 'off']: pause frames (rx and tx together) per setting, in sweep order."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or any(v not in ON_OFF for v in values) or len(set(values)) != len(values):
        raise ValueError(f"not a list of on and off: {text!r} (e.g. on,off)")
    return values


def parse_offloads(text: str) -> list[dict[str, str]]:
    """'gro=on+lro=on,gro=off+lro=off' -> [{'gro': 'on', 'lro': 'on'}, {'gro': 'off', ...}]: the
    settings in sweep order, each of one or more FEATURE=on|off joined by '+'."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        setting: dict[str, str] = {}
        for item in part.split("+"):
            name, sep, value = (x.strip().lower() for x in item.partition("="))
            if not sep or name not in OFFLOADS or value not in ON_OFF:
                raise ValueError(f"{item!r} is not FEATURE=on|off with a FEATURE of "
                                 f"{', '.join(OFFLOADS)} (e.g. gro=on,gro=off)")
            if name in setting:
                raise ValueError(f"{part!r} names {name} twice")
            setting[name] = value
        out.append(setting)
    if not out:
        raise ValueError(f"no setting in {text!r} (e.g. gro=on,gro=off)")
    if len({setting_key({"offloads": s}) for s in out}) != len(out):
        raise ValueError(f"a setting is given twice in {text!r}")
    return out


def settings_of(pause: list[str] | None, offloads: list[dict] | None) -> list[dict]:
    """Every device setting of a sweep, in the order the sweep runs them: [{}] when neither axis
    is swept; else each pause value with each offload setting."""
    return [{**({"pause": p} if p else {}), **({"offloads": o} if o else {})}
            for p, o in itertools.product(pause or [None], offloads or [None])]


def setting_key(setting: dict | None) -> str:
    """A setting as a string that is the same for equal settings (results.json cells, resume)."""
    return json.dumps(setting or {}, sort_keys=True)


def setting_label(setting: dict | None) -> str:
    """'pause on, gro off' ('as found': no setting swept)."""
    if not setting:
        return "as found"
    parts = [f"pause {setting['pause']}"] if "pause" in setting else []
    parts += [f"{k} {v}" for k, v in (setting.get("offloads") or {}).items()]
    return ", ".join(parts)


def named_features(settings: list[dict]) -> list[str]:
    """The offload features any of SETTINGS names, in OFFLOADS order."""
    named = {f for s in settings for f in s.get("offloads") or {}}
    return [f for f in OFFLOADS if f in named]


def target_state(setting: dict, found: dict, settings: list[dict]) -> dict:
    """What the device should show in SETTING's cells: the state FOUND, with every feature the
    sweep names set as SETTING says or else as found (so that one setting's change does not carry
    over into the next), and pause as SETTING says where it is swept."""
    want: dict = {"offloads": {f: (setting.get("offloads") or {}).get(f, found["offloads"][f])
                               for f in named_features(settings)}}
    if any("pause" in s for s in settings):
        want["pause"] = setting.get("pause", found.get("pause"))
    return want


def differences(want: dict, state: dict) -> list[str]:
    """What STATE shows that WANT does not ask for, each as 'gro on (asked off)'."""
    out = [f"{f} {state['offloads'].get(f)} (asked {v})"
           for f, v in want.get("offloads", {}).items() if state["offloads"].get(f) != v]
    if "pause" in want and state.get("pause") != want["pause"]:
        out.append(f"pause {state.get('pause')} (asked {want['pause']})")
    return out


def recorded_state(device: dict | None) -> dict | None:
    """The state of a device as results.json's host.config recorded it before the sweep's first
    run (offloads 'on' / 'off [fixed]', pause as ethtool's JSON or why not): what the settings are
    checked against and what is put back, also when a resumed sweep finds the device as a killed
    one left it. Pause None, with why_no_pause, where the driver has none. None: not recorded."""
    offloads = (device or {}).get("offloads")
    if not isinstance(offloads, dict):
        return None
    state: dict = {"offloads": {f: v.split()[0] for f, v in offloads.items()},
                   "fixed": [f for f, v in offloads.items() if v.endswith("[fixed]")]}
    pause = device.get("pause")
    state["pause"] = _pause_value(pause) if isinstance(pause, dict) else None
    if state["pause"] is None:
        state["why_no_pause"] = pause or "not recorded"
    return state


# -- the host -------------------------------------------------------------------------------
def _pause_value(answer: dict) -> str:
    rx, tx = bool(answer.get("rx")), bool(answer.get("tx"))
    return "on" if rx and tx else "off" if not rx and not tx else f"rx {'on' if rx else 'off'}, tx {'on' if tx else 'off'}"


def read_state(dev: str, netns: str | None, pause: bool = True) -> dict:
    """DEV's offloads ({'gro': 'on', ...}), which of them its driver fixes, and its pause frames
    ('on', 'off', 'rx on, tx off'; None where the driver has none), by ethtool in the namespace
    at path NETNS. PAUSE: read pause too."""
    out, why = ethtool(["--json", "-k", dev], netns)
    if out is None:
        raise SettingError(f"{dev}: its offloads cannot be read: {why}")
    features = json.loads(out)[0]
    state: dict = {"offloads": {}, "fixed": []}
    for short, name in OFFLOADS.items():
        f = features.get(name) or {}
        state["offloads"][short] = "on" if f.get("active") else "off"
        if f.get("fixed"):
            state["fixed"].append(short)
    if pause:
        out, why = ethtool(["--json", "-a", dev], netns)
        answer = json.loads(out) if out else []
        state["pause"] = _pause_value(answer[0]) if answer else None
    return state


def setting_problems(dev: str, found: dict, settings: list[dict]) -> list[str]:
    """Why DEV (in state FOUND) cannot take SETTINGS: each a sentence ([]: none)."""
    out = []
    if any("pause" in s for s in settings) and found.get("pause") is None:
        out.append(f"--pause: {dev} has no Ethernet flow control to switch "
                   f"({found.get('why_no_pause')}); pause frames need a NIC that has them")
    for f in named_features(settings):
        asked = {(s.get("offloads") or {}).get(f, found["offloads"][f]) for s in settings}
        if f in found["fixed"] and asked != {found["offloads"][f]}:
            out.append(f"--offloads: {dev}'s driver fixes {f} {found['offloads'][f]}: it cannot "
                       f"be switched")
    return out


def _link_up(dev: str, netns: str | None) -> bool:
    from steer.kernel.namespaces import enter_netns
    r = subprocess.run(["ip", "-j", "link", "show", "dev", dev], capture_output=True, text=True,
                       preexec_fn=(lambda: enter_netns(netns)) if netns else None)
    try:
        link = json.loads(r.stdout)[0]
    except (ValueError, IndexError):
        return False
    # a veth or a tunnel says UNKNOWN when it cannot know; LOWER_UP is the carrier
    return link.get("operstate") in ("UP", "UNKNOWN") and "LOWER_UP" in link.get("flags", [])


def apply_state(dev: str, netns: str | None, want: dict, should_stop=lambda: False) -> dict:
    """Make DEV show WANT (target_state), wait for its link to come back, and return the state
    read back; SettingError when ethtool refuses or the driver shows something else."""
    now = read_state(dev, netns, pause="pause" in want)
    change = [x for f, v in want["offloads"].items() if now["offloads"][f] != v
              for x in (_SET_NAME.get(f, f), v)]
    if change:
        out, why = ethtool(["-K", dev, *change], netns)
        if out is None:
            raise SettingError(f"ethtool -K {dev} {' '.join(change)}: {why}")
    if "pause" in want and now.get("pause") != want["pause"]:
        on = want["pause"] == "on"
        out, why = ethtool(["-A", dev, "rx", "on" if on else "off", "tx", "on" if on else "off"],
                           netns)
        if out is None:
            raise SettingError(f"ethtool -A {dev}: {why}")
    end = time.monotonic() + LINK_WAIT_SECONDS
    while not _link_up(dev, netns):
        if should_stop():
            break
        if time.monotonic() > end:
            raise SettingError(f"{dev}'s link did not come back within {LINK_WAIT_SECONDS:.0f} s "
                               f"after its settings changed")
        time.sleep(0.2)
    state = read_state(dev, netns, pause="pause" in want)
    wrong = differences(want, state)
    if wrong:
        raise SettingError(f"{dev} shows {', '.join(wrong)}: its driver did not take the setting")
    return state
