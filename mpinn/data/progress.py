"""Progress of a long read (rank 0's reading of a table into memory, or a stream's sample pass): rows read, their
share of the estimate, rows/s and the time left, on stderr; a line every 5 s when not on a terminal, nothing for a
read shorter than 2 s. The readers tick() it; the entry point says whether it shows (reading())."""
import sys
import time
from contextlib import contextmanager

_current = None


class ReadProgress:
    def __init__(self, what, about=None, stream=sys.stderr):
        self.what, self.about, self.stream = what, about, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.t0 = self._last = time.perf_counter()
        self.rows = 0
        self.shown = False

    def add(self, n):
        self.rows += int(n)
        now = time.perf_counter()
        if now - self.t0 < 2.0 or now - self._last < (0.5 if self.tty else 5.0):
            return
        self._last = now
        self.show(now)

    def show(self, now, end=False):
        rate = self.rows / max(now - self.t0, 1e-9)
        line = "reading %s: %d rows" % (self.what, self.rows)
        if self.about and not end:
            left = max(self.about - self.rows, 0) / max(rate, 1e-9)
            line += " (%d%% of about %d)" % (min(100, 100 * self.rows // max(self.about, 1)), self.about)
            line += ", %.0f rows/s, about %.0f s left" % (rate, left)
        else:
            line += ", %.0f rows/s, %.1f s" % (rate, now - self.t0)
        self.stream.write(("\r" + line + ("\n" if end else "")) if self.tty else line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.shown:
            self.show(time.perf_counter(), end=True)


@contextmanager
def reading(what, about=None, enabled=True):
    """Show the progress of the reads inside (tick() calls) while it lasts."""
    global _current
    if not enabled:
        yield None
        return
    _current = ReadProgress(what, about)
    try:
        yield _current
    finally:
        _current.close()
        _current = None


def showing():
    """Is a progress display open (reading)?"""
    return _current is not None


def expect(rows):
    """About how many rows the read inside will take (for the share and the time left)."""
    if _current is not None:
        _current.about = int(rows)


def tick(n):
    """Rows read (a chunk's), by a reader."""
    if _current is not None:
        _current.add(n)
