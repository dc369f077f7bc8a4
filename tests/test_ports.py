"""Port reservation: hundreds of instances per host, and a lock folder no other user controls."""
import os
import re
import resource
import socket
import stat

import pytest

from conftest import poprun
from popdist_launcher.launcher.layout import ports


def lock_folder(tmp: str) -> str:
    return os.path.join(tmp, f"poprun-lite-ports-{os.getuid()}")


def lower_open_file_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def test_256_instances_on_one_host_under_a_low_open_file_limit():
    # 256 instances need more than 256 descriptors in the launcher (a lock file and a probe
    # socket per port, then pipes per instance): the launcher raises its soft limit itself.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard >= 4096, "the test needs a hard limit >= 4096"
    result = poprun("-np", "256", "--backend", "local", "true", timeout=300,
                    preexec_fn=lower_open_file_limit)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_more_instances_than_ports_in_the_range_is_one_sentence():
    result = poprun("-np", "3", "--backend", "local", "--port-range", "24000-24001", "true",
                    timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == ["poprun-lite: error: 3 instances need 3 TCP ports on 0.0.0.0, but "
                     "24000..24001 holds only 2; pass a wider range with --port-range LOW-HIGH."]


def free_window(size: int) -> int:
    """The first port of ``size`` consecutive ports that nothing on this machine holds now (other
    jobs' launchers reserve ports in the fallback range too), searched from 24000 up."""
    for low in range(24000, ports.FALLBACK_RANGE[1] - size, size):
        try:
            for port in range(low, low + size):
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind(("0.0.0.0", port))
        except OSError:
            continue
        return low
    raise AssertionError(f"no {size} consecutive free ports in the fallback range")


def test_every_port_of_the_range_is_tried_once():
    low = free_window(300)
    try:
        with ports.reserve(300, port_range=(low, low + 299)) as got:
            assert sorted(got.ports) == list(range(low, low + 300))
    except ports.PortError as exc:
        # Another process on this machine took a port of the window after free_window looked:
        # the error's counts still show every port tried once.
        counts = re.search(r"only (\d+) were free \((\d+) in use, (\d+) held", str(exc))
        assert counts, exc
        assert sum(int(n) for n in counts.groups()) == 300, exc


@pytest.mark.parametrize("problem", ["other_owner", "world_writable", "sticky_world_writable",
                                     "symlink"])
def test_lock_folder_someone_else_controls_is_refused(tmp_path, problem):
    folder = lock_folder(str(tmp_path))
    if problem == "symlink":
        os.mkdir(tmp_path / "elsewhere", 0o700)
        os.symlink(tmp_path / "elsewhere", folder)
        words = "is not a folder (a symlink or a file)"
    else:
        os.mkdir(folder, 0o700)
        if problem == "other_owner":
            assert os.getuid() == 0, "planting a folder for another user needs root"
            os.chown(folder, 65534, 65534)
            words = f"belongs to uid 65534, not to you (uid {os.getuid()})"
        else:
            mode = 0o777 if problem == "world_writable" else 0o1777
            os.chmod(folder, mode)
            words = f"is writable by other users (mode {mode:o})"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    result = poprun("-np", "2", "--backend", "local", "true", env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"poprun-lite: error: the port-lock folder {folder} ")
    assert words in lines[0]


def test_lock_files_are_not_followed_through_symlinks(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    folder = ports.lock_dir()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    target = tmp_path / "victim"
    for port in (24010, 24011):
        os.symlink(target, os.path.join(folder, str(port)))
    with ports.reserve(1, port_range=(24010, 24012)) as got:
        assert got.ports == [24012]  # the planted names are skipped, not opened
    assert not target.exists()
    with pytest.raises(ports.PortError, match=r"only 0 were free \(0 in use, 2 held"):
        ports.reserve(1, port_range=(24010, 24011))
