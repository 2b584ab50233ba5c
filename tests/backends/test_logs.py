"""backends/logs.py: everything written inside a capture lands in the log file (print, logging,
native writes to fd 1/2, a child process spawned inside), nothing of it on the real stdout/stderr,
while the console stream taken before keeps reaching them."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

SCRIPT = textwrap.dedent("""
    import logging, os, subprocess, sys, time
    from pathlib import Path
    from backends.logs import capture, log_file, tail, terminal

    log = log_file(Path(sys.argv[1]), "replicas@2*vllm-server:lb=lor")
    con = terminal(1)
    heard = []
    logging.basicConfig(level=logging.INFO)  # a root handler on stderr, as engines configure
    with capture(log, heard.append):
        print("engine print", flush=True)
        logging.getLogger("engine").info("engine logging")
        os.write(2, b"engine native fd2\\n")
        child = subprocess.Popen([sys.executable, "-c",
                                  "import time; time.sleep(0.5); print('child after the capture', flush=True)"])
        con.write("console during the capture\\n")
        time.sleep(0.5)
    print("plain print after the capture", flush=True)
    child.wait()
    time.sleep(0.3)
    con.write("tail: " + " / ".join(tail(log, 3)) + "\\n")
    con.write("heard: " + " / ".join(heard) + "\\n")
    con.write("file: " + log.name + "\\n")
""")


def test_capture_files_every_channel_and_keeps_the_console(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""  # nothing written inside the capture escaped to the real stderr
    out = p.stdout.splitlines()
    assert out[0] == "console during the capture" and out[1] == "plain print after the capture"
    assert "engine" not in p.stdout.split("tail:")[0]
    text = (tmp_path / "logs" / "replicas_2_vllm-server_lb=lor.log").read_text()
    for line in ("engine print", "engine logging", "engine native fd2", "child after the capture"):
        assert line in text
    assert "plain print after the capture" not in text
    # the child spawned inside kept writing to the log after the capture ended
    assert "tail: " in p.stdout and "child after the capture" in p.stdout.split("tail:")[1]
    heard = p.stdout.split("heard: ")[1].splitlines()[0]
    assert "engine print" in heard and "engine native fd2" in heard  # the -v stream
