"""The boundary every buffer passes before MPI reads or writes it, and how a batch's rows split over ranks."""
import numpy as np

from mpinn.device.backend import synchronize_array

INDEX = np.int32     # CSR column ids and row lengths on the wire


def check_buffer(buf, dtype, length, what="buffer"):
    """The boundary check every buffer passes before MPI reads or writes it."""
    if not isinstance(buf, np.ndarray) and hasattr(buf, "__cuda_array_interface__"):
        check_device_buffer(buf, dtype, length, what)
        synchronize_array(buf)      # the one place a GPU buffer is made ready before MPI reads it
        return buf
    if not isinstance(buf, np.ndarray):
        raise TypeError("%s: expected a numpy array, got %s" % (what, type(buf).__name__))
    if not buf.flags.c_contiguous:
        raise ValueError("%s: not C-contiguous (a Fortran-ordered or strided array would be sent "
                         "in the wrong element order); convert it with numpy.ascontiguousarray "
                         "where it is loaded" % what)
    if buf.dtype != np.dtype(dtype):
        raise ValueError("%s: dtype %s, expected %s" % (what, buf.dtype, np.dtype(dtype)))
    if buf.size != length:
        raise ValueError("%s: %d elements, expected %d" % (what, buf.size, length))
    return buf


def split_counts(n, parts):
    """Rows per rank for a batch of n rows: contiguous slices, the first n % parts ranks get one more."""
    base, extra = divmod(int(n), parts)
    return np.array([base + (r < extra) for r in range(parts)], dtype=np.int64)


def displs(counts):
    """Each rank's offset into a buffer of counts laid end to end."""
    d = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=d[1:])
    return d


def check_device_buffer(buf, dtype, length, what="buffer"):
    """check_buffer's rules for an object exporting __cuda_array_interface__ (shape, typestr,
    strides): C-contiguous, the expected dtype, the expected number of elements."""
    cai = buf.__cuda_array_interface__
    shape, got = tuple(int(n) for n in cai["shape"]), np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:      # None means C-contiguous; otherwise every dim longer than 1 must match
        step = got.itemsize
        for n, s in reversed(list(zip(shape, strides))):
            if n > 1 and s != step:
                raise ValueError("%s: GPU array is not C-contiguous (shape %s, strides %s); MPI would "
                                 "read it in the wrong element order" % (what, shape, tuple(strides)))
            step *= n
    if got != np.dtype(dtype):
        raise ValueError("%s: dtype %s, expected %s" % (what, got, np.dtype(dtype)))
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size != length:
        raise ValueError("%s: %d elements, expected %d" % (what, size, length))
    return buf
