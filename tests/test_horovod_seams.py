"""Horovod's seams against the installed Horovod, no process started. The driver helper's
(launcher/elastic/helper/horovod_seams.py): every private method the helper overrides or calls
exists with the parameters the helper expects, every private attribute is set where the seams
say, the parent __init__ it skips does only what the seam does, the version matches. The worker
side's (compat/horovod_seams.py): the commit it replaces has the body it copies, the model
broadcast it sets is Horovod's."""
import ast
import inspect
import textwrap
import types

import horovod
import pytest
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.rendezvous import create_rendezvous_handler

from popdist_launcher.compat import horovod_seams as worker_seams
from popdist_launcher.launcher.elastic.helper import horovod_seams as seams


def parameters(function) -> tuple:
    return tuple(inspect.signature(function).parameters)


def test_the_installed_horovod_is_the_series_the_seams_were_written_for():
    assert horovod.__version__.startswith(seams.HOROVOD_SERIES)
    assert seams.version_problem() is None


@pytest.mark.parametrize("owner, name", [*seams.OVERRIDDEN, *seams.PUBLIC_OVERRIDDEN,
                                         *seams.CALLED],
                         ids=lambda value: getattr(value, "__name__", value))
def test_each_method_exists_with_the_expected_parameters(owner, name):
    expected = {**seams.OVERRIDDEN, **seams.PUBLIC_OVERRIDDEN, **seams.CALLED}[(owner, name)]
    assert parameters(getattr(owner, name)) == expected


def test_the_rendezvous_handlers_overridden_methods():
    handler = create_rendezvous_handler(driver=None)
    for name, expected in seams.RENDEZVOUS_OVERRIDDEN.items():
        assert parameters(getattr(handler, name)) == expected, name


def test_the_driver_modules_private_functions():
    for name, expected in seams.FUNCTIONS.items():
        assert parameters(getattr(horovod_driver, name)) == expected, name
    assert isinstance(seams.epoch_time_s(), int)


@pytest.mark.parametrize("owner", list(seams.ATTRIBUTES), ids=lambda owner: owner.__name__)
def test_each_private_attribute_is_set_by_its_class(owner):
    source = inspect.getsource(owner.__init__)
    missing = [name for name in seams.ATTRIBUTES[owner] if f"self.{name} =" not in source]
    assert missing == []


def test_the_monkeypatched_name_is_the_one_the_driver_builds():
    assert "HostManager(" in inspect.getsource(horovod_driver.ElasticDriver.__init__)
    assert horovod_driver.HostManager.__name__ in ("HostManager", "LauncherHostManager")


def test_the_host_state_seams_read_and_write_a_real_host_manager():
    from popdist_launcher.launcher.elastic.helper.driver_hosts import (LauncherHostManager,
                                                                       PushedHosts)
    manager = LauncherHostManager(PushedHosts(), (1, 2))
    assert seams.cooldown_end(manager, "node00") == 0
    seams.never_end_cooldown(manager, "node00")
    assert seams.cooldown_end(manager, "node00") == float("inf")
    assert seams.current_hosts(manager).host_assignment_order == []
    with pytest.raises(ValueError):
        seams.validate_cooldown_range((-1, 10))


def test_the_skipped_parent_init_does_only_what_the_seam_does():
    """BoundedNotificationClient skips WorkerNotificationClient.__init__: that __init__ is one
    call of BasicClient's with the arguments the seam passes, and BasicClient takes the probe's
    bounds the seam gives it."""
    skipped, parent = seams.SKIPPED_INIT
    assert skipped.__bases__ == (parent,)
    body = statements(inspect.getsource(skipped.__init__))
    assert len(body) == 1 and body[0].startswith("super(WorkerNotificationClient, self).__init__(")
    call = ast.parse(body[0]).body[0].value
    assert tuple(ast.unparse(a) for a in [*call.args, *call.keywords]) == seams.SKIPPED_INIT_CALL
    assert parameters(parent.__init__)[:7] == ("self", "service_name", "addresses", "key",
                                               "verbose", "match_intf", "probe_timeout")
    assert "attempts" in parameters(parent.__init__)


# --- the worker side: popdist_launcher/compat/horovod_seams.py ---------------------------------

def statements(source: str) -> list:
    """A function's body as unparsed statements, its docstring left out."""
    function = ast.parse(textwrap.dedent(source)).body[0]
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [ast.unparse(node) for node in body]


def horovod_method_source(module, class_name: str, method: str) -> str:
    """A method's source as Horovod's file has it (the class in the running process may carry
    the compatibility layer's replacement)."""
    tree = ast.parse(inspect.getsource(module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    function = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return ast.get_source_segment(inspect.getsource(module), function)


def test_the_replaced_commit_is_horovods_body():
    from horovod.common import elastic as common_elastic
    source = horovod_method_source(common_elastic, "State", "commit")
    assert tuple(statements(source)) == worker_seams.COMMIT_BODY


def test_the_replacement_commit_runs_horovods_two_calls_around_the_report():
    calls = []

    class FakeState:
        def save(self):
            calls.append("save")

        def check_host_updates(self):
            calls.append("check")

    commit = worker_seams.commit_with(lambda: calls.append("report"))
    commit(FakeState())
    assert calls == ["save", "report", "check"]
    replacement = statements(inspect.getsource(worker_seams.commit_with))
    assert [s for s in replacement if s.startswith("def commit")], replacement


def test_the_model_broadcast_is_set_by_the_keras_state_and_called_by_its_sync():
    from horovod.tensorflow import elastic as tf_elastic
    init = horovod_method_source(tf_elastic, "TensorFlowKerasState", "__init__")
    sync = horovod_method_source(tf_elastic, "TensorFlowKerasState", "sync")
    assert f"self.{worker_seams.MODEL_BROADCAST} =" in init
    assert f"self.{worker_seams.MODEL_BROADCAST}()" in sync
    state = types.SimpleNamespace()
    worker_seams.set_model_broadcast(state, print)
    assert getattr(state, worker_seams.MODEL_BROADCAST) is print


def test_the_compat_hooks_install_the_seams_on_horovods_state():
    """The hooks (run as horovod.tensorflow.elastic imports) leave State.commit the seam's."""
    from horovod.common.elastic import State
    from horovod.tensorflow import elastic as tf_elastic

    from popdist_launcher.compat import horovod_elastic, horovod_keras_sync
    horovod_elastic.install(tf_elastic)
    horovod_keras_sync.install(tf_elastic)
    assert State.commit.reports_progress
    assert State.commit.__qualname__.startswith("commit_with.")
    assert tf_elastic.TensorFlowKerasState.sync.builds_optimizer
