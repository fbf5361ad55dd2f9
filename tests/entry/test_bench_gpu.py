"""scripts/bench/gpu.py rehearsed on the CPU: every part's plumbing (the benchmark runs and their records, the
table, the time budget, the JSON, the PNG) with its GPU side pointed at the CPU and numpy standing in for cupy.
Nothing here is a GPU measurement; the script itself refuses to run without a GPU (tests/comm/test_gpu.py)."""
import json
import types

import numpy as np

from scripts.bench import gpu as bench_gpu


def test_every_part_runs_end_to_end_with_the_cpu_standing_in(tmp_path, monkeypatch, launcher):
    import mpinn.device.backend
    monkeypatch.setattr(bench_gpu, "DEVICE", "cpu")
    monkeypatch.setattr(mpinn.device.backend, "gpu_probe", lambda: (1, None))
    monkeypatch.setattr(mpinn.device.backend, "get_backend", lambda name="numpy": types.SimpleNamespace(
        describe=lambda: "the CPU standing in"))
    stream = types.SimpleNamespace(synchronize=lambda: None)
    monkeypatch.setattr(bench_gpu, "gpu_arrays", lambda: types.SimpleNamespace(
        asarray=np.asarray, asnumpy=np.asarray, cuda=types.SimpleNamespace(get_current_stream=lambda: stream)))
    monkeypatch.setattr(bench_gpu, "NEEDS_S", dict(bench_gpu.NEEDS_S, auc=1))
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    assert bench_gpu.main(["--workloads", "w3", "--shared-workloads", "w3", "--scales", "0.5,1", "--w4-rows", "3000",
                           "--w4-test-rows", "2000",
                           "--workdir", str(tmp_path / "w"), "--out", str(out), "--plot", str(png)]) == 0
    rec = json.load(open(out))
    assert rec["skipped"] == {}, rec["skipped"]
    w3 = rec["workloads"]["w3"]
    assert w3["same_loss_final"] and w3["loss_final_rel_diff"] == 0 and "target" not in w3
    assert rec["shared"]["w3"]["samples_per_s"] > 0 and rec["shared"]["w3"]["loss_final"] > 0
    assert [c["scale"] for c in rec["crossover"]] == [0.5, 1.0]
    assert {p["system"] for p in rec["auc"]["points"]} == {"mpinn gpu", "mpinn cpu"}
    assert 0.5 < rec["auc"]["hidden_model_auc"] <= 1
    assert png.exists() or "matplotlib" not in str(rec)


def test_a_part_without_the_budget_to_start_is_recorded_as_skipped(tmp_path, monkeypatch):
    import mpinn.device.backend
    monkeypatch.setattr(mpinn.device.backend, "gpu_probe", lambda: (1, None))
    monkeypatch.setattr(mpinn.device.backend, "get_backend", lambda name="numpy": types.SimpleNamespace(describe=lambda: "-"))
    out = tmp_path / "b.json"
    assert bench_gpu.main(["--budget-s", "10", "--out", str(out), "--plot", str(tmp_path / "b.png")]) == 0
    rec = json.load(open(out))
    assert sorted(rec["skipped"]) == sorted(bench_gpu.PARTS) and "10 s of the budget left" in rec["skipped"]["auc"]
