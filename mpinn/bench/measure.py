"""What a benchmark run measures besides its steps: peak memory, the other processes' load, the BLAS
threads, and the record written in the peers' format."""
import json
import os
import platform
import resource
import time

_CLK = os.sysconf("SC_CLK_TCK")


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_busy_s():
    """Machine-wide busy CPU seconds (user+nice+system+irq+softirq) and steal, from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq) / _CLK, steal / _CLK


class LoadWindow:
    """How many cores other processes used during the timed window (the peers' load meter)."""

    def start(self):
        self.busy0, self.steal0 = cpu_busy_s()
        self.cpu0, self.t0 = time.process_time(), time.perf_counter()

    def stop(self):
        self.busy1, self.steal1 = cpu_busy_s()
        self.cpu1, self.t1 = time.process_time(), time.perf_counter()
        return self.cpu1 - self.cpu0

    def summary(self, own_cpu_s_total):
        wall = self.t1 - self.t0
        return {"window_s": round(wall, 3), "own_cpu_cores": round(own_cpu_s_total / wall, 3),
                "foreign_cpu_cores": round(max(self.busy1 - self.busy0 - own_cpu_s_total, 0.0) / wall, 3),
                "steal_cores": round((self.steal1 - self.steal0) / wall, 3)}


def thread_info():
    try:
        from threadpoolctl import threadpool_info  # optional: threadpoolctl (scikit-learn's), not a dependency
        return [(d.get("internal_api"), d.get("num_threads")) for d in threadpool_info()]
    except Exception as e:  # noqa: BLE001 - optional detail
        return repr(e)


def write_result(rec, path):
    """Append the record to the JSONL file and print it (RESULT ...), as the peers do."""
    rec.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    rec.setdefault("host", platform.node())
    line = json.dumps(rec, sort_keys=True)
    with open(path, "a") as f:
        f.write(line + "\n")
    print("RESULT " + line, flush=True)
