"""Trace readers: Mooncake JSONL, Azure CSV, BurstGPT CSV -> request list + send offsets."""
from __future__ import annotations

import json

import pytest

from compare.workload.traces import BLOCK_TOKENS, TraceError, build_trace, detect_format, parse_window
from core.errors import UserError


def _mooncake(tmp_path, rows):
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_mooncake_shared_hash_ids_become_identical_prefix_blocks(tmp_path):
    p = _mooncake(tmp_path, [
        {"timestamp": 1000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 1500, "input_length": 700, "output_length": 7, "hash_ids": [1, 9]},
        {"timestamp": 3000, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]},
    ])
    t = build_trace(str(p))
    assert t.fmt == "mooncake"
    a, b, c = (r.prompt_token_ids for r in t.requests)
    assert [len(a), len(b), len(c)] == [1100, 700, 600]
    assert a[:BLOCK_TOKENS] == b[:BLOCK_TOKENS]  # shared hash id 1
    assert a[BLOCK_TOKENS:2 * BLOCK_TOKENS] != b[BLOCK_TOKENS:2 * BLOCK_TOKENS]
    assert a[:BLOCK_TOKENS] != c[:BLOCK_TOKENS]
    assert [r.max_tokens for r in t.requests] == [5, 7, 3]
    assert t.offsets_ns == [0, 500_000_000, 2_000_000_000]
    assert build_trace(str(p)).requests == t.requests  # deterministic


def test_speedup_window_and_cap(tmp_path):
    p = _mooncake(tmp_path, [{"timestamp": 1000 * i, "input_length": 8, "output_length": 2}
                             for i in range(10)])
    assert build_trace(str(p), speedup=2.0).offsets_ns[:3] == [0, 500_000_000, 1_000_000_000]
    t = build_trace(str(p), window=parse_window("3:6"))
    assert t.offsets_ns == [0, 1_000_000_000, 2_000_000_000]
    assert len(build_trace(str(p), cap=4).requests) == 4


def test_azure_and_burstgpt_csv(tmp_path):
    az = tmp_path / "azure.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.0000000,100,10\n2023-11-16 18:15:46.2500000,50,4\n", encoding="utf-8")
    t = build_trace(str(az))
    assert t.fmt == "azure" and t.offsets_ns == [0, 250_000_000]
    assert [len(r.prompt_token_ids) for r in t.requests] == [100, 50]
    bg = tmp_path / "burst.csv"
    bg.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,30,12,42,Conversation log\n7.5,GPT-4,20,8,28,API log\n", encoding="utf-8")
    t = build_trace(str(bg))
    assert t.fmt == "burstgpt" and t.offsets_ns == [0, 2_500_000_000]
    assert [r.max_tokens for r in t.requests] == [12, 8]


@pytest.mark.parametrize("content, needle", [
    ('{"timestamp": 2000, "input_length": 5, "output_length": 1}\n'
     '{"timestamp": 1000, "input_length": 5, "output_length": 1}\n', ":2: timestamp goes backwards"),
    ('{"timestamp": 1, "input_length": 5}\n', ":1: missing 'output_length'"),
    ('{"timestamp": 1, "input_length": "x", "output_length": 1}\n', ':1: input_length "x": should be a whole number >= 0'),
    ("TIMESTAMP,ContextTokens\n1,2\n", ":1: missing column 'GeneratedTokens'"),
    ("hello\n", ":1: cannot tell the trace format"),
])
def test_bad_trace_is_one_line_naming_file_and_line(tmp_path, content, needle):
    p = tmp_path / "bad.jsonl"
    p.write_text(content, encoding="utf-8")
    fmt = "azure" if content.startswith("TIMESTAMP") else None
    with pytest.raises(TraceError) as e:
        build_trace(str(p), fmt)
    assert str(p) in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)


def test_non_utf8_and_bad_window(tmp_path):
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b'{"timestamp": 1, "input_length": 5, "output_length": 1}\n\xff\xfe\n')
    with pytest.raises(UserError, match="not UTF-8"):  # (the user-file reader's error, with the byte)
        build_trace(str(p))
    with pytest.raises(TraceError, match="START:END"):
        parse_window("9:3")
    assert detect_format(_mooncake(tmp_path, [{"timestamp": 0}])) == "mooncake"
