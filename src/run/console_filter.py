"""Keeps MindSpore's report of dataset workers ended by our own stop off the console (issue 27).

A SIGTERM sent to the process group (a scheduler's stop, `timeout`, `kill -- -PGID`) reaches the
dataset's worker processes as well as train.py. MindSpore's SIGCHLD handler, C++ code in train.py's
process, then writes two lines straight to file descriptor 2 ("Dataset worker process N was killed
by signal: Terminated. Main process will be terminated." and "Main process may not respond to the
SIGTERM signal"), while train.py is already finishing its step and writing the checkpoint it will
name. Python cannot intercept a write to a file descriptor, so `filter_native_stderr` makes
descriptor 2 a pipe read by a small process (this file run as a script) that passes every other line
on to the real stderr. Python's own `sys.stderr` keeps writing to the real stream, so a terminal stays
a terminal for the progress bar. Workers ended otherwise (Killed: the OOM killer; a segfault) still
show. The pattern is the launchers' (scripts/launch_common.sh, console_lines); a test holds them equal.
"""
import os
import re
import sys

STOP_REPORT = re.compile(rb"^\[(ERROR|WARNING)\] MD\(.*SIGCHLDHandler\] (Dataset worker process [0-9]+ was killed "
                         rb"by signal: (Terminated|Interrupt)|Main process may not respond to the SIGTERM signal)")


def passes(line):
    """Whether a line (bytes) of native stderr reaches the console."""
    return not STOP_REPORT.match(line)


def filter_native_stderr():
    """From now on, what this process and its children write to file descriptor 2 passes the filter process;
    `sys.stderr` writes to the real stream directly. Call before MindSpore is imported. Returns the filter's pid
    (it ends by itself once every writer of the pipe has exited), or None without a stderr."""
    sys.stderr.flush()
    try:
        real = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep clean
        return None
    read_end, write_end = os.pipe()
    # posix_spawn, not subprocess.Popen: no Popen object left to warn "subprocess is still running" at exit;
    # its own session: a signal to train.py's process group does not end it before the last lines pass
    pid = os.posix_spawn(sys.executable, [sys.executable, "-S", os.path.abspath(__file__)], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0), (os.POSIX_SPAWN_DUP2, real, 1),
                                       (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)], setsid=True)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    # closefd=False: the descriptor lives as long as the process (no ResourceWarning for it at exit)
    sys.stderr = os.fdopen(real, "w", buffering=1, encoding=sys.stderr.encoding, errors=sys.stderr.errors,
                           closefd=False)
    return pid


def _pass_lines(source, sink):
    for line in source:
        if passes(line):
            sink.write(line)
            sink.flush()


if __name__ == "__main__":
    _pass_lines(sys.stdin.buffer, sys.stdout.buffer)
