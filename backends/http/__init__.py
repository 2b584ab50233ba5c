"""HTTP streaming: one SSE reader (sse.py) and pure wire protocols (openai.py, tgi.py)."""
