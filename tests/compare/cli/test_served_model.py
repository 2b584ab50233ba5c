"""`compare run` against already running servers without --model: the run's model is what the
server says it serves, never the embedded tiny model. Loopback servers speaking the OpenAI protocol
(tests/http_util.py); the real vLLM server and the TGI-protocol double: tests/backends/test_served_model_e2e.py."""
from __future__ import annotations

import json

from tests.compare.cli.test_cli_bad_input import assert_one_line_error
from tests.conftest import run_cli
from tests.http_util import ThreadedServer, sse_response, status_response

PROMPT_TOKENS = 23  # what the server's usage says; nothing on our side counts prompt tokens


def _routes(model: str = "remote-7b", max_len: int | None = 4096) -> dict:
    card = {"id": model, "object": "model", **({"max_model_len": max_len} if max_len else {})}
    return {"GET /v1/models": status_response("200 OK", json.dumps({"object": "list", "data": [card]}).encode()),
            "GET /version": status_response("200 OK", b'{"version": "loopback"}')}


def _stream(tokens: int = 4):
    events = [b"data: " + json.dumps({"choices": [{"index": 0, "text": " w", "token_ids": [100 + i],
                                                   "finish_reason": "length" if i == tokens - 1 else None}]}).encode()
              + b"\n\n" for i in range(tokens)]
    usage = {"choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens}}
    return sse_response(events + [b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"])


def test_run_without_model_records_what_the_server_serves(tmp_path):
    cache = tmp_path / "cache"  # the tiny model would be built here: it must stay empty
    with ThreadedServer(_stream(4), _routes()) as s:
        p = run_cli("run", "--backends", f"openai@{s.url}", "--num-requests", "3", "--output-len", "4",
                    "--concurrency", "1", "--warmup", "0", "--out", str(tmp_path), "--run-id", "r",
                    "--format", "json", env={"LLM_COMPARE_CACHE": str(cache)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "embedded tiny" not in p.stderr
    said = [x for x in p.stderr.splitlines() if "remote-7b" in x]
    assert len(said) == 1 and f"served by {s.url}" in said[0] and "prompts are text" in said[0], p.stderr
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["spec"]["model"] == "remote-7b" and run["spec"]["max_model_len"] == 4096
    assert run["spec"]["native"] == {}  # no local engine options invented for a server we do not run
    src = run["model_source"]
    assert src["source"] == f"served by {s.url}" and src["model"] == "remote-7b" and src["tokenizer"] is None
    assert src["endpoints"][0]["max_model_len"] == 4096
    assert run["workload"]["prompt_format"] == "text"
    reqs = [json.loads(x) for x in (tmp_path / "r" / "workload.jsonl").read_text().splitlines()]
    assert len(reqs) == 3 and all("prompt_token_ids" not in r and len(r["prompt_text"].split()) == 64 for r in reqs)
    recs = [json.loads(x) for x in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and all(r["prompt_tokens"] == PROMPT_TOKENS and r["token_ids"] == [100, 101, 102, 103]
                                  for r in recs)
    assert not cache.exists() or not any(cache.rglob("*")), "a run against a server built a model"


def test_mixed_local_and_served_backends_without_model_is_refused(tmp_path):
    with ThreadedServer(_stream(), _routes()) as s:
        p = run_cli("run", "--backends", f"hf,openai@{s.url}", "--out", str(tmp_path / "o"),
                    env={"LLM_COMPARE_CACHE": str(tmp_path / "cache")})
    assert_one_line_error(p, "mixes already running servers", "hf", "--model DIR")
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_served_run_refuses_what_it_cannot_do(tmp_path):
    with ThreadedServer(_stream(), _routes(max_len=128)) as s:
        # token ids of an unknown vocabulary mean nothing to the server
        p = run_cli("run", "--backends", f"openai@{s.url}", "--prompt-format", "token_ids", "--out", str(tmp_path / "o"))
        assert_one_line_error(p, "token_ids", "--tokenizer DIR", "--prompt-format text")
        # completions need the chat template to send messages
        p = run_cli("run", "--backends", f"openai@{s.url}", "--prompt-format", "chat", "--out", str(tmp_path / "o"))
        assert_one_line_error(p, "chat template", "--tokenizer DIR")
        p = run_cli("run", "--backends", f"openai@{s.url}", "--tokenizer", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
        assert_one_line_error(p, "--tokenizer", "not a directory")
        # a replayed run of token-id prompts (e.g. one of the tiny model) is refused too
        old = tmp_path / "old"
        old.mkdir()
        (old / "workload.jsonl").write_text(json.dumps({"request_id": "x", "max_tokens": 4, "prompt_token_ids": [11, 12]}) + "\n")
        p = run_cli("run", "--backends", f"openai@{s.url}", "--replay", str(old), "--out", str(tmp_path / "o"))
        assert_one_line_error(p, "token-id prompts", "--tokenizer DIR")
    assert not (tmp_path / "o").exists()
    # nobody listening: one line, nothing written
    p = run_cli("run", "--backends", f"openai@{s.url}", "--out", str(tmp_path / "o"))
    assert_one_line_error(p, "cannot ask", "/v1/models", "--model NAME")
    assert not (tmp_path / "o").exists()


def test_credentials_in_the_url_are_sent_and_never_shown(tmp_path):
    with ThreadedServer(_stream(), _routes()) as s:
        url = s.url.replace("http://", "http://user:s3cret@")
        p = run_cli("run", "--backends", f"openai@{url}", "--num-requests", "1", "--output-len", "4",
                    "--concurrency", "1", "--warmup", "0", "--out", str(tmp_path), "--run-id", "r", "--format", "json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "s3cret" not in p.stderr + p.stdout + (tmp_path / "r" / "run.json").read_text()
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["model_source"]["source"] == f"served by {s.url.replace('http://', 'http://user:***@')}"
