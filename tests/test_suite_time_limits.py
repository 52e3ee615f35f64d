"""The suite's time limits (tests/conftest.py), on a toy suite run by pytest-xdist in a subprocess:
a test past its pytest-timeout limit fails with its traceback and its worker goes on; one that the
signal cannot reach is ended by the hard limit and the crash report carries its stack; a worker
killed otherwise is reported as such."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")

TOY_TESTS = {
    "test_a_soft.py": """
import time, pytest
@pytest.mark.timeout(1)
def test_sleeps_past_its_limit():
    time.sleep(30)
def test_after_it_on_the_same_worker():
    pass
""",
    "test_b_hard.py": """
import ctypes, signal, pytest
@pytest.mark.timeout(1)
def test_stuck_in_c():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the soft limit cannot reach it
    ctypes.CDLL(None).sleep(30)
""",
    "test_c_killed.py": """
import os, signal
def test_killed_by_a_signal():
    os.kill(os.getpid(), signal.SIGKILL)
""",
}


@pytest.mark.slow
def test_time_limits_fail_the_test_or_report_the_stacks(tmp_path):
    conftest = CONFTEST.read_text().replace("HARD_LIMIT_GRACE_S = 60.0", "HARD_LIMIT_GRACE_S = 1.0")
    assert "HARD_LIMIT_GRACE_S = 1.0" in conftest
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 300\ntimeout_method = signal\n")
    for name, text in TOY_TESTS.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadfile",
                          "--max-worker-restart", "0", "-p", "no:cacheprovider", "-rA"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run.stdout
    assert run.returncode == 1, out
    assert "Timeout (>1.0s) from pytest-timeout" in out
    assert "PASSED test_a_soft.py::test_after_it_on_the_same_worker" in out
    assert "crashed while running 'test_b_hard.py::test_stuck_in_c'" in out
    assert "ended by the hard time limit (its pytest-timeout limit + 1 s)" in out
    assert 'test_b_hard.py", line 6 in test_stuck_in_c' in out
    assert "crashed while running 'test_c_killed.py::test_killed_by_a_signal'" in out
    assert "not ended by the time limit: the process died" in out


def test_files_run_longest_first_keeping_each_files_own_order(tmp_path, monkeypatch):
    """tests/conftest.py orders whole files by tests/durations.json (unlisted: UNLISTED_FILE_S)."""
    import json as _json
    from types import SimpleNamespace

    import conftest

    root = pathlib.Path(conftest.__file__).resolve().parents[1]
    durations = tmp_path / "durations.json"
    durations.write_text(_json.dumps({"tests/a.py": 1.0, "tests/b.py": 300.0}))
    monkeypatch.setattr(conftest, "DURATIONS", str(durations))
    items = [SimpleNamespace(path=root / "tests" / name, name=f"{name}:{i}")
             for name, i in (("a.py", 0), ("new.py", 0), ("b.py", 0), ("a.py", 1), ("b.py", 1))]
    conftest.slowest_files_first(items)
    assert [i.name for i in items] == ["b.py:0", "b.py:1", "new.py:0", "a.py:0", "a.py:1"]
