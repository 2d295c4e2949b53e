"""anvil.cuda: streams, events, memory statistics, record_stream (on a GPU), and clear errors without one."""
import pytest

import anvil

needs_gpu = pytest.mark.skipif(not anvil.cuda.is_available(), reason=f"no CUDA: {anvil.cuda.unavailable_reason()}")


def test_without_a_gpu_errors_name_the_reason():
    if anvil.cuda.is_available():
        pytest.skip("a GPU is present")
    for call in (lambda: anvil.cuda.Stream(), lambda: anvil.cuda.Event(), lambda: anvil.ones(1).cuda(),
                 lambda: anvil.cuda.current_stream()):
        with pytest.raises(RuntimeError):
            call()


@needs_gpu
def test_side_stream_and_events():
    s = anvil.cuda.Stream()
    assert s != anvil.cuda.default_stream()
    start, end = anvil.cuda.Event(enable_timing=True), anvil.cuda.Event(enable_timing=True)
    x = anvil.randn(1024, 1024, device="cuda")
    s.wait_stream(anvil.cuda.current_stream())
    with anvil.cuda.stream(s):
        assert anvil.cuda.current_stream() == s
        start.record()
        y = x @ x
        end.record()
        x.record_stream(s)
    assert anvil.cuda.current_stream() != s
    end.synchronize()
    assert start.elapsed_time(end) > 0
    anvil.cuda.current_stream().wait_stream(s)
    assert abs(y.sum().item() - (x.cpu() @ x.cpu()).sum().item()) < 1e-2 * abs(y.abs().sum().item())
    stats = anvil.cuda.memory_stats()
    assert stats["allocated_bytes.all.current"] >= 2 * 4 * 1024 * 1024
    assert anvil.cuda.max_memory_allocated() >= anvil.cuda.memory_allocated()
    del x, y
    anvil.cuda.synchronize()
    anvil.cuda.empty_cache()


@needs_gpu
def test_torch_consumer_waits_for_anvil_stream():
    torch = pytest.importorskip("torch")
    s = anvil.cuda.Stream()
    with anvil.cuda.stream(s):
        a = anvil.ones(1 << 24, device="cuda") * 3  # queued on s
        t = torch.from_dlpack(a)  # torch's current stream waits on an event recorded on s
    assert t.sum().item() == 3 * (1 << 24)
