"""The stack pipe between a program and its wrapper: the one pipe on which the program started
by poprun-lite's wrapper writes its Python stacks (faulthandler's text, which never holds a NUL)
and, each behind a NUL-led marker, its readiness, a collectives stall, training progress and
the hang check's position reports. The program's side (``stack_dump.py``, ``whereabouts.py``)
writes these, the wrapper (``launcher/spawned/wrapper.py``, through ``wire/protocol.py``) reads
them: both spell them from here.

Imports nothing: every Python program poprun-lite starts imports it at interpreter start.
"""

FD_ENV = "POPRUN_STACK_FD"  # "FD:WRAPPER_PID:SIGNAL", set by the wrapper for its program only
WHEREABOUTS_ENV = "POPRUN_WHEREABOUTS"  # "0": no whereabouts sampler (--hang-timeout 0 sets it)

READY = b"\0ready\n"  # the program registered its stack dump
STALL = b"\0stall "  # + the stall's reason + "\n": the collectives watchdog found a stall
PROGRESS = b"\0progress "  # + the step + "\n": training progress (report_progress)
WHERE = b"\0where "  # + a position report (wire/position_report.py) + "\n"
MARKERS = (READY, STALL, PROGRESS, WHERE)
