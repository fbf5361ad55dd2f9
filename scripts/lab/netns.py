"""A multi-host lab on one Linux machine: every "host" a network namespace, joined by a bridge.

    python -m scripts.lab.netns --check          # can this machine build the lab? (root, ip, namespaces, mpiexec)
    python -m scripts.lab.netns --clean          # remove namespaces and links of earlier runs whose process is gone
    python -m scripts.lab.netns --demo 2 --rate 10gbit    # build 2 hosts, shape, measure TCP between them, tear down

Used by tests/cluster/ and scripts/bench/multihost.py, sharded.py (one copy of the machinery):
  Cluster(n, out_dir, mpiexec)  namespaces mn<pid><letter>h1.., eth0 = 10.213.S.(10+i)/24 in each, a veth
                                pair per host into bridge mn<pid><letter>b = 10.213.S.1; no default route,
                                so nothing leaves the machine. up()/down() or `with`; down() kills every
                                process in a namespace before deleting it.
  Cluster.mpich / .openmpi      a launcher (under `timeout -k 5`) that reaches the hosts through
                                scripts/lab/netns_ssh, with the settings that make MPI use eth0: MPICH over
                                ofi/tcp on eth0 (the wheel's default UCX would use shared memory and no
                                byte would cross eth0), Open MPI's btl tcp on eth0
  Cluster.shape / .unshape      a token-bucket (tbf) rate limit on both directions of every host's link:
                                egress of the root-side veth = into the host, egress of eth0 inside the
                                namespace = out of the host. Rate only: latency cannot be added where the
                                kernel has no netem (as here); qdiscs() gives `tc -s qdisc show` of all links
  Cluster.counters              {host: (rx_bytes, tx_bytes)} of each host's eth0
Every name starts with mn<pid of the creating process>; remove_stale() deletes those whose process is gone.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from scripts import ROOT

STANDIN = os.path.join(ROOT, "scripts", "lab", "netns_ssh")
# every name this module creates: mn<pid of the creating process><letter> + h1 | b | v1 ...; a leftover of a
# run whose process is gone is removed at the next start
NAME_RE = re.compile(r"^mn(\d+)([a-z])(?:h\d+|b|v\d+)$")


def sh(*cmd, check=True, timeout=20):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), (r.stderr or r.stdout).strip()))
    return r


def default_mpiexec():
    """The launcher next to this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def netns_names():
    return [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line.strip()]


def link_names():
    return [l.split()[0].split("@")[0] for l in sh("ip", "-br", "link").stdout.splitlines() if l.strip()]


def kill_netns_processes(ns, deadline_s=5.0):
    """SIGKILL every process in namespace ns until none is left (processes on a cut-off host never exit)."""
    end = time.monotonic() + deadline_s
    while True:
        pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            raise RuntimeError("processes %s in namespace %s survive SIGKILL" % (pids, ns))
        time.sleep(0.05)


def remove_stale():
    """Namespaces and links left by an earlier run whose process is gone (e.g. killed)."""
    mine = str(os.getpid())
    for ns in netns_names():
        m = NAME_RE.match(ns)
        if m and m.group(1) != mine and not os.path.exists("/proc/%s" % m.group(1)):
            kill_netns_processes(ns)
            sh("ip", "netns", "del", ns, check=False)
    for link in link_names():
        m = NAME_RE.match(link)
        if m and m.group(1) != mine and not os.path.exists("/proc/%s" % m.group(1)):
            sh("ip", "link", "del", link, check=False)


def skip_reason(mpiexec):
    """None if this machine can build the lab and launch MPICH across it, else why not."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as root)"
    for tool in ("ip", "unshare", "timeout"):
        if not shutil.which(tool):
            return "needs the %r command" % tool
    if not mpiexec:
        return "no mpiexec (pip install -e '.[test]' installs the mpich wheel)"
    probe = "mn%dzh0" % os.getpid()
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return "network namespaces unavailable here: %s" % r.stderr.strip()
    sh("ip", "netns", "del", probe, check=False)
    return None


class Job:
    """A launcher started in the root namespace, in its own process group, under `timeout -k`."""

    def __init__(self, cmd, env, limit_s, out_dir, name):
        self.out_path, self.err_path = (os.path.join(out_dir, name + ext) for ext in (".out", ".err"))
        self._out, self._err = open(self.out_path, "w"), open(self.err_path, "w")
        self.proc = subprocess.Popen(["timeout", "-k", "5", str(limit_s)] + cmd, stdout=self._out,
                                     stderr=self._err, env=env, cwd=ROOT, start_new_session=True)
        self.started = time.monotonic()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.flush()
            self._err.flush()

    def wait_for_output(self, text, timeout):
        """Wait until stdout shows `text` (False if the job ends or time runs out first)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.stdout:
                return True
            if self.proc.poll() is not None:
                return text in self.stdout
            time.sleep(0.05)
        return False

    @property
    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    @property
    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._out.close()
        self._err.close()


class Cluster:
    """n hosts: namespaces <tag>h1.. with eth0 = 10.213.S.(10+i)/24 on a bridge <tag>b = 10.213.S.1;
    no default route, so nothing leaves the machine."""

    _count = 0

    def __init__(self, n_hosts, out_dir, mpiexec=None):
        Cluster._count += 1
        self.tag = "mn%d%s" % (os.getpid(), "abcdefghijklmnopqrstuvwxyz"[Cluster._count % 26])
        self.bridge = self.tag + "b"
        self.hosts = ["%sh%d" % (self.tag, i) for i in range(1, n_hosts + 1)]
        self.veths = ["%sv%d" % (self.tag, i) for i in range(1, n_hosts + 1)]
        self.out_dir = out_dir
        self.mpiexec = mpiexec or default_mpiexec()
        self.jobs = []
        self.subnet = None
        self.shaped = None

    def _free_subnet(self):
        used = set(re.findall(r"inet 10\.213\.(\d+)\.", sh("ip", "-4", "addr").stdout))
        for s in [(os.getpid() + k) % 250 + 2 for k in range(250)]:
            if str(s) not in used:
                return "10.213.%d" % s
        raise RuntimeError("no free 10.213.x.0/24 subnet on this machine")

    def up(self):
        self.subnet = self._free_subnet()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", self.subnet + ".1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, (ns, veth) in enumerate(zip(self.hosts, self.veths), 1):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", "%s.%d/24" % (self.subnet, 10 + i), "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        return self

    def stop_jobs(self):
        """Every launcher, then every process left in a namespace."""
        for job in self.jobs:
            job.kill()
        self.jobs = []
        for ns in self.hosts:
            if ns in netns_names():
                kill_netns_processes(ns)

    def down(self):
        try:
            self.stop_jobs()
        finally:
            present = netns_names()
            for ns in self.hosts:
                if ns in present:
                    sh("ip", "netns", "del", ns, check=False)
            links = link_names()
            for link in self.veths + [self.bridge]:
                if link in links:
                    sh("ip", "link", "del", link, check=False)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # ------------------------------------------------------------ the links
    def _links(self):
        """(tc's namespace option, device) of both directions of every host's link."""
        return [([], veth) for veth in self.veths] + [(["-n", ns], "eth0") for ns in self.hosts]

    def shape(self, rate="10gbit", burst="256kb", latency="5ms"):
        """A tbf of `rate` at the root of both ends of every host's link: the root-side veth's egress
        (into the host) and eth0's egress inside the namespace (out of the host). `latency` is tbf's
        queueing bound (how long a packet may wait for tokens), not an added delay."""
        for ns_opt, dev in self._links():
            sh("tc", *ns_opt, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
               "latency", latency)
        self.shaped = {"qdisc": "tbf", "rate": rate, "burst": burst, "latency": latency}
        return self

    def unshape(self):
        for ns_opt, dev in self._links():
            sh("tc", *ns_opt, "qdisc", "del", "dev", dev, "root", check=False)
        self.shaped = None
        return self

    def qdiscs(self):
        """`tc -s qdisc show` of every link end, labelled."""
        out = []
        for ns_opt, dev in self._links():
            text = sh("tc", *ns_opt, "-s", "qdisc", "show", "dev", dev).stdout.strip()
            out.append("%s %s: %s" % (ns_opt[1] if ns_opt else "root", dev, text))
        return "\n".join(out)

    def tcp_rate(self, src=0, dst=1, nbytes=1 << 30):
        """Bytes/s of one TCP stream from host src to host dst (python sockets, 1 MiB writes)."""
        port = 5201
        ip = "%s.%d" % (self.subnet, 11 + dst)
        recv = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                "s.bind(('%s',%d));s.listen(1);print('ready',flush=True);c,_=s.accept();n=0\n"
                "while True:\n b=c.recv(1<<20)\n if not b: break\n n+=len(b)\nprint(n)" % (ip, port))
        send = ("import socket,time;c=socket.create_connection(('%s',%d));b=bytes(1<<20);t=time.perf_counter()\n"
                "for _ in range(%d): c.sendall(b)\nc.shutdown(socket.SHUT_WR);c.recv(1);print(time.perf_counter()-t)"
                % (ip, port, nbytes >> 20))
        rp = subprocess.Popen(["timeout", "-k", "2", "60", "ip", "netns", "exec", self.hosts[dst], sys.executable,
                               "-c", recv], stdout=subprocess.PIPE, text=True)
        try:
            assert rp.stdout.readline().strip() == "ready"
            r = sh("ip", "netns", "exec", self.hosts[src], sys.executable, "-c", send, timeout=60)
            return (nbytes >> 20 << 20) / float(r.stdout.split()[-1])
        finally:
            rp.kill()
            rp.wait()

    # ------------------------------------------------------------ inside the hosts
    def counters(self):
        """{host: (rx_bytes, tx_bytes)} of eth0 inside each namespace."""
        out = {}
        for ns in self.hosts:
            r = sh("ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/rx_bytes",
                   "/sys/class/net/eth0/statistics/tx_bytes")
            rx, tx = map(int, r.stdout.split())
            out[ns] = (rx, tx)
        return out

    def pids(self, ns, pattern):
        found = []
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if pattern in cmd:
                found.append(int(pid))
        return found

    def hostfile(self, template, slots):
        """A hostfiles/ template with node1, node2 ... replaced by the namespaces and `slots` ranks each
        (a template names two nodes; further hosts are added as lines of the same form)."""
        with open(os.path.join(ROOT, "hostfiles", template)) as f:
            text = f.read()
        for i, ns in enumerate(self.hosts, 1):
            text, n = re.subn(r"^node%d(:\d+| slots=\d+)" % i,
                              lambda m: ns + (":%d" % slots if m.group(1).startswith(":") else " slots=%d" % slots),
                              text, flags=re.M)
            if n == 0:
                text += (ns + (":%d" if template.endswith(".mpich") else " slots=%d") % slots) + "\n"
        path = os.path.join(self.out_dir, "%s-%d-%d" % (template, len(self.hosts), slots))
        with open(path, "w") as f:
            f.write(text)
        return path

    # ------------------------------------------------------------ launching
    def mpich(self, n, args, hostfile, limit_s=60, name="job"):
        """`mpiexec -n N python ARGS` exactly as a user types it: the hostfile, the launcher and the
        network are set through the environment hydra and MPICH read."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   HYDRA_HOST_FILE=hostfile, HYDRA_LAUNCHER="ssh", HYDRA_LAUNCHER_EXEC=STANDIN,
                   HYDRA_IFACE=self.bridge,
                   # the wheel's default (UCX) would move the bytes through shared memory, not the network
                   MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="eth0")
        job = Job([self.mpiexec, "-n", str(n), sys.executable] + list(args), env, limit_s, self.out_dir, name)
        self.jobs.append(job)
        return job

    def openmpi(self, prefix, n, args, hostfile, limit_s=60, name="job"):
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                   MPI4PY_LIBMPI=os.path.join(prefix, "lib", "libmpi.so.40"),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PRTE_MCA_plm_ssh_agent=STANDIN,               # plm_rsh_agent is ignored by Open MPI 5
                   PRTE_MCA_oob_tcp_if_include=self.subnet + ".0/24",
                   OMPI_MCA_btl="tcp,sm,self", OMPI_MCA_btl_tcp_if_include="eth0",
                   OMPI_MCA_mpi_yield_when_idle="1",             # oversubscribed ranks crawl without it
                   # without keepalive PRRTE never notices a lost host, and even MPI_Abort then hangs
                   PRTE_MCA_oob_tcp_keepalive_time="2", PRTE_MCA_oob_tcp_keepalive_intvl="1",
                   PRTE_MCA_oob_tcp_keepalive_probes="3")
        # Open MPI does not forward the caller's environment to remote ranks
        forward = ["-x", "MPI4PY_LIBMPI", "-x", "PYTHONUNBUFFERED", "-x", "OMP_NUM_THREADS"]
        job = Job([os.path.join(prefix, "bin", "mpirun"), "--hostfile", hostfile, "-np", str(n)] + forward
                  + [sys.executable] + list(args), env, limit_s, self.out_dir, name)
        self.jobs.append(job)
        return job


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Run as root; every command removes leftovers of dead runs first.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="say whether this machine can build the lab")
    g.add_argument("--clean", action="store_true", help="remove namespaces and links of dead runs, and exit")
    g.add_argument("--demo", type=int, metavar="N", help="build N hosts, shape them, time TCP host 1 -> 2, tear down")
    p.add_argument("--rate", default="10gbit", help="tbf rate for --demo (default 10gbit; 'off': unshaped)")
    args = p.parse_args()
    reason = skip_reason(default_mpiexec())
    if args.check or reason:
        print(reason or "ok: this machine can build the lab")
        return 1 if reason else 0
    remove_stale()
    if args.clean:
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, Cluster(max(args.demo, 2), tmp) as c:
        if args.rate != "off":
            c.shape(args.rate)
        print("TCP %s -> %s: %.2f Gbit/s (%s)" % (c.hosts[0], c.hosts[1], c.tcp_rate() * 8e-9,
                                                  "tbf " + args.rate if c.shaped else "unshaped"))
        print(c.qdiscs())
    return 0


if __name__ == "__main__":
    sys.exit(main())
