"""core.process_exit.exit_without_teardown: a `compare` process that imported torch ends with
os._exit after doing what the interpreter's exit would have done first; nothing written is lost."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

CHILD = r"""
import atexit, sys, threading, time
from core.process_exit import exit_without_teardown
out = open(sys.argv[1], "w")  # block-buffered, never closed: only a flush keeps this line
out.write("buffered line\n")
def late():
    time.sleep(0.3)
    with open(sys.argv[1] + ".thread", "w") as f:
        f.write("thread done")
threading.Thread(target=late).start()  # non-daemon: joined before the exit
from concurrent.futures import ThreadPoolExecutor
ThreadPoolExecutor(1).submit(int)  # an idle pool worker (non-daemon): told to stop, as at a normal exit
atexit.register(lambda: open(sys.argv[1] + ".atexit", "w").write("handler ran"))
print("last line", end="")  # no newline: stdout's buffer too
exit_without_teardown(3)
print("never")
"""


def test_what_the_interpreter_did_first_is_done_and_nothing_written_is_lost(tmp_path):
    f = tmp_path / "out.txt"
    p = subprocess.run([sys.executable, "-c", CHILD, str(f)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PYTHONPATH": str(ROOT)})
    assert p.returncode == 3, p.stderr
    assert p.stdout == "last line"
    assert f.read_text() == "buffered line\n"
    assert (tmp_path / "out.txt.thread").read_text() == "thread done"
    assert (tmp_path / "out.txt.atexit").read_text() == "handler ran"
