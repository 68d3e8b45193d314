"""Files root writes and removes where others might have been first.

steer runs as root. A directory it keeps state in (its pins under bpffs, its restore state) is
trusted only when root made it so that nobody else could write there: owned by root (or by the
user running steer), a real directory and not a link, writable by its owner alone. Removal goes
through directory fds opened without following links, so a link planted inside never takes a
removal elsewhere. Files are written under a fresh name made with O_EXCL and renamed into place.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile

from steer.kernel.errors import KernelError


class UnsafePath(KernelError):
    """A path steer will not trust with root's writes; str() says why and what to do."""


def trusted_dir(path: str, create: bool = True) -> bool:
    """Check that PATH is a directory nobody but root (or this user) could have written to; with
    CREATE, make it (mode 0700) when missing. Returns whether it exists; raises UnsafePath."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    fix = f"remove it (rm -r {path}) and run steer again"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory but a {'link' if stat.S_ISLNK(st.st_mode) else 'file'}: "
                         f"steer does not follow it; {fix}")
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafePath(f"{path} belongs to uid {st.st_uid}, not root: whoever made it could "
                         f"place files there that steer would read or remove; {fix}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(f"{path} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
                         f"(mode {stat.S_IMODE(st.st_mode):04o}); chmod go-w {path}, or {fix}")
    return True


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def remove_tree(path: str, first: str = "") -> bool:
    """Remove directory PATH and everything in it without following a link anywhere: a link is
    removed, never its target. Entries whose name starts with FIRST go first (a pinned XDP link
    detaches before the maps it uses). Returns whether PATH existed."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        pfd = _open_dir(parent or ".")
    except FileNotFoundError:
        return False
    try:
        try:
            fd = _open_dir(name, pfd)
        except FileNotFoundError:
            return False
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=pfd)   # a link (or a file) where a directory was: only it goes
            return True
        try:
            _empty(fd, first)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=pfd)
    finally:
        os.close(pfd)
    return True


def _empty(fd: int, first: str) -> None:
    for entry in sorted(os.listdir(fd), key=lambda n: not (first and n.startswith(first))):
        try:
            sub = _open_dir(entry, fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(entry, dir_fd=fd)   # a file, a pin or a link: unlink never follows
            continue
        try:
            _empty(sub, first)
        finally:
            os.close(sub)
        os.rmdir(entry, dir_fd=fd)


def write_atomically(path: str, text: str | bytes, mode: int = 0o644) -> None:
    """Write TEXT (str or bytes) to PATH through a new file of an unpredictable name in PATH's directory (made
    with O_EXCL), renamed over PATH: a reader sees the old file or the new one, and a link planted
    at any name steer could guess is never written through."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: str, data, indent: int | None = 1) -> None:
    write_atomically(path, json.dumps(data, indent=indent))
