"""A test instance that does what it is told, per instance index.

usage: behave.py PID_DIR ACTION[@INDEX] ...
Actions for the instance whose index matches (or every instance without @INDEX):
  exit:N        print a line to stderr and exit with N
  sigkill       kill itself with SIGKILL
  sleep:S       sleep S seconds
  child         start a grandchild (sleep 300) in the same process group
  usr1          on SIGUSR1 write PID_DIR/usr1-<i> and carry on
  lines:N       print N long lines to stdout as fast as possible
Every instance writes its pid (and its grandchild's) to PID_DIR first.
"""
import os
import signal
import subprocess
import sys
import time

pid_dir = sys.argv[1]


def record(name, text):
    """Write PID_DIR/NAME whole or not at all (an instance may be stopped mid-write)."""
    tmp = os.path.join(pid_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(pid_dir, name))


index = int(os.environ["POPDIST_INSTANCE_INDEX"])
record(f"pid-{index}", str(os.getpid()))

for spec in sys.argv[2:]:
    action, _, target = spec.partition("@")
    if target and int(target) != index:
        continue
    name, _, arg = action.partition(":")
    if name == "exit":
        print(f"instance {index} gives up with code {arg}", file=sys.stderr, flush=True)
        sys.exit(int(arg))
    elif name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "sleep":
        time.sleep(float(arg))
    elif name == "child":
        child = subprocess.Popen(["sleep", "300"])
        record(f"child-{index}", str(child.pid))
    elif name == "usr1":
        def on_usr1(signum, frame, index=index):
            record(f"usr1-{index}", "got it")
        signal.signal(signal.SIGUSR1, on_usr1)
        record(f"ready-{index}", "ready")
    elif name == "lines":
        payload = str(index) * 700
        for n in range(int(arg)):
            sys.stdout.write(f"{index} {n} {payload}\n")
        sys.stdout.flush()
