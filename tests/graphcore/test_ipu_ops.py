"""Numbers of the IPU ops with CPU meanings vs NumPy references: normalization_ops (Graphcore's
strided groups), outlined_function (results and gradients), dropout, histograms, sequence
slices, within-replica collectives in this process, replica collectives in one program run."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import poprun
from tensorflow.python import ipu
from tensorflow.python.ipu.ops import normalization_ops

PROGRAMS = Path(__file__).parent / "programs"
RNG = np.random.default_rng(7)


def norm_reference(x, groups, channels_axis, strided, eps, gamma, beta):
    x = np.moveaxis(x, channels_axis, -1)
    channels = x.shape[-1]
    index = np.arange(channels)
    group_of = index % groups if strided else index // (channels // groups)
    out = np.empty_like(x, dtype=np.float64)
    for n in range(x.shape[0]):
        for g in range(groups):
            values = x[n][..., group_of == g]
            out[n][..., group_of == g] = (values - values.mean()) / np.sqrt(values.var() + eps)
    return np.moveaxis(out * gamma + beta, -1, channels_axis)


@pytest.mark.parametrize("groups,channels_axis,strided", [(2, -1, True), (2, -1, False),
                                                          (4, 1, True), (3, 1, False)])
def test_group_norm_matches_numpy_with_graphcore_grouping(groups, channels_axis, strided):
    x = RNG.normal(2.0, 3.0, size=(3, 12, 5, 4) if channels_axis == 1 else (3, 5, 4, 12))
    x = x.astype(np.float32)
    gamma, beta = RNG.normal(size=12), RNG.normal(size=12)
    init = {"gamma": tf.constant_initializer(gamma), "beta": tf.constant_initializer(beta)}
    out = normalization_ops.group_norm(x, groups=groups, channels_axis=channels_axis,
                                       epsilon=1e-3, param_initializers=init,
                                       strided_channel_grouping=strided)
    expected = norm_reference(x.astype(np.float64), groups, channels_axis, strided, 1e-3,
                              gamma, beta)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_layer_and_instance_norm_match_numpy():
    x = RNG.normal(size=(2, 3, 3, 6)).astype(np.float32)
    ones, zeros = np.ones(6), np.zeros(6)
    np.testing.assert_allclose(ipu.normalization_ops.layer_norm(x).numpy(),
                               norm_reference(x, 1, -1, False, 1.53e-5, ones, zeros), atol=1e-4)
    np.testing.assert_allclose(ipu.normalization_ops.instance_norm(x, center=False,
                                                                   scale=False).numpy(),
                               norm_reference(x, 6, -1, False, 1.53e-5, ones, zeros), atol=1e-4)
    with pytest.raises(ValueError, match="not commensurate with 4 groups"):
        normalization_ops.group_norm(x, groups=4)


def test_group_norm_creates_graphcore_variables_in_its_scope():
    with tf.Graph().as_default():
        normalization_ops.group_norm(tf.zeros([2, 4, 4]), groups=2, scope="gn")
        names = sorted(v.name for v in tf.compat.v1.trainable_variables())
    assert names == ["gn/beta:0", "gn/gamma:0"]


def test_outlined_function_results_gradients_and_one_trace():
    traces = []

    @ipu.outlined_function
    def dense(x, w):
        traces.append(1)
        return tf.tanh(tf.matmul(x, w))

    x = tf.constant(RNG.normal(size=(3, 4)), tf.float32)
    w = tf.Variable(RNG.normal(size=(4, 4)), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(dense(dense(x, w), w))
    grad = tape.gradient(loss, w).numpy()
    h1 = np.tanh(x.numpy() @ w.numpy())
    h2 = np.tanh(h1 @ w.numpy())
    assert loss.numpy() == pytest.approx(h2.sum(), rel=1e-5)
    d2 = 1 - h2 ** 2                                  # d loss / d (h1 @ w)
    d1 = (d2 @ w.numpy().T) * (1 - h1 ** 2)           # d loss / d (x @ w)
    np.testing.assert_allclose(grad, h1.T @ d2 + x.numpy().T @ d1, rtol=1e-4, atol=1e-5)
    assert len(traces) == 1  # both calls ran the one traced body
    assert ipu.outlined_function(name="f")(lambda a: a * 2)(tf.constant(3.0)).numpy() == 6.0


def test_dropout_rate_scale_noise_shape_and_seeded_repeats():
    x = tf.ones([200, 500])
    out = ipu.rand_ops.dropout(x, rate=0.3, seed=[1, 2]).numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((out == 0).mean() - 0.3) < 0.01  # 100000 draws: 5 standard deviations is 0.0072
    np.testing.assert_array_equal(out, ipu.rand_ops.dropout(x, rate=0.3, seed=[1, 2]).numpy())
    assert not np.array_equal(out, ipu.rand_ops.dropout(x, rate=0.3, seed=[1, 3]).numpy())
    rows = ipu.rand_ops.dropout(x, rate=0.5, noise_shape=[200, 1]).numpy()
    assert all(len(set(r)) == 1 for r in rows)  # one decision per row
    with pytest.raises(ValueError, match=r"range \[0, 1\)"):
        ipu.rand_ops.dropout(x, rate=1.0)


def test_histograms_count_as_graphcore_tests_expect():
    inputs = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], np.float32)
    levels = np.array([0.25, 0.5, 0.75, 1.0], np.float32)
    ops = ipu.statistics_ops
    assert ops.histogram(inputs, levels).numpy().tolist() == [2, 2, 3, 2, 1]
    magnitudes = ops.histogram(-inputs, levels, absolute_of_input=True)
    assert magnitudes.numpy().tolist() == [2, 2, 3, 2, 1]
    updated = ops.histogram_update(np.ones(5, np.float32), inputs, levels).numpy()
    assert updated.tolist() == [3, 3, 4, 3, 2]
    assert ops.histogram_normalize(updated).numpy().sum() == pytest.approx(1.0)
    np.testing.assert_allclose(ops.fixed_width_bins(inputs, 4).numpy(), [0.1, 0.4, 0.7, 1.0])


def test_sequence_slices_as_graphcore_documents_them():
    src = np.repeat(np.arange(6, dtype=np.float32)[:, None], 6, axis=1)
    out = ipu.slicing_ops.sequence_slice(np.zeros([6, 6], np.float32), src, [2, 2], [2, 1],
                                         [0, 4], False).numpy()
    assert out[:, 0].tolist() == [2, 3, 0, 0, 1, 2]
    unpacked = ipu.slicing_ops.sequence_slice_unpack(src, [2, 2], [2, 1], 4).numpy()
    assert unpacked[:, 0].tolist() == [2, 3, 1, 2]
    packed = ipu.slicing_ops.sequence_slice_pack(np.full([6, 6], 9, np.float32), unpacked,
                                                 [2, 2], [2, 1], True).numpy()
    assert packed[:, 0].tolist() == [0, 1, 2, 3, 0, 0]


def test_within_replica_collectives_and_barrier():
    shards = [tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0, 5.0]), tf.constant([6.0, 7.0, 8.0])]
    summed = ipu.within_replica_ops.all_reduce(shards, "COLLECTIVE_OP_ADD")
    assert [s.numpy().tolist() for s in summed] == [[10, 13, 13]] * 3
    maxed = ipu.within_replica_ops.all_reduce(shards, "COLLECTIVE_OP_MAX")
    assert maxed[0].numpy().tolist() == [6, 7, 8]
    matrices = [tf.reshape(tf.range(4.0), [2, 2]), tf.reshape(tf.range(4.0, 8.0), [2, 2])]
    gathered = ipu.within_replica_ops.all_gather(matrices, axis=0)
    np.testing.assert_array_equal(gathered[1].numpy(), np.arange(8.0).reshape(4, 2))
    a, (b,) = ipu.control_flow_ops.barrier([tf.constant(1.0), (tf.constant(2.0),)])
    assert (a.numpy(), b.numpy()) == (1.0, 2.0)


@pytest.fixture(scope="module", params=["one process", "poprun -np 2"])
def collectives(request, tmp_path_factory):
    """Every replica's results, replica 0 first: 4 local replicas of one process, or 2 instances
    of 2 replicas each under poprun-lite."""
    out = tmp_path_factory.mktemp("collectives")
    program = str(PROGRAMS / "ipu_collectives.py")
    if request.param == "one process":
        result = subprocess.run([sys.executable, program, str(out)], capture_output=True,
                                text=True, timeout=600)
    else:
        result = poprun("-np", "2", "--num-replicas", "4", program, str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    files = sorted(out.glob("collectives.*.json"))
    assert len(files) == (1 if request.param == "one process" else 2)
    merged = {}
    for f in files:
        for key, values in json.loads(f.read_text()).items():
            merged.setdefault(key, []).extend(values)
    return merged


def test_replica_collectives_over_four_replicas(collectives):
    x = [[10 * r + i for i in range(4)] for r in range(4)]
    assert collectives["index"] == [0, 1, 2, 3]
    assert collectives["gather_4"] == [x] * 4
    assert collectives["gather_2"] == [x[:2], x[:2], x[2:], x[2:]]
    assert collectives["all_to_all"] == [[[x[s][r] for s in range(4)]] for r in range(4)]
    sums = np.sum(x, axis=0)[:3].tolist() + [0]  # 3 elements padded to 4 blocks of 1
    assert collectives["scatter_add_3"] == [[s] for s in sums]
    assert collectives["scatter_max_2"] == [x[1][:2], x[1][2:], x[3][:2], x[3][2:]]


def test_ops_compile_with_xla_to_the_same_numbers():
    """Graphcore's programs call these ops inside compiled IPU functions (jit_compile=True)."""
    src = tf.reshape(tf.range(12.0), [6, 2])
    cases = {
        "slice": lambda: ipu.slicing_ops.sequence_slice(tf.zeros([6, 2]), src, [2, 2], [2, 1],
                                                        [0, 4], True),
        "unpack": lambda: ipu.slicing_ops.sequence_slice_unpack(src, [2, 2], [2, 1], 4),
        "histogram": lambda: ipu.statistics_ops.histogram(tf.range(10.0), tf.constant([2.0, 5.0])),
        "dropout": lambda: ipu.rand_ops.dropout(tf.ones([8, 8]), 0.5, seed=[3, 4]),
        "outlined": lambda: ipu.outlined_function(lambda a: a * 2.0)(src),
        "group_norm": lambda: normalization_ops.group_norm(src[None] * src[None], groups=2,
                                                           center=False, scale=False),
    }
    for name, case in cases.items():
        np.testing.assert_allclose(tf.function(case, jit_compile=True)().numpy(), case().numpy(),
                                   rtol=1e-6, err_msg=name)


def test_ctc_beam_search_returns_graphcore_layout_with_any_blank_index():
    logits = RNG.normal(size=(6, 2, 4)).astype(np.float32) * 3
    probs, lengths, labels = ipu.nn_ops.ctc_beam_search_decoder(logits, [6, 4], beam_width=10,
                                                                top_paths=2, blank_index=0)
    moved = np.concatenate([logits[..., 1:], logits[..., :1]], -1)  # TensorFlow's blank is last
    decoded, log_probs = tf.nn.ctc_beam_search_decoder(moved, [6, 4], beam_width=10, top_paths=2)
    np.testing.assert_allclose(probs.numpy(), -log_probs.numpy(), rtol=1e-6)
    for path, sparse in enumerate(decoded):
        for b in range(2):
            expected = [v + 1 for i, v in zip(sparse.indices.numpy(), sparse.values.numpy())
                        if i[0] == b]
            assert lengths.numpy()[b, path] == len(expected)
            assert labels.numpy()[b, path].tolist() == expected + [0] * (6 - len(expected))
    again = ipu.nn_ops.ctc_beam_search_decoder_with_log_probs(tf.nn.log_softmax(logits), [6, 4],
                                                              10, 2, 0)
    np.testing.assert_array_equal(again[2].numpy(), labels.numpy())


def test_buffer_dataset_keeps_elements_and_order():
    from tensorflow.python.ipu.data.ops.dataset_ops import BufferDataset
    assert list(BufferDataset(tf.data.Dataset.range(7), 3).as_numpy_iterator()) == list(range(7))


def test_sharding_dependencies_walk_inputs_and_control_inputs():
    with tf.Graph().as_default():
        a, b = tf.constant(1.0, name="a"), tf.constant(2.0, name="b")
        c = tf.constant(3.0, name="c")
        with tf.control_dependencies([c]):
            total = tf.add(a, b, name="total")
        tf.constant(4.0, name="unrelated")
        names = {op.name for op in ipu.sharding.dependencies([total])}
    assert names == {"a", "b", "c", "total"}


def test_outlined_function_with_layer_norm_in_a_tf1_loop_as_graphcores_guide_writes_it():
    with tf.Graph().as_default():
        @ipu.outlined_function
        def block(a):
            return ipu.nn_ops.gelu(normalization_ops.layer_norm(a))

        result = tf.compat.v1.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, block(x)),
                                         [0, tf.reshape(tf.range(8.0), [2, 4])])[1]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            got = session.run(result)
    x = np.arange(8.0).reshape(2, 4)
    for _ in range(3):
        mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
        y = (x - mean) / np.sqrt(var + 1.53e-5)
        x = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-5)
