"""Host discovery for elastic jobs: one run of the user's script (script.py), the poll process that
runs it every interval (poll.py) and the launcher's end of that process (poller.py)."""
