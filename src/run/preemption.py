"""Stopping at a step boundary on SIGTERM or Ctrl-C, so that a preempted run loses nothing.

Preemptible clusters (Slurm, Kubernetes, ModelArts) send SIGTERM and kill the job after a
grace period. `StopRequest` records the first SIGTERM or SIGINT (Ctrl-C); training finishes
the step in progress, writes a mid-epoch checkpoint (src.run.callbacks.StopOnSignal) and
exits with 128 + the signal number (143 for SIGTERM, 130 for Ctrl-C), what shells and
schedulers report for a job ended by that signal. A second SIGTERM changes nothing: it is the
same request (a scheduler follows it with SIGKILL after its grace period), and MindSpore sends
one itself when a SIGTERM to the process group also ended its dataset workers ("Dataset worker
process N was killed by signal: Terminated. Main process will be terminated."; measured: ending
the process there lost the checkpoint, tests/reliability/test_group_stop.py).

A Ctrl-C during training reaches Python as SIGTERM: before every graph run MindSpore's graph
scheduler installs a C-level SIGINT handler that sends the process SIGTERM (GraphScheduler::Run
registers mindspore::DefaultIntHandler; measured with an LD_PRELOAD trace of sigaction), so such
a run stops with status 143. Once the step has ended, `arm_second_ctrl_c` gives SIGINT its
default action again, which the kernel carries out even inside a long write: a Ctrl-C while the
checkpoint is being written ends the process at once, without it. (A second Ctrl-C during the
step's own kernels is MindSpore's SIGTERM again, the same request.)

Python runs a signal handler only between bytecodes of the main thread, i.e. when the step's
kernels have returned; the handler itself only records the signal.
"""
import ctypes
import faulthandler
import os
import signal
import sys
import threading

__all__ = ["StopRequest", "exit_status", "end_with_parent"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_status(signum):
    """The process exit status of a run stopped by `signum`: 128 + signum."""
    return 128 + int(signum)


class StopRequest:
    """Records the first SIGTERM / SIGINT while installed (a context manager).

    Args:
        deadline: seconds after the signal at which the process ends whatever it is doing
            (faulthandler's watchdog thread, which needs no Python): for distributed runs, where
            a lost peer can hold the last step in a collective. None: no deadline.

    Attributes:
        signum: the signal received first, or None.
    """

    def __init__(self, deadline=None):
        self.signum = None
        self.deadline = deadline
        self._previous = {}

    @property
    def name(self):
        return signal.Signals(self.signum).name if self.signum else None

    def _handle(self, signum, _frame):
        if self.signum is not None:  # a SIGTERM again: the same request (a Ctrl-C now has no handler or is MindSpore's)
            return
        self.signum = signum
        self.arm_second_ctrl_c()
        if self.deadline:  # a stop that hangs (a peer lost mid-collective) ends after it, from a C thread
            faulthandler.dump_traceback_later(self.deadline, exit=True)
        print(f"{signal.Signals(signum).name} received: finishing the current step, then writing a checkpoint "
              "(a Ctrl-C after the step stops at once, without one)", flush=True)

    def arm_second_ctrl_c(self):
        """After a stop request: SIGINT's default action, so that a Ctrl-C ends the process at once.

        Called again at the step's end, before the checkpoint is written: every graph run installs
        MindSpore's SIGINT handler anew (see the module docstring)."""
        if self.signum is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_DFL)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def end_with_parent(signum=signal.SIGTERM):
    """Have the kernel send `signum` to this process when its parent (the launcher) dies (Linux only).

    msrun starts each worker in a session of its own, so a launcher killed outright (kill -9, a
    lost node) would leave its workers training; with this they receive SIGTERM and stop like a
    preempted run. prctl(PR_SET_PDEATHSIG), see prctl(2).
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the call
        os.kill(os.getpid(), signum)
