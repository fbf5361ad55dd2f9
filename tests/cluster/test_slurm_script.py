"""scripts/slurm/train.sbatch's requeue decision, with srun and scontrol stood in for (no Slurm needed; the script
runs on a real two-node Slurm cluster in tests/cluster/test_slurm.py): only the attempt's own stop requeues."""
import os
import subprocess

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "slurm", "train.sbatch")


def attempt(tmp_path, srun_body):
    """Run the batch script once with `srun` doing srun_body (bash) and a `scontrol` that records its arguments:
    (exit code, scontrol's calls)."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "srun").write_text("#!/bin/bash\n" + srun_body + "\n")
    (stubs / "scontrol").write_text('#!/bin/bash\necho "$@" >> "%s"\n' % (tmp_path / "scontrol.log"))
    for stub in ("srun", "scontrol"):
        os.chmod(stubs / stub, 0o755)
    env = dict(os.environ, PATH="%s:%s" % (stubs, os.environ["PATH"]), SLURM_JOB_ID="4242", SLURM_NTASKS="2",
               SLURM_JOB_NODELIST="n[1-2]", MPINN_CHECKPOINT_DIR=str(tmp_path / "ck"))
    r = subprocess.run(["bash", SCRIPT, "--label", "y"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    log = tmp_path / "scontrol.log"
    return r.returncode, (log.read_text().splitlines() if log.exists() else [])


def test_a_stopped_attempt_requeues_and_a_failed_resume_ends_the_job(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    # the first attempt: mpinn checkpoints, writes STOPPED and exits 75 (srun may report 143)
    rc, calls = attempt(tmp_path, 'touch "%s/ckpt-run-000000010.npz"; echo "stopped by SIGTERM at step 10" > '
                                  '"%s/STOPPED"; exit 143' % (ck, ck))
    assert rc == 75 and calls == ["requeue 4242"]
    # the next attempt's resume is refused (the data changed: exit 2): the job ends, FAILED, not requeued again
    rc, calls = attempt(tmp_path, 'echo "mpinn: error: --resume ...: the data differs" >&2; exit 2')
    assert rc == 2 and calls == ["requeue 4242"], calls
