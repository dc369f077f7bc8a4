"""Ways of starting instances. Each backend answers two questions: is it available here, and
what command (and environment) starts instance i of a plan. Supervision is the same for all."""
from popdist_launcher.backends.base import Backend
from popdist_launcher.backends.local import LocalBackend

BACKENDS = {LocalBackend.name: LocalBackend}


def get_backend(name: str) -> Backend:
    return BACKENDS[name]()


__all__ = ["BACKENDS", "Backend", "LocalBackend", "get_backend"]
