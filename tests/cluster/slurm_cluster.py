"""A real two-node Slurm cluster on one Linux machine, for tests/cluster/test_slurm.py.

munged and slurmctld run in the root network namespace; each node is a slurmd in its own network
namespace (the multi-host test's Cluster: a bridge, veths, a private /24), with its own hostname and
/dev/shm, so MPI sees two hosts and the ranks' bytes cross eth0. Everything is private to one run: its
own munge key and socket, its own slurm.conf, state, spool and logs under a temporary directory, and a
free port for slurmctld. Every daemon runs in the foreground under subreaper.py (which reaps what the
daemons fork away) and is ended by its process id."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

from scripts.lab.netns import Job, kill_netns_processes, netns_names, sh
from test_multihost import Cluster     # the namespace lab with this venv's mpiexec

HERE = os.path.dirname(os.path.abspath(__file__))
SUBREAPER = os.path.join(HERE, "subreaper.py")
# the Debian packages (Slurm 22.05 in bookworm); libpmix-dev puts libpmix.so where Slurm's mpi/pmix
# plugin opens it (/usr/lib/x86_64-linux-gnu/pmix2/lib): without it `srun --mpi=pmix` cannot load
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
PMIX_PACKAGES = ["libpmix-dev"]
COMMANDS = ["munged", "munge", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scontrol", "scancel", "sinfo"]
PMIX_LIBRARY = "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so"
# every run's directory is named after the pytest process: a leftover of a run whose process is gone is
# recognised by it (and removed at the next start)
RUN_DIR_RE = re.compile(r"/mnslurm(\d+)/")


# ---------------------------------------------------------------- the packages
def _apt(*args, timeout=600):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=120"] + list(args), capture_output=True,
                          text=True, timeout=timeout, env=env, start_new_session=True)


def install(packages):
    """apt-get install the packages (an `apt-get update` first if that fails); None if they are there
    afterwards, else the reason they are not."""
    if not shutil.which("apt-get"):
        return "no apt-get on this machine"
    try:
        r = _apt("install", "-y", "--no-install-recommends", *packages)
        if r.returncode != 0:
            u = _apt("update")
            if u.returncode != 0:
                return "apt-get update failed: %s" % _last_line(u)
            r = _apt("install", "-y", "--no-install-recommends", *packages)
    except subprocess.TimeoutExpired:
        return "apt-get install %s took over 10 minutes" % " ".join(packages)
    return None if r.returncode == 0 else "apt-get install %s failed: %s" % (" ".join(packages), _last_line(r))


def _last_line(r):
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1] if lines else "exit code %d" % r.returncode


def missing_commands():
    return [c for c in COMMANDS if not shutil.which(c)]


def ensure_packages():
    """(reason Slurm cannot be had or None, reason PMIx cannot or None, seconds spent installing)."""
    t = time.monotonic()
    reason = None
    if missing_commands():
        reason = install(PACKAGES)
        if not reason and missing_commands():
            reason = "after apt-get install, still no %s" % ", ".join(missing_commands())
    pmix = None
    if not reason and not os.path.exists(PMIX_LIBRARY):
        pmix = install(PMIX_PACKAGES) or (None if os.path.exists(PMIX_LIBRARY) else "no " + PMIX_LIBRARY)
    return reason, pmix, time.monotonic() - t


# ---------------------------------------------------------------- processes
def proc_stat(pid):
    """(state, ppid) of a process, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError):
        return None


def alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(pid):
    """Every process below pid (by parent links, as they are now)."""
    children = {}
    for p in all_pids():
        st = proc_stat(p)
        if st:
            children.setdefault(st[1], []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def read_proc(pid, what):
    try:
        with open("/proc/%d/%s" % (pid, what), "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def mentioning(text, exclude=()):
    """Live processes whose command line or environment contains text (srun, ranks, daemons of a run)."""
    me = os.getpid()
    return [p for p in all_pids() if p != me and p not in exclude and alive(p)
            and (text in read_proc(p, "cmdline") or text in read_proc(p, "environ"))]


def kill_all(pids, deadline_s=5.0):
    """SIGKILL until every pid is gone (or a zombie, which its reaper removes)."""
    end = time.monotonic() + deadline_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            raise RuntimeError("processes %s survive SIGKILL" % left)
        time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def remove_stale():
    """Daemons, srun and ranks of an earlier run whose pytest process is gone (killed mid-run)."""
    for p in all_pids():
        m = RUN_DIR_RE.search(read_proc(p, "cmdline"))
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            kill_all([p] + descendants(p))


# ---------------------------------------------------------------- the cluster
CONF = """\
# generated by tests/cluster/slurm_cluster.py: a two-node cluster on one machine, each node a network namespace
ClusterName=mpinn
SlurmctldHost={host}({ctl_ip})
SlurmctldPort={port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket={d}/run/munge.sock,cred_expire=5
# ... and the schedulers look for it every second (defaults: the main loop 60 s, backfill 30 s)
SchedulerParameters=sched_interval=1,bf_interval=1
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
# each node's own scratch (mounted per node below), as on separate machines: PMIx's per-step folders
# would collide in one shared /tmp
TmpFS={d}/nodetmp
# no cgroups, no systemd: processes are tracked by their parent links
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Slurm's own default: srun wires no MPI unless told (--mpi=pmi2 / --mpi=pmix)
MpiDefault=none
ReturnToService=2
{nodes}
PartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """munged + slurmctld + one slurmd per namespace host. up() brings it up and waits until every node
    is idle; down() ends every job, daemon and process of it by pid, whatever state it is in."""

    def __init__(self, base_dir, cpus_per_node=2):
        self.dir = os.path.join(base_dir, "mnslurm%d" % os.getpid())
        self.net = Cluster(2, base_dir)
        self.cpus = cpus_per_node
        self.daemons = {}           # name -> Popen (the subreaper running it)
        self.jobs = []
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = None

    @property
    def nodes(self):
        return self.net.hosts

    # ------------------------------------------------------------ bring-up
    def up(self):
        for sub in ("munge", "run", "state", "log", "spool", "jobs", "nodetmp"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        os.chmod(os.path.join(self.dir, "run"), 0o755)          # munged wants its socket's folder open
        self.net.up()
        ips = ["%s.%d" % (self.net.subnet, 10 + i) for i in range(1, len(self.nodes) + 1)]
        nodes = "\n".join("NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN" % (n, ip, self.cpus)
                          for n, ip in zip(self.nodes, ips))
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=socket.gethostname(), ctl_ip=self.net.subnet + ".1", port=free_port(),
                                d=self.dir, nodes=nodes, names=",".join(self.nodes)))
        self.env = dict(os.environ, SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                        OPENBLAS_NUM_THREADS="1",
                        # the venv's python and mpiexec first, on every node (srun passes PATH on)
                        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                        # TCP over eth0: the mpich wheel's default (UCX) would use shared memory
                        # between the namespaces, and no byte would cross the "network"
                        MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="eth0")
        self.env.pop("SLURM_JOB_ID", None)
        m = os.path.join(self.dir, "munge")
        with open(os.path.join(m, "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(m, "munge.key"), 0o400)
        # --force: the temporary directory is not world-searchable (only root talks to munged here)
        self._start("munged", ["munged", "-F", "--force", "--socket", self.dir + "/run/munge.sock",
                               "--key-file", m + "/munge.key", "--pid-file", self.dir + "/run/munged.pid",
                               "--log-file", self.dir + "/log/munged.log", "--seed-file", m + "/seed"])
        self._wait(lambda: os.path.exists(self.dir + "/run/munge.sock"), 10, "munged's socket")
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for node in self.nodes:
            os.makedirs(os.path.join(self.dir, "spool", node), exist_ok=True)
            # nsenter --net, not `ip netns exec`: the latter remounts /sys, and slurmd needs /sys/fs/cgroup
            self._start("slurmd-" + node, [
                "nsenter", "--net=/run/netns/" + node, "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", 'hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && '
                'mount -t tmpfs -o mode=1777 tmpfs "$2" && shift 2 && exec "$@"',
                "sh", node, os.path.join(self.dir, "nodetmp"), "slurmd", "-D", "-f", self.conf, "-N", node])
        self._wait(lambda: self.node_states() == ["idle"] * len(self.nodes), 30, "every node idle")
        return self

    def _start(self, name, cmd):
        log = open(os.path.join(self.dir, "log", name + ".stdio"), "w")
        self.daemons[name] = subprocess.Popen([sys.executable, SUBREAPER] + cmd, stdout=log, stderr=log,
                                              stdin=subprocess.DEVNULL, env=self.env, cwd=self.dir,
                                              start_new_session=True)
        log.close()

    def _wait(self, ready, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            dead = [n for n, p in self.daemons.items() if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        raise RuntimeError("Slurm: no %s after %d s (daemons that exited: %s)\n%s"
                           % (what, timeout, dead or "none", self.log_tails()))

    def log_tails(self, lines=6):
        out = []
        for name in sorted(os.listdir(os.path.join(self.dir, "log"))):
            with open(os.path.join(self.dir, "log", name), errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
            out.append("== %s\n%s" % (name, "\n".join(tail)))
        return "\n".join(out)

    # ------------------------------------------------------------ client commands
    def cmd(self, *args, timeout=20, check=True):
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.env,
                           start_new_session=True)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
        return r

    def node_states(self):
        r = self.cmd("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=10)
        return sorted(r.stdout.split()) if r.returncode == 0 else None

    def job_ids(self):
        return [int(j) for j in self.cmd("squeue", "-h", "-o", "%i").stdout.split()]

    def job(self, job_id):
        """scontrol show job, as a dict (JobState, ExitCode, Restarts, ...)."""
        text = self.cmd("scontrol", "show", "job", "-o", str(job_id)).stdout
        return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)

    def wait_job_done(self, job_id, timeout):
        """Wait until the job has left the queue; its final record."""
        end = time.monotonic() + timeout
        while job_id in self.job_ids():
            if time.monotonic() > end:
                raise AssertionError("job %d still queued or running after %d s: %s" % (
                    job_id, timeout, self.job(job_id)))
            time.sleep(0.2)
        return self.job(job_id)

    def srun(self, args, limit_s=60, name="srun"):
        """srun ARGS in the background (its own process group, under timeout -k)."""
        job = Job(["srun"] + list(args), self.env, limit_s, os.path.join(self.dir, "jobs"), name)
        self.jobs.append(job)
        return job

    def sbatch(self, args, env=None):
        e = dict(self.env, **(env or {}))
        r = subprocess.run(["sbatch", "--parsable"] + list(args), capture_output=True, text=True, timeout=20,
                           env=e, start_new_session=True)
        if r.returncode != 0:
            raise RuntimeError("sbatch: %s" % r.stderr.strip())
        return int(r.stdout.strip().split(";")[0])

    def tasks(self, node, pattern):
        """Pids of processes on a node whose command line contains pattern."""
        return self.net.pids(node, pattern)

    # ------------------------------------------------------------ teardown
    def step_processes(self):
        """Every process in the nodes' namespaces but the slurmd themselves: stepds, batch scripts, ranks."""
        slurmds = set()
        for name, reaper in self.daemons.items():
            if name.startswith("slurmd-"):
                slurmds.update(p for p in descendants(reaper.pid) if read_proc(p, "comm").strip() == "slurmd")
        present = netns_names()
        return [p for ns in self.nodes if ns in present
                for p in map(int, sh("ip", "netns", "pids", ns, check=False).stdout.split()) if p not in slurmds]

    def end_jobs(self, wait_s=15):
        """Cancel every job and wait until no step process is left; SIGKILL what still is."""
        for job in self.jobs:
            job.kill()
        self.jobs = []
        if self.env and self.daemons.get("slurmctld") and self.daemons["slurmctld"].poll() is None:
            self.cmd("scancel", "--user=root", check=False)
            end = time.monotonic() + wait_s
            while time.monotonic() < end and (self.job_ids() or self.step_processes()):
                time.sleep(0.2)
        kill_all(self.step_processes())

    def down(self):
        """Idempotent; safe at any point of up()."""
        try:
            try:
                self.end_jobs()
            except Exception:       # noqa: BLE001 - a broken controller must not stop the teardown
                pass
            for proc in self.daemons.values():
                if proc.poll() is None:
                    try:
                        os.kill(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            for proc in self.daemons.values():
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    kill_all(descendants(proc.pid) + [proc.pid])
                    proc.wait(5)
            for ns in self.nodes:
                if ns in netns_names():
                    kill_netns_processes(ns)
            kill_all(mentioning(self.dir))
        finally:
            self.net.down()
