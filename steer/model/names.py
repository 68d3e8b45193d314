"""Names that come from the host or the command line: process names, devices, namespaces.

Anyone on the host picks a process's name (prctl, the name of the binary), a network
namespace's (a file under /run/netns) and, with CAP_NET_ADMIN in any namespace, a device's. So
a name is shown as text with its control characters escaped (never as terminal markup or raw
escape sequences), checked against the kernel's own rules before it reaches a path, and
encoded before it becomes part of a file name.
"""
from __future__ import annotations

import re

IFNAMSIZ = 16             # the kernel's limit, the terminating NUL included
NETNS_NAME_MAX = 255      # a file name under /run/netns

# C0, DEL, C1, the format characters that reorder or hide text (bidi overrides, zero width,
# tags), the line and paragraph separators, and lone surrogates (a name's bytes that were not
# UTF-8, as Python decodes file names): a terminal acts on them, a reader cannot see them, or a
# UTF-8 encoder refuses them
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069"
                         "\ud800-\udfff\ufeff\U000e0000-\U000e007f]")


def printable(name: str) -> str:
    """NAME with every character a terminal would act on written as \\xNN or \\uNNNN."""
    def escape(m: re.Match) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"
    return _UNSHOWABLE.sub(escape, name)


def ifname_error(name: str) -> str | None:
    """Why NAME cannot be a network device's name (the kernel's dev_valid_name), or None."""
    if not name:
        return "empty"
    if len(name.encode()) >= IFNAMSIZ:
        return f"longer than {IFNAMSIZ - 1} bytes"
    if name in (".", ".."):
        return f"{name!r} is not a device name"
    bad = next((c for c in name if c in "/:" or c.isspace() or _UNSHOWABLE.match(c)), None)
    if bad is not None:
        return f"holds {printable(repr(bad))}, which no device name may"
    return None


def netns_error(name: str) -> str | None:
    """Why NAME cannot be a named network namespace (a file in /run/netns), or None."""
    if not name:
        return "empty"
    if len(name.encode()) > NETNS_NAME_MAX:
        return f"longer than {NETNS_NAME_MAX} bytes"
    if name in (".", "..") or "/" in name or "\0" in name:
        return f"{printable(repr(name))} is not a file name"
    return None


def file_part(name: str) -> str:
    """NAME as one part of a file name: letters, digits, '.', '_' and '-' as they are, every other
    byte as %XX, so that two names never give the same part and no part holds '/' or '@'."""
    out = []
    for b in name.encode():
        c = chr(b)
        out.append(c if c.isascii() and (c.isalnum() or c in "._-") and not (c == "." and not out)
                   else f"%{b:02X}")
    return "".join(out)

