"""pyopencl interop: a clattn context over pyopencl's queue and arrays shared both ways, with no
copy (a write through one side is seen through the other)."""
import numpy as np
import pytest

import clattn
import reference as ref
from test_functional import OUT_TOL, W_ATOL, W_RTOL

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")


@pytest.fixture(scope="module")
def shared(ctx):
    cl_ctx, queue = ctx.to_pyopencl()  # pyopencl objects over clattn's own context and queue
    wrapped = clattn.Context.from_pyopencl(queue)
    yield wrapped, queue
    wrapped.close()


def test_wrapped_context_runs_pyopencl_arrays(shared, rng):
    c, queue = shared
    Q = cla.to_device(queue, rng.standard_normal((2, 5, 8)).astype(np.float32))
    K = cla.to_device(queue, rng.standard_normal((2, 7, 8)).astype(np.float32))
    V = cla.to_device(queue, rng.standard_normal((2, 7, 3)).astype(np.float32))
    q, k, v = (clattn.Array.from_pyopencl(c, a) for a in (Q, K, V))
    out = clattn.dot_product_attention(q, k, v, [7, 2], ctx=c)
    got = out.to_pyopencl(queue).get()
    want, W, _ = ref.attention(Q.get(), K.get(), V.get(), ref.blocked((2, 5, 7), [7, 2]))
    ref.assert_scaled(got, want, ref.out_scale(W, V.get()), 1e-4, "attention over pyopencl")


def test_no_copies(shared):
    c, queue = shared
    host = np.arange(12, dtype=np.float32)
    pa = cla.to_device(queue, host)
    view = clattn.Array.from_pyopencl(c, pa[4:]).reshape(2, 4)
    pa.fill(5.0)  # written through pyopencl, read through clattn
    assert (view.numpy() == 5).all()
    view.fill(2.0)  # written through clattn, read through pyopencl
    c.finish()
    assert pa.get().tolist() == [5.0] * 4 + [2.0] * 8
    buf_view = clattn.Array.from_pyopencl(c, pa.base_data, shape=(3,), dtype="float32", offset=1)
    assert buf_view.numpy().tolist() == [5.0, 5.0, 5.0]


def test_interop_bad_input(shared):
    c, queue = shared
    with pytest.raises(TypeError, match="shape, dtype"):
        clattn.Array.from_pyopencl(c, cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64))
    with pytest.raises(TypeError, match="data: .*float64"):
        clattn.Array.from_pyopencl(c, cla.zeros(queue, 4, np.float64))


def test_bfloat16_through_pyopencl(shared):
    # to_pyopencl gives a bfloat16 Array as uint16; from_pyopencl takes it back when told
    c, queue = shared
    a = c.array(np.array([1.5, -2.0, 3.25], np.float32)).astype("bfloat16")
    pa = a.to_pyopencl(queue)
    assert pa.dtype == np.uint16
    back = clattn.Array.from_pyopencl(c, pa, dtype="bfloat16")
    assert back.dtype == "bfloat16"
    assert back.astype("float32").numpy().tolist() == [1.5, -2.0, 3.25]
    with pytest.raises(TypeError, match="dtype: float16 differs"):
        clattn.Array.from_pyopencl(c, cla.zeros(queue, 4, np.float32), dtype="float16")


def test_views_and_contexts_over_one_cl_context(ctx, shared, rng):
    c, queue = shared
    data = rng.standard_normal((3, 4)).astype(np.float32)
    a = ctx.array(data)  # made on ctx, read through pyopencl at an element offset
    assert np.array_equal(a[1].to_pyopencl(queue).get(), data[1])
    # The wrapped context shares ctx's cl_context: its arrays run in ctx's ops.
    b = c.array(data)
    got = clattn.masked_softmax(b, ctx=ctx).numpy()
    assert np.allclose(got, clattn.masked_softmax(data).numpy())


def test_host_inputs_do_not_wait_for_the_queue(ctx, rng):
    # An op given host data returns while earlier work is still queued: clattn's queue waits here
    # on a user event that completes only after the op has returned. A blocking write of the
    # data (the binding's upload before) waited for it, and so would anything else that blocks.
    import threading
    cl_ctx, queue = ctx.to_pyopencl()
    gate = cl.UserEvent(cl_ctx)
    cl.enqueue_barrier(queue, wait_for=[gate])
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (2, 6, 4),
                                                                    (2, 6, 3)))
    got = {}

    def ops():
        got["softmax"] = clattn.masked_softmax(x, [2, 5], ctx=ctx)
        got["attention"] = clattn.dot_product_attention(q, k, v, [6, 1], ctx=ctx)
    t = threading.Thread(target=ops)
    t.start()
    t.join(60)
    returned = not t.is_alive()
    gate.set_status(cl.command_execution_status.COMPLETE)
    t.join()
    assert returned, "an op given host data waited for the queue's earlier work"
    ref.assert_close(got["softmax"].numpy(), ref.masked_softmax(x, ref.blocked(x.shape, [2, 5])),
                     W_RTOL, W_ATOL, "softmax queued behind the gate")
    want, W, _ = ref.attention(q, k, v, ref.blocked((2, 3, 6), [6, 1]))
    ref.assert_scaled(got["attention"].numpy(), want, ref.out_scale(W, v), OUT_TOL,
                      "attention queued behind the gate")
