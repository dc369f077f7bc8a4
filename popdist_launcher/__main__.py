"""``python -m popdist_launcher`` is ``poprun-lite``."""
from popdist_launcher.launcher.entry import main

main()
