"""Object-storage URLs in the training config (checkpoint.dir, data.path, eval.path, the hf model's options): which
paths are ones, and what makes one malformed. The one rule, read by the config's validation (`scaletrain validate`,
the operator, the launcher) and by the trainer's storage code alike; torch-free, as the rest of contract/.

S3 (`s3://BUCKET/KEY`, on AWS or an S3-compatible store: spec.objectStorage) is the supported store; the other
fsspec stores below take the same path through the trainer, given their fsspec package in the image."""

from __future__ import annotations

import re

S3_SCHEME = "s3"
# fsspec's object stores other than S3: Google Cloud Storage (gcsfs) and Azure Blob Storage (adlfs).
OTHER_SCHEMES = ("gs", "gcs", "az", "abfs", "abfss")
SCHEMES = (S3_SCHEME, *OTHER_SCHEMES)
# Anything spelled like a URL: a malformed one (s4://, http://) is refused, not read as a local path.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<bucket>[^/?#]*)(?P<key>/[^?#]*)?(?P<rest>[?#].*)?$")
# What is meant as one, though malformed: a scheme and one slash (s3:/bucket), or no scheme (://bucket).
_URL_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/|.*://)")
# S3's rules for a bucket name (its general purpose buckets): 3 to 63 lowercase letters, digits, dots and hyphens,
# starting and ending with a letter or digit, no two dots in a row.
_S3_BUCKET = re.compile(r"^(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_object_url(path: str) -> bool:
    """Whether `path` names object storage (SCHEMES), rather than a file of the pod's."""
    match = _URL.match(path)
    return match is not None and match["scheme"] in SCHEMES


def object_url_problem(path: str, names_object: bool) -> str | None:
    """What is wrong with `path` as an object-storage URL, with the fix; None for a well-formed one and for a plain
    path. `names_object`: it must name an object (a data file), not a bucket or a prefix."""
    example = f"{S3_SCHEME}://BUCKET/" + ("KEY" if names_object else "PREFIX")
    match = _URL.match(path)
    if match is None:
        return f"not a URL of object storage: give {example} or a local path" if _URL_LIKE.match(path) else None
    scheme, bucket, key = match["scheme"], match["bucket"], (match["key"] or "").removeprefix("/")
    if scheme not in SCHEMES:
        return f"{scheme}:// is not object storage: give {example} (S3 or an S3-compatible store) or a local path"
    if match["rest"] is not None:
        return f"a query or fragment ({match['rest'][0]}...) is no part of an object's name: give {example}"
    if not bucket:
        return f"names no bucket: give {example}"
    if scheme == S3_SCHEME and not _S3_BUCKET.match(bucket):
        return (
            f"{bucket!r} is not an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting "
            "and ending with a letter or digit"
        )
    if "//" in f"/{key}".rstrip("/"):
        return f"an empty part (//) in its key: give {example}"
    if names_object and (not key or key.endswith("/")):
        return f"names a bucket or a prefix, not an object: give {example}"
    return None
