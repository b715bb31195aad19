/*
 * gpt_cuda_attn.cu - causal attention through cuDNN's fused flash attention
 * (API in gpt_cuda_attn.h), with NVIDIA's header-only cudnn-frontend graph
 * API (SDPA forward with stats, SDPA backward with the deterministic
 * algorithm). cudnn-frontend loads libcudnn.so.9 through dlopen
 * (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): zo-train links no cuDNN. Without
 * the frontend's headers at build time (ZO_GPT_CUDA_CUDNN 0) every call says
 * so and the fused set runs the baseline's attention.
 */
#include "gpt_cuda_attn.h"

#include <stdio.h>

#include "seterr.h"

#if ZO_GPT_CUDA_CUDNN

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <math.h>

#include <exception>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

/* The dlopen handle of libcudnn that cudnn-frontend's dynamic loading reads (defined by its user). */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

enum Uid : int64_t { UQ = 1, UK, UV, UO, USTATS, UDO, UDQ, UDK, UDV };

typedef std::tuple<int, int, int, int> shape_key; /* B, T, NH, hs */

struct attn_graphs {
  int ok; /* 1 both graphs built; 0 cuDNN has no engine for the shape */
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  std::string why; /* when !ok: the reason, given again at each zga_ready() of the shape */
};

/* Strides of (B, NH, T, hs) views: q, k, v inside qkv (B, T, 3, NH, hs); out (B, T, NH, hs). */
std::vector<int64_t> qkv_stride(int T, int C, int hs) {
  return {(int64_t)T * 3 * C, hs, (int64_t)3 * C, 1};
}
std::vector<int64_t> out_stride(int T, int C, int hs) { return {(int64_t)T * C, hs, C, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> bf16_tensor(fe::graph::Graph &g, const char *name,
                                                          int64_t uid, int B, int NH, int T, int hs,
                                                          std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, NH, T, hs})
                      .set_stride(stride)
                      .set_data_type(fe::DataType_t::BFLOAT16));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/* validate, lower to cuDNN, plans by heuristics A, check, build: the first failure's message, or "". */
std::string build(fe::graph::Graph &g, cudnnHandle_t h) {
  if (fe::error_t e = g.validate(); e.is_bad()) return "validate: " + e.get_message();
  if (fe::error_t e = g.build_operation_graph(h); e.is_bad())
    return "build_operation_graph: " + e.get_message();
  if (fe::error_t e = g.create_execution_plans({fe::HeurMode_t::A}); e.is_bad())
    return "create_execution_plans: " + e.get_message();
  if (fe::error_t e = g.check_support(h); e.is_bad()) return "check_support: " + e.get_message();
  if (fe::error_t e = g.build_plans(h); e.is_bad()) return "build_plans: " + e.get_message();
  return std::string();
}

} // namespace

struct zga {
  cudnnHandle_t h = nullptr;
  std::map<shape_key, attn_graphs> cache;
  void *own_ws = nullptr; /* when the caller's workspace is too small */
  size_t own_ws_bytes = 0;
  void *ws = nullptr; /* the workspace the cached graphs run with */
  size_t ws_need = 0; /* the largest any cached graph needs */
};

int zga_create(zga **out, char *err, size_t errlen) {
  *out = nullptr;
  if (!cudnn_frontend::cudnn_dlhandle) {
    cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!cudnn_frontend::cudnn_dlhandle) {
      const char *why = dlerror();
      seterr(err, errlen, "cuDNN attention: cannot load libcudnn.so.9 (%s)", why ? why : "?");
      return -1;
    }
  }
  try {
    zga *a = new zga;
    const cudnnStatus_t st = fe::detail::create_handle(&a->h);
    if (st != CUDNN_STATUS_SUCCESS) {
      delete a;
      seterr(err, errlen, "cuDNN attention: cudnnCreate failed (status %d)", (int)st);
      return -1;
    }
    *out = a;
    return 0;
  } catch (const std::exception &e) {
    seterr(err, errlen, "cuDNN attention: %s", e.what());
  } catch (...) { seterr(err, errlen, "cuDNN attention: an exception creating the handle"); }
  return -1;
}

void zga_destroy(zga *a) {
  if (!a) return;
  try {
    a->cache.clear();
    if (a->h) (void)fe::detail::destroy_handle(a->h);
  } catch (...) {}
  if (a->own_ws) (void)cudaFree(a->own_ws);
  delete a;
}

/* Both graphs of one shape; ok 0 with the reason in why when cuDNN has no engine for it. */
static attn_graphs make_graphs(zga *a, int B, int T, int NH, int hs) {
  attn_graphs r{0, nullptr, nullptr, std::string()};
  const int C = NH * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  auto f = new_graph();
  {
    auto Q = bf16_tensor(*f, "Q", UQ, B, NH, T, hs, qkv_stride(T, C, hs));
    auto K = bf16_tensor(*f, "K", UK, B, NH, T, hs, qkv_stride(T, C, hs));
    auto V = bf16_tensor(*f, "V", UV, B, NH, T, hs, qkv_stride(T, C, hs));
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("causal attention")
                   .set_generate_stats(true)
                   .set_attn_scale(scale)
                   .set_causal_mask(true);
    auto [O, S] = f->sdpa(Q, K, V, opt);
    O->set_output(true).set_uid(UO).set_dim({B, NH, T, hs}).set_stride(out_stride(T, C, hs));
    S->set_output(true)
        .set_uid(USTATS)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1})
        .set_stride({(int64_t)NH * T, T, 1, 1});
  }
  r.why = build(*f, a->h);
  if (!r.why.empty()) return r;
  auto b = new_graph();
  {
    auto Q = bf16_tensor(*b, "Q", UQ, B, NH, T, hs, qkv_stride(T, C, hs));
    auto K = bf16_tensor(*b, "K", UK, B, NH, T, hs, qkv_stride(T, C, hs));
    auto V = bf16_tensor(*b, "V", UV, B, NH, T, hs, qkv_stride(T, C, hs));
    auto O = bf16_tensor(*b, "O", UO, B, NH, T, hs, out_stride(T, C, hs));
    auto dO = bf16_tensor(*b, "dO", UDO, B, NH, T, hs, out_stride(T, C, hs));
    auto S = b->tensor(fe::graph::Tensor_attributes()
                           .set_name("stats")
                           .set_uid(USTATS)
                           .set_dim({B, NH, T, 1})
                           .set_stride({(int64_t)NH * T, T, 1, 1})
                           .set_data_type(fe::DataType_t::FLOAT));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("causal attention backward")
                   .set_attn_scale(scale)
                   .set_causal_mask(true)
                   .set_deterministic_algorithm(true);
    auto [dQ, dK, dV] = b->sdpa_backward(Q, K, V, O, dO, S, opt);
    dQ->set_output(true).set_uid(UDQ).set_dim({B, NH, T, hs}).set_stride(qkv_stride(T, C, hs));
    dK->set_output(true).set_uid(UDK).set_dim({B, NH, T, hs}).set_stride(qkv_stride(T, C, hs));
    dV->set_output(true).set_uid(UDV).set_dim({B, NH, T, hs}).set_stride(qkv_stride(T, C, hs));
  }
  r.why = build(*b, a->h);
  if (!r.why.empty()) return r;
  r.ok = 1;
  r.fwd = f;
  r.bwd = b;
  return r;
}

int zga_ready(zga *a, int B, int T, int NH, int hs, void *ws, size_t ws_bytes, char *err,
              size_t errlen) {
  const shape_key key(B, T, NH, hs);
  try {
    auto it = a->cache.find(key);
    if (it == a->cache.end()) {
      attn_graphs g = make_graphs(a, B, T, NH, hs);
      if (g.ok) {
        int64_t wf = 0, wb = 0;
        if (g.fwd->get_workspace_size(wf).is_bad() || g.bwd->get_workspace_size(wb).is_bad()) {
          g.ok = 0;
          g.why = "get_workspace_size failed";
        } else {
          const size_t need = (size_t)(wf > wb ? wf : wb);
          if (need > a->ws_need) a->ws_need = need;
        }
      }
      it = a->cache.emplace(key, g).first;
    }
    if (!it->second.ok) {
      seterr(err, errlen, "cuDNN attention: B %d T %d NH %d hs %d: %s", B, T, NH, hs,
             it->second.why.c_str());
      return 0;
    }
    /* the workspace: the caller's when it is large enough, else an own one */
    if (a->ws_need <= ws_bytes) {
      a->ws = ws;
    } else {
      if (a->own_ws_bytes < a->ws_need) {
        if (a->own_ws) (void)cudaFree(a->own_ws);
        a->own_ws = nullptr, a->own_ws_bytes = 0;
        const cudaError_t e = cudaMalloc(&a->own_ws, a->ws_need);
        if (e != cudaSuccess) {
          a->own_ws = nullptr;
          seterr(err, errlen, "cuDNN attention: cudaMalloc of a %zu-byte workspace failed: %s",
                 a->ws_need, cudaGetErrorString(e));
          return -1;
        }
        a->own_ws_bytes = a->ws_need;
      }
      a->ws = a->own_ws;
    }
    return 1;
  } catch (const std::exception &e) {
    seterr(err, errlen, "cuDNN attention: B %d T %d NH %d hs %d: %s", B, T, NH, hs, e.what());
  } catch (...) {
    seterr(err, errlen, "cuDNN attention: B %d T %d NH %d hs %d: an exception", B, T, NH, hs);
  }
  return -1;
}

/* Run @g with @pack on @s. */
static int run(zga *a, fe::graph::Graph &g, std::unordered_map<int64_t, void *> &pack,
               cudaStream_t s, const char *what, char *err, size_t errlen) {
  try {
    const cudnnStatus_t st = fe::detail::set_stream(a->h, s);
    if (st != CUDNN_STATUS_SUCCESS) {
      seterr(err, errlen, "cuDNN attention %s: cudnnSetStream failed (status %d)", what, (int)st);
      return -1;
    }
    fe::error_t e = g.execute(a->h, pack, a->ws);
    if (e.is_bad()) {
      seterr(err, errlen, "cuDNN attention %s: %s", what, e.get_message().c_str());
      return -1;
    }
    return 0;
  } catch (const std::exception &e) {
    seterr(err, errlen, "cuDNN attention %s: %s", what, e.what());
  } catch (...) { seterr(err, errlen, "cuDNN attention %s: an exception", what); }
  return -1;
}

static attn_graphs *cached(zga *a, int B, int T, int NH, int hs, char *err, size_t errlen) {
  auto it = a->cache.find(shape_key(B, T, NH, hs));
  if (it == a->cache.end() || !it->second.ok) {
    seterr(err, errlen, "cuDNN attention: no graphs for B %d T %d NH %d hs %d (zga_ready)", B, T,
           NH, hs);
    return nullptr;
  }
  return &it->second;
}

int zga_forward(zga *a, cudaStream_t s, __nv_bfloat16 *out, float *stats, const __nv_bfloat16 *qkv,
                int B, int T, int NH, int hs, char *err, size_t errlen) {
  attn_graphs *g = cached(a, B, T, NH, hs, err, errlen);
  if (!g) return -1;
  const int C = NH * hs;
  std::unordered_map<int64_t, void *> pack = {{UQ, (void *)qkv},
                                              {UK, (void *)(qkv + C)},
                                              {UV, (void *)(qkv + 2 * C)},
                                              {UO, (void *)out},
                                              {USTATS, (void *)stats}};
  return run(a, *g->fwd, pack, s, "forward", err, errlen);
}

int zga_backward(zga *a, cudaStream_t s, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *qkv, const __nv_bfloat16 *out, const float *stats, int B,
                 int T, int NH, int hs, char *err, size_t errlen) {
  attn_graphs *g = cached(a, B, T, NH, hs, err, errlen);
  if (!g) return -1;
  const int C = NH * hs;
  std::unordered_map<int64_t, void *> pack = {
      {UQ, (void *)qkv},   {UK, (void *)(qkv + C)},   {UV, (void *)(qkv + 2 * C)},
      {UO, (void *)out},   {UDO, (void *)dout},       {USTATS, (void *)stats},
      {UDQ, (void *)dqkv}, {UDK, (void *)(dqkv + C)}, {UDV, (void *)(dqkv + 2 * C)}};
  return run(a, *g->bwd, pack, s, "backward", err, errlen);
}

#else /* built without cudnn-frontend's headers */

int zga_create(zga **out, char *err, size_t errlen) {
  *out = NULL;
  seterr(err, errlen,
         "cuDNN attention: built without cudnn-frontend's headers (cudnn_frontend.h; models/"
         "CMakeLists.txt ZO_CUDNN_FRONTEND_INCLUDE)");
  return -1;
}

void zga_destroy(zga *a) { (void)a; }

int zga_ready(zga *a, int B, int T, int NH, int hs, void *ws, size_t ws_bytes, char *err,
              size_t errlen) {
  (void)a, (void)B, (void)T, (void)NH, (void)hs, (void)ws, (void)ws_bytes;
  seterr(err, errlen, "cuDNN attention: not built");
  return 0;
}

int zga_forward(zga *a, cudaStream_t s, __nv_bfloat16 *out, float *stats, const __nv_bfloat16 *qkv,
                int B, int T, int NH, int hs, char *err, size_t errlen) {
  (void)a, (void)s, (void)out, (void)stats, (void)qkv, (void)B, (void)T, (void)NH, (void)hs;
  seterr(err, errlen, "cuDNN attention: not built");
  return -1;
}

int zga_backward(zga *a, cudaStream_t s, __nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *qkv, const __nv_bfloat16 *out, const float *stats, int B,
                 int T, int NH, int hs, char *err, size_t errlen) {
  (void)a, (void)s, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)stats, (void)B, (void)T;
  (void)NH, (void)hs;
  seterr(err, errlen, "cuDNN attention: not built");
  return -1;
}

#endif
