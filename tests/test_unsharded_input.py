"""The one warning the strategies and the IPUEstimator give for a dataset that is not sharded
across instances: once, on instance 0 of two or more, never for a sharded pipeline."""
import logging

import tensorflow as tf

from popdist_launcher.ipu._estimator_input import unsharded_estimator_input_warning
from popdist_launcher.ipu_runtime.datasets import UnshardedInputWarning, is_sharded
from popdist_launcher.strategies.popdist_strategy import unsharded_input_warning

LOGGER = "popdist_launcher.test_unsharded_input"


def test_is_sharded_sees_a_shard_anywhere_in_the_pipeline():
    plain = tf.data.Dataset.range(8)
    assert not is_sharded(plain.batch(2))
    assert is_sharded(plain.shard(2, 0).map(lambda x: x + 1).batch(2).prefetch(1))


def test_warned_once_on_instance_0_of_several(caplog):
    warning = UnshardedInputWarning(logging.getLogger(LOGGER), "each of {instances} reads all")
    dataset = tf.data.Dataset.range(8).batch(2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warning.check(dataset, num_instances=3, instance_index=0)
        warning.check(dataset, num_instances=3, instance_index=0)
    assert [r.getMessage() for r in caplog.records] == ["each of 3 reads all"]


def test_not_warned_for_one_instance_another_instance_or_a_sharded_dataset(caplog):
    dataset = tf.data.Dataset.range(8)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for instances, index, data in ((1, 0, dataset), (2, 1, dataset),
                                       (2, 0, dataset.shard(2, 0))):
            UnshardedInputWarning(logging.getLogger(LOGGER), "x").check(data, instances, index)
    assert caplog.records == []


def test_the_strategies_and_the_estimator_say_how_to_shard(caplog):
    dataset = tf.data.Dataset.range(8)
    with caplog.at_level(logging.WARNING):
        unsharded_input_warning("PopDistStrategy").check(dataset, 4, 0)
        unsharded_estimator_input_warning().check(dataset, 4, 0)
    strategy, estimator = (r.getMessage() for r in caplog.records)
    assert strategy.startswith("PopDistStrategy does not shard datasets across instances")
    assert "each of the 4 instances" in strategy and "seen 4 times per epoch" in strategy
    assert estimator.startswith("The IPUEstimator does not shard the input_fn's dataset")
    for message in (strategy, estimator):
        assert "dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())" in message
    assert {r.name for r in caplog.records} == {"popdist_launcher.strategies.popdist_strategy",
                                                "popdist_launcher.ipu.ipu_estimator"}
