"""``python -m popdist_launcher`` is ``poprun-lite``."""
from popdist_launcher.launch import main

main()
