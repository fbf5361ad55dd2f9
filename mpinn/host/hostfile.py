"""Hostfiles: MPICH (host:slots) and Open MPI (host slots=N) syntax, read strictly, and checked against the hosts a job ran on."""
import re
from dataclasses import dataclass, field

from mpinn.core.errors import MpinnError

# hostfile options each launcher accepts besides the host name (tested against hydra 5.0.2 and PRRTE 5.0.11)
MPICH_KEYS = ("user", "ifhn")
OPENMPI_KEYS = ("slots", "max_slots", "max-slots", "slots_max", "slots-max")
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MPICH, OPENMPI, EITHER = "MPICH host:slots", "Open MPI host slots=N", "bare host names"


@dataclass
class Hostfile:
    path: str
    syntax: str                                   # MPICH, OPENMPI or EITHER
    hosts: list = field(default_factory=list)     # [(line number, host, slots or None)]
    warnings: list = field(default_factory=list)

    @property
    def slots(self):
        return sum(s or 1 for _, _, s in self.hosts)

    def describe(self):
        shown = ", ".join("%s%s" % (h, "" if s is None else ":%d" % s) for _, h, s in self.hosts[:8])
        more = " ..." if len(self.hosts) > 8 else ""
        return "%s (%s): %d host%s, %d slot%s: %s%s" % (
            self.path, self.syntax, len(self.hosts), "s"[:len(self.hosts) != 1], self.slots,
            "s"[:self.slots != 1], shown, more)


def _count(text, where):
    if not text.isdigit() or int(text) <= 0:
        raise MpinnError("%s: slots must be a positive integer, not %r" % (where, text))
    return int(text)


def parse_hostfile(path):
    """Read an MPICH (host:slots) or Open MPI (host slots=N) hostfile; every mistake is one line
    naming the line number (hydra silently reads 'node:x' as 0 slots; PRRTE reads 'node:2' as a host name)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise MpinnError("hostfile %s does not exist" % path)
    except (OSError, UnicodeDecodeError) as e:
        raise MpinnError("hostfile %s cannot be read: %s" % (path, getattr(e, "strerror", None) or e))
    hf = Hostfile(path, EITHER)
    first = {}                   # syntax -> line that first used it
    seen = {}                    # host -> first line
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = "hostfile %s line %d" % (path, no)
        head, *options = line.split()
        slots, used = None, set()
        if ":" in head:
            host, _, count = head.partition(":")
            if not host:
                raise MpinnError("%s: no host name before ':' in %r" % (where, head))
            slots = _count(count, where)
            used.add(MPICH)
        else:
            host = head
        if not HOST_RE.match(host):
            raise MpinnError("%s: %r is not a host name or IPv4 address" % (where, host))
        for opt in options:
            key, eq, value = opt.partition("=")
            if not eq or not value:
                raise MpinnError("%s: unexpected %r after the host name (MPICH: 'host:slots', "
                                 "Open MPI: 'host slots=N')" % (where, opt))
            if key in OPENMPI_KEYS:
                used.add(OPENMPI)
                if key == "slots":
                    slots = _count(value, where)
                else:
                    _count(value, where)
            elif key in MPICH_KEYS:
                used.add(MPICH)
            else:
                raise MpinnError("%s: unknown option %r (MPICH takes host:slots [user=NAME] [ifhn=ADDR]; "
                                 "Open MPI takes host slots=N [max_slots=M])" % (where, key))
        if len(used) > 1:
            raise MpinnError("%s: mixes MPICH's host:slots with Open MPI's key=value options" % where)
        for syntax in used:
            first.setdefault(syntax, no)
        if len(first) > 1:
            m, o = first[MPICH], first[OPENMPI]
            raise MpinnError("%s: %s syntax, but line %d uses %s syntax; a hostfile is read by one launcher"
                             % (where, "MPICH" if no == m else "Open MPI", o if no == m else m,
                                "Open MPI" if no == m else "MPICH"))
        if host in seen:
            hf.warnings.append("hostfile line %d repeats host %s (first on line %d): launchers add up "
                               "or reorder its slots" % (no, host, seen[host]))
        seen.setdefault(host, no)
        hf.hosts.append((no, host, slots))
    if not hf.hosts:
        raise MpinnError("hostfile %s lists no hosts (only comments or blank lines)" % path)
    if first:
        hf.syntax = next(iter(first))
    return hf


LOCAL_NAMES = {"localhost", "127.0.0.1"}


def _short(host):
    """Compare host names without their domain (MPI may report node1.cluster for node1), addresses whole."""
    return host if re.match(r"^[0-9.]+$", host) else host.split(".")[0]


def check_hostfile_against_job(hf, library, records):
    """(errors, warnings) from comparing the hostfile with the launcher and hosts this job really has."""
    errors, warnings = [], list(hf.warnings)
    flavour = "Open MPI" if library.startswith("Open MPI") else "MPICH" if "MPICH" in library else None
    if hf.syntax == OPENMPI and flavour == "MPICH":
        errors.append("hostfile %s uses Open MPI syntax (host slots=N) but this job runs %s, whose "
                      "launcher takes host:slots" % (hf.path, library))
    if hf.syntax == MPICH and flavour == "Open MPI":
        errors.append("hostfile %s uses MPICH syntax (host:slots) but this job runs %s, whose launcher "
                      "reads 'node:2' as a host name; write 'node slots=2'" % (hf.path, library))
    listed = {_short(h) for _, h, _ in hf.hosts}
    ran = sorted({_short(r["host"]) for r in records})
    if len(ran) == 1 and listed <= LOCAL_NAMES:
        pass                    # a hostfile for this machine, used on this machine
    elif listed.isdisjoint(ran) and len(ran) == 1 and len(listed) > 1:
        warnings.append("every rank ran on %s, but the hostfile lists %d hosts: pass it to the launcher "
                        "too (mpirun -f FILE, or --hostfile FILE for Open MPI)" % (ran[0], len(listed)))
    elif not set(ran) <= listed:
        warnings.append("ranks ran on host(s) not named in the hostfile: %s (fine if it lists addresses "
                        "or aliases of them)" % ", ".join(h for h in ran if h not in listed))
    if len(records) > hf.slots:
        warnings.append("%d ranks for %d slots in the hostfile: hosts are oversubscribed"
                        % (len(records), hf.slots))
    return errors, warnings
