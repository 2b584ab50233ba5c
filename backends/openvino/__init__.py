"""OpenVINO GenAI: the backend (backend.py), the ContinuousBatchingPipeline in its own engine
process (engine.py) and the checkpoint's one-time OpenVINO IR export (export.py);
adapters/openvino.py is the pure plan."""
