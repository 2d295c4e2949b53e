// cuDNN convolution passes (cuda/cudnn_conv.h). A conv1d runs as a conv2d of height 1 (cuDNN's
// graphs take two or three spatial dims). cudnn-frontend loads libcudnn.so.9 when first used
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): without it on the library path every pass is planned
// as the composition, and the process still starts.
#include "cuda/cudnn_conv.h"

#if ANVIL_WITH_CUDNN

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "anvil/conv.h"
#include "cuda/runtime.h"

// cudnn-frontend's dynamic loading reads the library handle from here.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace anvil::cuda_backend {
namespace {

namespace fe = cudnn_frontend;

bool load_cudnn() {
  if (fe::cudnn_dlhandle) return true;
  for (const char* name : {"libcudnn.so.9", "libcudnn.so"})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) {
      fe::cudnn_dlhandle = h;
      return true;
    }
  return false;
}

struct Plan {
  bool supported = false;
  std::shared_ptr<fe::graph::Graph> graph;
  std::shared_ptr<fe::graph::Tensor_attributes> x, w, y, bias;
  int64_t workspace = 0;
};

fe::DataType_t data_type(DType t) {
  if (t == kFloat32) return fe::DataType_t::FLOAT;
  if (t == kFloat16) return fe::DataType_t::HALF;
  if (t == kBFloat16) return fe::DataType_t::BFLOAT16;
  if (t == kFloat64) return fe::DataType_t::DOUBLE;
  throw DTypeError(detail::cat_message("[conv] cuDNN has no plan for ", dtype_name(t)));
}

// The conv as cuDNN sees it: >= 2 spatial dims (a 1-d conv gets a leading extent-1 axis).
struct Geometry {
  std::vector<int64_t> in, out, kernel, stride, pad, dilation;
};
Geometry geometry(const ConvDirectParams& p) {
  Geometry g;
  if (p.spatial == 1) {
    g.in.push_back(1), g.out.push_back(1), g.kernel.push_back(1), g.stride.push_back(1), g.pad.push_back(0),
        g.dilation.push_back(1);
  }
  for (int i = 0; i < p.spatial; ++i) {
    const ConvAxis& a = p.axis[i];
    g.in.push_back(a.in), g.out.push_back(a.out), g.kernel.push_back(a.kernel), g.stride.push_back(a.stride),
        g.pad.push_back(a.pad), g.dilation.push_back(a.dilation);
  }
  return g;
}

// Dims [n, c, spatial...] and dense strides in the layout.
struct Desc {
  std::vector<int64_t> dim, stride;
};
Desc desc(int64_t n, int64_t c, const std::vector<int64_t>& spatial, bool channels_last) {
  Desc d;
  d.dim = {n, c};
  d.dim.insert(d.dim.end(), spatial.begin(), spatial.end());
  d.stride.assign(d.dim.size(), 1);
  if (!channels_last) {
    for (size_t i = d.dim.size() - 1; i-- > 0;) d.stride[i] = d.stride[i + 1] * d.dim[i + 1];
  } else {  // order c, last spatial ... first spatial, n
    int64_t s = c;
    for (size_t i = d.dim.size(); i-- > 2;) {
      d.stride[i] = s;
      s *= d.dim[i];
    }
    d.stride[1] = 1;
    d.stride[0] = s;
  }
  return d;
}

std::atomic<bool> g_fft_winograd{false};

// The plan cache's key: every field the plan depends on as raw int64 words (no decimal text: one
// allocation per lookup, and no operator+ chains, which GCC 12's -Wrestrict misreads).
std::string key_of(const ConvDirectParams& p, int device, int64_t workspace_limit, bool fft_winograd) {
  int64_t v[12 + 6 * 3] = {fft_winograd ? 1 : 0, static_cast<int64_t>(p.pass), static_cast<int64_t>(p.dtype),
                           p.spatial, p.n, p.c_in, p.c_out, p.groups, p.channels_last ? 1 : 0, device,
                           workspace_limit, p.has_bias ? 1 : 0};  // 3 axes at most (ConvDirectParams::axis)
  int n = 12;
  for (int i = 0; i < p.spatial; ++i) {
    const ConvAxis& a = p.axis[i];
    for (int64_t x : {a.in, a.out, a.kernel, a.stride, a.pad, a.dilation}) v[n++] = x;
  }
  return std::string(reinterpret_cast<const char*>(v), static_cast<size_t>(n) * sizeof(int64_t));
}

Plan build(cudnnHandle_t handle, const ConvDirectParams& p, int64_t workspace_limit, bool fft_winograd) {
  Plan plan;
  const Geometry g = geometry(p);
  auto graph = std::make_shared<fe::graph::Graph>();
  const fe::DataType_t io = data_type(p.dtype);
  graph->set_io_data_type(io)
      .set_intermediate_data_type(p.dtype == kFloat64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT)
      .set_compute_data_type(p.dtype == kFloat64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT);
  const Desc dx = desc(p.n, p.c_in, g.in, p.channels_last), dy = desc(p.n, p.c_out, g.out, p.channels_last);
  const Desc dw = desc(p.c_out, p.c_in / p.groups, g.kernel, p.channels_last);
  auto tensor = [&](const char* name, const Desc& d) {
    return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_dim(d.dim).set_stride(d.stride).set_data_type(io));
  };
  const fe::DataType_t compute = p.dtype == kFloat64 ? fe::DataType_t::DOUBLE : fe::DataType_t::FLOAT;
  // out (+ bias [1, c, 1...]) in float, rounded once to the output.
  auto with_bias = [&](std::shared_ptr<fe::graph::Tensor_attributes> out, int64_t c, const Desc& d) {
    if (!p.has_bias) return out;
    out->set_data_type(compute);
    Desc b = desc(1, c, std::vector<int64_t>(d.dim.size() - 2, 1), false);
    plan.bias = tensor("bias", b);
    return graph->pointwise(out, plan.bias,
                            fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD).set_compute_data_type(compute));
  };
  if (p.pass == ConvPass::Forward) {
    plan.x = tensor("x", dx);
    plan.w = tensor("w", dw);
    auto conv = graph->conv_fprop(plan.x, plan.w,
                                  fe::graph::Conv_fprop_attributes().set_padding(g.pad).set_stride(g.stride).set_dilation(
                                      g.dilation).set_compute_data_type(compute));
    conv->set_dim(dy.dim).set_stride(dy.stride).set_data_type(io);
    plan.y = with_bias(conv, p.c_out, dy);
    plan.y->set_dim(dy.dim).set_stride(dy.stride).set_data_type(io).set_output(true);
  } else if (p.pass == ConvPass::BackwardInput) {
    plan.y = tensor("dy", dy);
    plan.w = tensor("w", dw);
    auto conv = graph->conv_dgrad(plan.y, plan.w,
                                  fe::graph::Conv_dgrad_attributes().set_padding(g.pad).set_stride(g.stride).set_dilation(
                                      g.dilation).set_compute_data_type(compute));
    conv->set_dim(dx.dim).set_stride(dx.stride).set_data_type(io);
    plan.x = with_bias(conv, p.c_in, dx);
    plan.x->set_dim(dx.dim).set_stride(dx.stride).set_data_type(io).set_output(true);
  } else {
    plan.y = tensor("dy", dy);
    plan.x = tensor("x", dx);
    plan.w = graph->conv_wgrad(plan.y, plan.x,
                               fe::graph::Conv_wgrad_attributes().set_padding(g.pad).set_stride(g.stride).set_dilation(
                                   g.dilation).set_compute_data_type(compute));
    plan.w->set_dim(dw.dim).set_stride(dw.stride).set_data_type(io).set_output(true);
  }
  if (graph->validate().is_bad() || graph->build_operation_graph(handle).is_bad()) return plan;
  if (graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}).is_bad()) return plan;
  // Exact sums, the same bits every run: no TF32 for float32 / float64 data, no lossy
  // algorithms (unless FFT / Winograd are allowed), no split reductions through atomics.
  std::vector<fe::NumericalNote_t> barred = {fe::NumericalNote_t::NONDETERMINISTIC,
                                             fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION,
                                             fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
  if (!fft_winograd)
    for (fe::NumericalNote_t n : {fe::NumericalNote_t::FFT, fe::NumericalNote_t::WINOGRAD,
                                  fe::NumericalNote_t::WINOGRAD_TILE_4x4, fe::NumericalNote_t::WINOGRAD_TILE_6x6,
                                  fe::NumericalNote_t::WINOGRAD_TILE_13x13})
      barred.push_back(n);
  if (p.dtype == kFloat32 || p.dtype == kFloat64) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
  graph->deselect_numeric_notes(barred);
  graph->deselect_workspace_greater_than(workspace_limit);
  if (graph->check_support(handle).is_bad()) return plan;
  if (graph->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE).is_bad()) return plan;
  if (graph->get_workspace_size(plan.workspace).is_bad()) return plan;
  plan.graph = graph;
  plan.supported = true;
  return plan;
}

// The LRU plan cache and one cuDNN handle per device, under one lock (plans are built and run
// under it: a graph's execute is not re-entrant).
struct Cache {
  std::mutex mu;
  size_t capacity = 256;
  std::list<std::pair<std::string, std::shared_ptr<Plan>>> order;  // most recent first
  std::unordered_map<std::string, decltype(order)::iterator> index;
  std::unordered_map<int, cudnnHandle_t> handles;

  cudnnHandle_t handle(int device) {
    auto it = handles.find(device);
    if (it != handles.end()) return it->second;
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t st = fe::detail::create_handle(&h);
    ANVIL_CHECK(st == CUDNN_STATUS_SUCCESS, DeviceError, "[conv] cudnnCreate failed: ", fe::detail::get_error_string(st));
    handles[device] = h;
    return h;
  }

  bool unavailable = false;  // libcudnn could not be loaded: nothing is tried again

  std::shared_ptr<Plan> get(const ConvDirectParams& p, int device) {
    const int64_t limit = conv_workspace_limit(Device(kCUDA, device));
    const bool fft_winograd = g_fft_winograd.load();
    const std::string key = key_of(p, device, limit, fft_winograd);
    auto it = index.find(key);
    if (it != index.end()) {
      order.splice(order.begin(), order, it->second);
      return it->second->second;
    }
    auto plan = std::make_shared<Plan>();
    if (!unavailable && !load_cudnn()) unavailable = true;
    if (!unavailable) {
      try {
        *plan = build(handle(device), p, limit, fft_winograd);
      } catch (const std::exception&) {  // dlopen of libcudnn failed, or no handle
        unavailable = true;
      }
    }
    order.emplace_front(key, plan);
    index[key] = order.begin();
    trim();
    return plan;
  }

  void trim() {
    while (order.size() > capacity) {
      index.erase(order.back().first);
      order.pop_back();
    }
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // outlives every static that could run a conv at exit
  return *c;
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

std::atomic<bool> g_use{true};

}  // namespace

bool cudnn_loadable() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.unavailable && !load_cudnn()) c.unavailable = true;
  return !c.unavailable;
}
void set_cudnn_use(bool enabled) { g_use.store(enabled); }
bool cudnn_use() { return g_use.load(); }
void set_cudnn_fft_winograd(bool allow) { g_fft_winograd.store(allow); }
bool cudnn_fft_winograd() { return g_fft_winograd.load(); }

// Tensors of 2^31 elements or more go to the composition (64-bit indices): cuDNN 9.19 offered a
// plan for a one-channel conv1d over 2^31 + 40 samples and its kernel faulted
// (cudaErrorIllegalAddress on the H200).
bool below_int32_elements(const ConvDirectParams& p) {
  int64_t in = p.n * p.c_in, out = p.n * p.c_out;
  const int64_t w = p.c_out * (p.c_in / std::max<int64_t>(1, p.groups));
  int64_t taps = 1;
  for (int i = 0; i < p.spatial; ++i) {
    in *= p.axis[i].in;
    out *= p.axis[i].out;
    taps *= p.axis[i].kernel;
  }
  const int64_t limit = int64_t{1} << 31;
  return in < limit && out < limit && w * taps < limit;
}

bool cudnn_conv_supported(const ConvDirectParams& p) {
  if (!g_use.load() || !aligned16(p.x) || !aligned16(p.w) || !aligned16(p.y) || !aligned16(p.bias)) return false;
  if (!below_int32_elements(p)) return false;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.get(p, p.device)->supported;
}

void cudnn_conv_run(const ConvDirectParams& p) {
  KernelLaunch launch(p.device, 0);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const std::shared_ptr<Plan> plan = c.get(p, launch.device());
  ANVIL_CHECK(plan->supported, DeviceError, "[conv] cuDNN has no plan for these params (ask conv_direct_plan first)");
  cudnnHandle_t h = c.handle(launch.device());
  ANVIL_CHECK(fe::detail::set_stream(h, launch.stream()) == CUDNN_STATUS_SUCCESS, DeviceError,
              "[conv] cudnnSetStream failed");
  std::shared_ptr<StorageImpl> workspace;
  if (plan->workspace > 0) workspace = allocate(Device(kCUDA, launch.device()), static_cast<size_t>(plan->workspace));
  std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*> pack = {
      {plan->x, p.x}, {plan->w, p.w}, {plan->y, p.y}};
  if (plan->bias) pack[plan->bias] = const_cast<void*>(p.bias);
  fe::error_t st = plan->graph->execute(h, pack, workspace ? workspace->data : nullptr);
  ANVIL_CHECK(st.is_good(), DeviceError, "[conv] cuDNN execute failed: ", st.get_message());
}

size_t cudnn_plan_cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.order.size();
}

void set_cudnn_plan_cache_capacity(size_t plans) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.capacity = plans;
  c.trim();
}

}  // namespace anvil::cuda_backend

#else  // no cuDNN in this build: every pass runs as the im2col composition

namespace anvil::cuda_backend {
bool cudnn_conv_supported(const ConvDirectParams&) { return false; }
void cudnn_conv_run(const ConvDirectParams&) {
  throw DeviceError("[conv] this build has no cuDNN (configure with the cudnn-frontend headers)");
}
size_t cudnn_plan_cache_size() { return 0; }
void set_cudnn_plan_cache_capacity(size_t) {}
bool cudnn_loadable() { return false; }
void set_cudnn_use(bool) {}
bool cudnn_use() { return false; }
void set_cudnn_fft_winograd(bool) {}
bool cudnn_fft_winograd() { return false; }
}  // namespace anvil::cuda_backend

#endif
