"""Engines the launcher starts (mpirun, srun, ssh clients): a watchdog that kills their process
groups (and removes their scratch folders) even when the launcher is killed with SIGKILL; a
signal to a process group; exit codes.
(Wrappers need no watchdog: each kills what it started when its connection to the launcher
closes. How an exit reads in a sentence is ``output/report.py``'s ``describe_exit``.)
"""
from __future__ import annotations

import os
import subprocess

# A tiny process that outlives nothing: it reads process-group ids (and "rm FOLDER" lines) from a
# pipe and, when the pipe closes without "done" (the launcher died, however it died), kills every
# group still listed, then removes the folders. POSIX sh, because it must start in a millisecond
# and cost no memory.
_WATCHDOG = r"""
trap '' INT HUP TERM QUIT USR1 USR2 PIPE
groups=
gone=
folders=
while IFS= read -r line; do
  case "$line" in
    done) exit 0 ;;
    "rm "*) folders="$folders
${line#rm }" ;;
    -*) gone="$gone ${line#-} " ;;
    *) groups="$groups $line" ;;
  esac
done
for g in $groups; do
  case "$gone" in *" $g "*) continue ;; esac
  kill -KILL "-$g" 2>/dev/null
done
printf '%s\n' "$folders" | while IFS= read -r f; do
  [ -n "$f" ] && rm -rf -- "$f"
done
exit 0
"""


class Watchdog:
    """Kills the job's process groups if the launcher dies before saying ``done``."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._fd = self._proc.stdin.fileno()

    def _send(self, line: str) -> None:
        try:
            os.write(self._fd, (line + "\n").encode())
        except OSError:
            pass

    def watch(self, pgid: int) -> None:
        self._send(str(pgid))

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def remove_if_killed(self, folder: str) -> None:
        """Remove ``folder`` (an engine's scratch) should the launcher die; the launcher removes
        it itself otherwise."""
        self._send(f"rm {folder}")

    def close(self) -> None:
        self._send("done")
        self._proc.stdin.close()
        self._proc.wait()


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def exit_code_of(returncode: int) -> int:
    """Shell convention: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode
