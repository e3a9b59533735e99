"""A dependency-free progress bar on stderr."""
import sys
import time


class ProgressBar:
    """`label: 120/500 [####......] 24% 35.1 img/s, eta 0:11` on stderr.

    On a terminal the line is redrawn in place (at most 10 times a second); in a log file
    (not a TTY) a line is written at the first update, then at most every `interval_s`
    seconds, and at the end, so a log holds a few lines per run however fast it goes.
    `total` may be an upper bound (e.g. batches × batch size): `finish()` writes the final
    line with the true count.
    The rate and ETA count from the first update on, so a first call that compiles a graph
    does not skew them.
    """

    def __init__(self, total, label="", stream=None, width=30, unit="it", interval_s=10.0, clock=time.monotonic):
        self.total = max(int(total), 1)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.width = width
        self.done = 0
        self.interval_s = interval_s
        self.clock = clock
        self.start = clock()
        self._first = None  # (time, count) at the first update
        self._last_update = self.start
        self._last_draw = None
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, n=1):
        self.done = min(self.done + n, self.total)
        now = self.clock()
        if self._first is None:
            self._first = (now, self.done)
        self._last_update = now
        self._draw(now)

    def _draw(self, now):
        interval = 0.1 if self._tty else self.interval_s
        if self.done < self.total and self._last_draw is not None and now - self._last_draw < interval:
            return
        self._last_draw = now
        if self._tty:
            self.stream.write("\r" + self._line(now) + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def finish(self):
        """Mark the work done at the count reached (when `total` was an upper bound)."""
        if self.done < self.total:
            self.total = max(self.done, 1)
            self._draw(self._last_update)  # the rate of the work, not the wait

    def _line(self, now):
        filled = self.done * self.width // self.total
        start, counted = self._first if self._first and self.done > self._first[1] else (self.start, 0)
        rate = (self.done - counted) / max(now - start, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        eta = f", eta {int(left) // 60}:{int(left) % 60:02d}" if self.done < self.total and rate > 0 else ""
        return (f"{self.label}: {self.done}/{self.total} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{100 * self.done // self.total:3d}% {rate:.1f} {self.unit}/s{eta}")
