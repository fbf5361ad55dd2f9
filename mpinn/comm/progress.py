"""A thread that drives MPI's progress on posted requests while the rank computes (Progress; --stale-rows 1 and 2,
whose rows' Ialltoallv TableShards.post posts, and with 2 the gradient rows' of send_back): MPICH moves a nonblocking
collective's data only inside MPI calls."""
import contextlib
import threading
import time


class Progress:
    """A thread that calls Test on posted requests every `poll` seconds while the rank computes (between
    resume() and pause()), until all have completed, so that MPICH moves its data then rather than at the wait. It makes MPI calls while
    the main thread computes only; pause() returns once it is out of MPI (the MPI library was started with
    MPI_THREAD_MULTIPLE, mpi4py's default, so the main thread's own collectives may follow at once either way)."""

    def __init__(self, poll=50e-6):
        self.poll, self.requests = float(poll), []
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
                self.tests += len(self.requests)
                # a completed request is null: Test keeps saying so, and Wait returns at once
                if all([r.Test() for r in self.requests]):
                    self.requests = []
                    self._go.clear()
                    continue
            time.sleep(self.poll)

    def resume(self, *requests):
        """Drive `requests` (None: none) from now on (until they complete or pause())."""
        with self._in_mpi:
            self.requests = [r for r in requests if r is not None]
            self._go.set()

    @contextlib.contextmanager
    def driving(self, *requests):
        """Drive `requests` for the length of a with block."""
        self.resume(*requests)
        try:
            yield
        finally:
            self.pause()

    def pause(self):
        """Stop driving; returns when the thread is out of MPI."""
        with self._in_mpi:
            self.requests = []
            self._go.clear()

    def close(self):
        """The thread ends (a step's release_)."""
        with self._in_mpi:
            self._quit = True
            self._go.set()
        self._thread.join()
