"""What the launcher writes: its own lines (``console.py``, the one writer of ``poprun-lite: ``
lines), the instances' output routed to the terminal and log files (``routing.py``), the
merging of identical start-up lines (``twins.py``, ``startup_lines.py``), the root-cause
report (``report.py``) and the summary of a stopped job (``stop_summary.py``). It is the
launcher's bottom folder: it imports ``wire/`` and ``tf_config`` and nothing of the launcher's
other folders, which all may import it."""
