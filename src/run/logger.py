"""A run's log: lines to stdout and appended to a file (never truncated, so resumed runs add to it)."""
import time


class RunLogger:
    """Callable `log(message)`: a timestamped line on stdout and in `path` (when given)."""

    def __init__(self, path=None, rank=0):
        self.path = path
        self.prefix = f"[rank {rank}] " if rank else ""
        self._file = open(path, "a", encoding="utf-8", buffering=1) if path else None

    def __call__(self, message):
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {self.prefix}{message}"
        print(line, flush=True)
        self._write(line)

    def to_file(self, message):
        """A timestamped line in the file only (e.g. MindSpore's own warnings); dropped once closed."""
        self._write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {self.prefix}{message}")

    def _write(self, line):
        if self._file is not None:
            try:
                self._file.write(line + "\n")
            except OSError as exc:  # a full or read-only disk: name the file (write() does not)
                raise OSError(exc.errno, exc.strerror, self.path) from None

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self):  # closed with the logger, so no ResourceWarning for the file
        self.close()

