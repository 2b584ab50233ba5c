"""Already running OpenAI-compatible servers (vLLM, SGLang, trtllm-serve, ...): ``openai@URL``
(/v1/completions) and ``openai-chat@URL`` (/v1/chat/completions), streamed by the shared HTTP
backend (backends/http_backends.py); nothing is launched or configured here."""
from __future__ import annotations

from backends.http_backends import http_capabilities
from backends.registry import BackendEntry, register

register(BackendEntry(
    name="openai", summary="an already running OpenAI-compatible server, /v1/completions (vLLM, SGLang, trtllm-serve)",
    factory="backends.http_backends:OpenAIEndpointBackend", plan="backends.http_backends:endpoint_plan",
    requires=("httpx",), extra="pip install httpx", needs_target=True,
    notes=("openai@http://127.0.0.1:8000; bearer token from $LLM_COMPARE_API_KEY if set",),
    capabilities=http_capabilities("openai"),
))
register(BackendEntry(
    name="openai-chat", summary="an already running OpenAI-compatible server, /v1/chat/completions",
    factory="backends.http_backends:OpenAIChatEndpointBackend", plan="backends.http_backends:endpoint_plan",
    requires=("httpx",), extra="pip install httpx", needs_target=True,
    capabilities=http_capabilities("openai-chat"), roles=("chat",),
))
