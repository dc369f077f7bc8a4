"""The shape keras.ipu.optimizers' ALSOptimizerSGD, Adam and RMSProp share (``ALSOptimizerAround``):
Graphcore's constructor signatures, the wrapped Keras optimizer made from the first arguments
(by position or keyword), the ALS settings from the rest, the get_config / from_config round
trip, a wrong call's TypeError, and a new optimizer written as two class attributes. In this
process, no training (tests/graphcore/test_keras_ipu_optimizers.py trains them)."""
import inspect

import pytest

from tensorflow.python.ipu.keras.optimizers import (ALSOptimizer, ALSOptimizerAdam,
                                                    ALSOptimizerRMSProp, ALSOptimizerSGD)

from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSOptimizerAround

# ALSOptimizer's own arguments after ``opt``, with Graphcore's defaults; then ``name``.
ALS_DEFAULTS = [("initial_loss_scaling_factor", 1), ("update_frequency", 8),
                ("increase_factor", 2), ("max_loss_scaling_factor", 32768),
                ("accumulate_statistics_over_update_period", True), ("ratio_threshold", 10e-6),
                ("captured_grads_only", False), ("lpf_alpha", 0.0), ("histogram_bin_edge", 8192)]
INNER_DEFAULTS = {
    ALSOptimizerSGD: [("learning_rate", 0.01), ("momentum", 0.0)],
    ALSOptimizerAdam: [("learning_rate", 0.001), ("beta_1", 0.9), ("beta_2", 0.999),
                       ("epsilon", 1e-7)],
    ALSOptimizerRMSProp: [("learning_rate", 0.001), ("rho", 0.9), ("momentum", 0.0),
                          ("epsilon", 1e-7), ("centered", False)],
}
INNER_NAMES = {ALSOptimizerSGD: "SGD", ALSOptimizerAdam: "Adam", ALSOptimizerRMSProp: "RMSprop"}


def parameters(cls):
    return [(p.name, p.default, p.kind) for p in inspect.signature(cls).parameters.values()]


@pytest.mark.parametrize("cls", list(INNER_DEFAULTS), ids=lambda c: c.__name__)
def test_each_has_graphcores_signature(cls):
    expected = INNER_DEFAULTS[cls] + ALS_DEFAULTS + [("name", cls.__name__)]
    assert parameters(cls) == [(name, default, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                               for name, default in expected]
    assert parameters(ALSOptimizer)[1:] == parameters(cls)[len(INNER_DEFAULTS[cls]):-1] + \
        [("name", "ALSOptimizer", inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def test_positional_arguments_fill_the_wrapped_optimizer_then_the_loss_scaling():
    opt = ALSOptimizerRMSProp(0.25, 0.75, 0.5, 1e-5, True, 4, 2)
    inner = opt.inner_optimizer.get_config()
    assert type(opt.inner_optimizer).__name__ == "RMSprop"
    assert (inner["learning_rate"], inner["rho"], inner["momentum"], inner["epsilon"],
            inner["centered"]) == (0.25, 0.75, 0.5, 1e-5, True)
    assert (opt.initial_loss_scaling_factor, opt.update_frequency, opt.increase_factor) == \
        (4, 2, 2)
    assert opt.get_name() == "ALSOptimizerRMSProp"
    named = ALSOptimizerSGD(momentum=0.5, max_loss_scaling_factor=1024, name="mine")
    assert named.inner_optimizer.get_config()["momentum"] == 0.5
    assert named.inner_optimizer.get_config()["learning_rate"] == pytest.approx(0.01)
    assert (named.max_loss_scaling_factor, named.get_name()) == (1024, "mine")


@pytest.mark.parametrize("cls, arguments", [
    (ALSOptimizerSGD, dict(learning_rate=0.125, momentum=0.5)),
    (ALSOptimizerAdam, dict(learning_rate=0.25, beta_1=0.75, beta_2=0.5, epsilon=1e-3)),
    (ALSOptimizerRMSProp, dict(learning_rate=0.5, rho=0.25, momentum=0.125, centered=True)),
], ids=lambda x: getattr(x, "__name__", ""))
def test_get_config_and_from_config_round_trip(cls, arguments):
    opt = cls(update_frequency=3, increase_factor=4, lpf_alpha=0.5, name="als", **arguments)
    config = opt.get_config()
    assert config["inner_optimizer_type"].__name__ == INNER_NAMES[cls]
    assert {k: config["inner_optimizer_config"][k] for k in arguments} == arguments
    assert (config["name"], config["update_frequency"], config["increase_factor"],
            config["lpf_alpha"]) == ("als", 3, 4, 0.5)
    again = cls.from_config(config)
    assert type(again) is cls
    assert again.get_config() == config


def test_a_wrong_call_is_a_type_error_naming_the_class():
    with pytest.raises(TypeError, match=r"^ALSOptimizerAdam\(\): .*unexpected keyword.*'lr'"):
        ALSOptimizerAdam(lr=0.1)
    with pytest.raises(TypeError, match=r"^ALSOptimizerSGD\(\): .*multiple values.*learning_rate"):
        ALSOptimizerSGD(0.1, learning_rate=0.2)
    with pytest.raises(TypeError, match=r"^ALSOptimizerSGD\(\): too many positional"):
        ALSOptimizerSGD(*range(13))
    with pytest.raises(ValueError, match="update_frequency must be a positive int, got 0"):
        ALSOptimizerSGD(update_frequency=0)  # ALSOptimizer's own checks still run


def test_a_new_optimizer_around_keras_is_two_class_attributes():
    class ALSOptimizerNesterov(ALSOptimizerAround):
        INNER_OPTIMIZER = ALSOptimizerSGD.INNER_OPTIMIZER
        INNER_DEFAULTS = {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True}

    assert parameters(ALSOptimizerNesterov)[:3] == [
        ("learning_rate", 0.05, inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("momentum", 0.9, inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("nesterov", True, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    opt = ALSOptimizerNesterov(0.5, update_frequency=2)
    inner = opt.inner_optimizer.get_config()
    assert (inner["learning_rate"], inner["momentum"], inner["nesterov"]) == (0.5, 0.9, True)
    assert opt.get_name() == "ALSOptimizerNesterov"
    assert ALSOptimizerNesterov.from_config(opt.get_config()).get_config() == opt.get_config()

    class Subclass(ALSOptimizerSGD):  # a program's own subclass keeps SGD's constructor
        pass

    assert parameters(Subclass) == parameters(ALSOptimizerSGD)
    assert Subclass(0.5).inner_optimizer.get_config()["learning_rate"] == 0.5
