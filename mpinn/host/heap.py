"""The process's pages and heap (glibc): huge pages kept off a slice, mallopt's thresholds for streaming and
for training, large zeroed vectors in pages of their own."""
import ctypes
import errno
import mmap

MADV_NOHUGEPAGE, HUGE_PAGE = 15, 2 << 20


def small_pages_at(a, cuts):
    """Keep the 2 MiB-aligned windows of array a's memory around the element offsets `cuts` out of
    transparent huge pages (madvise MADV_NOHUGEPAGE; numpy advises huge pages for big arrays): a rank
    that writes only a slice of a buffer then makes resident its slice to a 4 KiB page, not rounded
    out by up to 2 MiB at each end (W2's 21 MiB slice at np 3: +13%, measured). Call it before the
    slice is written. No-op where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    base, end = a.ctypes.data, a.ctypes.data + a.nbytes
    for cut in cuts:
        window = (base + int(cut) * a.itemsize) // HUGE_PAGE * HUGE_PAGE
        lo, hi = max(window, base // 4096 * 4096), min(window + HUGE_PAGE, (end + 4095) // 4096 * 4096)
        if hi > lo:
            libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_NOHUGEPAGE)
    return True


# ---------------------------------------------------------------- the process's heap (glibc)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _mallopt(*settings):
    """glibc's mallopt for each (parameter, value); False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all(bool(libc.mallopt(p, int(v))) for p, v in settings)
    except (OSError, AttributeError):
        return False


def steady_heap(threshold=1 << 20):
    """Make glibc serve every allocation >= threshold bytes with its own mmap, returned to the OS when
    freed. By default glibc raises that threshold after each large free, after which chunk-sized numpy
    buffers come from a heap that fragments: a process streaming chunks then grows with the row count
    (prepare at 10M rows: +25%). No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, threshold))


def reusing_heap(mmap_threshold=32 << 20, trim_threshold=256 << 20):
    """The opposite trade, for the training loop: serve allocations below 32 MiB from the heap and keep
    up to 256 MiB of freed heap, so that each step's temporaries (activations, gradient rows, received
    batches: the same sizes every step) reuse warm pages. glibc's default maps every allocation of
    128 KiB or more afresh, and frees it back to the OS, until some large free raises that threshold;
    a rank that never freed a large array (every rank but the one that loaded the data) then pays
    page faults for every temporary of every step: on W2 at np 2 that was 0.7 ms of rank 1's 4.4 ms
    step, and the whole job waited for it. No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold))


FRESH_BYTES = 4 << 20     # arrays at least this large get pages of their own (fresh_zeros)


def fresh_zeros(n, dtype):
    """A zeroed host vector of n elements whose large form (FRESH_BYTES and up) lies in pages of its own,
    mapped anonymously: untouched until written, whatever the heap holds. numpy's zeros is calloc, which
    may hand back a freed heap chunk and clear it, making every page resident: on the rank that read the
    data, a sharded table's other rows (pages it must never hold) would all be in memory."""
    import numpy as np  # start-up: mpinn.host loads no numpy before pin_threads has set BLAS's threads
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < FRESH_BYTES:
        return np.zeros(int(n), dtype=dtype)
    try:
        return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype)
    except OSError as e:        # as numpy says it: the size asked for
        if e.errno != errno.ENOMEM:
            raise
        raise MemoryError("Unable to allocate %.2f GiB for an array with shape (%d,) and data type %s"
                          % (nbytes / 2**30, int(n), dtype)) from None
