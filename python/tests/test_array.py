"""Device arrays: transfers, the 16-bit conversions against a host implementation written here
from the IEEE rules, views, and bad input."""
import math

import numpy as np
import pytest

import clattn


def bf16_bits(x):
    """float32 -> bfloat16 bits: round to nearest even; NaN kept NaN (quieted)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, np.float32))
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


EDGES = np.array([0.0, -0.0, 1.0, -1.5, 65504.0, 65519.99, 65520.0, -1e9, 2.0 ** -24,
                  2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -14, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11,
                  1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 3.3895e38, -3.4e38, 1e-40, np.inf, -np.inf,
                  np.nan], np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_roundtrip(ctx, rng, dtype):
    data = (rng.standard_normal((3, 5, 7)) * 100).astype(dtype)
    a = ctx.array(data)
    assert a.shape == (3, 5, 7) and a.dtype == dtype and a.ndim == 3 and a.size == 105
    assert np.array_equal(a.numpy(), data)
    assert np.array_equal(np.asarray(a), data)


def test_float16_conversion(ctx):
    got = ctx.array(EDGES, "float16").numpy()
    with np.errstate(over="ignore"):  # 65520 and up overflow to infinity, as they should
        want = EDGES.astype(np.float16)  # NumPy rounds IEEE binary16 to nearest even
    assert np.array_equal(got.view(np.uint16)[:-1], want.view(np.uint16)[:-1])
    assert np.isnan(got[-1])
    back = ctx.array(got).astype("float32").numpy()
    assert np.array_equal(back[:-1], got[:-1].astype(np.float32)) and np.isnan(back[-1])


def test_bfloat16_conversion(ctx):
    a = ctx.array(EDGES, "bfloat16")
    assert a.dtype == "bfloat16" and a.nbytes == 2 * EDGES.size
    got = np.asarray(a.numpy(), np.float32)  # float32 (or ml_dtypes' bfloat16) of the bits
    bits = (got.view(np.uint32) >> 16).astype(np.uint16)
    want = bf16_bits(EDGES)
    assert np.array_equal(bits, want), (bits ^ want).nonzero()
    assert np.signbit(got[1]) and got[1] == 0


def test_astype_fill_full(ctx):
    a = ctx.full((2, 3), 1.0 / 3.0, "float16")
    assert np.array_equal(a.numpy(), np.full((2, 3), 1 / 3, np.float16))
    assert np.array_equal(a.astype(np.float32).numpy(), np.full((2, 3), np.float16(1 / 3),
                                                                np.float32))
    assert np.array_equal(ctx.zeros(4).numpy(), np.zeros(4, np.float32))
    assert np.isnan(ctx.full(3, math.nan).numpy()).all()


def test_host_conversions_of_array(ctx):
    assert ctx.array(np.arange(5.0)).dtype == "float32"        # float64 becomes float32
    assert ctx.array([1, 2, 3]).dtype == "int32"
    assert ctx.array(np.array([True, False])).numpy().tolist() == [1, 0]
    assert ctx.array(np.arange(12.0).reshape(3, 4).T).numpy().tolist() == \
        np.arange(12.0).reshape(3, 4).T.tolist()               # explicit: a contiguous copy
    with pytest.raises(ValueError, match="int32's range"):
        ctx.array(np.array([2 ** 40]))
    with pytest.raises(TypeError, match="data"):
        ctx.array(np.array(["a"]))
    with pytest.raises(TypeError, match="not a clattn dtype"):
        ctx.array([1.0], "float64")


def test_views(ctx):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = ctx.array(data)
    assert np.array_equal(a.reshape(6, 4).numpy(), data.reshape(6, 4))
    assert np.array_equal(a.reshape(-1).numpy(), data.ravel())
    assert np.array_equal(a[1].numpy(), data[1])
    assert np.array_equal(a[-1][2:].numpy(), data[-1][2:])
    view = a[0]
    view.write(np.full((3, 4), 7, np.float32))
    assert (a.numpy()[0] == 7).all() and np.array_equal(a.numpy()[1], data[1])
    del a  # the view keeps the buffer alive
    assert (view.numpy() == 7).all()


def test_bad_shapes_and_indices(ctx):
    a = ctx.zeros((2, 3))
    with pytest.raises(ValueError, match="shape: cannot reshape"):
        a.reshape(4, 2)
    with pytest.raises(IndexError, match="out of range"):
        a[2]
    with pytest.raises(IndexError, match="step 1"):
        a[::2]
    with pytest.raises(ValueError, match="1 to 4 dims"):
        ctx.empty((1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="positive"):
        ctx.empty((2, 0))
    with pytest.raises(TypeError, match="fill takes float"):
        ctx.array([1, 2]).fill(1.0)
    with pytest.raises(TypeError, match="data: expected float32"):
        a.write(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="data: shape"):
        a.write(np.zeros((3, 2), np.float32))


def test_release(ctx):
    a = ctx.zeros(3)
    a.release()
    assert repr(a) == "clattn.Array(released)"
    with pytest.raises(ValueError, match="released"):
        a.numpy()
    a.release()  # idempotent


def test_repr_and_context(ctx):
    a = ctx.array(np.array([[1.5, 2.0]], np.float32))
    assert repr(a) == "clattn.Array([[1.5, 2. ]], dtype=float32)"
    assert ctx.description in repr(ctx)
    assert any(d.selected for d in clattn.devices())
    assert clattn.array([1.0]).context is clattn.default_context()


def test_view_outlives_release_of_its_base(ctx):
    # A view keeps the memory: releasing the base must not free it under the view (this crashed).
    a = ctx.array(np.arange(8, dtype=np.float32))
    v = a[2:].reshape(2, 3)
    a.release()
    assert np.array_equal(v.numpy(), np.arange(2, 8, dtype=np.float32).reshape(2, 3))


def test_context_from_any_array_argument(ctx):
    other = clattn.Context()
    try:
        Q = np.ones((1, 3, 4), np.float32)
        out, lse = clattn.dot_product_attention(Q, Q, Q, need_lse=True, ctx=other)
        # host Q, K, V: the context comes from out and lse
        dq, _, _ = clattn.dot_product_attention_backward(Q, Q, Q, Q, out=out, lse=lse)
        assert dq.context is other
        bias = other.array(np.zeros((1, 3, 3), np.float32))
        assert clattn.dot_product_attention(Q, Q, Q, bias=bias).context is other
    finally:
        other.close()
