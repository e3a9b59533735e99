"""Stopping at a step boundary on SIGTERM or Ctrl-C, so that a preempted run loses nothing.

Preemptible clusters (Slurm, Kubernetes, ModelArts) send SIGTERM and kill the job after a
grace period. `StopRequest` records the first SIGTERM or SIGINT (Ctrl-C); training finishes
the step in progress, writes a mid-epoch checkpoint (src.run.callbacks.StopOnSignal) and
exits with 128 + the signal number (143 for SIGTERM, 130 for Ctrl-C), what shells and
schedulers report for a job ended by that signal. A second Ctrl-C ends the process at once:
after the first signal SIGINT gets its default action, which the kernel carries out even
inside a long kernel. A second SIGTERM changes nothing: it is the same request (a scheduler
follows it with SIGKILL after its grace period), and MindSpore sends one itself when a SIGTERM
to the process group also ended its dataset workers ("Dataset worker process N was killed by
signal: Terminated. Main process will be terminated."; measured: ending the process there lost
the checkpoint, tests/reliability/test_group_stop.py).

Python runs a signal handler only between bytecodes of the main thread, i.e. when the step's
kernels have returned; the handler itself only records the signal. Measured with MindSpore 2.10:
once the data pipeline runs, a SIGINT can reach Python as SIGTERM (MindSpore's dataset engine
registers C-level SIGINT/SIGTERM handlers, mindspore::dataset::SIGINTHandler), so a Ctrl-C may
stop the run with status 143; the handler then gives SIGINT its default action, so the second
Ctrl-C still ends the process at once.
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
        if self.signum is not None:  # a SIGTERM again: the same request (a second Ctrl-C has no handler now)
            return
        self.signum = signum
        # a second Ctrl-C ends the process at once: the kernel's default action, also when MindSpore's dataset
        # engine passed the first one on as SIGTERM (this replaces its C-level SIGINT handler)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if self.deadline:  # a stop that hangs (a peer lost mid-collective) ends after it, from a C thread
            faulthandler.dump_traceback_later(self.deadline, exit=True)
        print(f"{signal.Signals(signum).name} received: finishing the current step, then writing a checkpoint "
              "(press Ctrl-C again to stop at once, without one)", flush=True)

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
