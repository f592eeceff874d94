"""Smoke: a broker starts, kcat lists it, and a clean stop leaves the clean-shutdown marker."""

import subprocess


def test_broker_starts_lists_and_stops_cleanly(broker):
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"broker 1 at 127.0.0.1:{broker.port}" in out.stdout
    assert broker.stop() == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    assert "Traceback" not in broker.log_text()
