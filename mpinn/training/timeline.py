"""Where the time goes: every phase of every step on a timeline (and a Chrome trace), and the progress bar."""
import json
import os
import sys
import time

PHASES = ("data", "compute", "comm", "update")   # data wait, forward+backward, communication, optimizer


class Timeline:
    """Every phase of every step as a record (phase, start, end, step); the summary's time split is
    the sum of the same records. The records themselves are kept only when a trace file is wanted."""

    def __init__(self, keep=False):
        self.keep = keep
        self.reset()

    def reset(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.parts = {}         # named parts of a phase (a sharded table's Alltoallv's): seconds
        self.events = []
        self.origin = time.perf_counter()

    def add(self, phase, start, end, step, name=None):
        """A record of phase; name: which part of it (its own totals in .parts, its own name in the trace)."""
        self.totals[phase] += end - start
        if name:
            self.parts[name] = self.parts.get(name, 0.0) + end - start
        if self.keep:
            self.events.append((name or phase, start, end, step, phase))

    def trace_events(self, rank):
        """This rank's records as Chrome-trace complete events ("X", microseconds), one track."""
        out = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "rank %d" % rank}},
               {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}}]
        for name, start, end, step, phase in self.events:
            out.append({"name": name, "cat": phase, "ph": "X", "pid": rank, "tid": 0,
                        "ts": (start - self.origin) * 1e6, "dur": (end - start) * 1e6, "args": {"step": step}})
        return out


class ProgressBar:
    """A one-line progress bar on rank 0 (stderr); plain periodic lines when not on a terminal."""

    def __init__(self, enabled, stream=sys.stderr):
        self.enabled, self.stream = enabled, stream
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._last = 0.0

    def update(self, epoch, epochs, step, steps, loss, rate):
        if not self.enabled:
            return
        now = time.perf_counter()
        last_step = step == steps
        if not last_step and now - self._last < (0.2 if self.tty else 5.0):
            return
        self._last = now
        width = 24
        done = int(width * step / steps)
        line = "epoch %d/%d [%s%s] %3d%% step %d/%d loss %.4f %.0f samples/s" % (
            epoch, epochs, "#" * done, "." * (width - done), 100 * step // steps, step, steps, loss, rate)
        if self.tty:
            self.stream.write("\r" + line + ("\n" if last_step else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def write_trace(timeline, comm, path):
    """Collective: rank 0 gathers every rank's records (once) and writes one Chrome-trace JSON file
    (Perfetto, chrome://tracing): a process per rank, its phases as complete events."""
    events = comm.gather_obj(timeline.trace_events(comm.rank))
    if comm.rank == 0:
        doc = {"traceEvents": [e for rank_events in events for e in rank_events],
               "displayTimeUnit": "ms",
               "otherData": {"ranks": comm.size, "phases": list(PHASES), "reduce": comm.name}}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
