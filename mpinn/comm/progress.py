"""A thread that drives MPI's progress on a posted request while the rank computes (Progress; --stale-rows 1, whose
rows' Ialltoallv TableShards.post posts): MPICH moves a nonblocking collective's data only inside MPI calls."""
import contextlib
import threading
import time


class Progress:
    """A thread that calls Test on a posted request every `poll` seconds while the rank computes (between
    resume() and pause()), so that MPICH moves its data then rather than at the wait. It makes MPI calls while
    the main thread computes only; pause() returns once it is out of MPI (the MPI library was started with
    MPI_THREAD_MULTIPLE, mpi4py's default, so the main thread's own collectives may follow at once either way)."""

    def __init__(self, poll=50e-6):
        self.poll, self.request = float(poll), None
        self._go, self._quit, self._in_mpi = threading.Event(), False, threading.Lock()
        self.tests = 0                  # Test calls made (the benchmark reports them)
        self._thread = threading.Thread(target=self._run, name="mpinn-progress", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            self._go.wait()
            if self._quit:
                return
            with self._in_mpi:
                request = self.request
                if request is not None:
                    self.tests += 1
                if request is None or request.Test():      # done (a completed request is null: Wait returns)
                    self.request = None
                    self._go.clear()
                    continue
            time.sleep(self.poll)

    def resume(self, request):
        """Drive `request` from now on (until it completes or pause())."""
        with self._in_mpi:
            self.request = request
            self._go.set()

    @contextlib.contextmanager
    def driving(self, request):
        """Drive `request` for the length of a with block."""
        self.resume(request)
        try:
            yield
        finally:
            self.pause()

    def pause(self):
        """Stop driving; returns when the thread is out of MPI."""
        with self._in_mpi:
            self.request = None
            self._go.clear()

    def close(self):
        """The thread ends (a step's release_)."""
        with self._in_mpi:
            self._quit = True
            self._go.set()
        self._thread.join()
