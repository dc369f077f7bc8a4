"""``ipu.pipelining_ops``: ``pipeline(computational_stages, ...)`` and its helpers.

On IPUs the stages run on different IPUs, overlapping micro-batches. Here they run in order on
the replica's device, one micro-batch at a time, which computes the same numbers: each of
``repeat_count`` pipeline runs takes ``gradient_accumulation_count`` micro-batches from the
infeed through every stage, enqueues the last stage's outputs, and, with an
``optimizer_function``, accumulates the gradients of its loss and applies them once (summed, or
averaged with ``reduction_method=MEAN``/``RUNNING_MEAN``). Options that place stages on IPUs or
tune IPU memory are accepted and logged once. Replicas follow Graphcore's rule: the selected IPUs
over the IPUs of one pipeline (``max(device_mapping) + 1``, rounded up to a power of two).
"""
from __future__ import annotations

import enum
import logging
import math
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu._loop_support import REPLICA, as_list, body_arguments

log = logging.getLogger(__name__)
_logged: set = set()
# Accumulator variables by their optimizer or outfeed queue (see pipeline()).
_ACCUMULATORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class PipelineSchedule(enum.IntEnum):
    """The order IPUs run stages in; on one device every schedule gives the same numbers."""
    Grouped = 0
    Interleaved = 1
    Sequential = 2


class RecomputationMode(enum.Enum):
    """How IPUs recompute activations to save memory (nothing is recomputed here)."""
    Auto = 0
    RecomputeThenBackpropagate = 1
    RecomputeAndBackpropagateInterleaved = 2


class PipelineStageOptions:
    """Poplar options of one stage's convolutions and matmuls (no effect here)."""

    def __init__(self, convolution_options: Optional[Dict[str, str]] = None,
                 matmul_options: Optional[Dict[str, str]] = None,
                 slice_options: Optional[Dict[str, str]] = None) -> None:
        self.convolution_options = dict(convolution_options or {})
        self.matmul_options = dict(matmul_options or {})
        self.slice_options = dict(slice_options or {})


class OptimizerFunctionOutput:
    """What an ``optimizer_function`` returns: the optimizer, the loss, and the extra arguments
    of ``compute_gradients`` / ``apply_gradients`` (Keras optimizers: ``variables`` and
    optionally the ``tape`` the loss was recorded on)."""

    def __init__(self, opt, loss, compute_gradients_args=None, compute_gradients_kwargs=None,
                 apply_gradients_args=None, apply_gradients_kwargs=None, variables=None, tape=None,
                 gradient_capture_context=None, captured_gradient_outfeed=None) -> None:
        # TensorFlow 1's Optimizer, or any Keras optimizer this TensorFlow may have (Keras 2's
        # OptimizerV2 and 2.11+ Optimizer, Keras 3's, TensorFlow's own old Keras copy): their
        # one common interface, whichever Keras tf.keras is for this program.
        if not (isinstance(opt, tf.compat.v1.train.Optimizer)
                or callable(getattr(opt, "apply_gradients", None))):
            raise TypeError("OptimizerFunctionOutput.opt must be a TensorFlow Optimizer or Keras "
                            "Optimizer object.")
        if not tf.is_tensor(loss):
            raise TypeError("OptimizerFunctionOutput.loss must be a TensorFlow Tensor object.")
        self.opt = opt
        self.loss = loss
        self.compute_gradients_args = tuple(compute_gradients_args or ())
        self.compute_gradients_kwargs = dict(compute_gradients_kwargs or {})
        self.apply_gradients_args = tuple(apply_gradients_args or ())
        self.apply_gradients_kwargs = dict(apply_gradients_kwargs or {})
        self.variables = tuple(variables or ())
        self.tape = tape
        self.gradient_capture_context = gradient_capture_context
        self.captured_gradient_outfeed = captured_gradient_outfeed


def recomputation_checkpoint(tensors, name: Optional[str] = None):
    """Marks where IPU recomputation restarts; the tensors pass through unchanged."""
    return tf.nest.map_structure(tf.identity, tensors)


def _log_once(key: str, message: str) -> None:
    if key not in _logged:
        _logged.add(key)
        log.info(message)


def _call_stage(stage: Callable, values) -> Any:
    args, kwargs = body_arguments(values)
    return stage(*args, **kwargs)


def _grads_and_vars(spec: OptimizerFunctionOutput) -> List:
    if isinstance(spec.opt, tf.compat.v1.train.Optimizer):
        return spec.opt.compute_gradients(spec.loss, *spec.compute_gradients_args,
                                          **spec.compute_gradients_kwargs)
    variables = list(spec.variables) or list(tf.compat.v1.trainable_variables())
    if not variables:
        raise ValueError("OptimizerFunctionOutput for a Keras optimizer needs `variables`.")
    grads = spec.tape.gradient(spec.loss, variables) if spec.tape is not None \
        else tf.gradients(spec.loss, variables)
    return list(zip(grads, variables))


def check_replication(num_stages: int, device_mapping: Optional[Sequence[int]] = None) -> int:
    """The replicas Graphcore makes of a pipeline over ``device_mapping`` (default: stage i on
    IPU i): the selected IPUs over its IPUs rounded up to a power of two. Under an IPUStrategy
    whose local replicas differ, a ValueError naming the IPUs per replica to launch with."""
    from popdist_launcher.ipu import ipu_strategy
    from popdist_launcher.ipu_runtime import configured_system

    mapping = list(range(num_stages)) if device_mapping is None else list(device_mapping)
    if len(mapping) != num_stages or not all(isinstance(d, int) and d >= 0 for d in mapping):
        raise ValueError(f"device_mapping must give one IPU (an int >= 0) per computational "
                         f"stage ({num_stages}), got {device_mapping!r}.")
    shards = max(mapping) + 1
    rounded = 2 ** math.ceil(math.log2(shards))
    program_replica = REPLICA.get()
    if program_replica is not None:  # a compile() program: it replicates over `rounded` IPUs
        program_replica.program.note_ipus(rounded)
    system = configured_system.get_configured_system()
    if system is None:
        return 1
    replication = max(1, system.num_ipus // rounded)  # stages share IPUs when there are fewer
    strategy = tf.distribute.get_strategy()
    local = strategy.num_local_replicas if isinstance(strategy, ipu_strategy.IPUStrategyV1) else 1
    if local > 1 and local != replication:
        raise ValueError(
            f"The pipeline spans {rounded} IPUs, so the {system.num_ipus} selected IPUs make "
            f"{replication} replica(s), but this IPUStrategy runs {local} (one per "
            f"{system.ipus_per_replica} IPU(s)). Give each replica {rounded} IPUs: poprun-lite "
            f"--ipus-per-replica {rounded} (or POPDIST_NUM_IPUS_PER_REPLICA={rounded}), or "
            f"popdist.tensorflow.set_ipu_config(config, ipus_per_replica={rounded}).")
    return replication


def pipeline(computational_stages: Sequence[Callable],
             gradient_accumulation_count: Optional[int] = None,
             gradient_accumulation_dtype=None,
             gradient_accumulation_for_captured_grads: bool = True,
             repeat_count: int = 1, batch_serialization_iterations: int = 1,
             inputs: Optional[Sequence] = None, infeed_queue=None, outfeed_queue=None,
             optimizer_function: Optional[Callable] = None, device_mapping=None,
             pipeline_schedule=None, recomputation_mode=None,
             forward_propagation_stages_poplar_options=None,
             backward_propagation_stages_poplar_options=None, weight_update_poplar_options=None,
             offload_weight_update_variables=None,
             replicated_optimizer_state_sharding: bool = False,
             offload_activations=None, offload_gradient_accumulation_buffers=None,
             replicated_weight_sharding=None, offload_weights=None,
             continuous_weight_updates: bool = False, outfeed_loss: bool = False,
             accumulate_outfeed: bool = False, accumulate_outfeed_dtype=None, outfeed_mask=None,
             reduction_method=GradientAccumulationReductionMethod.SUM, name: Optional[str] = None):
    """Run ``repeat_count`` x ``gradient_accumulation_count`` micro-batches through the stages
    (see the module docstring). Returns the pipeline's op (None in eager mode)."""
    stages = list(computational_stages)
    if not stages or not all(callable(s) for s in stages):
        raise ValueError("computational_stages must be a non-empty list of functions.")
    if gradient_accumulation_count is None or isinstance(gradient_accumulation_count, bool) or \
            not isinstance(gradient_accumulation_count, int) or gradient_accumulation_count < 1:
        raise ValueError(f"gradient_accumulation_count must be a positive int, got "
                         f"{gradient_accumulation_count!r}.")
    if continuous_weight_updates:
        raise NotImplementedError("continuous_weight_updates is not supported (nor by Graphcore's "
                                  "current SDK).")
    if batch_serialization_iterations != 1:
        _log_once("serial", "pipeline batch_serialization_iterations: each micro-batch runs whole "
                  "here (same numbers)")
    if outfeed_mask is not None and (optimizer_function is None or outfeed_loss):
        raise ValueError("outfeed_mask needs an optimizer_function and outfeed_loss=False.")
    if (device_mapping is not None or pipeline_schedule is not None
            or recomputation_mode is not None):
        _log_once("placement", "pipeline device_mapping / pipeline_schedule / recomputation_mode: "
                  "the stages run in order on the replica's device here (same numbers)")
    check_replication(len(stages), device_mapping)
    method = GradientAccumulationReductionMethod.parse(reduction_method)
    n = gradient_accumulation_count
    inputs = [] if inputs is None else as_list(inputs)

    def accumulators(owner: Any, key: str, like: Sequence) -> List[tf.Variable]:
        """Accumulators, one per tensor of ``like``, kept with ``owner`` (the optimizer or
        outfeed, which outlive the retraces of a tf.function). As on an IPU, where they live
        inside the compiled program, they are no global variables (``global_variables()`` and
        checkpoints hold the model's alone) and need no initializer: the first micro-batch of
        each accumulation assigns them (``accumulate``)."""
        shapes = tuple((tuple(t.shape), t.dtype) for t in like)
        kept = _ACCUMULATORS.setdefault(owner, {})
        if kept.get(key, (None,))[0] != shapes:
            with tf.init_scope():
                kept[key] = (shapes, [tf.compat.v1.Variable(
                    lambda t=t: tf.zeros(t.shape, t.dtype), trainable=False, collections=[],
                    use_resource=True, name=f"pipeline_{key}_{i}") for i, t in enumerate(like)])
        return kept[key][1]

    def accumulate(acc: tf.Variable, index, value, later_value: Callable) -> tf.Operation:
        """``acc`` set to ``value`` at the first micro-batch of an accumulation (``index`` 0),
        else to ``later_value()`` (which may read ``acc``)."""
        def assign(new):
            with tf.control_dependencies([acc.assign(new(), read_value=False)]):
                return tf.constant(0)
        return tf.cond(tf.equal(index, 0), lambda: assign(lambda: value),
                       lambda: assign(later_value)).op

    def micro_batch(step):
        """Forward one micro-batch through every stage, accumulate, and update every n."""
        index = step % n
        values, kwargs = list(inputs), {}
        if infeed_queue is not None:
            with tf.control_dependencies([step]):  # not before the iteration starts
                extra, kwargs = body_arguments(infeed_queue._dequeue())  # noqa: SLF001
            values += list(extra)
        outputs = stages[0](*values, **kwargs)
        for stage in stages[1:]:
            outputs = _call_stage(stage, [] if outputs is None else outputs)
        to_outfeed, ops, spec, grad_accs, pairs = outputs, [], None, [], []
        if optimizer_function is not None:
            spec = _call_stage(optimizer_function, outputs)
            if not isinstance(spec, OptimizerFunctionOutput):
                raise TypeError("optimizer_function must return a "
                                "pipelining_ops.OptimizerFunctionOutput.")
            pairs = [(tf.zeros_like(v) if g is None else tf.convert_to_tensor(g), v)
                     for g, v in _grads_and_vars(spec)]
            grad_accs = accumulators(spec.opt, "gradients", [g for g, _ in pairs])
            k = tf.cast(index, tf.float32)
            for acc, (g, _) in zip(grad_accs, pairs):
                if method == GradientAccumulationReductionMethod.RUNNING_MEAN:
                    later = (lambda acc=acc, g=g: acc * tf.cast(k / (k + 1), acc.dtype)
                             + g / tf.cast(k + 1, acc.dtype))
                else:
                    later = lambda acc=acc, g=g: acc + g  # noqa: E731
                ops.append(accumulate(acc, index, g, later))
            if outfeed_loss:
                to_outfeed = spec.loss
            elif outfeed_mask is not None:
                to_outfeed = [o for o, masked in zip(as_list(outputs), outfeed_mask) if not masked]
        flat_out = [tf.convert_to_tensor(t) for t in tf.nest.flatten(to_outfeed)]
        if flat_out and outfeed_queue is None:
            raise ValueError("The last computational stage has outputs, so an outfeed_queue is "
                             "required to receive them.")
        out_accs = (accumulators(outfeed_queue, "outfeed", flat_out)
                    if accumulate_outfeed and flat_out else [])
        if out_accs:
            ops += [accumulate(a, index, tf.cast(t, a.dtype),
                               lambda a=a, t=t: a + tf.cast(t, a.dtype))
                    for a, t in zip(out_accs, flat_out)]
        elif flat_out:
            ops.append(outfeed_queue.enqueue(to_outfeed))

        def update():
            done = []
            if out_accs:
                done.append(outfeed_queue.enqueue(
                    tf.nest.pack_sequence_as(to_outfeed, [tf.identity(a) for a in out_accs])))
            if spec is not None:
                scale = 1.0 / n if method == GradientAccumulationReductionMethod.MEAN else 1.0
                grads = [tf.identity(a) * tf.cast(scale, a.dtype) for a in grad_accs]
                applied = spec.opt.apply_gradients(list(zip(grads, [v for _, v in pairs])),
                                                   *spec.apply_gradients_args,
                                                   **spec.apply_gradients_kwargs)
                done += [x for x in [applied] if isinstance(x, tf.Operation) or tf.is_tensor(x)]
            # Outputs carry every effect (TF1 prunes the rest).
            with tf.control_dependencies(done):
                return tf.constant(1)

        with tf.control_dependencies(ops):
            updated = tf.cond(tf.equal(index, n - 1), update, lambda: tf.constant(0))
        with tf.control_dependencies([updated]):
            return step + 1

    result = tf.while_loop(lambda step: step < repeat_count * n, micro_batch, [tf.constant(0)],
                           parallel_iterations=1, name=name)
    return None if tf.executing_eagerly() else as_list(result)[0].op
