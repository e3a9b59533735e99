"""MindSpore's own warnings: off the console, into the run's log.

MindSpore warns through its logger (`[WARNING] ME(...)` lines on stderr) and through Python's
`warnings` module. Some of them concern MindSpore's own code and cannot be fixed here, e.g.
2.10's checkpoint module calls the deprecated `Thread.getName()`. `divert_framework_warnings`
sends those to the run's log instead of the console. Warnings that this project's code causes
are fixed where they arise, not hidden: a Python warning raised from a file outside MindSpore's
package still reaches the console (tests/test_warnings.py checks that train, eval and export
raise none).
"""
import logging
import os
import warnings


class _ToLog(logging.Filter):
    """On MindSpore's console handler: warnings go to `write`, errors stay on the console."""

    def __init__(self, write):
        super().__init__()
        self.write = write

    def filter(self, record):
        if record.levelno >= logging.ERROR:
            return True
        self.write(f"mindspore {record.levelname.lower()}: {' '.join(record.getMessage().split())}")
        return False


def divert_framework_warnings(write):
    """Send MindSpore's warnings to `write(line)` (e.g. the run log's file) instead of stderr."""
    import mindspore
    from mindspore import log as ms_log

    package = os.path.dirname(os.path.abspath(mindspore.__file__)) + os.sep
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if os.path.abspath(filename).startswith(package):
            write(" ".join(warnings.formatwarning(message, category, filename, lineno, line).split()))
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
    ms_log.get_level()  # creates MindSpore's logger, named as mindspore/log.py names it
    for handler in logging.getLogger(f"ME.mindspore.log.{os.getpid()}").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.addFilter(_ToLog(write))
