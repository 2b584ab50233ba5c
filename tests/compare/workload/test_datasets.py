"""``--dataset``: JSONL/CSV prompt files (text, chat messages, token ids) -> the request list."""
from __future__ import annotations

import json

import pytest

from compare.workload.datasets import DatasetError, load_dataset, parse_columns
from core.errors import UserError


def _jsonl(tmp_path, rows, name="p.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_jsonl_text_chat_and_ids_with_optional_output_len(tmp_path):
    p = _jsonl(tmp_path, [{"prompt": "hello", "output_len": 7},
                          {"messages": [{"role": "user", "content": "hi"}]},
                          {"token_ids": [5, 6, 7], "output_len": 3}])
    a, b, c = load_dataset(str(p), default_output_len=11)
    assert a.prompt_text == "hello" and a.max_tokens == 7
    assert b.messages == (("user", "hi"),) and b.max_tokens == 11
    assert c.prompt_token_ids == (5, 6, 7) and c.max_tokens == 3
    assert len(load_dataset(str(p), limit=2)) == 2


def test_csv_with_a_column_mapping(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text('question,n\n"what, then?",4\nwhy,5\n', encoding="utf-8")
    reqs = load_dataset(str(p), columns=parse_columns("prompt=question,output_len=n"))
    assert [(r.prompt_text, r.max_tokens) for r in reqs] == [("what, then?", 4), ("why", 5)]


@pytest.mark.parametrize("name, content, needle", [
    ("p.csv", "text,n\nhello,3\n", ":1: missing column"),
    ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b", "output_len": "x"}\n', ":2: output_len 'x'"),
    ("p.jsonl", '{"prompt": "a"}\n\n{"nothing": 1}\n', ":3: no prompt column"),
    ("p.jsonl", '{"token_ids": [1, "a"]}\n', ":1: token_ids must be"),
    ("p.jsonl", '{"messages": [{"role": "user"}]}\n', ":1: messages must be"),
    ("p.jsonl", "{oops\n", ":1: not a JSON object"),
])
def test_malformed_row_is_one_line_naming_file_and_line(tmp_path, name, content, needle):
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError) as e:
        load_dataset(str(p))
    msg = str(e.value)
    assert msg.startswith(str(p)) and needle in msg and "\n" not in msg


def test_non_utf8_and_bad_mapping(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_bytes(b'{"prompt": "a"}\n\xff\n')
    with pytest.raises(UserError, match="not UTF-8"):  # (the user-file reader's error, with the byte)
        load_dataset(str(p))
    with pytest.raises(DatasetError, match="FIELD=COLUMN"):
        parse_columns("question")


def test_parquet_where_pyarrow_is_installed(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": ["x", "y"], "output_len": [2, 3]}), p)
    assert [(r.prompt_text, r.max_tokens) for r in load_dataset(str(p))] == [("x", 2), ("y", 3)]
