"""TensorRT-LLM: trtllm-serve in NVIDIA's release containers or in-process (backend.py), the
quantize/build steps into the engine cache (pipeline.py); adapters/trtllm.py is the pure plan."""
