"""Which lines are start-up lines every instance writes alike: TensorFlow's C++ log lines (merged
across instances on the console) and its start-up notices (shown once per job, left out of the
root-cause report's last lines). Pure functions of a line's bytes."""
from __future__ import annotations

import re
from typing import Iterable, List, Optional

# A C++ log line as absl writes it (TensorFlow 2.16+): "I0000 00:00:1795834646.987807    7953
# port.cc:153] text" (seconds since 1970 before absl's log is set up), and as TensorFlow's own
# logging did before (2.15): "2024-01-31 12:00:00.123456: I tensorflow/core/util/port.cc:113]
# text". Time and thread differ per instance.
_ABSL = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ (\S+:\d+\] .*)$")
_TF_LOGGING = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) (\S+:\d+\] .*)$")

# TensorFlow's start-up notices, the same in every process and every job: what the program
# cannot act on (how TensorFlow was built, GPU libraries this machine lacks).
NOTICES = re.compile(b"|".join(b"(?:%s)" % pattern for pattern in (
    rb"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    rb"STDERR$",
    rb"oneDNN custom operations are on",
    rb"This TensorFlow binary is optimized to use available CPU instructions",
    rb"^To enable the following instructions: .*rebuild TensorFlow with the appropriate "
    rb"compiler flags\.$",
    rb"Unable to register cu(DNN|FFT|BLAS) factory",
    rb"computation placer already registered",
    rb"Could not find cuda drivers on your machine",
    rb"(TF-TRT Warning: )?Could not find TensorRT",
    rb"failed call to cuInit",
    rb"Could not load dynamic library 'lib(cudart|cuda|nvinfer|nvinfer_plugin)",
    rb"cudart dlerror: ",
    rb"Ignore above cudart dlerror if you do not have a GPU set up on your machine",
    rb"Cannot dlopen some GPU libraries",
    rb"(CPU|TF) Frequency: \d+ Hz",
    rb"^E[0-9]{4} .* (cuda_dnn|cuda_fft|cuda_blas)\.cc:\d+\] ",
)))
LONGEST = 2000  # a longer line is none of these


def _text(line: bytes) -> bytes:
    return line.rstrip(b"\r\n") if len(line) <= LONGEST else b""


def log_line_key(line: bytes) -> Optional[bytes]:
    """A C++ log line without its time and thread (the same for every instance that logs the
    same thing), or None when ``line`` is no such line."""
    text = _text(line)
    match = _ABSL.match(text) or _TF_LOGGING.match(text)
    return match.group(1) + b" " + match.group(2) if match else None


def is_notice(line: bytes) -> bool:
    """Whether ``line`` is one of TensorFlow's start-up notices (``NOTICES``)."""
    text = _text(line)
    return bool(text) and NOTICES.search(text) is not None


def twin_key(line: bytes) -> Optional[bytes]:
    """What identical start-up lines of several instances share (None: not a start-up line)."""
    key = log_line_key(line)
    if key is not None:
        return key
    return _text(line) if is_notice(line) else None


def without_notices(lines: Iterable[str]) -> List[str]:
    """``lines`` (text) less TensorFlow's start-up notices."""
    return [line for line in lines if not is_notice(line.encode("utf-8", "replace"))]
