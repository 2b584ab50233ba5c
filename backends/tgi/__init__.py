"""text-generation-inference: its container or an already running server (tgi@URL), streamed by
either client (backends/http/tgi_client.py); adapters/tgi.py is the pure launcher plan."""
