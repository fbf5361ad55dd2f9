"""python -m mpinn.bench.netprobe (issue 63, item 5): the network probe a cluster runs under mpirun or srun. Here, on
one machine, only its dry run (--allow-one-node) can measure; the file must be what the cluster model reads."""
import json
import sys

import numpy as np
import pytest

from conftest import mpirun


@pytest.mark.mpi
def test_the_probe_refuses_two_ranks_on_one_node(tmp_path, launcher):
    out = tmp_path / "probe.json"
    r = mpirun(2, ["-m", "mpinn.bench.netprobe", "--out", str(out)], timeout=60)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "both ranks are on one node" in lines[0] and "--allow-one-node" in lines[0], r.stderr
    assert not out.exists()


@pytest.mark.mpi
def test_the_probe_refuses_other_than_two_ranks(tmp_path, launcher):
    r = mpirun(1, ["-m", "mpinn.bench.netprobe", "--out", str(tmp_path / "p.json"), "--allow-one-node"], timeout=60,
               process=True)
    assert r.returncode == 2 and "exactly 2 ranks" in r.stderr, r.stderr


@pytest.mark.mpi
def test_the_dry_run_writes_what_the_cluster_model_reads(tmp_path, launcher):
    from scripts.bench.cluster_model.model import read_network
    out = tmp_path / "probe.json"
    r = mpirun(2, ["-m", "mpinn.bench.netprobe", "--out", str(out), "--allow-one-node", "--largest", "65536"],
               timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    progress = [l for l in r.stdout.splitlines() if l.startswith("netprobe: ")]
    assert len(progress) - progress[-1].startswith("netprobe: warning") == 1 + 1 + 9 + 1 + 1   # layout, counts,
    #                                                                   256 B .. 64 KiB, in flight, the fits
    doc = json.loads(out.read_text())
    assert doc["link"]["one_node"] is True and doc["points"]["2x1"]["np"] == 2
    net = read_network(str(out))                         # what --network FILE does
    # (the fitted values are a measurement: on a busy machine the small sizes of a dry run can fit a negative slope,
    # which the probe then warns of; the file and its reading are what this checks)
    assert all(np.isfinite(net[k]) for k in ("b_v", "b_ar", "a_v")) and net["per_message"] is not None
    fits = doc["fits"]
    resolved = all(fits[k]["crossing_Bps"] > 0 and fits[k]["alpha_s"] > 0 for k in ("alltoallv", "allreduce"))
    assert ("warning" in progress[-1]) == (not resolved)
    assert net["label"].startswith("one node (dry run")
    assert doc["fits"]["alltoallv"]["crossing_Bps"] == pytest.approx(net["b_v"])


@pytest.mark.slow
@pytest.mark.mpi
def test_the_cluster_model_runs_on_the_probe(tmp_path, launcher, monkeypatch):
    """The whole command: python -m scripts.bench.cluster_model --network FILE (its outputs in tmp_path)."""
    from scripts.bench.cluster_model import __main__ as cm, report
    out = tmp_path / "probe.json"
    r = mpirun(2, ["-m", "mpinn.bench.netprobe", "--out", str(out), "--allow-one-node", "--largest", "65536"],
               timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    monkeypatch.setattr(report, "RESULTS", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["cluster_model"])
    cm.main(["--network", str(out), "--tag", "probe-test"])
    assert list(tmp_path.glob("cluster-model-*-probe-test.json"))
