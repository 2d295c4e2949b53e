// anvil.cuda: availability, streams (a context manager switches anvil's current stream), events
// with elapsed_time, synchronize, the caching allocator's statistics; Tensor.record_stream.
#include <nanobind/stl/string.h>

#include <string>

#include "anvil/cuda.h"
#include "anvil/memory.h"
#include "anvil/stream.h"
#include "bindings.h"

namespace anvil::python {
namespace {

// A CUDA device argument: an index, an anvil.device / string, or None (device 0).
Device cuda_device(nb::handle h) {
  if (is_int(h)) return Device(kCUDA, nb::cast<int>(h));
  return device_arg(h, Device(kCUDA, 0));
}

// `with anvil.cuda.stream(s):` makes s the current stream of its device, the previous one back
// on exit (torch.cuda.stream / StreamContext).
struct StreamContext {
  Stream stream;
  Stream previous;
};

}  // namespace

void bind_cuda(nb::module_& m, nb::class_<Tensor>& tensor_class) {
  nb::module_ c = m.def_submodule("cuda", "anvil.cuda: devices, streams, events and memory of the CUDA backend");
  c.def("is_available", &cuda::is_available);
  c.def("unavailable_reason", &cuda::unavailable_reason);
  c.def("device_count", &cuda::device_count);
  c.def("built_with_cuda", &cuda::built_with_cuda);
  c.def("synchronize", [](nb::handle device) { synchronize(cuda_device(device)); }, nb::arg("device").none() = nb::none());

  nb::class_<Stream>(c, "Stream")
      .def("__init__", [](Stream* s, nb::handle device) { new (s) Stream(Stream::create(cuda_device(device))); },
           nb::arg("device").none() = nb::none())
      .def_prop_ro("device", &Stream::device)
      .def_prop_ro("cuda_stream", [](const Stream& s) { return reinterpret_cast<uintptr_t>(s.native_handle()); })
      .def("synchronize", &Stream::synchronize)
      .def("query", &Stream::query)
      .def("wait_event", [](const Stream& s, const Event& e) { e.wait(s); }, nb::arg("event"))
      .def("wait_stream", [](const Stream& s, const Stream& other) {
        Event e(other.device());
        e.record(other);
        e.wait(s);
      }, nb::arg("stream"))
      .def("record_event", [](const Stream& s, nb::handle event) {
        Event e = event.is_none() ? Event(s.device()) : nb::cast<Event>(event);
        e.record(s);
        return e;
      }, nb::arg("event").none() = nb::none())
      .def("__eq__", [](const Stream& a, const Stream& b) { return a == b; })
      .def("__hash__", [](const Stream& s) { return std::hash<void*>()(s.native_handle()); })
      .def("__repr__", [](const Stream& s) {
        return "<anvil.cuda.Stream device=" + s.device().str() + " cuda_stream=" +
               std::to_string(reinterpret_cast<uintptr_t>(s.native_handle())) + ">";
      });
  c.def("current_stream", [](nb::handle device) { return current_stream(cuda_device(device)); },
        nb::arg("device").none() = nb::none());
  c.def("default_stream", [](nb::handle device) { return default_stream(cuda_device(device)); },
        nb::arg("device").none() = nb::none());
  c.def("set_stream", &set_stream, nb::arg("stream"));
  nb::class_<StreamContext>(c, "StreamContext")
      .def("__enter__", [](StreamContext& ctx) {
        ctx.previous = current_stream(ctx.stream.device());
        set_stream(ctx.stream);
        return ctx.stream;
      })
      .def("__exit__", [](StreamContext& ctx, nb::args) { set_stream(ctx.previous); });
  c.def("stream", [](const Stream& s) { return StreamContext{s, s}; }, nb::arg("stream"));

  nb::class_<Event>(c, "Event")
      .def("__init__", [](Event* e, bool enable_timing, nb::handle device) {
        new (e) Event(cuda_device(device), enable_timing);
      }, nb::arg("enable_timing") = false, nb::kw_only(), nb::arg("device").none() = nb::none())
      .def("record", [](Event& e, nb::handle stream) {
        if (stream.is_none()) e.record();
        else e.record(nb::cast<const Stream&>(stream));
      }, nb::arg("stream").none() = nb::none())
      .def("wait", [](const Event& e, nb::handle stream) {
        e.wait(stream.is_none() ? current_stream(Device(kCUDA, 0)) : nb::cast<const Stream&>(stream));
      }, nb::arg("stream").none() = nb::none())
      .def("synchronize", &Event::synchronize)
      .def("query", &Event::query)
      .def("elapsed_time", &Event::elapsed_time, nb::arg("end_event"));

  c.def("memory_stats", [](nb::handle device) {
    const MemoryStats s = memory_stats(cuda_device(device));
    nb::dict d;
    d["allocated_bytes.all.current"] = s.allocated_bytes;
    d["allocated_bytes.all.peak"] = s.peak_allocated_bytes;
    d["reserved_bytes.all.current"] = s.reserved_bytes;
    d["reserved_bytes.all.peak"] = s.peak_reserved_bytes;
    d["num_alloc_retries"] = 0;
    d["num_ooms"] = s.num_ooms;
    d["allocation.all.allocated"] = s.num_allocs;
    d["allocation.all.freed"] = s.num_frees;
    d["segment.all.current"] = s.num_segments;
    d["num_cache_hits"] = s.num_cache_hits;
    return d;
  }, nb::arg("device").none() = nb::none());
  c.def("memory_allocated", [](nb::handle device) { return memory_stats(cuda_device(device)).allocated_bytes; },
        nb::arg("device").none() = nb::none());
  c.def("memory_reserved", [](nb::handle device) { return memory_stats(cuda_device(device)).reserved_bytes; },
        nb::arg("device").none() = nb::none());
  c.def("max_memory_allocated", [](nb::handle device) { return memory_stats(cuda_device(device)).peak_allocated_bytes; },
        nb::arg("device").none() = nb::none());
  c.def("reset_peak_memory_stats", [](nb::handle device) { reset_peak_memory_stats(cuda_device(device)); },
        nb::arg("device").none() = nb::none());
  c.def("empty_cache", [] { empty_cache(Device(kCUDA, 0)); });
  c.def("memory_summary", [](nb::handle device) { return memory_stats_str(cuda_device(device)); },
        nb::arg("device").none() = nb::none());

  tensor_class.def("record_stream", &Tensor::record_stream, nb::arg("stream"));
}

}  // namespace anvil::python
