"""vLLM: in-process (inproc.py: AsyncLLM, its scheduler stats in stats.py), the OpenAI API server
launched here (server.py) and the same server in a container (container.py); adapters/vllm.py is
the pure spec -> engine-args plan."""
