"""Client self-check: a loopback streaming server with known timing, and the measurement of how
well the HTTP client of ``compare run`` stamps its events (``compare calibrate``).

- server.py: the server (OpenAI completions and TGI ``/generate_stream``), ``CalibrationServerProcess``
  to run it in a subprocess; ``python -m compare.running.calibration`` starts it (``__main__.py``).
- shards.py: the server in several processes sharing one port.
- client.py: the measurement through the OpenAI-protocol client (``measure``).
- tgi.py: the same through TGI's clients (``measure_tgi``).
"""
from compare.running.calibration.server import (
    CalibrationServerProcess, CalibrationTiming, cpu_times, metrics_page, raise_nofile,
)

__all__ = ["CalibrationServerProcess", "CalibrationTiming", "cpu_times", "metrics_page", "raise_nofile"]
