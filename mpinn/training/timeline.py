"""Where the time goes: every phase of every step on a timeline (and a Chrome trace), and the progress bar."""
import json
import os
import sys
import time

from mpinn.files.outputs import made_parent

PHASES = ("data", "compute", "comm", "update")   # data wait, forward+backward, communication, optimizer


class Timeline:
    """Every phase of every step as a record (phase, start, end, step); the summary's time split is
    the sum of the same records. The records themselves are kept only when a trace file is wanted.

    A step takes its phase boundaries from now(): the host's clock, or on a GPU (backend with a device) a mark
    (DeviceClock) the GPU reaches when the work queued before it is done, so that kernels still running when
    the host moves on count in the phase that queued them, not in the next one that waits for them (the
    communication). Marks cost the host no wait: a record waits in `pending` until the GPU has passed its end
    (asked without waiting after each step), and the totals, parts and trace wait once for what is left.
    `syncs` counts, per step, the host's waits on the device the backend saw (Backend.syncs) between a phase's
    marks (each record carries its own in the trace): a step's, from its first boundary to its last; not the
    data wait's, timed on the host, nor an evaluation's between steps."""

    def __init__(self, keep=False, backend=None):
        self.keep = keep
        self.backend = backend
        self.clock = DeviceClock(backend) if backend is not None and backend.device is not None else None
        self.reset()

    def reset(self):
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._parts = {}        # named parts of a phase (a sharded table's Alltoallv's): seconds
        self._events = []
        self.pending = []       # records whose marks the device has not passed yet
        self.syncs = {}         # step -> the host's waits on the device during it
        self.origin = time.perf_counter()

    def now(self):
        """A phase boundary: the host's time, or on a GPU a mark (see DeviceClock)."""
        return time.perf_counter() if self.clock is None else self.clock.now()

    def add(self, phase, start, end, step, name=None):
        """A record of phase; name: which part of it (its own totals in .parts, its own name in the trace).
        start, end: host times (time.perf_counter) or marks (now())."""
        syncs = 0
        if isinstance(start, Mark) and isinstance(end, Mark):
            syncs = end.syncs - start.syncs
            self.syncs[step] = self.syncs.get(step, 0) + syncs
        if isinstance(start, float) and isinstance(end, float) and not self.pending:
            self._record(phase, start, end, step, name, syncs)
            return
        self.pending.append((phase, start, end, step, name, syncs))
        self._settle(wait=False)

    def _settle(self, wait):
        """Record the pending records, in order, whose marks the device has passed; wait: all of them."""
        while self.pending:
            phase, start, end, step, name, syncs = self.pending[0]
            if not wait and not all(self.clock.ready(m) for m in (start, end) if not isinstance(m, float)):
                return
            start, end = (self.clock.seconds(m) if not isinstance(m, float) else m for m in (start, end))
            self.pending.pop(0)
            self._record(phase, start, end, step, name, syncs)

    def _record(self, phase, start, end, step, name, syncs):
        self._totals[phase] += end - start
        if name:
            self._parts[name] = self._parts.get(name, 0.0) + end - start
        if self.keep:
            self._events.append((name or phase, start, end, step, phase, syncs))

    @property
    def totals(self):
        """Seconds per phase (on a GPU, once the device has passed every mark: the host waits for it here)."""
        self._settle(wait=True)
        return self._totals

    @property
    def parts(self):
        self._settle(wait=True)
        return self._parts

    @property
    def events(self):
        self._settle(wait=True)
        return self._events

    def trace_events(self, rank):
        """This rank's records as Chrome-trace complete events ("X", microseconds), one track."""
        out = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "rank %d" % rank}},
               {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}}]
        for name, start, end, step, phase, syncs in self.events:
            out.append({"name": name, "cat": phase, "ph": "X", "pid": rank, "tid": 0,
                        "ts": (start - self.origin) * 1e6, "dur": (end - start) * 1e6,
                        "args": {"step": step, "host_syncs": syncs}})
        return out


class Mark:
    """A phase boundary on a GPU: the event recorded there and the backend's count of host waits then."""
    __slots__ = ("event", "syncs")

    def __init__(self, event, syncs):
        self.event, self.syncs = event, syncs


class DeviceClock:
    """Phase boundaries on a GPU: at each, a timing event recorded on the compute stream (the host does not wait).
    A mark's time is when the GPU passed it, on the host's clock: the anchor (the host's time when the first
    event was recorded, the device made idle just before, once a run) plus the device time from the anchor's
    event to the mark's (cudaEventElapsedTime)."""

    def __init__(self, backend):
        self.b = backend
        self.anchor = None

    def _event(self):
        event = self.b.new_event(timing=True)
        event.record(self.b.current_stream())
        return event

    def now(self):
        if self.anchor is None:
            self.b.synchronize()
            event = self._event()
            self.anchor = (time.perf_counter(), event)
        return Mark(self._event(), self.b.syncs)

    def ready(self, mark):
        return self.b.event_done(mark.event)

    def seconds(self, mark):
        self.b.host_wait(mark.event)
        host, event = self.anchor
        return host + self.b.elapsed_ms(event, mark.event) / 1e3


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
        if step > steps:        # a stream's steps are an estimate: past it, the count alone
            line = "epoch %d/%d [%s] step %d (%d estimated) loss %.4f %.0f samples/s" % (
                epoch, epochs, "#" * width, step, steps, loss, rate)
        else:
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
        tmp = made_parent(path) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
