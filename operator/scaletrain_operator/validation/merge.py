"""The podTemplate merge: the user's pod template under the rendered pod, the rendered value winning
every conflict (mappings by key, named lists by name, other lists of objects joined)."""

from __future__ import annotations

import copy
from typing import Any

# How podTemplate lists merge with the rendered ones: the key that identifies an item, and whether
# two items with the same key merge field by field (containers) or the rendered one replaces the
# template's (a merged env var could end up with both value and valueFrom, a volume with two sources).
LIST_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}
FIELD_BY_FIELD_LISTS = {"containers", "initContainers"}


def merge_under(base: Any, overlay: Any, field: str | None = None) -> Any:
    """Merge `overlay` (the rendered pod) over `base` (the user's podTemplate); overlay wins conflicts.

    Mappings merge key by key. Lists in LIST_MERGE_KEYS merge item by item on their key, base order
    first; other lists of mappings (tolerations, ...) are the union; other lists (command, args) are
    replaced. Neither input is modified.
    """
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = copy.deepcopy(base)
        for key, value in overlay.items():
            merged[key] = merge_under(base[key], value, key) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(overlay, list) and all(isinstance(i, dict) for i in base + overlay):
        key = LIST_MERGE_KEYS.get(field or "")
        if key and all(key in item for item in base + overlay):
            by_key = {item[key]: copy.deepcopy(item) for item in base}
            for item in overlay:
                same = by_key.get(item[key])
                deep = same is not None and field in FIELD_BY_FIELD_LISTS
                by_key[item[key]] = merge_under(same, item) if deep else copy.deepcopy(item)
            return list(by_key.values())
        return copy.deepcopy(base) + [copy.deepcopy(item) for item in overlay if item not in base]
    return copy.deepcopy(overlay)
