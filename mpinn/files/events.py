"""TensorBoard event files written directly, with no dependency: TFRecord framing (masked CRC-32C) around Event
protocol buffers holding scalar summaries (what tensorboard --logdir reads)."""
import os
import socket
import struct
import time


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1      # Castagnoli's polynomial, reflected
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    """One TFRecord: the length, its checksum, the data, the data's checksum."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1          # a negative int64 as protobuf writes it: ten bytes
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, wire, payload):
    return _varint(number << 3 | wire) + payload


def _bytes_field(number, data):
    return _field(number, 2, _varint(len(data)) + data)


def event(wall_time, step, file_version=None, scalars=None, start=False):
    """An Event message (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64), file_version = 3
    (string), summary = 5: Summary { repeated Value value = 1 }, Value { string tag = 1; float simple_value = 2 }, or
    (start) session_log = 7: SessionLog { status = 1: START (1) }."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(int(step)))
    if file_version is not None:
        return out + _bytes_field(3, file_version.encode())
    if start:
        return out + _bytes_field(7, _field(1, 0, _varint(1)))
    values = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5, struct.pack("<f", value)))
                      for tag, value in scalars.items())
    return out + _bytes_field(5, values)


class EventWriter:
    """Scalars into a new event file in `log_dir` (made if missing), each event flushed as it is written, so that a
    run that dies keeps what it wrote and TensorBoard shows a run while it trains."""

    def __init__(self, log_dir):
        os.makedirs(log_dir, exist_ok=True)
        base = os.path.join(log_dir, "events.out.tfevents.%010d.%s.%d" % (time.time(), socket.gethostname(),
                                                                           os.getpid()))
        self.path, n = base, 0
        while os.path.exists(self.path):
            n += 1
            self.path = "%s.%d" % (base, n)
        self.file = open(self.path, "wb")
        self._write(event(time.time(), 0, file_version="brain.Event:2"))

    def _write(self, data):
        self.file.write(record(data))
        self.file.flush()

    def restart(self, step):
        """A resumed run starts again at `step`: TensorBoard drops the points an earlier file has from this step on
        (a run that died after its checkpoint wrote steps the resumed one writes again)."""
        self._write(event(time.time(), step, start=True))

    def scalars(self, step, values, wall_time=None):
        """{tag: number} at a step (tags such as "valid/auc" group in TensorBoard by their prefix); a None or NaN is
        left out."""
        values = {k: float(v) for k, v in values.items() if v is not None and float(v) == float(v)}
        if values:
            self._write(event(time.time() if wall_time is None else wall_time, step, scalars=values))

    def close(self):
        self.file.close()
