"""The frames between the launcher and its Horovod driver helper (wire/helper_frames.py), no
process started: every kind survives encode and decode, and a line that is no frame is a
ValueError naming why."""
import json
import typing

import pytest

from popdist_launcher.wire import helper_frames as frames

EXAMPLES = [
    frames.Hosts(hosts=[["node0", 2], ["node1", 1]]),
    frames.Allow(addresses=["10.0.0.2"]),
    frames.Exited(wid=3, code=1, blame="host", how="exited", what="exited with 1", mark=7),
    frames.Round(round=2, size=3, hosts=[["node0", 2], ["node1", 1]]),
    frames.Start(wid=4, round=2, hostname="node1", rank=2, size=3, local_rank=0, local_size=1,
                 cross_rank=1, cross_size=2),
    frames.Stop(wid=4),
    frames.Blacklist(host="node1", cooldown=12.5, forever=False, limit=3),
    frames.Retry(host="node1", wid=4, streak=1, limit=3, sentence="instance 4 exited with 1"),
    frames.Fatal(reason="fewer than --min-np 2 slots were usable"),
    frames.Alive(),
    frames.Done(error=None, results={"node0[0]": [0, 1700000000.0]}),
]


def test_there_is_one_example_of_each_kind():
    assert sorted(type(f).KIND for f in EXAMPLES) == sorted(frames.KINDS)


def test_each_kind_goes_one_way_and_is_a_frame():
    """The launcher sends TO_HELPER, the helper TO_LAUNCHER; each side handles the other's."""
    assert not set(frames.TO_HELPER) & set(frames.TO_LAUNCHER)
    assert len(frames.KINDS) == len(frames.TO_HELPER) + len(frames.TO_LAUNCHER)
    assert set(typing.get_args(frames.Frame)) == set(frames.KINDS.values())


@pytest.mark.parametrize("frame", EXAMPLES, ids=lambda f: f.KIND)
def test_each_kind_is_one_json_line_and_decodes_to_the_same_record(frame):
    line = frames.encode(frame)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["kind"] == frame.KIND
    assert frames.decode(line) == frame


def test_the_launchers_exited_may_leave_out_how_what_and_mark():
    assert frames.decode('{"kind": "EXITED", "wid": 1, "code": 0, "blame": "none"}') == \
        frames.Exited(wid=1, code=0, blame="none", how="", what="", mark=0)


@pytest.mark.parametrize("line, words", [
    ("not json", "Expecting value"),
    ("[1, 2]", "JSON object, not list"),
    ('{"kind": "HELLO"}', "unknown kind"),
    ('{"wid": 1}', "unknown kind"),
    ('{"kind": ["STOP"]}', "unknown kind"),
    ('{"kind": "STOP"}', "STOP frame with other fields"),
    ('{"kind": "STOP", "wid": 1, "extra": 2}', "STOP frame with other fields"),
])
def test_a_line_that_is_no_frame_is_a_value_error_saying_why(line, words):
    with pytest.raises(ValueError) as err:
        frames.decode(line)
    assert words in str(err.value)
