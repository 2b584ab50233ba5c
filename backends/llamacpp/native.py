"""llama.cpp's side of ``--native llamacpp.KEY=VALUE``: a key that is a flag goes to llama-server
as is, so an unknown one is checked here against the flags the server's own ``--help`` lists (else
the server dies at start, 30 lines of usage later). The help is read from the server this run
would use, when it is already there (``server_bin``, a prebuilt one, or this machine's build in
the engine cache); before the first build nothing is checked here. A ``server_bin`` that is no
executable, or does not answer ``--help`` as llama-server does, is refused here, before the run
directory is written."""
from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from adapters.llamacpp import SPECIAL_NATIVE
from core.errors import UserError

LABEL = "a flag of this llama-server (its --help) nor one of " + ", ".join(SPECIAL_NATIVE)
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


def help_flags(text: str) -> frozenset[str]:
    """The flags in llama-server's ``--help``: the left column of each option line
    (``-t,    --threads N    number of ...`` -> -t, --threads), never the descriptions."""
    out: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("-"):
            continue
        column = []
        for part in re.split(r"\s{2,}", line.strip()):
            column.append(part)
            if not part.endswith(","):
                break
        out.update(_FLAG.findall(" ".join(column)))
    return frozenset(out)


def _server_here() -> Path | None:
    """The llama-server a run would start, where it exists without building one."""
    from backends.llamacpp.build import SERVER_ENV, build_fields
    from backends.models.engine_cache import EngineCache, cache_key

    if os.environ.get(SERVER_ENV):
        p = Path(os.environ[SERVER_ENV])
        return p if os.access(p, os.X_OK) else None
    cache = EngineCache()
    entry = cache.get(cache_key(build_fields(None)))
    if entry is not None and cache.damage(entry) is not None:  # (never run a damaged build: the run rebuilds it)
        return None
    p = entry.path / "bin" / "llama-server" if entry is not None else None
    return p if p is not None and os.access(p, os.X_OK) else None


@functools.lru_cache(maxsize=4)
def _flags_of(server: str) -> frozenset[str] | None:
    try:
        r = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    flags = help_flags(r.stdout + r.stderr)
    return flags if "--port" in flags else None  # not the help we know: nothing is checked


def checked_keys(model: str, options: dict[str, Any]) -> tuple[str, set[str] | None]:
    """(what a key of the llamacpp section is, the keys the llama-server of the run takes or None)."""
    if options.get("server_bin") not in (None, ""):  # (empty: the adapter refuses it)
        from backends.llamacpp.build import server_binary

        server, _ = server_binary(str(options["server_bin"]))  # an executable file, else one line
        flags = _flags_of(str(server))
        if flags is None:
            raise UserError(f"--native llamacpp.server_bin={server}: it does not answer --help as llama-server "
                            f"does (no --port listed); point it at a llama-server binary")
        return LABEL, set(flags) | set(SPECIAL_NATIVE)
    server = _server_here()
    flags = _flags_of(str(server)) if server is not None else None
    return LABEL, None if flags is None else set(flags) | set(SPECIAL_NATIVE)
