"""The wire format between the launcher and each instance's wrapper: typed, length-prefixed frames.

Standard library only, no json or typing (the wrapper imports it once per instance: every
millisecond counts). A frame is one kind byte, a 4-byte big-endian length and the payload. The
wrapper proves it belongs to the job by answering the launcher's random challenge with
HMAC-SHA256(job secret, challenge + index); the launcher proves it is the job's launcher by
answering the wrapper's own challenge the same way, in front of what it says to run.
"""
import struct

from popdist_launcher.wire import stack_pipe

# The program's end of the stack pipe, and what a program writes on it besides faulthandler's
# text (spelled once, in wire/stack_pipe.py, which the program's side imports too).
STACK_FD_ENV = stack_pipe.FD_ENV
STACK_READY = stack_pipe.READY
STACK_STALL = stack_pipe.STALL
STACK_PROGRESS = stack_pipe.PROGRESS
STACK_WHERE = stack_pipe.WHERE

HEADER = struct.Struct("!BI")

# wrapper -> launcher
HELLO = 1      # "INDEX MAC HOST WRAPPER_PID CHALLENGE": CHALLENGE is the wrapper's, in hex
STARTED = 2    # "PID": the program runs
STDOUT = 3     # bytes the program wrote to stdout
STDERR = 4     # bytes the program wrote to stderr
EXIT = 5       # "RETURNCODE": negative = killed by that signal
STACKS = 6     # text: the program's Python stacks (faulthandler), after a DUMP
STALL = 7      # text: the program's collectives watchdog reports a stall
PROGRESS = 8   # "STEP": the program reported training progress (popdist_launcher.report_progress)
PROBED = 9     # "STATE WORK": its main thread's state (R, S, D, T ...), CPU + I/O so far
WHERE = 10     # a position report for the hang check (wire/position_report.py)
# launcher -> wrapper
CHALLENGE = 20  # 16 random bytes, sent on accept (TCP and Unix sockets)
SPEC = 21       # mac(secret, b"launcher" + wrapper's challenge, index) + encode_spec()
SIGNAL = 22     # one byte: deliver this signal to the program's process group
STDIN = 23      # bytes for the program's stdin (instance 0 only)
STDIN_EOF = 24  # the launcher's stdin ended
DUMP = 25       # write the program's Python stacks (all threads)
RELEASE = 26    # the job is over: end every descendant, flush output, exit 0
CUT_PEERS = 27  # a worker of the job failed: shut down the program's connections to its peers
#                 (Gloo's pairs; payload and rules in peer_sockets.py)
PROBE = 28      # the job made no progress for the hang bound: answer PROBED

# A host that stops answering (powered off, cut from the network) is found by TCP keepalive
# on both ends of every wrapper connection: probes after KEEPALIVE_IDLE_S of silence, every
# KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES unanswered end it; unacknowledged data gives up after
# LOST_AFTER_S. The launcher then reports the host lost, and the wrapper ends its program.
KEEPALIVE_IDLE_S = 2
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_PROBES = 3
LOST_AFTER_S = KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_PROBES  # 5

SECRET_ENV = "POPRUN_JOB_SECRET"
# Names the wrapper removes from what the program inherits (space-separated), e.g. TF_CONFIG
# under --tf-config none when the launcher's own environment (a TFJob pod) has one.
UNSET_ENV = "POPRUN_UNSET"


SPEC_HEADER = struct.Struct("!BII")


def encode_spec(argv, env, cwd: str, stdin: bool, run: bool = True) -> bytes:
    """argv (a list; ignored unless ``run``), env (a dict added to the wrapper's own), cwd, and
    whether the program's stdin is the launcher's. Strings never hold NUL (execve's rule)."""
    words = [cwd, *(argv if run else ()), *(f"{k}={v}" for k, v in env.items())]
    return SPEC_HEADER.pack((1 if stdin else 0) | (2 if run else 0), len(argv) if run else 0,
                            len(env)) + b"\0".join(w.encode("utf-8", "surrogateescape")
                                                    for w in words)


def decode_spec(payload: bytes) -> dict:
    flags, nargv, _ = SPEC_HEADER.unpack_from(payload)
    words = [w.decode("utf-8", "surrogateescape")
             for w in payload[SPEC_HEADER.size:].split(b"\0")]
    env = dict(w.split("=", 1) for w in words[1 + nargv:] if w)
    return {"cwd": words[0], "argv": words[1:1 + nargv] if flags & 2 else None, "env": env,
            "stdin": bool(flags & 1)}


def frame(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def mac(secret: bytes, challenge: bytes, index: int) -> str:
    """HMAC-SHA256 (RFC 2104) of challenge + index, written out over the C SHA-256 so the
    wrapper need not import hashlib (OpenSSL's start-up costs it 3-4 ms, the C module 0.3 ms)."""
    try:
        from _sha2 import sha256  # Python 3.12+
    except ImportError:
        from _sha256 import sha256  # Python 3.11
    key = (sha256(secret).digest() if len(secret) > 64 else secret).ljust(64, b"\0")
    inner = sha256(bytes(b ^ 0x36 for b in key) + challenge + str(index).encode()).digest()
    return sha256(bytes(b ^ 0x5C for b in key) + inner).hexdigest()


def mac_ok(secret: bytes, challenge: bytes, index: int, offered: str) -> bool:
    from _operator import _compare_digest  # hmac.compare_digest, without importing hmac
    return _compare_digest(mac(secret, challenge, index), str(offered))


def hello_proven(payload: bytes, secret: bytes, challenge: bytes,
                 count: int) -> "tuple[int, bytes] | None":
    """A wrapper's HELLO, checked against the launcher's ``challenge``: (its index, below
    ``count``, and its own challenge), or None when it does not prove it belongs to the job."""
    try:
        index_text, offered, _, _, theirs = payload.decode("ascii").split()[:5]
        index, their_challenge = int(index_text), bytes.fromhex(theirs)
    except (ValueError, UnicodeDecodeError):
        return None
    if 0 <= index < count and mac_ok(secret, challenge, index, offered):
        return index, their_challenge
    return None


LAUNCHER_PROOF = b"launcher"  # what the launcher's answer to a wrapper's challenge starts with
MAC_SIZE = 64  # hex digits


class FrameReader:
    """Collects bytes from a stream and hands out whole frames."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> "list[tuple[int, bytes]]":
        buf = self._buf
        buf += data
        frames = []
        at, size = 0, len(buf)
        while size - at >= HEADER.size:
            kind, length = HEADER.unpack_from(buf, at)
            end = at + HEADER.size + length
            if end > size:
                break
            frames.append((kind, bytes(buf[at + HEADER.size:end])))
            at = end
        if at:
            del buf[:at]
        return frames

    def take(self, data: bytes = b"") -> "tuple[int, bytes] | None":
        """Add ``data``; hand out the first whole frame only (the rest stays for later)."""
        buf = self._buf
        buf += data
        if len(buf) < HEADER.size:
            return None
        kind, length = HEADER.unpack_from(buf, 0)
        end = HEADER.size + length
        if len(buf) < end:
            return None
        payload = bytes(buf[HEADER.size:end])
        del buf[:end]
        return kind, payload


def keep_alive(sock) -> None:
    """Turn on the keepalive above for a TCP socket (Linux options; skipped where missing)."""
    import _socket as socket  # the C module: the wrapper never imports the socket module
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
                        ("TCP_USER_TIMEOUT", LOST_AFTER_S * 1000)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
