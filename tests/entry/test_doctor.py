"""mpinn.doctor: hostfile checks, host differences, the report; end to end under mpiexec."""
import json
import os

import pytest

from conftest import ROOT, mpirun
from mpinn.core.errors import MpinnError
from mpinn.doctor import differences, format_report, short_library
from mpinn.host.hostfile import EITHER, MPICH, OPENMPI, check_hostfile_against_job, parse_hostfile


def hostfile(tmp_path, text, name="hosts"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("name,syntax,hosts", [
    ("localhost", MPICH, [("localhost", 2)]),
    ("localhost.openmpi", OPENMPI, [("localhost", 2)]),
    ("two-nodes.mpich", MPICH, [("node1", 2), ("node2", 2)]),
    ("two-nodes.openmpi", OPENMPI, [("node1", 2), ("node2", 2)]),
])
def test_the_shipped_hostfiles_parse(name, syntax, hosts):
    hf = parse_hostfile(os.path.join(ROOT, "hostfiles", name))
    assert hf.syntax == syntax and [(h, s) for _, h, s in hf.hosts] == hosts and not hf.warnings


def test_comments_blank_lines_options_and_bare_names(tmp_path):
    hf = parse_hostfile(hostfile(tmp_path, "# cluster\n\nnode-a.example.org:4 user=me  # four\n10.0.0.7\n"))
    assert hf.syntax == MPICH and [(no, h, s) for no, h, s in hf.hosts] == [
        (3, "node-a.example.org", 4), (4, "10.0.0.7", None)]
    assert hf.slots == 5
    hf = parse_hostfile(hostfile(tmp_path, "a slots=2 max_slots=4\nb\n"))
    assert hf.syntax == OPENMPI and hf.slots == 3
    assert parse_hostfile(hostfile(tmp_path, "a\nb\n")).syntax == EITHER


@pytest.mark.parametrize("text,message", [
    ("a:2\nb:x\n", "line 2: slots must be a positive integer, not 'x'"),
    ("a:0\n", "line 1: slots must be a positive integer, not '0'"),
    ("a:\n", "line 1: slots must be a positive integer, not ''"),
    ("# c\n:4\n", "line 2: no host name before ':'"),
    ("a slots=-1\n", "line 1: slots must be a positive integer, not '-1'"),
    ("a:2\nb slots=2\n", "line 2: Open MPI syntax, but line 1 uses MPICH syntax"),
    ("a slots=2\n\nb:2\n", "line 3: MPICH syntax, but line 1 uses Open MPI syntax"),
    ("a:2 slots=2\n", "line 1: mixes MPICH's host:slots with Open MPI's key=value options"),
    ("a\nb cores=4\n", "line 2: unknown option 'cores'"),
    ("a 4\n", "line 1: unexpected '4' after the host name"),
    ("a\nnode_1;rm\n", "line 2: 'node_1;rm' is not a host name"),
    ("# only a comment\n\n", "lists no hosts"),
])
def test_mistakes_are_one_line_with_the_line_number(tmp_path, text, message):
    path = hostfile(tmp_path, text)
    with pytest.raises(MpinnError) as e:
        parse_hostfile(path)
    assert message in str(e.value) and path in str(e.value) and "\n" not in str(e.value)


def test_a_missing_hostfile_is_an_error(tmp_path):
    with pytest.raises(MpinnError, match="does not exist"):
        parse_hostfile(str(tmp_path / "nope"))


def test_a_repeated_host_is_a_warning(tmp_path):
    hf = parse_hostfile(hostfile(tmp_path, "a:1\nb:1\na:1\n"))
    assert hf.warnings == ["hostfile line 3 repeats host a (first on line 1): launchers add up or reorder its slots"]


def record(rank, host, **kw):
    r = {"rank": rank, "host": host, "local_rank": 0, "local_size": 1, "python": "3.11.7", "numpy": "2.4.6",
         "scipy": "1.17.1", "mpi4py": "4.1.2", "mpi": "MPICH 5.0.2", "mpinn": "0.1.0", "cupy": "not installed",
         "gpu": "none (cupy not installed)"}
    r.update(kw)
    return r


def test_differences_name_the_hosts_and_ranks():
    recs = [record(0, "n1"), record(1, "n2", numpy="2.3.0"), record(2, "n1"), record(3, "n2", numpy="2.3.0")]
    assert differences(recs) == ["numpy differs: 2.4.6 on n1 (ranks 0,2); 2.3.0 on n2 (ranks 1,3)"]
    assert differences([record(0, "n1"), record(1, "n2")]) == []


def test_hostfile_syntax_must_match_the_launcher(tmp_path):
    ompi = parse_hostfile(hostfile(tmp_path, "n1 slots=1\nn2 slots=1\n"))
    errors, _ = check_hostfile_against_job(ompi, "MPICH 5.0.2", [record(0, "n1"), record(1, "n2")])
    assert errors and "uses Open MPI syntax (host slots=N) but this job runs MPICH 5.0.2" in errors[0]
    mpich = parse_hostfile(hostfile(tmp_path, "n1:1\nn2:1\n"))
    errors, _ = check_hostfile_against_job(mpich, "Open MPI v5.0.11", [record(0, "n1"), record(1, "n2")])
    assert errors and "reads 'node:2' as a host name" in errors[0]
    errors, warnings = check_hostfile_against_job(mpich, "MPICH 5.0.2", [record(0, "n1.cluster"), record(1, "n2")])
    assert errors == [] and warnings == []


def test_a_hostfile_not_given_to_the_launcher_is_noticed(tmp_path):
    hf = parse_hostfile(hostfile(tmp_path, "n1:2\nn2:2\n"))
    _, warnings = check_hostfile_against_job(hf, "MPICH 5.0.2", [record(0, "laptop"), record(1, "laptop")])
    assert "every rank ran on laptop, but the hostfile lists 2 hosts: pass it to the launcher" in warnings[0]
    _, warnings = check_hostfile_against_job(hf, "MPICH 5.0.2", [record(r, "n%d" % (1 + r % 2)) for r in range(6)])
    assert warnings == ["6 ranks for 4 slots in the hostfile: hosts are oversubscribed"]


def test_short_library_names():
    assert short_library("MPICH Version:      5.0.2") == "MPICH 5.0.2"
    assert short_library("Open MPI v5.0.11, package: Open MPI user@localhost Distribution") == "Open MPI v5.0.11"


def test_the_report_flags_problems():
    rep = {"ranks": [record(0, "n1"), record(1, "n2", scipy="1.9.0")], "hostfile": None,
           "allreduce": {"elements": 10, "dtype": "float32", "bytes": 40, "what": "--model-size", "repeats": 2,
                         "median_s": 1e-4, "min_s": 1e-4, "bus_gb_s": None},
           "latency": {"median_s": 2e-5}, "step": None, "warnings": ["a note"]}
    rep["differences"] = rep["problems"] = differences(rep["ranks"])
    text = format_report(rep)
    assert "PROBLEM: scipy differs: 1.17.1 on n1 (rank 0); 1.9.0 on n2 (rank 1)" in text
    assert "note: a note" in text and text.endswith("verdict: 1 problem")


# ---------------------------------------------------------------- end to end
@pytest.mark.mpi
def test_doctor_on_two_ranks_writes_the_report(tmp_path, launcher):
    out = str(tmp_path / "doctor.json")
    r = mpirun(2, ["-m", "mpinn.doctor", "--hostfile", "hostfiles/localhost", "--json", out, "--repeats", "2",
                   "--hash-bits", "12"], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.load(open(out))
    assert [(x["rank"], x["local_rank"], x["local_size"]) for x in rep["ranks"]] == [(0, 0, 2), (1, 1, 2)]
    assert rep["ranks"][0]["gpu"].startswith(("none", "cuda:0")) and rep["problems"] == [] and rep["ok"]
    # 4096 hashed + 4 dense -> 64 -> 1, with the linear part (one more column of W0 and b0), as training has it
    assert rep["allreduce"]["elements"] == (4096 + 4) * 65 + 65 + 64 + 1
    step = rep["step"]
    assert step["rows_per_rank"] == 512 and 0 < step["comm_share"] < 1 and step["compute_s"] > 0
    for text in ("mpinn doctor: 2 ranks on 1 host", "hostfile: hostfiles/localhost (MPICH host:slots)",
                 "step estimate:", "communication", "verdict: ok"):
        assert text in r.stdout, r.stdout


@pytest.mark.mpi
def test_doctor_estimates_a_sharded_step(tmp_path, launcher):
    """--table sharded: the step estimate runs the trainer's ShardedStep and shows its exchanges."""
    out = str(tmp_path / "doctor.json")
    r = mpirun(2, ["-m", "mpinn.doctor", "--json", out, "--repeats", "2", "--hash-bits", "12", "--table", "sharded"],
               timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    step = json.load(open(out))["step"]
    assert step["table"] == "sharded" and step["fetch_s"] > 0 and step["return_s"] > 0 and step["compute_s"] > 0
    assert abs(step["step_s"] - sum(step[k + "_s"] for k in ("scatter", "compute", "fetch", "return", "allreduce",
                                                            "update"))) < 1e-12
    for text in ("table sharded (asked for)", "fetch rows", "gradient rows to owners", "(Alltoallv)"):
        assert text in r.stdout, r.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("text,message", [
    (None, "hostfile {path} does not exist"),
    ("localhost:2\nlocalhost:two\n", "hostfile {path} line 2: slots must be a positive integer, not 'two'"),
    ("localhost slots=2\n", "hostfile {path} uses Open MPI syntax (host slots=N) but this job runs MPICH"),
])
def test_a_bad_hostfile_is_one_line_and_exit_2(tmp_path, launcher, text, message):
    path = str(tmp_path / "hosts")
    if text is not None:
        open(path, "w").write(text)
    r = mpirun(2, ["-m", "mpinn.doctor", "--hostfile", path, "--model-size", "10"], timeout=60)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("mpinn: error: " + message.format(path=path)), r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("args,message", [
    (["--hash-bits", "40"], "argument --hash-bits: must be in 1..30, not 40"),
    (["--hash-bits", "30", "--hidden", "4096"], "the model has 4399120277510 parameters: they and a gradient of them "
                                                "take 32776.0 GiB, more than the"),
])
def test_a_model_the_job_cannot_hold_is_one_line_and_exit_2_as_training_says(tmp_path, launcher, args, message):
    """It was an OSError traceback as the gradient's buffer was made (train refuses both in one line)."""
    r = mpirun(2, ["-m", "mpinn.doctor"] + args, timeout=60)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("mpinn: error: " + message), r.stderr


def test_host_notes_more_ranks_than_cores_or_gpus():
    from mpinn.doctor import host_notes
    recs = [record(r, "n1", cpus=2, gpu="cuda:%d A100 (2 on host)" % (r % 2)) for r in range(3)]
    recs.append(record(3, "n2", cpus=8))
    notes = host_notes(recs)
    assert notes[0].startswith("n1: 3 ranks on 2 cores") and "n1: 3 ranks share 2 GPU(s)" in notes
    assert "GPUs on n1 but none on n2" in notes
