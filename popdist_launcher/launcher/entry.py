"""``poprun-lite``'s entry point: loads and runs the command line (launch.py). Nothing imports
this module; an interrupt while the launcher loads ends it with 130, not a traceback."""
import os


def main() -> None:
    """The ``poprun-lite`` command."""
    try:
        from popdist_launcher import launch
    except KeyboardInterrupt:
        os._exit(130)
    launch.run()
