"""YAML documents read as the Kubernetes API reads them, with the API server's limits.

PyYAML implements YAML 1.1, where `3e-4` (no dot) is a string; Kubernetes' YAML reader takes it as a
number, and so do users who write `lr: 3e-4`. With strict types a string would be refused, so the
reader here resolves such numbers as Kubernetes does. A document larger than the API server takes, or
nested deeper than any real one, is refused before it is parsed further.
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO, TextIO

import yaml

MAX_DOCUMENT_BYTES = 3 * 1024 * 1024  # the API server's limit on a request body (about 3 MB)
MAX_DEPTH = 100  # nested mappings and lists; a real ScaleTrainJob has about 10
# Numbers with an exponent but no dot, or no sign in the exponent: floats in Kubernetes' YAML, strings in 1.1.
EXPONENT_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$")


class DocumentError(ValueError):
    """A document that cannot be read; the message says where and why."""


class KubernetesLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser when there is one
    """yaml.SafeLoader plus the numbers Kubernetes' YAML reader accepts (EXPONENT_FLOAT), and mappings
    keyed by strings only, as JSON's are: Kubernetes reads YAML by converting it to JSON, so `1: x` is
    {"1": "x"} and `true: x` is {"true": "x"}."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        self.flatten_mapping(node)  # merge keys (<<)
        mapping = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "a key must be a scalar", key_node.start_mark
                )
            # Keyed by the JSON spelling as each key is read: in Python, the keys 1 and true would be one.
            mapping[json_key(self.construct_object(key_node))] = self.construct_object(value_node, deep=deep)
        return mapping


def json_key(key: Any) -> str:
    """A YAML mapping key as Kubernetes' YAML-to-JSON conversion spells it."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


KubernetesLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+.0123456789"))


def load_documents(text: str, origin: str) -> list[Any]:
    """The non-empty YAML (or JSON) documents in `text`; DocumentError naming `origin`, the line and
    column for a syntax error."""
    size = len(text.encode("utf-8"))
    if size > MAX_DOCUMENT_BYTES:
        raise DocumentError(
            f"{origin}: {size} bytes; the API server takes at most {MAX_DOCUMENT_BYTES} bytes per object"
        )
    try:
        check_depth(text, origin)
        return [document for document in yaml.load_all(text, Loader=KubernetesLoader) if document is not None]
    except yaml.YAMLError as error:
        raise DocumentError(f"{origin}: not valid YAML: {error}") from None


def check_depth(text: str, origin: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, from the parser's events as they come: building the
    objects first would take a long time and end in a RecursionError."""
    depth = 0
    for event in yaml.parse(text, Loader=KubernetesLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}"
                raise DocumentError(f"{origin}: nested more than {MAX_DEPTH} levels deep at {where}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_bounded(stream: BinaryIO | TextIO, origin: str) -> str:
    """At most MAX_DOCUMENT_BYTES of `stream` (bytes as UTF-8, or text): a larger input is refused
    without reading it all."""
    data = stream.read(MAX_DOCUMENT_BYTES + 1)
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"{origin}: over {MAX_DOCUMENT_BYTES} bytes; the API server takes at most that per object")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DocumentError(f"{origin}: not UTF-8: {error}") from None
