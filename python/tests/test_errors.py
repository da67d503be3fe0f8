"""Bad input: a Python exception naming the argument (the C library's message where it found the
problem), nothing written to the outputs."""
import numpy as np
import pytest

import clattn


def f32(*shape):
    return np.ones(shape, np.float32)


def assert_untouched(out, value=7.0):
    assert (out.numpy() == value).all(), "an output was written by a failed call"


def test_c_errors_carry_last_error(ctx):
    out = ctx.full((2, 3, 4), 7.0)
    with pytest.raises(clattn.ShapeMismatch, match="valid_lens") as e:
        clattn.masked_softmax(f32(2, 3, 4), [1, 2, 3], out=out)
    assert e.value.status == 2 and isinstance(e.value, ValueError)
    assert_untouched(out)
    with pytest.raises(clattn.InvalidArgument, match="valid_lens"):
        clattn.masked_softmax(f32(2, 3, 4), [5, 1], out=out)  # a length over K
    assert_untouched(out)
    out = ctx.full((2, 3, 6), 7.0)
    with pytest.raises(clattn.ShapeMismatch, match="K"):
        clattn.dot_product_attention(f32(2, 3, 4), f32(2, 5, 3), f32(2, 5, 6), out=out)
    assert_untouched(out)


def test_multihead_heads_not_dividing(ctx):
    out = ctx.full((1, 2, 5), 7.0)
    with pytest.raises(clattn.Error, match="num_heads"):
        clattn.multihead_attention(f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4), 3, f32(10, 4),
                                   f32(10, 4), f32(10, 4), f32(5, 10), out=out)
    assert_untouched(out)


def test_python_side_checks_name_the_argument(ctx):
    with pytest.raises(TypeError, match="queries: dtype float64"):
        clattn.dot_product_attention(np.ones((2, 3, 4)), f32(2, 5, 4), f32(2, 5, 4))
    with pytest.raises(ValueError, match="keys: the array is not C-contiguous"):
        clattn.dot_product_attention(f32(2, 3, 4), f32(2, 4, 5).transpose(0, 2, 1),
                                     f32(2, 5, 4))
    with pytest.raises(TypeError, match="values: dtype int32 is not accepted"):
        clattn.dot_product_attention(f32(2, 3, 4), f32(2, 5, 4), np.ones((2, 5, 4), np.int32))
    with pytest.raises(TypeError, match="valid_lens: expected integer lengths"):
        clattn.masked_softmax(f32(2, 3, 4), np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="mask: expected a bool or integer"):
        clattn.masked_softmax(f32(2, 3, 4), mask=np.ones((3, 4)))
    with pytest.raises(ValueError, match="X: expected 1 to 4 dims"):
        clattn.masked_softmax(np.ones((1, 1, 1, 1, 2), np.float32))
    with pytest.raises(ValueError, match="align"):
        clattn.masked_softmax(f32(2, 3), causal=True, align="bottom")
    with pytest.raises(TypeError, match="window"):
        clattn.masked_softmax(f32(2, 3), window=3)
    with pytest.raises(ValueError, match="dropout_p"):
        clattn.dot_product_attention(f32(1, 2), f32(1, 2), f32(1, 2), dropout_p=1.5)
    with pytest.raises(ValueError, match="need"):
        clattn.dot_product_attention_backward(f32(1, 2), f32(1, 2), f32(1, 2), f32(1, 2),
                                              need=("dx",))
    with pytest.raises(TypeError, match="out: expected a clattn.Array"):
        clattn.masked_softmax(f32(2, 3), out=np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="k_cache: expected a device clattn.Array"):
        clattn.decode_attention(f32(1, 1, 1, 4), f32(1, 1, 8, 4), f32(1, 1, 8, 4),
                                np.array([1], np.int32))
    with pytest.raises(TypeError, match="ctx: expected a clattn.Context"):
        clattn.masked_softmax(f32(2, 3), ctx="cpu")


def test_integers_in_range_or_an_error(ctx):
    # ctypes would wrap these into int32 / uint64 fields (2**32 + 1 heads running as 1) or
    # truncate a float; each is an error naming the argument, nothing enqueued.
    x = f32(2, 3, 4)
    with pytest.raises(ValueError, match="window: 4294967296 is outside"):
        clattn.masked_softmax(x, window=(2**32, 2**32))
    with pytest.raises(TypeError, match="window: expected an integer"):
        clattn.masked_softmax(x, window=(1.7, 0))
    mha = (f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4))
    with pytest.raises(ValueError, match="num_heads"):
        clattn.multihead_attention(*mha, 2**32 + 1, f32(4, 4), f32(4, 4), f32(4, 4), f32(4, 4))
    with pytest.raises(ValueError, match="num_kv_heads"):
        clattn.multihead_attention(*mha, 2, f32(4, 4), f32(4, 4), f32(4, 4), f32(4, 4),
                                   num_kv_heads=2**32 + 2)
    with pytest.raises(ValueError, match="seed"):
        clattn.dropout(x, 0.5, seed=2**64)
    with pytest.raises(ValueError, match="offset"):
        clattn.dot_product_attention(x, x, x, dropout_p=0.5, offset=-1)
    with pytest.raises(ValueError, match="shape: a dim is too large"):
        ctx.empty((2**64 + 3,))
    with pytest.raises(ValueError, match="num_heads"):
        clattn.MultiHeadAttention(8, 2**31)


def test_messages_name_the_argument(ctx):
    x = f32(2, 3, 4)
    with pytest.raises(ValueError, match=r"X: an empty array \(shape \(2, 0, 4\)\)"):
        clattn.masked_softmax(np.zeros((2, 0, 4), np.float32))
    with pytest.raises(ValueError, match="data: clattn tensors have 1 to 4 dims"):
        ctx.array(np.ones((1, 1, 1, 1, 2), np.float32))
    with pytest.raises(TypeError, match="out_dtype"):
        clattn.dot_product_attention(x, x, x, out_dtype=np.float64, need_weights=True)
    with pytest.raises(TypeError, match="out_dtype: expected one of .* got int32"):
        clattn.masked_softmax(x, out_dtype="int32")
    gone = ctx.array(x)
    gone.release()
    with pytest.raises(ValueError, match="X: the array has been released"):
        clattn.masked_softmax(gone)
    with pytest.raises(ValueError, match="x: the array has been released"):
        clattn.dropout(gone, 0.5)
    with pytest.raises(TypeError, match="astype converts between float dtypes"):
        ctx.array(x).astype("int32")
    # a byte order other than the machine's would be a silent conversion
    with pytest.raises(TypeError, match="queries: dtype >f4"):
        clattn.dot_product_attention(x.astype(">f4"), x, x)
    # num_heads 0 in training mode (need_saved) is num_heads' error, not need_saved's
    with pytest.raises(ValueError, match="num_heads"):
        clattn.MultiHeadAttention(8, 0)(f32(1, 2, 8), f32(1, 3, 8), f32(1, 3, 8))


def test_wide_integer_mask_is_compared_with_zero(ctx, rng):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    keep = rng.random((2, 3, 5)) < 0.6
    wide = np.where(keep, np.int64(2**32), np.int64(0))  # nonzero, but 0 modulo 2**32
    got = clattn.masked_softmax(x, mask=wide).numpy()
    assert np.array_equal(got, clattn.masked_softmax(x, mask=keep).numpy())


def test_context_errors():
    with pytest.raises(clattn.DeviceNotFound, match="no-such-device-xyz"):
        clattn.Context("no-such-device-xyz")
    with pytest.raises(clattn.InvalidArgument, match="bogus"):
        clattn.Context(tuning="matmul=bogus")
    with pytest.raises(TypeError, match="sync"):
        clattn.Context(sync=2)
    c = clattn.Context()
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.finish()
    c.close()


def test_array_of_another_context(ctx):
    other = clattn.Context()
    try:
        a = other.array(f32(2, 3))
        with pytest.raises(ValueError, match="X: the array belongs to another OpenCL context"):
            clattn.masked_softmax(a, ctx=ctx)
    finally:
        other.close()


def test_state_dict_errors():
    with pytest.raises(KeyError, match="in_proj_weight"):
        clattn.MultiHeadAttention(4, 2).load_state_dict({"foo": np.zeros(3)})
    with pytest.raises(ValueError, match="add_bias_kv"):
        clattn.MultiHeadAttention(4, 2).load_state_dict(
            {"in_proj_weight": np.zeros((12, 4)), "bias_k": np.zeros((1, 1, 4))})
    with pytest.raises(TypeError, match="W_q.weight: expected float"):
        clattn.AdditiveAttention(2).load_state_dict(
            {"W_q.weight": np.zeros((2, 2), np.int64), "W_k.weight": np.zeros((2, 2)),
             "w_v.weight": np.zeros((1, 2))})
    with pytest.raises(ValueError, match="dropout"):
        clattn.DotProductAttention(dropout=2.0)


def test_context_tuning_and_tune_file(tmp_path):
    c = clattn.Context(tune_file="off")
    try:
        assert c.tune_note == "no tune file: off"
        assert c.tuning("matmul").split(":")[0] in ("cpu", "gpu")
        with pytest.raises(clattn.InvalidArgument, match="no bucket"):
            c.tuning("matmul@d64")
    finally:
        c.close()
    bad = tmp_path / "tune.txt"
    bad.write_text("not a tune file\n")
    c = clattn.Context(tune_file=str(bad))  # ignored with a note, never an error
    try:
        assert "ignored" in c.tune_note and "corrupt" in c.tune_note
    finally:
        c.close()


def test_floats_and_flags_checked_before_ctypes(ctx):
    # c_float would make 1e40 an infinity (fill -1e40 turning d2l's finite fill into -inf's NaN
    # rows) and bool() takes any string for True: each is an error naming the argument.
    x = f32(2, 3, 4)
    with pytest.raises(ValueError, match="fill: -1e\\+40 is outside float32's range"):
        clattn.masked_softmax(x, [1, 2], fill=-1e40)
    with pytest.raises(ValueError, match="alpha"):
        clattn.matmul(f32(2, 3), f32(3, 2), alpha=1e40)
    with pytest.raises(ValueError, match="beta"):
        clattn.matmul(f32(2, 3), f32(3, 2), beta=-1e39, out=ctx.full((2, 2), 1.0))
    with pytest.raises(ValueError, match="scale"):
        clattn.dot_product_attention(f32(1, 2), f32(1, 2), f32(1, 2), scale=1e39)
    with pytest.raises(TypeError, match="causal: expected True or False"):
        clattn.masked_softmax(x, causal="no")
    with pytest.raises(TypeError, match="trans_a"):
        clattn.matmul(f32(2, 3), f32(2, 3), trans_a="yes")
    with pytest.raises(TypeError, match="training"):
        clattn.dropout(x, 0.5, training=2)
    # numbers as numbers, flags as flags: strings refused, not parsed or taken for True
    with pytest.raises(TypeError, match="dropout_p: expected a number"):
        clattn.dot_product_attention(f32(1, 2), f32(1, 2), f32(1, 2), dropout_p="0.5")
    with pytest.raises(TypeError, match="p: expected a number"):
        clattn.dropout(x, "abc")
    with pytest.raises(TypeError, match="dropout: expected a number"):
        clattn.DotProductAttention(dropout=None)
    with pytest.raises(TypeError, match="need_weights"):
        clattn.dot_product_attention(f32(1, 2), f32(1, 2), f32(1, 2), need_weights="no")
    with pytest.raises(TypeError, match="need_lse"):
        clattn.dot_product_attention(f32(1, 2), f32(1, 2), f32(1, 2), need_lse="no")
    with pytest.raises(ValueError, match="align"):
        clattn.masked_softmax(x, align=["top_left"])
    # None is the unbounded side; -1 (C's spelling) is not a second one
    with pytest.raises(ValueError, match="window: -1"):
        clattn.masked_softmax(x, window=(-1, 0))
    # -inf stays a fill (PyTorch's), finite extremes stay finite
    assert np.isnan(clattn.masked_softmax(x, [0, 2], fill=-np.inf).numpy()[0]).all()
    assert np.allclose(clattn.masked_softmax(x, [0, 2], fill=-3.4e38).numpy()[0], 0.25)


def test_strings_with_nul_refused():
    with pytest.raises(ValueError, match="device: contains a NUL"):
        clattn.Context(device="cpu\0zzz")
    with pytest.raises(ValueError, match="cache_dir: contains a NUL"):
        clattn.Context(cache_dir="/tmp/x\0y")
