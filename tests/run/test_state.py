"""The run state's result: the exit status train.py returns for each way a run ends (src/run/state.py).
Plain logic, no MindSpore; the callbacks that set the stops are driven by real runs in test_callbacks.py
and tests/reliability/ (test_preemption.py: 143 and 130, test_nonfinite.py: 1)."""
import signal

import pytest

from src.run.state import RunResult, RunState


def test_the_result_carries_the_exit_status_of_each_stop():
    assert RunState().result() == RunResult(0, None, None)  # ran to the end
    limited = RunState()
    limited.stop("step_limit")
    assert limited.result() == RunResult(0, "step_limit", None)  # --max_steps ends with status 0
    for signum, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        stopped = RunState()
        stopped.stop("signal", signum=signum)
        assert stopped.result().status == status
    diverged = RunState()
    diverged.stop("diverged", message="stopping: 3 consecutive non-finite losses")
    assert diverged.diverged and diverged.result() == RunResult(1, "diverged", "stopping: 3 consecutive non-finite losses")


def test_an_unknown_stop_reason_is_refused():
    with pytest.raises(ValueError, match="unknown stop reason 'done'"):
        RunState().stop("done")
