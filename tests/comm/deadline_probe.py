"""Under mpiexec (tests/comm/test_deadlines.py): trains with the options of each argument (a space-separated
argv) and prints every MPI collective a rank started with no deadline armed, as
`UNGUARDED <call> <where>`, then `done`.

A collective with no deadline is where a lost peer (kill -9 under srun without --kill-on-bad-exit, an
unreachable host) leaves the survivors waiting for ever. The watchdog is mpinn's own class with its state read
at each call; the calls are those of mpi4py's communicator under every mpinn Communicator."""
import shlex
import sys
import traceback

import mpinn.comm.base as base
import mpinn.comm.guard as guard

COLLECTIVES = {"Allreduce", "allreduce", "Iallreduce", "Bcast", "bcast", "Ibcast", "Barrier", "Ibarrier", "Reduce",
               "Scatterv", "scatter", "Gatherv", "Gather", "gather", "Allgather", "Allgatherv", "allgather",
               "Alltoall", "Alltoallv", "Split", "Split_type", "Dup"}
watchdogs = []
unguarded = set()


class Recorded(guard.Watchdog):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        watchdogs.append(self)


def where():
    frames = [f for f in traceback.extract_stack()[:-2]
              if "/mpinn/" in f.filename and not f.filename.endswith("/comm/base.py")]
    return " < ".join("%s:%d" % (f.filename.split("/mpinn/")[-1], f.lineno) for f in frames[::-1][:3])


class Watched:
    """mpi4py's communicator, each collective call checked against the newest watchdog's state."""

    def __init__(self, comm):
        object.__setattr__(self, "_comm", comm)

    def __getattr__(self, name):
        attr = getattr(self._comm, name)
        if name not in COLLECTIVES or not callable(attr):
            return attr

        def call(*args, **kwargs):
            armed = watchdogs and watchdogs[-1].state()[2] is not None and not watchdogs[-1]._stop.is_set()
            if not armed:
                unguarded.add("%s %s" % (name, where()))
            return attr(*args, **kwargs)
        return call


def watched_init(init):
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.comm = Watched(self.comm)
    return __init__


guard.Watchdog = Recorded
base.Communicator.__init__ = watched_init(base.Communicator.__init__)

from mpinn import api, settings  # noqa: E402 - after the patches

for argv in sys.argv[1:]:
    args = shlex.split(argv)
    everywhere = "--params-everywhere" in args
    args = [a for a in args if a != "--params-everywhere"] + ["--quiet", "--no-progress"]
    api.run(settings.from_argv(args), params_everywhere=everywhere)
for line in sorted(unguarded):
    print("UNGUARDED %s\n" % line, end="", flush=True)     # one write a line: the ranks end together
print("done\n", end="", flush=True)
