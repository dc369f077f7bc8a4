"""``python -m popdist_launcher`` is ``poprun-lite``."""
from popdist_launcher.launcher.fast_start import run

run()
