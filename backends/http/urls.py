"""Credentials written into a URL (``http://user:secret@host``): sent, never shown.

The client sends them as HTTP basic auth; everywhere a URL or a backend name that holds one is
shown or stored (backend names, records, run.json, messages) it reads ``http://user:***@host``.
"""
from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit, urlunsplit

_USERINFO = re.compile(r"(://)([^/@\s:]*)(:[^/@\s]*)?@")


def redact_url(text: str) -> str:
    """``text`` with every URL's credentials masked: user:secret@ -> user:***@, token@ -> ***@."""
    return _USERINFO.sub(lambda m: f"{m[1]}{m[2]}:***@" if m[3] is not None else f"{m[1]}***@", text)


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its credentials, and the basic-auth header value they make (or None)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, pw = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(pw)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=hostport)).rstrip("/"), f"Basic {token}"
