"""poprun-lite jobs that mostly wait, run side by side: started together, each one's result
collected as ``poprun()`` gives it, so that parametrised cases that each wait seconds for real
share one wait (a module fixture runs them; each test asserts its own case)."""
import subprocess
import tempfile
import time
from typing import Dict, Hashable, Sequence

from conftest import LAUNCHER, job_environ


def poprun_together(jobs: Dict[Hashable, Sequence[str]],
                    timeout: float = 240) -> Dict[Hashable, subprocess.CompletedProcess]:
    """Run ``poprun-lite ARGS`` for every ARGS of ``jobs`` at once; wait for all, each bounded
    by the launcher's own ``--timeout`` (POPRUN_TIMEOUT, as ``poprun()`` sets it) and killed
    at ``timeout``; their output goes to files, so none blocks on a full pipe. Returns each
    key's completed process (return code -9 for one killed at the timeout)."""
    env = {**job_environ(), "POPRUN_TIMEOUT": f"{timeout * 0.85 - 5:g}"}
    started = {}
    with tempfile.TemporaryDirectory() as folder:
        try:
            for n, (key, args) in enumerate(jobs.items()):
                out, err = (open(f"{folder}/{n}.{name}", "w+") for name in ("out", "err"))
                proc = subprocess.Popen([*LAUNCHER, *args], stdout=out, stderr=err, text=True,
                                        env=env)
                started[key] = (proc, out, err, list(args))
            deadline = time.monotonic() + timeout
            for proc, _, _, _ in started.values():
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            for proc, out, err, _ in started.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        results = {}
        for key, (proc, out, err, args) in started.items():
            out.seek(0)
            err.seek(0)
            results[key] = subprocess.CompletedProcess(args, proc.returncode, out.read(),
                                                       err.read())
            out.close()
            err.close()
    return results
