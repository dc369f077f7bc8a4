"""The placement's text: what the launcher asks of each instance's CPUs, threads and GPUs, as the
value of ``POPRUN_PLACEMENT`` (encode, decode); the wrapper applies it (spawned/placement.py)."""

PLACEMENT_ENV = "POPRUN_PLACEMENT"
BIND_MODES = ("none", "core", "numa")


def encode(bind: str, threads: bool, gpus: str, report: bool) -> str:
    """The launcher's half: the options, as the value of POPRUN_PLACEMENT ("" = nothing to do).
    ``gpus`` is "auto" (one per local replica), "none" or a count per instance."""
    if bind == "none" and not threads and gpus == "none" and not report:
        return ""
    return f"bind={bind} threads={int(threads)} gpus={gpus} report={int(report)}"


def for_instance(options: str, index: int, local_index: int, local_size: int,
                 local_replicas: int) -> str:
    """``options`` (from :func:`encode`) with the instance's index, its place among its host's
    instances and its number of replicas."""
    return f"{options} index={index} local={local_index}/{local_size} " \
           f"replicas={local_replicas}" if options else ""


def decode(text: str) -> dict:
    return dict(word.split("=", 1) for word in text.split() if "=" in word)
