"""A container's filesystem, made in a mount namespace of its own, then its command:
`python -I -S container_root.py LAYOUT_JSON COMMAND...` (the pod executor's pod_filesystem.py writes
LAYOUT_JSON). Root only; the standard library only, as it runs isolated (-I -S) before the command.

In a new mount namespace (nothing mounted in it reaches this machine), as a container
runtime makes a container's root:

- the root is an overlay: this machine's root filesystem as the image below, the container's own
  writable layer above (a directory of the pod's), so a write outside the volumes lands in the pod's
  directory, never in this machine's files;
- this machine's other mounts (the interpreter's, the packages', the pod network's /etc/hosts) are
  bound in read-only, except /proc (bound as it is), /dev (the container's own) and /tmp (an overlay
  too: this machine's /tmp below, a writable layer of the container's own above, whether or not /tmp
  is a filesystem of its own here);
- /dev is a tmpfs with the devices a container gets (null, zero, full, random, urandom, tty, a
  devpts of its own) and the accelerators' (nvidia*, dri, infiniband), and /dev/shm a tmpfs of its
  own of the size the layout says (a memory-backed emptyDir's sizeLimit);
- the directories `hidden` (the executor's root, with every pod's files) are covered by an empty
  read-only tmpfs;
- each volume is bound at its mountPath (read-only where the mount says), and the termination
  message file at its terminationMessagePath;
- then chroot, the working directory (made if missing, as the runtime makes it), and exec.

A failure to make any of it is written to stderr (the container's log) and exits START_ERROR_EXIT_CODE,
before the command runs. Not a security boundary: the processes share this machine's PID namespace
and run as root, so /proc/1/root still leads to this machine's root.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_SLAVE = 0x20, 0x1000, 0x4000, 0x80000
LOCKED_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}  # kept when made read-only
OWN_TREES = ("/proc", "/dev", "/tmp")  # made here, not bound from this machine
NOT_BOUND_TYPES = ("nsfs",)  # namespace files (/run/netns/POD): a bound copy would keep another pod's network
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # what runc gives every container
ACCELERATOR_DEVICES = ("nvidia", "dri", "infiniband")  # names starting so: what device plugins add
DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}
MAX_SYMLINKS = 40  # in one path, as the kernel follows them
START_ERROR_EXIT_CODE = 128  # as the executor reports a command that cannot be started

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(OSError):
    """A step of making the container's filesystem failed; the message names it."""


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2); an error names the source and the target as `target` is given."""

    def encoded(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    if _libc.mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data)) != 0:
        raise SetupError(f"mount {source or fstype} on {target}: {os.strerror(ctypes.get_errno())}")


def unshare_mounts() -> None:
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise SetupError(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    # Nothing mounted here propagates out; this machine's unmounts (a pod network's `ip netns del`)
    # still propagate in, so no copy of a mount here outlives the original.
    mount(None, "/", None, MS_REC | MS_SLAVE)


def host_mounts() -> list[tuple[str, int]]:
    """This namespace's mount points to bind (not / nor namespace files), with the options to keep:
    parents before children."""
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            path = re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape.group(1), 8)), fields[4])  # " " is \040
            fstype = fields[fields.index("-") + 1]
            flags = sum(flag for name, flag in LOCKED_OPTIONS.items() if name in fields[5].split(","))
            if path != "/" and fstype not in NOT_BOUND_TYPES:
                found.append((path, flags))
    return sorted(found, key=lambda mount_point: mount_point[0].count("/"))  # stable: over-mounts stay in order


def under(path: str, trees: list[str]) -> bool:
    return any(path == tree or path.startswith(tree.rstrip("/") + "/") for tree in trees)


class Root:
    """The container's root directory, as this machine sees it before the chroot; paths are the container's."""

    def __init__(self, directory: str):
        self.directory = directory

    def at(self, path: str) -> str:
        """The container's `path` as this machine sees it, its symbolic links followed inside the root as
        the container's kernel follows them after the chroot (`/var/run` -> `/run` is the container's
        /run, not this machine's)."""
        resolved: list[str] = []
        pending = [part for part in path.split("/") if part not in ("", ".")]
        links = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                resolved = resolved[:-1]
                continue
            candidate = "/".join([self.directory, *resolved, part])
            if not os.path.islink(candidate):
                resolved.append(part)
                continue
            links += 1
            if links > MAX_SYMLINKS:
                raise SetupError(f"{path}: too many levels of symbolic links")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            pending = [part for part in target.split("/") if part not in ("", ".")] + pending
        return "/".join([self.directory, *resolved])

    def mount(self, fstype: str, path: str, flags: int, data: str) -> None:
        os.makedirs(self.at(path), exist_ok=True)
        try:
            mount(fstype, self.at(path), fstype, flags, data)
        except SetupError as error:
            raise SetupError(str(error).replace(self.at(path), path)) from None

    def bind(self, source: str, path: str, read_only: bool, flags: int = 0, recursive: bool = False) -> None:
        """`source` of this machine at `path`: a directory, or a file on an empty file made for it."""
        target = self.at(path)
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                open(target, "w").close()
        try:
            mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
            if read_only:
                mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except SetupError as error:
            raise SetupError(str(error).replace(target, path)) from None


def make_dev(root: Root, shm_size: str) -> None:
    root.mount("tmpfs", "/dev", MS_NOSUID, "mode=755,size=65536k")
    for name in sorted(os.listdir("/dev")):
        source = "/dev/" + name
        if name in DEVICES or name.startswith(ACCELERATOR_DEVICES):
            if stat.S_ISCHR(os.stat(source).st_mode) or os.path.isdir(source):
                root.bind(source, source, read_only=False, recursive=True)
    for name, target in DEVICE_LINKS.items():
        os.symlink(target, root.at("/dev/" + name))
    root.mount("devpts", "/dev/pts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    root.mount("tmpfs", "/dev/shm", MS_NOSUID | MS_NODEV, f"mode=1777,size={shm_size}")


def make_root(layout: dict) -> None:
    """The container's filesystem at layout["root"], per the module's docstring."""
    root, hidden = Root(layout["root"]), layout["hidden"]
    mounts = host_mounts()
    mount(
        "overlay", root.directory, "overlay", 0, f"lowerdir=/,upperdir={layout['layer']},workdir={layout['layerWork']}"
    )
    for path, flags in mounts:
        if not under(path, [*OWN_TREES, *hidden]) and os.path.lexists(root.at(path)):
            root.bind(path, path, read_only=True, flags=flags)
    root.bind("/proc", "/proc", read_only=False, recursive=True)
    make_dev(root, layout["shmSize"])
    root.mount("overlay", "/tmp", 0, f"lowerdir=/tmp,upperdir={layout['tmpLayer']},workdir={layout['tmpLayerWork']}")
    for path in hidden:
        if os.path.isdir(root.at(path)):
            root.mount("tmpfs", path, MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    for volume in sorted(layout["volumes"], key=lambda volume: volume["path"].count("/")):
        root.bind(volume["source"], volume["path"], volume["readOnly"], recursive=True)


def enter(layout: dict) -> None:
    """Make the container's filesystem and enter it, in its working directory."""
    unshare_mounts()
    make_root(layout)
    os.chroot(layout["root"])  # its directory on this machine
    os.makedirs(layout["workingDir"], exist_ok=True)
    os.chdir(layout["workingDir"])


def main(argv: list[str]) -> None:
    command = argv[2:]
    try:
        enter(json.loads(argv[1]))
    except OSError as error:
        fail(f"cannot make the container's filesystem: {error}")
    try:
        os.execvp(command[0], command)  # on the container's PATH, in its filesystem
    except OSError as error:
        fail(f"exec {command[0]!r}: {error.strerror}")


def fail(message: str) -> None:
    print(f"scaletrain: {message}", file=sys.stderr, flush=True)
    sys.exit(START_ERROR_EXIT_CODE)


if __name__ == "__main__":
    main(sys.argv)
