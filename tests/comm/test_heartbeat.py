"""A lost peer in prepare at several ranks (mpinn.comm.heartbeat): a peer whose beat stands still ends the job with
one line naming it; a slow peer that is alive is waited for. The whole, a task killed under srun without
--kill-on-bad-exit: tests/cluster/test_slurm.py::test_kill_9_of_one_prepare_task_ends_the_step_through_the_heartbeat.
(mpiexec -disable-auto-cleanup does not stand in for it: MPICH's launcher still ended such a job itself in 3 runs of 4
here.)"""
import os
import time

from mpinn.comm.heartbeat import Heartbeat, folder_for


def pair(folder, seconds=1.0, every=0.05):
    lines = []
    a = Heartbeat(str(folder), 0, 2, seconds, every=every, lost=lines.append).start()
    b = Heartbeat(str(folder), 1, 2, seconds, every=every, lost=lines.append).start()
    return a, b, lines


def test_a_peer_that_beats_is_never_lost_however_long_it_takes(tmp_path):
    a, b, lines = pair(tmp_path / "alive")
    t = time.monotonic()
    while time.monotonic() - t < 2.5:        # 2.5 times the timeout
        a.check()
        b.check()
        time.sleep(0.01)
    assert lines == []
    b.stop()
    a.stop()
    assert not (tmp_path / "alive").exists()        # the last one out takes the folder


def test_a_peer_whose_beat_stands_still_ends_the_job_with_one_line(tmp_path):
    a, b, lines = pair(tmp_path / "alive")
    b._stop.set()           # killed: its thread stops, its file stays
    b._thread.join()
    a.check(now=100.0)
    a.check(now=100.9)      # within the timeout (and once a second at most)
    assert lines == []
    a.check(now=101.5)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("mpinn: error on rank 0 of 2: rank 1 gave no sign of life for 1 s (")
    assert os.path.join(str(tmp_path / "alive"), "rank-1") in line and "killed, out of memory" in line
    assert "raise --peer-timeout" in line
    a.stop()


def test_a_peer_never_seen_asks_whether_the_folder_is_shared(tmp_path):
    lines = []
    a = Heartbeat(str(tmp_path / "alive"), 0, 3, 2.0, lost=lines.append).start()
    a.check(now=0.0)
    a.check(now=2.5)
    assert len(lines) == 1 and "rank 1 gave no sign of life for 2 s" in lines[0]
    assert "never seen: is %s on a filesystem every node shares?" % (tmp_path / "alive") in lines[0]
    a.stop()


def test_the_folder_is_beside_the_output_and_hidden(tmp_path):
    assert folder_for(str(tmp_path / "days.mpinn")) == str(tmp_path / ".days.mpinn.alive")


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    import pytest
    from mpinn.core.errors import MpinnError
    (tmp_path / "file").write_text("x")
    with pytest.raises(MpinnError, match="^cannot write into %s: Not a directory$" % (tmp_path / "file")):
        Heartbeat(folder_for(str(tmp_path / "file" / "out.mpinn")), 0, 2, 5).start()


def test_the_peers_rows_ride_on_their_beats_for_rank_0_to_show(tmp_path):
    a, b, lines = pair(tmp_path / "alive")
    b.rows = 1234567
    time.sleep(0.2)             # a few of b's beats (every 0.05 s)
    a.check()
    assert a.progress_line(every=10.0, now=0.0) is None          # a short wait says nothing
    assert a.progress_line(every=10.0, now=10.5) == "rank 1 1,234,567 rows"
    assert a.progress_line(every=10.0, now=11.0) is None         # at most once every 10 s
    b.stop()
    a.stop()
