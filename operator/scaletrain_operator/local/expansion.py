"""`$(VAR)` references in a container's command, args and env values, expanded as the kubelet does.

A port of Kubernetes' third_party/forked/golang/expansion (Expand with MappingFuncFor), rule for rule:
`$(NAME)` becomes NAME's value when NAME is defined and stays as written when it is not; `$$` is an
escaped `$`; any other `$` (a bare `$VAR`, `${VAR}`, an unterminated `$(`, a `$` at the end) stays
as it is. The name is everything up to the first `)`, so nothing nests, and a value is never
expanded again.
"""

from __future__ import annotations

from collections.abc import Mapping

OPERATOR, OPENER, CLOSER = "$", "(", ")"


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with its `$(NAME)` references to `variables` replaced, by Kubernetes' rules."""
    out: list[str] = []
    checkpoint = cursor = 0
    while cursor < len(text):
        if text[cursor] == OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            following = text[cursor + 1]
            closer = text.find(CLOSER, cursor + 2) if following == OPENER else -1
            if closer != -1:
                name = text[cursor + 2 : closer]
                out.append(variables.get(name, f"{OPERATOR}{OPENER}{name}{CLOSER}"))
                cursor = closer
            else:  # `$$` is an escaped `$`; `$x` and an unterminated `$(` stay as written
                out.append(following if following == OPERATOR else OPERATOR + following)
                cursor += 1
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]
