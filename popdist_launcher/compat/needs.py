"""The library's parts need TensorFlow (and the Horovod-based ones Horovod), which the user's
environment provides: where one is not installed, importing such a part raises
ModuleNotFoundError (for that module, as Python's own would) with one sentence saying which
part needs it, which Python lacks it and the command that adds it."""
import importlib.util
import sys

_ADD = {
    "tensorflow": "install TensorFlow 2.15 or newer (`pip install tensorflow`, or "
                  "tensorflow-cpu)",
    "horovod": "build Horovod against this TensorFlow (`python -m popdist_launcher.install "
               "horovod`)",
}


def require(module: str, needed_by: str) -> None:
    """Raise ModuleNotFoundError for ``module`` (``tensorflow`` or ``horovod``) unless it can
    be imported; ``needed_by`` names the part that needs it."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"{needed_by} needs {module}, which is not installed for this Python "
            f"({sys.executable}): {_ADD[module]}; `poprun-lite --check-build` shows what this "
            f"environment has", name=module)
