"""Graphcore's ``popdist`` spellings (``from popdist_launcher import popdist``): the top-level
``popdist`` package, under the name older code imports."""
from popdist import *  # noqa: F401,F403
from popdist import __all__  # noqa: F401
