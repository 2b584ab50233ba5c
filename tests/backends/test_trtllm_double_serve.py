"""The TEST DOUBLE's trtllm-serve front (containers/images/trtllm-double/trtllm_double.py), held to
the release fact sheets: what a stream and a /metrics read look like per TensorRT-LLM release.

The front runs here in-process (FastAPI's TestClient); its upstream is a canned vLLM-format
completions stream served by httpx.MockTransport, because what is tested is the front's rewriting,
not vLLM. The container path with the real vLLM server behind it is tests/backends/test_trtllm_pipeline.py.
"""
import importlib.util
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from adapters.trtllm_facts import facts_for
from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "trtllm_double", ROOT / "containers" / "images" / "trtllm-double" / "trtllm_double.py")
double = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(double)


def _vllm_stream(n_tokens: int) -> bytes:
    """What vLLM's /v1/completions streams with continuous usage: one id for the request."""
    chunks = [{"id": "cmpl-req", "object": "text_completion", "model": "m",
               "choices": [{"index": 0, "text": f"t{i}", "finish_reason": "length" if i == n_tokens else None}],
               "usage": {"prompt_tokens": 3, "completion_tokens": i, "total_tokens": 3 + i}}
              for i in range(1, n_tokens + 1)]
    chunks.append({"id": "cmpl-req", "object": "text_completion", "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 3, "completion_tokens": n_tokens, "total_tokens": 3 + n_tokens}})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


def _front(release: str, llm_args: dict) -> TestClient:
    def upstream(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, content=_vllm_stream(4), headers={"content-type": "text/event-stream"})
    quirks = double.ServeQuirks(release, llm_args)
    return TestClient(double.serve_app("http://upstream", quirks, transport=httpx.MockTransport(upstream)))


def _stream(client: TestClient) -> list[dict]:
    body = {"model": "m", "prompt": "x", "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = [ln[len("data: "):] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


@pytest.mark.parametrize("release", ["1.0.0", "1.1.0", "1.2.0"])
def test_affected_releases_give_every_chunk_a_fresh_id_with_running_usage(release):
    assert facts_for(release).chunk_id == "fresh-per-chunk"
    chunks = _stream(_front(release, {}))
    ids = [c["id"] for c in chunks]
    assert len(set(ids)) == len(ids) == 5, ids
    assert all(i.startswith("cmpl-") for i in ids[:-1]) and ids[-1].startswith("chatcmpl-")
    assert chunks[-1]["object"] == "chat.completion.chunk" and chunks[-1]["choices"] == []
    # the running total, not a per-chunk delta: a parser keyed on the id would count 1+2+3+4
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 4]


def test_a_release_with_the_fix_keeps_one_id_per_request():
    chunks = _stream(_front("1.3.0", {}))
    assert {c["id"] for c in chunks} == {"cmpl-req"}


def test_metrics_is_empty_unless_iteration_stats_are_on():
    off = _front("1.2.0", {})
    _stream(off)
    assert off.get("/metrics").json() == []
    assert off.get("/prometheus/metrics").status_code == 404  # only with return_perf_metrics
    on = _front("1.2.0", {"enable_iter_perf_stats": True})
    _stream(on)
    first = on.get("/metrics").json()
    assert len(first) == 4 and all(s["numActiveRequests"] == 1 for s in first)
    assert on.get("/metrics").json() == []  # drained by the read, as get_stats_async does


def test_an_unreadable_release_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="TRTLLM_DOUBLE_RELEASE"):
        double.ServeQuirks("latest", {})


@pytest.mark.parametrize("release,override,want", [
    ("1.0.0", None, "fresh-per-chunk"), ("1.2.1", None, "fresh-per-chunk"), ("1.3.0", None, "per-request"),
    ("1.3.0rc20", "fresh-per-chunk", "fresh-per-chunk"), ("1.3.0rc27", "per-request", "per-request"),
])
def test_the_chunk_id_behaviour_per_release(release, override, want):
    assert double.chunk_ids_of(release, override) == want


def test_a_release_candidate_that_straddles_the_fix_must_be_told():
    with pytest.raises(SystemExit, match="TRTLLM_DOUBLE_CHUNK_IDS"):
        double.chunk_ids_of("1.3.0rc14")


@pytest.mark.parametrize("stats_on", [False, True])
def test_the_level_scrape_reports_iterations_or_says_why_there_are_none(stats_on):
    import asyncio

    from backends.server_metrics import MetricsScraper

    front = _front("1.2.0", {"enable_iter_perf_stats": True} if stats_on else {})

    async def level():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=front.app), base_url="http://double") as c:
            scraper = MetricsScraper(c, "trtllm-json", interval_s=0.05)
            await scraper.start("level")
            await asyncio.to_thread(_stream, front)  # the level's work, through the same front
            return await scraper.stop("level")
    out = asyncio.run(level())
    assert out["available"] is True
    if stats_on:
        assert out["summary"]["iterations"] == 4 and "empty" not in out["summary"]
    else:
        assert out["summary"]["iterations"] == 0 and "enable_iter_perf_stats" in out["summary"]["empty"]


def test_the_double_refuses_the_config_alias_before_1_2(monkeypatch, tmp_path):
    monkeypatch.setenv("TRTLLM_DOUBLE_RELEASE", "1.1.0")
    with pytest.raises(SystemExit, match="No such option: --config"):
        double.serve([str(tmp_path), "--config", str(tmp_path / "llm_args.yaml")])
