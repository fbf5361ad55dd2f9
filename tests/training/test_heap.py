"""The process-wide heap settings (mpinn.host.heap): the training loop's temporaries reuse warm pages."""
import subprocess
import sys

import pytest

SCRIPT = r"""
import resource, sys
import numpy as np
from mpinn.host.heap import reusing_heap
if sys.argv[1] == "reuse":
    assert reusing_heap()
def step():                      # one step's temporaries: eight of 1 MiB alive at once, then freed
    keep = [np.ones(1 << 18, np.float32) for _ in range(8)]
    return sum(float(a[-1]) for a in keep)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode):
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


@pytest.mark.launch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_reusing_heap_keeps_step_temporaries_off_fresh_pages():
    # glibc's default: the 8 MiB freed at the heap's top is above its trim threshold (twice the
    # largest block freed so far) and goes back to the OS every step, to be faulted in again
    assert faults("default") > 100 * 1024
    # with reusing_heap the pages are faulted in once and reused
    assert faults("reuse") < 100 * 16
