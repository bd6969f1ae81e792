"""Kubernetes' own rules for what a ScaleTrainJob passes into its Service, Job and pods.

The CRD cannot hold all of them (node selectors, resource names, mounts, names of other objects), and
the API server applies them only when the operator creates the Job: too late for `scaletrain validate`,
and then a refused Job (reason ChildRejected). The same rules here, from the apimachinery and core/v1
validation, let validate, render and the operator refuse such a spec up front, each with its field path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from scaletrain_trainer.contract.validation import PathPart, Problem

# The patterns of Kubernetes' names, as apimachinery's and core/v1's validation spell them.
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # Service names
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # volume names
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # claim names
ENV_VAR_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"  # a container's env
DATA_KEY = r"^[-._a-zA-Z0-9]+$"  # a key of a ConfigMap's or a Secret's data

DNS_SUBDOMAIN_MAX = 253
LABEL_MAX = 63
TOTAL_ANNOTATION_BYTES = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB
NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
QUANTITY = re.compile(r"([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")


def dns_subdomain(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (ServiceAccount, PriorityClass and claim names), or None."""
    if len(name) > DNS_SUBDOMAIN_MAX:
        return f"must be at most {DNS_SUBDOMAIN_MAX} characters"
    if not re.fullmatch(DNS_1123_SUBDOMAIN, name):
        return "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending alphanumeric"
    return None


def is_dns_label(name: object) -> bool:
    """A DNS-1123 label (namespace, container and volume names): at most 63 of a-z, 0-9 and '-', starting
    and ending alphanumeric."""
    return isinstance(name, str) and len(name) <= LABEL_MAX and re.fullmatch(DNS_1123_LABEL, name) is not None


def qualified_name(key: str) -> str | None:
    """Why `key` is not a qualified name ([prefix/]name, as label and annotation keys), or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (problem := dns_subdomain(prefix)):
        return f"prefix {problem}"
    if not name or len(name) > LABEL_MAX or not re.fullmatch(NAME_PART, name):
        return (
            f"must be a qualified name: an optional DNS prefix and '/', then at most {LABEL_MAX} characters "
            "of letters, digits, '-', '_' and '.', starting and ending alphanumeric"
        )
    return None


def label_value(value: str) -> str | None:
    if len(value) > LABEL_MAX or not re.fullmatch(f"({NAME_PART})?", value):
        return (
            f"must be a label value: at most {LABEL_MAX} characters of letters, digits, '-', '_' and '.', "
            "starting and ending alphanumeric (or empty)"
        )
    return None


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity's value ("500m" is 0.5, "2Gi" 2147483648); ValueError when not one."""
    match = QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(text)
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(text) from None
    if suffix[:1] in ("e", "E"):
        return value * Decimal(10) ** int(suffix[1:])
    return value * Decimal(SUFFIXES[suffix])


def labels_problems(labels: Mapping[str, Any], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """Each key a qualified name, each value a label value; reported at the map with the key named, as
    the API server reports them."""
    for key, value in labels.items():
        if problem := qualified_name(str(key)):
            yield Problem(where, f"{key!r}: key {problem}")
        elif not isinstance(value, str):
            yield Problem(where, f"{key!r}: the value must be a string")
        elif problem := label_value(value):
            yield Problem(where, f"{key!r}: {value!r} {problem}")


def annotations_problems(annotations: Mapping[str, Any], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    for key in annotations:
        if problem := qualified_name(str(key)):
            yield Problem(where, f"{key!r}: key {problem}")
    size = sum(len(str(key)) + len(str(value)) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_BYTES:
        yield Problem(where, f"{size} bytes in all; annotations may hold at most {TOTAL_ANNOTATION_BYTES}")


def metadata_problems(metadata: Any, where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """Labels and annotations of an object's metadata (a mapping; anything else is for the caller)."""
    if not isinstance(metadata, Mapping):
        return
    for field, check in (("labels", labels_problems), ("annotations", annotations_problems)):
        value = metadata.get(field)
        if isinstance(value, Mapping):
            yield from check(value, (*where, field))
        elif value is not None:
            yield Problem((*where, field), "must be a mapping of strings")


def resources_problems(sections: Mapping[str, Mapping[str, str]], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """Resource names, non-negative amounts, and requests no larger than limits."""
    amounts: dict[str, dict[str, Decimal]] = {}
    for section, values in sections.items():
        for name, text in values.items():
            at = (*where, section, name)
            if "/" not in name and name not in STANDARD_RESOURCES and not name.startswith("hugepages-"):
                yield Problem(at, f"{name} is not a standard resource (cpu, memory, ephemeral-storage, hugepages-*); "
                                  "an extended one needs a domain, e.g. example.com/device")  # fmt: skip
                continue
            if problem := qualified_name(name):
                yield Problem(at, f"resource name {problem}")
                continue
            amount = parse_quantity(text)
            if amount < 0:
                yield Problem(at, f"{text} is negative; a resource amount must be 0 or more")
            amounts.setdefault(section, {})[name] = amount
    for name, requested in amounts.get("requests", {}).items():
        limit = amounts.get("limits", {}).get(name)
        if limit is not None and requested > limit:
            message = f"{sections['requests'][name]} is more than limits.{name} ({sections['limits'][name]})"
            yield Problem((*where, "requests", name), message + "; a request must be at most its limit")


def mounts_problems(mounts: Iterable[Mapping[str, Any]], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """Each mountPath once; a subPath relative and inside its volume (core/v1 VolumeMounts, as mappings)."""
    mounts = list(mounts)
    yield from repeated_mount_paths([mount["mountPath"] for mount in mounts], where)
    for index, mount in enumerate(mounts):
        sub_path = mount.get("subPath") or ""
        if sub_path.startswith("/") or ".." in sub_path.split("/"):
            yield Problem((*where, index, "subPath"), "must be a relative path without '..'")


def repeated_mount_paths(paths: Iterable[Any], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """One container's volumeMounts by their mountPath (WHERE: the list's path): each path once, as the API
    server requires."""
    seen: set[str] = set()
    for index, path in enumerate(paths):
        if not isinstance(path, str):
            continue
        if (path.rstrip("/") or "/") in seen:
            yield Problem((*where, index, "mountPath"), f"{path} is mounted twice; mount each path once")
        seen.add(path.rstrip("/") or "/")


def name_problems(names: Mapping[str, str | None]) -> Iterator[Problem]:
    """Names of other objects the pods refer to, each a DNS subdomain."""
    for field, name in names.items():
        if name is not None and (problem := dns_subdomain(name)):
            yield Problem((field,), problem)


def volume_source_problems(volume: Mapping[str, Any], where: tuple[PathPart, ...]) -> Iterator[Problem]:
    """The object a volume names (a claim, a ConfigMap, a Secret) must have a valid name."""
    for source, field in (("persistentVolumeClaim", "claimName"), ("configMap", "name"), ("secret", "secretName")):
        named = volume.get(source)
        if not isinstance(named, Mapping) or field not in named:
            continue
        value = named[field]
        if not isinstance(value, str) or (problem := dns_subdomain(value)):
            yield Problem((*where, source, field), problem if isinstance(value, str) else "must be a string")
