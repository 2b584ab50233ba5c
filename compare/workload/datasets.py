"""``--dataset FILE``: the user's own prompts as the request list.

JSONL (one object a line), CSV (a header row) or Parquet (only where pyarrow is installed; it is
not a dependency). Each row holds one prompt, as one of:

- ``prompt``: text;
- ``messages``: chat messages, a list of ``{"role": ..., "content": ...}`` (in CSV: that list as JSON);
- ``token_ids``: a list of token ids (in CSV: as JSON);

and optionally ``output_len`` (the reply's length in tokens; the workload's output length when
absent). ``--dataset-columns prompt=question,output_len=max_tokens`` maps other column names.
A malformed row is refused naming the file, the line and what is wrong.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterator

from core.records import MAX_REQUEST_TOKENS, GenerationRequest

FIELDS = ("prompt", "messages", "token_ids", "output_len")


class DatasetError(ValueError):
    """A prompt file that cannot be used; the message is the one line shown to the user."""


def parse_columns(text: str | None) -> dict[str, str]:
    """``field=column,...`` over the defaults (each field read from the column of its own name)."""
    cols = {f: f for f in FIELDS}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        field, sep, column = part.partition("=")
        field, column = field.strip(), column.strip()
        if not sep or field not in FIELDS or not column:
            raise DatasetError(f"--dataset-columns {text!r}: use FIELD=COLUMN with FIELD one of "
                               f"{', '.join(FIELDS)}, e.g. prompt=question")
        cols[field] = column
    return cols


_FIX = "pass a JSONL, CSV or Parquet prompt file"


def _rows(path: Path, cols: dict[str, str]) -> Iterator[tuple[int, dict[str, Any]]]:
    from core.fsutil import check_user_file, read_user_text

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        check_user_file(path, "--dataset file", _FIX)  # (a directory, FIFO, device or loop: one line)
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), "
                               "or pass the prompts as JSONL or CSV") from None
        try:
            table = pq.read_table(path).to_pylist()
        except Exception as e:  # (pyarrow raises its own kinds for a damaged or foreign file)
            raise DatasetError(f"{path}: not a Parquet file pyarrow can read ({type(e).__name__}); {_FIX}") from None
        for i, row in enumerate(table, 1):
            yield i, row if isinstance(row, dict) else {}
        return
    # through the user-file reader: a directory, FIFO, device, symlink loop, a huge or non-UTF-8
    # file is one line (core.errors.UserError), never a hang
    text = read_user_text(path, "--dataset file", _FIX)
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        prompt_cols = [cols[k] for k in ("prompt", "messages", "token_ids")]
        if not any(c in header for c in prompt_cols):
            raise DatasetError(f"{path}:1: missing column: none of {', '.join(map(repr, prompt_cols))} "
                               f"in the header ({', '.join(header)}); map one with --dataset-columns")
        for row in reader:
            yield reader.line_num, dict(row)
        return
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{no}: not a JSON object ({e.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{no}: not a JSON object")
        yield no, row


def _decode(value: Any, where: str, field: str) -> Any:
    if isinstance(value, str) and field in ("messages", "token_ids"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise DatasetError(f"{where}: {field} is not a JSON list") from None
    return value


def _request(row: dict[str, Any], cols: dict[str, str], where: str, rid: str, default_out: int,
             ignore_eos: bool, seed: int) -> GenerationRequest:
    def get(field: str) -> Any:
        v = row.get(cols[field])
        return None if v is None or v == "" else _decode(v, where, field)

    given = [f for f in ("prompt", "messages", "token_ids") if get(f) is not None]
    if len(given) != 1:
        what = "no" if not given else "more than one"
        raise DatasetError(f"{where}: {what} prompt column; give exactly one of "
                           f"{cols['prompt']!r} (text), {cols['messages']!r} (chat), {cols['token_ids']!r} (ids)")
    out = get("output_len")
    if out is None:
        out_len = default_out
    else:
        try:
            out_len = int(str(out).strip())
        except ValueError:
            out_len = 0
        if out_len < 1 or out_len > MAX_REQUEST_TOKENS:
            raise DatasetError(f"{where}: {cols['output_len']} {out!r} is not a whole number >= 1 and "
                               f"<= {MAX_REQUEST_TOKENS}")
    common = dict(request_id=rid, max_tokens=out_len, ignore_eos=ignore_eos, seed=seed)
    kind, value = given[0], get(given[0])
    if kind == "prompt":
        if not isinstance(value, str) or not value.strip():
            raise DatasetError(f"{where}: {cols['prompt']} must be non-empty text")
        return GenerationRequest(prompt_text=value, **common)
    if kind == "token_ids":
        if not isinstance(value, list) or not value or not all(isinstance(x, int) and not isinstance(x, bool)
                                                               and x >= 0 for x in value):
            raise DatasetError(f"{where}: {cols['token_ids']} must be a non-empty list of token ids")
        return GenerationRequest(prompt_token_ids=tuple(value), **common)
    if (not isinstance(value, list) or not value
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                       and isinstance(m.get("content"), str) for m in value)):
        raise DatasetError(f"{where}: {cols['messages']} must be a non-empty list of "
                           '{"role": ..., "content": ...}')
    return GenerationRequest(messages=tuple((m["role"], m["content"]) for m in value), **common)


def load_dataset(path_: str, *, columns: dict[str, str] | None = None, default_output_len: int = 32,
                 ignore_eos: bool = True, seed: int = 0, limit: int | None = None,
                 name: str = "dataset") -> list[GenerationRequest]:
    """The file's prompts, in file order (the first ``limit``); every row checked before any runs."""
    path = Path(path_)
    cols = columns or parse_columns(None)
    reqs: list[GenerationRequest] = []
    try:
        for no, row in _rows(path, cols):
            reqs.append(_request(row, cols, f"{path}:{no}", f"{name}-{len(reqs):05d}",
                                 default_output_len, ignore_eos, seed))
            if limit is not None and len(reqs) >= limit:
                break
    except csv.Error as e:
        raise DatasetError(f"{path}: not a CSV file ({e}); {_FIX}") from None
    if not reqs:
        raise DatasetError(f"{path}: no prompts in the file")
    return reqs
