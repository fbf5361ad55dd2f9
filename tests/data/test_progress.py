"""The progress of a long read (mpinn.data.progress): nothing for a short read; past 2 s, a line every 5 s off a
terminal with the rows, their share of the estimate, rows/s and the time left; a closing line; through a real
read of a table in chunks."""
import io

from mpinn.data import progress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_long_read_shows_rows_share_rate_and_time_left(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    out = io.StringIO()
    p = progress.ReadProgress("the data", about=1000, stream=out)
    p.add(100)
    clock.t += 1.0
    p.add(100)
    assert out.getvalue() == ""                     # under 2 s: nothing
    clock.t += 5.0                                  # 6 s, 300 rows: 50 rows/s, 700 left: 14 s
    p.add(100)
    assert out.getvalue() == "reading the data: 300 rows (30% of about 1000), 50 rows/s, about 14 s left\n"
    clock.t += 1.0
    p.add(100)                                      # within 5 s of the last line: nothing more
    assert out.getvalue().count("\n") == 1
    clock.t += 1.0
    p.close()
    assert out.getvalue().splitlines()[-1] == "reading the data: 400 rows, 50 rows/s, 8.0 s"


def test_a_short_read_shows_nothing_and_the_readers_tick_it(tmp_path):
    from mpinn.data import DataSpec, load_data
    path = tmp_path / "t.csv"
    path.write_text("y,a\n" + "".join("%d,v%d\n" % (i % 2, i % 5) for i in range(3000)))
    with progress.reading("t.csv") as p:
        p.stream = io.StringIO()
        load_data(str(path), DataSpec(label="y"))
        assert p.rows == 3000 and abs(p.about - 3000) < 150 and p.stream.getvalue() == ""


def test_the_training_bar_past_a_streams_estimated_steps_says_so():
    """A stream's steps an epoch are estimated from its files' sizes: past the estimate the bar shows the count,
    not 'step 48/43' at 111%."""
    from mpinn.training.timeline import ProgressBar
    out = io.StringIO()
    bar = ProgressBar(True, out)
    for step in (43, 48):
        bar._last = 0.0
        bar.update(1, 1, step, 43, 0.5, 1000.0)
    first, second = out.getvalue().splitlines()
    assert "100% step 43/43" in first
    assert "step 48 (43 estimated)" in second and "%" not in second and "/43" not in second
