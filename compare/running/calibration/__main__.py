"""``python -m compare.running.calibration``: the calibration server (server.py) in this process."""
from compare.running.calibration.server import main

main()
