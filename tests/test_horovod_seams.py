"""Horovod's seams (launcher/elastic/helper/horovod_seams.py) against the installed Horovod, no
process started: every private method the helper overrides or calls exists with the parameters
the helper expects, every private attribute is set where the seams say, the version matches."""
import inspect

import horovod
import pytest
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.rendezvous import create_rendezvous_handler

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
