"""notebook_launcher's elastic options (Accelerate 1.15's signature): restarts in a real forked
2-process launch (tests/scripts/notebook_restarts.py, from a plain Python process: forking works
the same from a kernel, which tests/test_notebooks.py runs), arguments checked in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launching import free_port, python

SCRIPT = Path(__file__).parent / "scripts" / "notebook_restarts.py"


def test_max_restarts_forks_the_workers_again_and_the_rest_is_taken(tmp_path: Path) -> None:
    port = free_port()
    run = python(SCRIPT, str(tmp_path), str(port), str(free_port()), timeout=150).check()
    # Rank 1 failed its first attempt; the whole group was stopped and forked again, told which
    # attempt it is, at the rdzv_endpoint's address; every line carries the prefix template.
    assert "notebook_launcher: worker 1 raised; restarting the workers (1 of 1)" in run.stdout
    assert "[0]: attempt 1 of rank 0, world 2" in run.stdout
    assert "[1]: attempt 1 of rank 1, world 2" in run.stdout
    assert "restarted launch completed" in run.stdout
    attempts = sorted(path.name for path in tmp_path.glob("attempt*"))
    assert attempts == ["attempt0_rank0", "attempt0_rank1", "attempt1_rank0", "attempt1_rank1"]
    assert (tmp_path / "attempt1_rank0").read_text() == str(port)
    # Without restarts (the default) the same failure raises in the caller, after one attempt.
    assert "launch without restarts raised: True" in run.stdout
    assert sorted(path.name for path in (tmp_path / "no_restart").iterdir()) == ["attempt0_rank0", "attempt0_rank1"]


def test_elastic_arguments_are_checked_before_anything_starts() -> None:
    from accel_convert.runtime import notebook_launcher

    with pytest.raises(ValueError, match="max_restarts"):
        notebook_launcher(print, num_processes=2, max_restarts=-1)
    with pytest.raises(ValueError, match="monitor_interval"):
        notebook_launcher(print, num_processes=2, monitor_interval=0)
    with pytest.raises(ValueError, match="HOST:PORT"):
        notebook_launcher(print, num_processes=2, rdzv_endpoint="localhost")
