"""The learning curve end to end: --curve writes one row per epoch, --plot a PNG with every curve drawn."""
import struct
import zlib

import pytest

from conftest import mpirun


def png_chunks(path):
    """(type, data) of every chunk of a PNG file, each checked against its CRC."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, out = 8, []
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, "damaged chunk %r" % kind
        out.append((kind.decode("ascii"), body))
        pos += 12 + length
    return out


@pytest.mark.mpi
def test_plot_writes_a_png_with_every_curve_and_the_curve_file(tmp_path, launcher):
    png, csv = tmp_path / "curve.png", tmp_path / "curve.csv"
    r = mpirun(2, ["-m", "mpinn.train", "--default-rows", "3000", "--epochs", "3", "--hidden", "8",
                   "--hash-bits", "12", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
                   "--plot", str(png), "--curve", str(csv)], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "plot written to %s" % png in r.stdout and "curve written to %s" % csv in r.stdout
    chunks = png_chunks(png)
    kinds = [k for k, _ in chunks]
    assert kinds[0] == "IHDR" and kinds[-1] == "IEND" and "IDAT" in kinds
    width, height = struct.unpack(">II", chunks[0][1][:8])
    assert (width, height) == (1000, 360)           # two panels: the losses, the held-out metrics
    text = dict(body.split(b"\0", 1) for k, body in chunks if k == "tEXt")
    drawn = text[b"Description"].decode("latin-1").split("; ")
    assert sorted(drawn) == sorted(["train loss: 3 points", "held-out log-loss: 3 points",
                                    "accuracy: 3 points", "auc: 3 points"]), drawn
    rows = csv.read_text().splitlines()         # 3000 rows: an ensemble; its first model's epochs, then the average
    assert rows[0].startswith("model,epoch,at,step,samples,elapsed,eval_seconds,time,train_loss") and len(rows) == 1 + 4
    assert rows[-1].startswith("averaged,,end,")       # not drawn
