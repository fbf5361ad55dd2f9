"""Where the fused kernels' library comes from, safely: the one built at install time (mpinn/optim/build_backend.py),
else one built at run time into a cache directory that only this user can write.

No code is loaded from a place another user can write. The run-time cache is $MPINN_CACHE_DIR, else
$XDG_CACHE_HOME/mpinn or ~/.cache/mpinn: created with mode 0700, and before anything in it is loaded it
must be a real directory (not a symlink) owned by this user and writable by nobody else, and so must every
directory above it (or be root's, or sticky like /tmp). A shared temporary directory is never used. A
node's ranks compile once: under a lock, to a temporary name, then linked into place without replacing
anything; the library's size and SHA-256 are written beside it and checked before every load (a damaged
one is removed and rebuilt once). A library built from other sources than the installed ones is never
loaded (each carries its sources' SHA-256). Every failure is a reason (Unavailable), never a crash: the
numpy passes then run."""
import ctypes
import errno
import fcntl
import hashlib
import importlib.machinery
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = ("fused.c", "fused_kernels.h")          # the sources, in the order their hash covers them
FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared"]     # no FMA: numpy's bits
NATIVE = ["-march=native"]      # a run-time build is for this CPU (sqrt and division: 1.7x faster with AVX2)
V3_FLAGS = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave", "abm"}     # x86-64-v3, /proc/cpuinfo


class Unavailable(Exception):
    """Why a library cannot be used (one line)."""


def source_hash(where=HERE):
    """The SHA-256 of the kernels' sources (mpinn/optim/build_backend.py computes the same at install time)."""
    h = hashlib.sha256()
    for name in KERNELS:
        with open(os.path.join(where, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        line = ""
    return set(line.split(":", 1)[-1].split())


def installed(variant):
    """The path of the installed extension `variant` (base, v3 or native), or None."""
    name = {"base": "_fused", "v3": "_fused_v3", "native": "_fused_native"}[variant]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(HERE, name + suffix)
        if os.path.exists(path):
            return path
    return None


def installed_variants():
    """The installed extensions this CPU can run, the fastest first: [(variant, path)] (the native build
    is checked when it is opened: open_library(..., cpu=True))."""
    out = [(v, installed(v)) for v in ("native", "v3", "base") if installed(v)]
    return [(v, p) for v, p in out if v != "v3" or V3_FLAGS <= cpu_flags()]


def open_library(path, want_hash):
    """ctypes.CDLL(path), refused if it was built from other sources than want_hash, or for a CPU with
    features this one lacks (the function that says so runs no vector code: loading is safe)."""
    try:
        lib = ctypes.CDLL(path)
        lib.mpinn_source_hash.restype = lib.mpinn_cpu_flags.restype = ctypes.c_char_p
        built, needs = lib.mpinn_source_hash().decode(), set(lib.mpinn_cpu_flags().decode().split())
    except (OSError, AttributeError) as e:
        raise Unavailable("%s cannot be loaded: %s" % (path, e))
    if built != want_hash:
        raise Unavailable("%s was built from other sources (%s..., these are %s...)" % (path, built[:12],
                                                                                      want_hash[:12]))
    missing = sorted(needs - cpu_flags())
    if missing:
        raise Unavailable("%s was built for a CPU with %s, which this one lacks" % (path, ", ".join(missing[:5])))
    return lib


# ---------------------------------------------------------------- the private cache
def cache_dir():
    if os.environ.get("MPINN_CACHE_DIR"):
        return os.path.abspath(os.environ["MPINN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mpinn")


def check_private(path, uid=None):
    """Raise Unavailable unless path is a directory only this user controls: not a symlink, owned by this
    user, writable by nobody else; and every directory above it owned by root or this user and not
    writable by others, unless sticky (/tmp), so that nobody else can swap it."""
    uid = os.getuid() if uid is None else uid
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise Unavailable("%s is not a directory (a symlink or a file): not used" % path)
    if st.st_uid != uid:
        raise Unavailable("%s belongs to user %d, not to this user (%d): not used" % (path, st.st_uid, uid))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Unavailable("%s can be written by others (mode %o): not used" % (path, stat.S_IMODE(st.st_mode)))
    parent = os.path.dirname(path)
    while parent != path:
        st = os.stat(parent)
        if st.st_uid not in (0, uid) or (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                                         and not st.st_mode & stat.S_ISVTX):
            raise Unavailable("%s lies in %s, which others can change: not used" % (path, parent))
        path, parent = parent, os.path.dirname(parent)


def private_dir(path):
    """path made (mode 0700) if missing, and checked (check_private)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise Unavailable("cannot make the cache %s: %s" % (path, e.strerror or e))
    check_private(path)
    if not os.access(path, os.W_OK | os.X_OK):
        raise Unavailable("cannot write the cache %s" % path)
    return path


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "%d %s" % (os.path.getsize(path), h.hexdigest())


def _verified(path):
    """Is path the library whose size and SHA-256 were recorded beside it when it was built?"""
    try:
        with open(path + ".sha256") as f:
            return f.read().strip() == _digest(path)
    except OSError:
        return False


def compiler():
    """The C compiler command: $CC split as a shell would ("ccache gcc", "gcc -m64"), else cc or gcc."""
    if os.environ.get("CC"):
        cmd = shlex.split(os.environ["CC"])
        if not cmd or not shutil.which(cmd[0]):
            raise Unavailable("CC=%s: %s is not a command" % (os.environ["CC"], cmd[0] if cmd else "''"))
        return cmd
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc, gcc, or $CC)")
    return [cc]


def _compile(cc, out, want_hash):
    """Compile fused.c into the file out (a name of its own, in the cache)."""
    define = ["-DMPINN_SOURCE_HASH=\"%s\"" % want_hash]
    src = os.path.join(HERE, "fused.c")
    last = None
    for flags in (FLAGS + NATIVE, FLAGS):       # a compiler that knows no -march=native: without it
        cpu = ["-DMPINN_CPU_FLAGS=\"%s\"" % " ".join(sorted(cpu_flags()))] if flags[-1] in NATIVE else []
        cmd = cc + flags + define + cpu + ["-I", HERE, "-o", out, src, "-lm"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise Unavailable("%s failed: %s" % (" ".join(cc), e))
        if not r.returncode:
            return
        last = (r.stderr or r.stdout).strip()
    raise Unavailable("%s failed: %s" % (" ".join(cc), last[-300:]))


def cache_name(want_hash):
    """The run-time build's file name: one per source, flags, platform and CPU kind (a home directory
    shared by nodes of different kinds keeps one file per kind; a new source gets a new name)."""
    key = hashlib.sha256((want_hash + " ".join(FLAGS + NATIVE) + sysconfig.get_platform() + platform.machine()
                          + " ".join(sorted(cpu_flags()))).encode()).hexdigest()[:16]
    return "fused-%s.so" % key


def cached(want_hash):
    """The path of this machine's run-time build in the private cache: made once per node (under a lock),
    verified before it is handed out, a damaged one removed and rebuilt once."""
    where = private_dir(cache_dir())
    path = os.path.join(where, cache_name(want_hash))
    with open(path[:-3] + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # the node's other ranks wait here, then find the file
        for attempt in (1, 2):
            if os.path.exists(path) or os.path.islink(path):
                if not os.path.islink(path) and _verified(path):
                    return path
                if attempt == 2:
                    raise Unavailable("%s is damaged after a rebuild" % path)
                for p in (path, path + ".sha256"):      # damaged or foreign: removed (a process that has it
                    if os.path.lexists(p):              # mapped keeps its copy), then built again
                        os.unlink(p)
            cc = compiler()
            fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=where)
            os.close(fd)
            try:
                _compile(cc, tmp, want_hash)
                with open(tmp + ".sha256", "w") as f:
                    f.write(_digest(tmp))
                os.replace(tmp + ".sha256", path + ".sha256")
                try:
                    os.link(tmp, path)      # never replaces: a file already there stays what it is
                except OSError as e:
                    if e.errno != errno.EEXIST:
                        raise Unavailable("cannot write %s: %s" % (path, e.strerror))
            finally:
                for p in (tmp, tmp + ".sha256"):
                    if os.path.lexists(p):
                        os.unlink(p)
    return path
