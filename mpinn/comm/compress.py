"""--compress fp16|bf16: the dense gradient exchanged as 16-bit words, summed in float32 in rank order."""
import numpy as np

from mpinn.comm.buffers import check_buffer

FP16_MAX_EXP, BF16_MAX_EXP = 0x7C00, 0x7F80     # exponent bits all ones: Inf or NaN


class Compressed16:
    """The dense gradient Allreduce in 16-bit words (fp16, or bf16 emulated as the top half of a
    float32 rounded to nearest even, since numpy has no bfloat16).

    The gradient arrives already scaled by 1/N, so a sum of P shares stays in range. Each rank
    sends [16-bit gradient | loss slot in its own dtype, as raw words | overflow flag]; the flag is
    1 when the cast produced an Inf or NaN. The exchange is one Allgather, and every rank adds the
    P rows in float32, in rank order: the same float32 accumulation and bitwise the same result
    on every rank, so the non-finite verdict needs no message. An overflow anywhere writes NaN
    into the loss slot, so Trainer.finite rejects the step on every rank.
    Cost: each rank receives (P-1) x 2 bytes per gradient element, against about 2 (P-1)/P x 4
    for a ring Allreduce in float32: cheaper below 4 ranks, equal at 4, dearer beyond (MPICH can
    sum MPIX_C_FLOAT16 natively, but rounds every partial sum to fp16 on the way)."""

    def __init__(self, communicator, kind):
        if kind not in ("fp16", "bf16"):
            raise ValueError("16-bit words are fp16 or bf16, not %r" % kind)     # the option's choices
        self.c, self.kind = communicator, kind
        self.send = self.recv = None
        self.overflows = 0          # steps where some rank's cast overflowed

    def encode(self, body, words):
        """body (float32/float64) as 16-bit words into words; True when the cast overflowed."""
        if self.kind == "fp16":
            with np.errstate(over="ignore"):     # an overflow is reported by the flag, not a warning
                np.copyto(words.view(np.float16), body, casting="unsafe")
            exp = FP16_MAX_EXP
        else:
            to_bf16(body, words)
            exp = BF16_MAX_EXP
        return bool(np.any((words & exp) == exp))

    def decode_sum(self, rows, out):
        """out[...] = the float32 sum, in rank order, of the 16-bit rows (P, n)."""
        if self.kind == "fp16":
            acc = rows[0].view(np.float16).astype(np.float32)
            for r in range(1, rows.shape[0]):
                acc += rows[r].view(np.float16)
        else:
            acc = from_bf16(rows[0])
            for r in range(1, rows.shape[0]):
                acc += from_bf16(rows[r])
        out[...] = acc

    def allreduce_sum_(self, buf):
        """buf: a gradient buffer's dense part, its last element the loss slot; summed in place."""
        c = self.c
        check_buffer(buf, buf.dtype, buf.size, "gradient buffer")
        n, tail = buf.size - 1, buf.dtype.itemsize // 2     # words of the loss slot
        words = n + tail + 1
        if self.send is None or self.send.size != words:
            self.send = np.empty(words, dtype=np.uint16)
            self.recv = np.empty((c.size, words), dtype=np.uint16)
        send, recv = self.send, self.recv
        bad = self.encode(buf[:n], send[:n])
        send[n:n + tail] = buf[n:].view(np.uint16)
        send[-1] = 1 if bad else 0
        check_buffer(send, np.uint16, words, "compressed gradient")
        check_buffer(recv, np.uint16, c.size * words, "gathered compressed gradients")
        c.comm.Allgather(send, recv)
        self.decode_sum(recv[:, :n], buf[:n])
        loss = buf.dtype.type(0)
        for r in range(c.size):
            loss += recv[r, n:n + tail].copy().view(buf.dtype)[0]
        buf[n] = loss
        if recv[:, -1].any():
            self.overflows += 1
            buf[n] = np.nan
        return buf


def to_bf16(body, words):
    """body (float32; float64 is rounded to float32 first) as bfloat16 words (uint16, body's shape) into words, each
    the top half of the float32 rounded to nearest even (numpy has no bfloat16); NaN stays NaN."""
    with np.errstate(over="ignore"):
        u = np.ascontiguousarray(body, dtype=np.float32).view(np.uint32)
    # round to nearest even: add 0x7FFF plus the lowest kept bit, keep the top 16 bits
    r = (u >> 16) & 1
    r += 0x7FFF
    r += u
    np.right_shift(r, 16, out=r)
    np.copyto(words, r, casting="unsafe")
    nan = np.isnan(body)      # the rounding add can carry a NaN's payload into the sign
    if nan.any():
        words[nan] = 0x7FC0
    return words


def from_bf16(words):
    """bfloat16 words as float32 values (exact)."""
    return (words.astype(np.uint32) << 16).view(np.float32)
