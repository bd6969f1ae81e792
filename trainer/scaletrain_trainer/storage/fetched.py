"""A directory on object storage (a Hugging Face model's config and weights) copied to local disk, once per
machine, and checked against the store before use.

The copy is made by whichever process of the machine takes the lock first; the others wait for it (a lock
file, FETCH_TIMEOUT_S at most) and then use it. It is written to a partial directory and renamed into place
with the store's listing it was made from (each object's size and ETag): a later run uses it only while that
listing, and each local file's size, still match, and fetches anew otherwise, so a model re-uploaded to the same
prefix is never served stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from ..contract import wire
from . import objects

log = logging.getLogger(__name__)

DEFAULT_CACHE = "/tmp/scaletrain-models"
LISTING_FILE = ".scaletrain-listing.json"
FETCH_TIMEOUT_S = 3 * 3600  # a 70B model's 140 GB at 20 MB/s, with room to spare
LOCK_POLL_S = 0.5

Listing = dict[str, dict[str, object]]  # relative name -> {"bytes": size, "etag": ETag}


class FetchError(Exception):
    """The directory could not be fetched: a refusal, or nothing there."""


def fetched_directory(url: str) -> Path:
    """The local copy of the object-store directory `url`, fetched now unless an up-to-date copy exists."""
    fs, prefix = objects.filesystem(url)
    try:
        listing = _listing(fs, prefix)
    except Exception as error:
        if (what := objects.store_failure(error)) is None:
            raise
        raise FetchError(f"cannot list {objects.where(url)}: {what}") from None
    if not listing:
        raise FetchError(f"{objects.where(url)} holds no objects")
    cache = Path(os.environ.get(wire.MODEL_CACHE_ENV) or DEFAULT_CACHE)
    target = cache / hashlib.sha256(url.encode()).hexdigest()[:16]
    cache.mkdir(parents=True, exist_ok=True)
    with _machine_lock(target.with_suffix(".lock"), url):
        if not _up_to_date(target, listing):
            _fetch(fs, prefix, listing, target, url)
    return target


def _listing(fs, prefix: str) -> Listing:
    found = fs.find(prefix, detail=True)
    return {
        name[len(prefix) + 1 :]: {"bytes": int(info["size"]), "etag": str(info.get("ETag", ""))}
        for name, info in found.items()
        if info["type"] == "file"
    }


def _up_to_date(target: Path, listing: Listing) -> bool:
    try:
        kept = json.loads((target / LISTING_FILE).read_text())
    except (OSError, ValueError):
        return False
    if kept != listing:
        return False
    return all((target / name).is_file() and (target / name).stat().st_size == kept[name]["bytes"] for name in kept)


def _fetch(fs, prefix: str, listing: Listing, target: Path, url: str) -> None:
    partial = target.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    try:
        for name in listing:
            (partial / name).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{prefix}/{name}", str(partial / name))
    except Exception as error:
        if (what := objects.store_failure(error)) is None:
            raise
        raise FetchError(f"cannot fetch {objects.where(url)}: {what}") from None
    wrong = [name for name, entry in listing.items() if (partial / name).stat().st_size != entry["bytes"]]
    if wrong:
        raise FetchError(f"{objects.where(url)}: {', '.join(wrong[:3])} arrived with another size than listed")
    (partial / LISTING_FILE).write_text(json.dumps(listing))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    total = sum(int(entry["bytes"]) for entry in listing.values())
    log.info("fetched %s (%.1f MB) to %s in %.1f s", url, total / 1e6, target, time.monotonic() - started)


@contextlib.contextmanager
def _machine_lock(path: Path, url: str) -> Iterator[None]:
    """An exclusive lock on `path` among this machine's processes, waited for FETCH_TIMEOUT_S at most; released
    when its file closes, a crashed holder's included."""
    with path.open("a") as file:
        deadline = time.monotonic() + FETCH_TIMEOUT_S
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FetchError(f"another process was still fetching {url} after {FETCH_TIMEOUT_S} s") from None
                time.sleep(LOCK_POLL_S)
        yield
