"""Fault injection for the failure-path tests (MPINN_FAULT): one rank misbehaves at a given global step."""
import os
import signal
import time

import numpy as np

from mpinn.core.errors import MpinnError


class Faults:
    """Test hooks (set by MPINN_FAULT): make one rank misbehave at a given global step, so the
    failure paths are tested for real. Spec: kind:rank:step[+], comma-separated; kind is nan
    (poison this rank's gradient), huge (the largest finite gradient value, which overflows a
    16-bit cast: --compress), hang (sleep for an hour), kill (SIGKILL itself), raise, or slow (sleep
    0.1 s: a run slow enough to be signalled mid-epoch); a trailing + repeats it on every later step.
    evalhang:rank:step sleeps for an hour in the first held-out evaluation after that step (a peer lost
    while the others score the held-out rows)."""

    KINDS = ("nan", "huge", "hang", "kill", "raise", "slow", "evalhang")

    def __init__(self, spec="", rank=0):
        self.rules = []
        for item in filter(None, (x.strip() for x in (spec or "").split(","))):
            try:
                kind, r, step = item.split(":")
                onward = step.endswith("+")
                rule = (kind, int(r), int(step.rstrip("+")), onward)
            except ValueError:
                raise MpinnError("MPINN_FAULT: expected kind:rank:step[+], not %r" % item, collective=True)
            if kind not in self.KINDS:
                raise MpinnError("MPINN_FAULT: kind must be one of %s, not %r" % ("|".join(self.KINDS), kind), collective=True)
            if rule[1] == rank:
                self.rules.append(rule)

    def fire(self, step, grad_buffer):
        for kind, _, at, onward in self.rules:
            if step == at or (onward and step > at):
                if kind == "nan":     # the output bias: always in the reduced dense tail
                    grad_buffer[-2] = np.nan
                elif kind == "huge":
                    grad_buffer[-2] = np.finfo(grad_buffer.dtype).max
                elif kind == "hang":
                    time.sleep(3600)
                elif kind == "kill":
                    os.write(2, b"MPINN_FAULT: kill at %.3f\n" % time.time())
                    os.kill(os.getpid(), signal.SIGKILL)
                elif kind == "raise":
                    raise RuntimeError("injected failure at step %d" % step)
                elif kind == "slow":
                    time.sleep(0.1)

    def fire_evaluation(self, step):
        for kind, _, at, _ in self.rules:
            if kind == "evalhang" and step >= at:
                os.write(2, b"MPINN_FAULT: evalhang at step %d\n" % step)
                time.sleep(3600)
