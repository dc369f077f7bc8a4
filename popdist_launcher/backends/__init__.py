"""Ways of starting instances. Each backend answers two questions: is it available here, and
what command (and environment) starts instance i of a plan. Supervision is the same for all."""
from popdist_launcher.backends.base import Backend
from popdist_launcher.backends.local import LocalBackend
from popdist_launcher.backends.ssh import SshBackend

BACKENDS = {LocalBackend.name: LocalBackend, SshBackend.name: SshBackend}


def get_backend(name: str, **options) -> Backend:
    return BACKENDS[name](**options)


__all__ = ["BACKENDS", "Backend", "LocalBackend", "SshBackend", "get_backend"]
