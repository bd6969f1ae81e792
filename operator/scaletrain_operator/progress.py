"""Reading rank 0's /progress endpoint: the operator copies it into status.progress, run-local draws it.
The same fields come from rank 0's termination message once the job succeeded (`final_progress`).

The endpoint is served by a pod, which runs the tenant's code: one read must not stall or break the
operator's pass over every job. So a read has one deadline for connecting and the whole answer, a
size cap, and takes only a JSON object whose fields have the expected types and ranges. A non-finite
number never gets through: Go's JSON decoder, and so the API server, refuses NaN in a status patch.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import urllib.parse
from http.client import HTTPException, HTTPResponse
from typing import Any

from .validation.progress_answer import Unreadable, parse_progress

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 64 * 1024  # headers and body; a real progress answer is ~300 bytes
CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([0-9]{1,9})[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


MAX_READS_AT_ONCE = 256  # connections a pass holds open at once (each for one deadline at most)


def read_progress(url: str, timeout_seconds: float) -> dict[str, Any] | None:
    """The progress at `url`, or None when it cannot be read within `timeout_seconds` in all (not up
    yet, gone, slow, oversized or garbled)."""
    (answer,) = read_all_progress([url], timeout_seconds)
    return None if isinstance(answer, Unreadable) else answer


def read_all_progress(urls: list[str], timeout_seconds: float) -> list[dict[str, Any] | Unreadable]:
    """The progress at each of `urls`, read at once (MAX_READS_AT_ONCE at a time), or why not. However
    the endpoints answer (slowly, at length, garbled, or not at all), the whole costs about one deadline
    per MAX_READS_AT_ONCE URLs: no endpoint's slowness delays another's read. A loop of its own, closed
    without waiting for name lookups still running in its threads (asyncio.run would wait): a slow DNS
    answer for a hostname URL does not stretch the pass."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_read_all(urls, timeout_seconds))
    finally:
        loop.close()


async def _read_all(urls: list[str], timeout_seconds: float) -> list[dict[str, Any] | Unreadable]:
    slots = asyncio.Semaphore(MAX_READS_AT_ONCE)

    async def read(url: str) -> dict[str, Any] | Unreadable:
        async with slots:
            try:
                body = await asyncio.wait_for(fetch(url), timeout_seconds)
                return parse_progress(body)
            except asyncio.TimeoutError:
                return Unreadable(f"no whole answer within {timeout_seconds} s")
            except (OSError, HTTPException, Unreadable, ValueError, RecursionError) as error:
                log.debug("no progress from %s: %s", url, error)
                return error if isinstance(error, Unreadable) else Unreadable(describe(error))

    return list(await asyncio.gather(*map(read, urls)))


def describe(error: Exception) -> str:
    """What went wrong, in words: "connection refused" rather than "[Errno 111] Connection refused"."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__  # a gaierror's errno is < 0
    return text[0].lower() + text[1:]


async def fetch(url: str) -> bytes:
    """The body of a GET of `url`: the whole answer, headers and body, within MAX_ANSWER_BYTES (the
    caller bounds the time). HTTP/1.0 with `Connection: close`: the answer ends when the server closes, or
    once its Content-Length has come (a server that keeps the connection open)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise Unreadable(f"not an http URL: {url!r}")
    request = (
        f"GET {parts.path or '/'} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
        "Accept: application/json\r\nConnection: close\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
    try:
        writer.write(request.encode("ascii"))
        received = b""
        while len(received) <= MAX_ANSWER_BYTES and (chunk := await reader.read(MAX_ANSWER_BYTES)):
            received += chunk
            if is_whole(received):
                break
        if len(received) > MAX_ANSWER_BYTES:
            raise Unreadable(f"an answer over {MAX_ANSWER_BYTES} bytes")
    finally:
        writer.close()
    response = HTTPResponse(Received(bytes(received)))  # parses the status line, headers and body
    response.begin()
    if response.status != 200:
        raise Unreadable(f"HTTP {response.status}")
    return response.read()


def is_whole(answer: bytes) -> bool:
    """Whether `answer` holds its head and as many body bytes as its Content-Length says."""
    head, blank_line, body = answer.partition(b"\r\n\r\n")
    length = CONTENT_LENGTH.search(head) if blank_line else None
    return length is not None and len(body) >= int(length.group(1))


class Received:
    """An answer already received, as http.client's parser reads a socket."""

    def __init__(self, data: bytes):
        self.data = data

    def makefile(self, *_: Any, **__: Any) -> io.BytesIO:
        return io.BytesIO(self.data)
