"""Where checkpoint.dir's checkpoints live, and how one becomes complete: the two commit protocols.

A directory (`LocalDirectory`) has an atomic rename: a checkpoint is written to step-N.partial, verified,
and renamed to step-N, so step-N exists only once it is complete.

An object store (`ObjectPrefix`: s3:// and the other fsspec URLs) has none: a "rename" copies every object,
and a prefix exists as soon as its first object does. There a checkpoint is complete once its manifest
exists: the manifest, with every object's size and CRC-32, is written last, after the objects were read
back, and step-N without one is a save that never finished. Such a save's objects are removed by the next
save; they are never resumed from. Rewriting a step removes its manifest first, so that a crash meanwhile
leaves no manifest over objects it does not describe.

Both set a damaged checkpoint aside as step-N.corrupt (on an object store a server-side copy of its objects,
then their removal) and list only complete ones. The manager (training/checkpoint.py) decides what to
write, verify and keep; a store only answers for its own storage.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import zlib
from pathlib import Path

from fsspec import AbstractFileSystem
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter, StorageReader, StorageWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from ..contract.storage_urls import is_object_url
from . import objects

CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")
PARTIAL_SUFFIX = ".partial"
CORRUPT_SUFFIX = ".corrupt"
MANIFEST = "manifest.json"
CHUNK_BYTES = 1 << 22
# Files each rank writes at once to an object store (DCP's thread_count): one upload at a time leaves the
# link idle while a part is being signed and answered.
OBJECT_WRITE_THREADS = 4

Checksum = dict[str, int]  # {"bytes": size, "crc32": CRC-32}


def checkpoint_store(directory: str) -> CheckpointStore:
    """The store of checkpoint.dir."""
    return ObjectPrefix(directory) if is_object_url(directory) else LocalDirectory(directory)


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def checkpoint_names(names: list[str]) -> list[str]:
    """The checkpoint names among `names`, oldest first."""
    found = [(int(match.group(1)), name) for name in names if (match := CHECKPOINT_NAME.match(name))]
    return [name for _, name in sorted(found)]


class LocalDirectory:
    """Checkpoints in a directory: written as step-N.partial, renamed to step-N when complete."""

    def __init__(self, directory: str):
        self.root = Path(directory)

    def __str__(self) -> str:
        return str(self.root)

    def location(self, name: str) -> str:
        return str(self.root / name)

    def completed(self) -> list[str]:
        """Complete checkpoints' names, oldest first."""
        if not self.root.is_dir():
            return []
        return checkpoint_names([path.name for path in self.root.iterdir()])

    def writing_location(self, name: str) -> str:
        """Where the ranks write `name` until it is committed."""
        return self.location(name + PARTIAL_SUFFIX)

    def start_writing(self, name: str) -> None:
        """Rank 0, before a save: remove what crashed saves left, and make the partial directory."""
        for stale in self.root.glob(f"*{PARTIAL_SUFFIX}"):
            shutil.rmtree(stale, ignore_errors=True)
        Path(self.writing_location(name)).mkdir(parents=True)

    def write_text(self, location: str, file_name: str, text: str) -> None:
        (Path(location) / file_name).write_text(text)

    def read_text(self, location: str, file_name: str) -> str:
        """Raises FileNotFoundError when there is no such file."""
        return (Path(location) / file_name).read_text()

    def files(self, location: str) -> list[str]:
        return sorted(path.name for path in Path(location).iterdir() if path.is_file())

    def checksum(self, location: str, file_name: str) -> Checksum | None:
        try:
            with (Path(location) / file_name).open("rb") as file:
                return _checksum_of(file)
        except FileNotFoundError:
            return None

    def commit(self, name: str, manifest: str) -> None:
        """Rank 0: the manifest into the partial directory, then the rename that makes it complete."""
        partial, final = Path(self.writing_location(name)), Path(self.location(name))
        (partial / MANIFEST).write_text(manifest)
        if final.exists():  # written by an earlier run of this job that was not resumed from it
            shutil.rmtree(final)
        partial.rename(final)

    def visible(self, name: str) -> bool:
        return Path(self.location(name)).is_dir()

    def set_aside(self, name: str) -> str:
        aside = _free_aside_name(name, lambda candidate: (self.root / candidate).exists())
        (self.root / name).rename(self.root / aside)
        return aside

    def remove(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def writer(self, location: str) -> StorageWriter:
        return FileSystemWriter(location)

    def reader(self, location: str) -> StorageReader:
        return FileSystemReader(location)


class ObjectPrefix:
    """Checkpoints under an object-store prefix: step-N is complete once step-N/manifest.json exists."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.options = objects.storage_options(self.url)
        self.fs: AbstractFileSystem
        self.fs, self.path = objects.filesystem(self.url)

    def __str__(self) -> str:
        return self.url

    def location(self, name: str) -> str:
        return f"{self.url}/{name}"

    def completed(self) -> list[str]:
        return [name for name in checkpoint_names(self._names()) if self._committed(name)]

    def writing_location(self, name: str) -> str:
        return self.location(name)  # no rename on an object store: the manifest, written last, commits

    def start_writing(self, name: str) -> None:
        """Rank 0, before a save: remove the objects of every save that never finished, and those of an
        earlier checkpoint of this step (its manifest first)."""
        for other in checkpoint_names(self._names()):
            if other == name or not self._committed(other):
                self.remove(other)

    def write_text(self, location: str, file_name: str, text: str) -> None:
        self.fs.pipe_file(self._key(location, file_name), text.encode())

    def read_text(self, location: str, file_name: str) -> str:
        return self.fs.cat_file(self._key(location, file_name)).decode()

    def files(self, location: str) -> list[str]:
        listed = self.fs.ls(self._key(location), detail=True)
        return sorted(entry["name"].rsplit("/", 1)[-1] for entry in listed if entry["type"] == "file")

    def checksum(self, location: str, file_name: str) -> Checksum | None:
        try:
            with self.fs.open(self._key(location, file_name), "rb", block_size=objects.BLOCK_BYTES) as file:
                return _checksum_of(file)
        except FileNotFoundError:
            return None

    def commit(self, name: str, manifest: str) -> None:
        self.write_text(self.location(name), MANIFEST, manifest)

    def visible(self, name: str) -> bool:
        return self._committed(name)

    def set_aside(self, name: str) -> str:
        aside = _free_aside_name(name, lambda candidate: self.fs.exists(f"{self.path}/{candidate}"))
        self.fs.copy(f"{self.path}/{name}", f"{self.path}/{aside}", recursive=True)
        self.remove(name)
        return aside

    def remove(self, name: str) -> None:
        """The manifest first: a checkpoint being removed is never taken for a complete one. Deleting a key that
        is not there succeeds on S3, so neither is looked up first."""
        self.fs.rm_file(self._key(self.location(name), MANIFEST))
        with contextlib.suppress(FileNotFoundError):  # no other object under it
            self.fs.rm(f"{self.path}/{name}", recursive=True)

    def writer(self, location: str) -> StorageWriter:
        # No fsync: an object exists, whole and durable, once its upload is answered.
        return FsspecWriter(location, sync_files=False, thread_count=OBJECT_WRITE_THREADS, **self.options)

    def reader(self, location: str) -> StorageReader:
        return FsspecReader(location, **self.options)

    def _names(self) -> list[str]:
        try:
            return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(self.path, detail=False)]
        except FileNotFoundError:  # nothing written under the prefix yet
            return []

    def _committed(self, name: str) -> bool:
        return self.fs.exists(self._key(self.location(name), MANIFEST))

    def _key(self, location: str, file_name: str = "") -> str:
        """`location` (a URL of this store) as the file system's path, with `file_name` under it."""
        path = self.path + location[len(self.url) :]
        return f"{path}/{file_name}" if file_name else path


def _checksum_of(file) -> Checksum:
    crc, size = 0, 0
    while chunk := file.read(CHUNK_BYTES):
        crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return {"bytes": size, "crc32": crc}


def _free_aside_name(name: str, taken) -> str:
    """step-N.corrupt, or step-N.corrupt-2, ... when taken: kept for a post-mortem, out of the way of
    resuming and of pruning."""
    aside, copy = name + CORRUPT_SUFFIX, 1
    while taken(aside):
        copy += 1
        aside = f"{name}{CORRUPT_SUFFIX}-{copy}"
    return aside


CheckpointStore = LocalDirectory | ObjectPrefix
