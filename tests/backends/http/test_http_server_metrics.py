"""Server metrics: real Prometheus exposition (prometheus_client's own server on loopback) parsed
with the real text parser; deltas are exactly one level's work."""
from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from backends.server_metrics import MetricsScraper, histogram_delta, parse_prometheus
from backends.vllm_server import free_port


@pytest.fixture()
def vllm_like_server():
    reg = CollectorRegistry()
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"], registry=reg,
                     buckets=(0.01, 0.02, 0.04, 0.08, 0.16))
    tokens = Counter("vllm:generation_tokens", "tokens", ["model_name"], registry=reg)
    running = Gauge("vllm:num_requests_running", "running", ["model_name"], registry=reg)
    other = Counter("process_unrelated", "dropped", registry=reg)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        yield f"http://127.0.0.1:{port}", ttft, tokens, running, other
    finally:
        server.shutdown()
        thread.join(5)


def test_level_deltas_from_real_exposition(vllm_like_server):
    url, ttft, tokens, running, other = vllm_like_server
    ttft.labels("m").observe(0.5)  # before the level: must not count
    tokens.labels("m").inc(1000)

    async def go():
        async with httpx.AsyncClient(base_url=url) as c:
            s = MetricsScraper(c, "prometheus", interval_s=0.05)
            await s.start("c1")
            for v in (0.015, 0.015, 0.03, 0.03):
                ttft.labels("m").observe(v)
            tokens.labels("m").inc(64)
            running.labels("m").set(4)
            other.inc()
            await asyncio.sleep(0.3)
            running.labels("m").set(0)
            return await s.stop("c1")

    out = asyncio.run(go())
    assert out["available"] and out["scrapes"] >= 3
    d = out["server_ttft_ms"]
    assert d["count"] == 4 and abs(d["mean"] - 22.5) < 1e-6  # mean is exact: sum/count deltas
    assert 10 <= d["p50"] <= 20 and 20 <= d["p99"] <= 40  # interpolated inside the right buckets
    assert out["counters"]["vllm:generation_tokens_total"] == 64
    assert not any(k.startswith("process_") for k in out["counters"])  # only vllm:/tgi_/trtllm_ kept
    assert out["gauges"]["vllm:num_requests_running"]["max"] == 4


def test_missing_metrics_endpoint_is_reported_not_fatal():
    from tests.http_util import RawHttpServer, status_response

    async def go():
        async with RawHttpServer(status_response("404 Not Found", b"no metrics here")) as srv:
            async with httpx.AsyncClient(base_url=srv.url) as c:
                s = MetricsScraper(c, "prometheus")
                await s.start("c1")
                return await s.stop("c1")

    out = asyncio.run(go())
    assert out["available"] is False and "HTTP 404" in out["errors"]


def test_histogram_quantile_interpolation():
    text = ("# TYPE vllm:e2e_request_latency_seconds histogram\n"
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 50\n'
            'vllm:e2e_request_latency_seconds_bucket{le="2.0"} 100\n'
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 100\n'
            "vllm:e2e_request_latency_seconds_sum 120\nvllm:e2e_request_latency_seconds_count 100\n")
    after = parse_prometheus(text)
    d = histogram_delta({}, after, "vllm:e2e_request_latency_seconds")
    assert d["p50"] == pytest.approx(1000.0) and d["p99"] == pytest.approx(1980.0) and d["mean"] == 1200.0
