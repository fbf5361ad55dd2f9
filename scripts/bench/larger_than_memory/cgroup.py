"""A memory cgroup for one run, made under this process's own (v1 or v2): its limit, the processes inside it, and
what it was charged."""
import os
import secrets
import signal
import sys
import time

MIB = 1 << 20


class Unavailable(Exception):
    """No memory cgroup can be made here; the message says why."""


def read(path):
    with open(path) as f:
        return f.read()


def _stat(path):
    return {k: int(v) for k, v in (line.split() for line in read(path).splitlines())}


def _own_cgroup():
    """(v1 memory mount, our path in it) and (v2 mount, our path), each None where absent."""
    mounts = [line.split()[1:4] for line in read("/proc/mounts").splitlines()]
    v1 = [d for d, kind, opts in mounts if kind == "cgroup" and "memory" in opts.split(",")]
    v2 = [d for d, kind, _ in mounts if kind == "cgroup2"]
    own = {}
    for line in read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        own["v2" if controllers == "" else controllers] = path
    mem = next((p for c, p in own.items() if "memory" in c.split(",")), None)
    return ((v1[0], mem) if v1 and mem is not None else None, (v2[0], own["v2"]) if v2 and "v2" in own else None)


class MemoryGroup:
    """A memory cgroup made under this process's own for one run (limit None: no limit); close() removes it."""

    def __init__(self, limit=None, tag="mpinn-ltm"):
        self.path, self.anon_peak = None, 0
        if os.geteuid() != 0:
            raise Unavailable("making a memory cgroup needs root")
        try:
            v1, v2 = _own_cgroup()
        except (OSError, ValueError) as e:
            raise Unavailable("cannot read this process's cgroups: %s" % e)
        if not (v1 or v2):
            raise Unavailable("no memory cgroup is mounted (neither v1 with memory nor v2)")
        self.version = 1 if v1 else 2
        mount, own = v1 or v2
        parent = os.path.join(mount, own.lstrip("/"))
        parent = parent if os.path.isdir(parent) else mount      # a namespace or bind mount hides our path
        if self.version == 2 and "memory" not in read(os.path.join(parent, "cgroup.subtree_control")).split():
            raise Unavailable("cgroup v2 at %s does not hand the memory controller to its children" % parent)
        path = os.path.join(parent, "%s-%d-%s" % (tag, os.getpid(), secrets.token_hex(3)))
        try:
            os.mkdir(path)
        except OSError as e:
            raise Unavailable("cannot make a cgroup under %s: %s" % (parent, e.strerror))
        self.path = path
        try:
            if limit is not None and self.version == 1:
                self._write("memory.limit_in_bytes", limit)
                self._write("memory.memsw.limit_in_bytes", limit, optional=True)   # absent without swap accounting
            elif limit is not None:
                self._write("memory.max", limit)
                self._write("memory.swap.max", 0, optional=True)
        except OSError as e:
            self.close()
            raise Unavailable("cannot set the limit in %s: %s" % (path, e.strerror))

    def _write(self, name, value, optional=False):
        path = os.path.join(self.path, name)
        if not (optional and not os.path.exists(path)):
            with open(path, "w") as f:
                f.write(str(value))

    @property
    def mechanism(self):
        return "cgroup v%d" % self.version

    def enter(self):
        """For Popen(preexec_fn=...): the child joins the group before it execs, so all it starts is inside."""
        self._write("cgroup.procs", os.getpid())

    def sample(self):
        """Keep the peak of the group's anonymous memory."""
        try:
            st = _stat(os.path.join(self.path, "memory.stat"))
            self.anon_peak = max(self.anon_peak, st.get("total_rss", st.get("anon", 0)))
        except (OSError, ValueError):
            pass

    def stats(self):
        """The group's peak usage (MiB) and its OOM kills. (v1's failcnt stays 0 on this kernel at the limit.)"""
        p = lambda name: os.path.join(self.path, name)      # noqa: E731
        if self.version == 1:
            peak, oom = int(read(p("memory.max_usage_in_bytes"))), _stat(p("memory.oom_control")).get("oom_kill", 0)
        else:
            peak = int(read(p("memory.peak"))) if os.path.exists(p("memory.peak")) else float("nan")   # < 5.19
            oom = _stat(p("memory.events")).get("oom_kill", 0)
        return {"peak_mib": peak / MIB, "anon_peak_mib_sampled": self.anon_peak / MIB, "oom_kills": oom}

    def close(self):
        """Kill what is left inside (processes this script started), then remove the group."""
        for _ in range(100):
            if not self.path:
                return
            procs = os.path.join(self.path, "cgroup.procs")
            kill([int(x) for x in read(procs).split()] if os.path.exists(procs) else [])
            try:
                os.rmdir(self.path)
                self.path = None
            except OSError:
                time.sleep(0.1)
        print("warning: could not remove the cgroup %s" % self.path, file=sys.stderr)


def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

