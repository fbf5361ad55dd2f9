"""Where the fused kernels come from, and that no code is loaded from a place another user can write
(mpinn/optim/fused_build.py): the installed build, the private run-time cache and its checks, a planted
library that must never run, a damaged cache entry rebuilt, $CC split as a shell would, one compile for
the ranks of a node, and every failure a reason (the numpy passes then run), never a crash."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import mpirun, run
from mpinn.optim import fused_build
from mpinn.optim.fused_build import Unavailable

pytestmark = pytest.mark.launch       # starts processes (tests/launch.py)

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(not CC, reason="no C compiler here")
# run as real processes (process=True): the kernels are chosen once per process, from its environment
TRAIN = [sys.executable, "-m", "mpinn.train", "--default-rows", "3000", "--epochs", "1", "--hidden", "8",
         "--hash-bits", "12", "--no-progress", "--optimizer", "adam"]


def env_for(cache, **extra):
    """A run that may only build at run time, into `cache`."""
    return dict(MPINN_FUSED="runtime", MPINN_CACHE_DIR=str(cache), **extra)


def planted(tmp_path, marker):
    """A shared library whose constructor writes `marker` when it is loaded: the code another user would plant."""
    src = tmp_path / "plant.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void plant(void) {\n'
                   '    FILE* f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); } }\n'
                   'const char* mpinn_source_hash(void) { return "%s"; }\n'
                   'const char* mpinn_cpu_flags(void) { return ""; }\n' % (marker, fused_build.source_hash()))
    out = tmp_path / "plant.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


def status_of(env):
    r = run([sys.executable, "-c", "from mpinn.optim import fused; print(fused.status())"], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


# ---------------------------------------------------------------- the checks of the private cache
def test_a_cache_others_can_write_is_refused(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(Unavailable, match="can be written by others"):
        fused_build.check_private(str(d))
    os.chmod(d, 0o700)
    fused_build.check_private(str(d))


def test_a_cache_of_another_user_or_behind_a_symlink_is_refused(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    with pytest.raises(Unavailable, match="belongs to user"):
        fused_build.check_private(str(d), uid=os.getuid() + 1)      # what another user's directory looks like
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(Unavailable, match="not a directory"):
        fused_build.check_private(str(link))


def test_a_cache_inside_a_directory_others_can_change_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)                 # world-writable and not sticky: anyone could swap the cache
    (shared / "cache").mkdir(mode=0o700)
    with pytest.raises(Unavailable, match="which others can change"):
        fused_build.check_private(str(shared / "cache"))
    os.chmod(shared, 0o777 | stat.S_ISVTX)  # sticky, as /tmp: nobody else can rename what is ours
    fused_build.check_private(str(shared / "cache"))


def test_the_cache_is_made_private(tmp_path, monkeypatch):
    monkeypatch.setenv("MPINN_CACHE_DIR", str(tmp_path / "new"))
    path = fused_build.private_dir(fused_build.cache_dir())
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0


# ---------------------------------------------------------------- planted code never runs
@needs_cc
def test_a_planted_library_does_not_run_and_training_succeeds(tmp_path):
    """The home cannot be written and a world-writable mpinn-<uid> directory in the temp dir holds a library
    under the name the old loader would load (and one sits in a world-writable MPINN_CACHE_DIR under the
    exact name a run-time build takes): neither is loaded, training runs with the numpy passes or its own
    build, and says why."""
    marker = tmp_path / "planted-code-ran"
    lib = planted(tmp_path, marker)
    tmp = tmp_path / "tmp"
    other = tmp / ("mpinn-%d" % os.getuid())
    other.mkdir(parents=True)
    os.chmod(other, 0o777)
    shutil.copy(lib, other / fused_build.cache_name(fused_build.source_hash()))
    env = dict(MPINN_FUSED="runtime", XDG_CACHE_HOME="/proc/mpinn-cannot-write-here", TMPDIR=str(tmp), HOME="/proc")
    r = run(TRAIN + ["--model-out", str(tmp_path / "m.npz")], env=env, timeout=300, process=True)
    assert r.returncode == 0, r.stderr
    assert not marker.exists(), "planted code ran"
    assert "kernels: off" in r.stdout and "cannot make the cache" in r.stdout, r.stdout
    cache = tmp_path / "open-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    shutil.copy(lib, cache / fused_build.cache_name(fused_build.source_hash()))
    r = run(TRAIN + ["--model-out", str(tmp_path / "m2.npz")], env=env_for(cache), timeout=300, process=True)
    assert r.returncode == 0, r.stderr
    assert not marker.exists(), "planted code ran"
    assert "can be written by others" in r.stdout, r.stdout


@needs_cc
def test_a_library_built_from_other_sources_is_not_loaded(tmp_path):
    lib = planted(tmp_path, tmp_path / "marker")
    with pytest.raises(Unavailable, match="built from other sources"):
        fused_build.open_library(str(lib), "0" * 64)


# ---------------------------------------------------------------- damage, compilers, one compile per node
@needs_cc
def test_a_truncated_cached_library_is_rebuilt_and_training_succeeds(tmp_path):
    cache = tmp_path / "cache"
    assert status_of(env_for(cache)).startswith("compiled, run-time build")
    (so,) = [p for p in cache.iterdir() if p.suffix == ".so"]
    size = so.stat().st_size
    with open(so, "r+b") as f:
        f.truncate(size // 3)
    r = run(TRAIN + ["--model-out", str(tmp_path / "m.npz")], env=env_for(cache), timeout=300, process=True)
    assert r.returncode == 0, r.stderr
    assert "kernels: compiled, run-time build" in r.stdout, r.stdout
    assert so.stat().st_size == size and fused_build._verified(str(so))


def test_a_compiler_that_is_not_there_leaves_the_numpy_passes_and_says_why(tmp_path):
    r = run(TRAIN + ["--model-out", str(tmp_path / "m.npz")], env=env_for(tmp_path / "c", CC="/nonexistent"),
            timeout=300, process=True)
    assert r.returncode == 0, r.stderr
    assert "kernels: off" in r.stdout and "CC=/nonexistent: /nonexistent is not a command" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr


def test_a_compiler_that_fails_leaves_the_numpy_passes_and_says_why(tmp_path):
    got = status_of(env_for(tmp_path / "c", CC=shutil.which("false") or "/bin/false"))
    assert got.startswith("off: not available") and "failed" in got


@needs_cc
def test_cc_is_split_as_a_shell_would(tmp_path):
    """CC="ccache gcc"-style: a wrapper and its compiler (env here), or a compiler and its flags."""
    assert status_of(env_for(tmp_path / "a", CC="env %s" % CC)).startswith("compiled, run-time build")
    assert status_of(env_for(tmp_path / "b", CC="%s -O2" % CC)).startswith("compiled, run-time build")


@needs_cc
@pytest.mark.mpi
def test_two_ranks_starting_at_once_compile_once(tmp_path, launcher):
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "cc-logging"
    wrapper.write_text('#!/bin/sh\necho "$$" >> "%s"\nexec %s "$@"\n' % (log, CC))
    wrapper.chmod(0o755)
    env = env_for(tmp_path / "cache", CC=str(wrapper))
    r = mpirun(2, ["-c", "from mpinn.optim import fused; print(fused.status())"], env=env, timeout=300, process=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("compiled, run-time build") == 2, r.stdout
    assert len(log.read_text().split()) == 1, log.read_text()     # one compiler run for both ranks


# ---------------------------------------------------------------- the installed build
def test_the_install_and_the_loader_hash_the_same_sources():
    from mpinn.optim import build_backend
    assert build_backend.source_hash() == fused_build.source_hash()


def test_an_installed_build_is_used_when_there_is_one():
    """pip install -e . (the README's install) builds mpinn.optim._fused at install time where a compiler is."""
    if not fused_build.installed("base"):
        pytest.skip("this install has no compiled kernels (no compiler at install time)")
    got = status_of({"MPINN_FUSED": "auto"})
    assert got.startswith("compiled, installed"), got
    assert status_of({"MPINN_FUSED": "base"}).startswith("compiled, installed base")


def test_a_build_for_another_cpu_is_not_loaded(monkeypatch):
    """The native build carries the installing CPU's features; on a CPU lacking one it is refused (its
    code could stop the process with an illegal instruction), and auto falls back to another build."""
    path = fused_build.installed("native")
    if not path:
        pytest.skip("no native build installed here")
    fused_build.open_library(path, fused_build.source_hash())
    fewer = fused_build.cpu_flags() - {"avx2"}
    monkeypatch.setattr(fused_build, "cpu_flags", lambda: fewer)
    with pytest.raises(Unavailable, match="built for a CPU with avx2"):
        fused_build.open_library(path, fused_build.source_hash())


def test_the_status_line_names_an_unknown_setting():
    assert "none of auto" in status_of({"MPINN_FUSED": "fast"})
