"""A test instance that does what it is told, per instance index.

usage: behave.py PID_DIR ACTION[@INDEX] ...
Actions for the instance whose index matches (or every instance without @INDEX):
  exit:N        print a line to stderr and exit with N
  sigkill       kill itself with SIGKILL
  sleep:S       sleep S seconds
  child         start a grandchild (sleep 300) in the same process group
  usr1          on SIGUSR1 write PID_DIR/usr1-<i> and carry on
  lines:N       print N long lines to stdout as fast as possible
  stdout:N      print N lines to stdout (nothing to stderr)
  words:N       print N lines as print("instance", i, "line", n, "end") writes them: in pieces
  prompt        write "Name? " to stdout without a newline
  closeout      close stdout and stderr (they go to /dev/null)
  onstop:S      on SIGINT/SIGTERM/SIGHUP: write PID_DIR/signal-<i> (its name), take S seconds to
                "save", write PID_DIR/saved-<i>, exit 0
  stubborn:S    on SIGINT/SIGTERM/SIGHUP: write PID_DIR/signal-<i> (its name), wait S seconds,
                write PID_DIR/still-<i>, and carry on as if nothing happened (only SIGKILL ends it)
  daemon        start a setsid() daemon (sleep 300, holding stdout); pid in PID_DIR/daemon-<i>
  progress:N    N progress-bar updates separated by \r, then \n
  bigline:M     one line of M MiB (the instance's digit) without a newline
  binary        every byte value, 4 times, to stdout
  stdin         copy stdin to PID_DIR/stdin-<i> (until end of file)
  argsize       write the length of the last argument to PID_DIR/argsize-<i>
  hang          wait in hang_here() forever, a second thread in side_thread()
  stall         report a collectives stall to the launcher (as the stall watchdog does)
  waitfor:NAME  wait (up to 60 s) until PID_DIR/NAME exists, e.g. another instance's ready-<i>
  switches      write the site hook's switches that are on to PID_DIR/switches-<i>
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
    elif name == "stdout":
        for n in range(int(arg)):
            print(f"instance {index} stdout line {n}", flush=True)
    elif name == "words":  # unbuffered (as the launcher runs Python), each piece is a write
        for n in range(int(arg)):
            print("instance", index, "line", n, "end")
    elif name == "prompt":
        sys.stdout.write("Name? ")
        sys.stdout.flush()
    elif name == "closeout":  # its pipes close; what it writes later goes nowhere
        sys.stdout.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    elif name == "onstop":
        def on_stop(signum, frame, index=index, seconds=float(arg)):
            record(f"signal-{index}", signal.Signals(signum).name)
            time.sleep(seconds)
            record(f"saved-{index}", "saved")
            os._exit(0)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, on_stop)
        record(f"ready-{index}", "ready")
    elif name == "stubborn":
        def on_stop(signum, frame, index=index, seconds=float(arg)):
            record(f"signal-{index}", signal.Signals(signum).name)
            time.sleep(seconds)
            record(f"still-{index}", "still here")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, on_stop)
        record(f"ready-{index}", "ready")
    elif name == "daemon":
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(write_end, str(os.getpid()).encode())
                os.execvp("sleep", ["sleep", "300"])
            os._exit(0)
        os.close(write_end)
        record(f"daemon-{index}", os.read(read_end, 64).decode())
    elif name == "progress":
        for n in range(int(arg)):
            sys.stdout.write(f"\rinstance {index} progress {n + 1}/{arg}")
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
    elif name == "bigline":
        sys.stdout.write(str(index) * (int(arg) << 20))
        sys.stdout.flush()
    elif name == "binary":
        sys.stdout.buffer.write(bytes(range(256)) * 4)
        sys.stdout.flush()
    elif name == "stdin":
        record(f"stdin-{index}", sys.stdin.read())
    elif name == "switches":
        from popdist_launcher.compat import startup
        record(f"switches-{index}", " ".join(sorted(startup.finder().on)))
    elif name == "argsize":
        record(f"argsize-{index}", str(len(sys.argv[-1])))
    elif name == "hang":
        import threading

        def side_thread():
            while True:
                time.sleep(0.05)

        def hang_here():
            record(f"ready-{index}", "ready")
            time.sleep(3600)

        threading.Thread(target=side_thread, daemon=True).start()
        hang_here()
    elif name == "stall":
        from popdist_launcher.stack_dump import report_stall
        report_stall(f"collective stall on instance {index}: allreduce 'grad' waited too long")
    elif name == "waitfor":
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(pid_dir, arg)) and time.monotonic() < deadline:
            time.sleep(0.01)
    elif name == "lines":
        payload = str(index) * 700
        for n in range(int(arg)):
            sys.stdout.write(f"{index} {n} {payload}\n")
        sys.stdout.flush()
