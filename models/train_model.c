/*
 * train_model.c - the GPT model on the cpu or cuda backend, wired to the engine
 * through the layer hook (see train_model.h). Above the engine: a user of its
 * public API, as zo-train and the tests are.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train_model.h"
#include "zoffload/status.h"
#include "zoffload/adam.h"
#include "zoffload/budget.h"
#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/handover.h"
#if ZO_TRAIN_MODEL_CUDA
#include "gpt_cuda.h"
#endif

struct train_model {
  gpt_config cfg;
  int cuda;
  gpt_model *cpu;
#if ZO_TRAIN_MODEL_CUDA
  gpt_cuda *gpu;
#endif
  zo_engine_t *eng;
  zo_device_t *dev;
  zo_stream_t *stream; /* cuda: the model's stream, wrapped; the engine's compute stream */
  zo_param_t **params; /* borrowed */
  gpt_param_spec *specs;
  int n_params;
  void *dev_grads; /* resident: every gradient in grad_dtype, tensor i at goff[i] elements (device);
                               cuda streamed: the three gradient scratches below, in one allocation */
  size_t *goff, grad_bytes;
  /* streamed (cuda): no full-model gradient buffer; bf16 scratches on the device, each tensor 256-byte aligned at
   * goff[i] elements in its group's scratch: gscr_dev[0] for group 0 (wte, wpe; live through each backward since
   * wte is tied), gscr_dev[1 + g % 2] for group g >= 1 (blocks, ln_f: two of the largest group, so the engine's
   * copy out of one overlaps the next group's backward). Each backward zeroes a group's scratch at its begin
   * (after a stream-ordered zo_engine_grad_fence), the kernels add this micro-batch's gradient into it, and its
   * end hands every tensor over from there (accumulate, or ready in the last micro-batch). */
  int cuda_streamed;
  char *gscr_dev[3];
  zo_dtype grad_dtype;
  /* streamed (cpu): no full-model buffer; fp32 scratch for group 0 ([0], live through each pass) and for the
   * group in flight ([1]), tensor i at soff[i] floats in its group's scratch; gradients go out tensor by tensor
   * through a device ring of twice the largest tensor in the hand-over dtype, its space the hand-over's (ho). */
  int streamed;
  int gemm_bf16; /* train.cpu_gemm "bf16": the blocks' product weights bound as the engine's bf16 copies */
  float *wscr[2], *gscr[2];
  size_t *soff;
  char *ring;
  /* streamed: the gradients' hand-over (cpu: its space the ring; cuda: unbounded) */
  zo_grad_handover_t *ho;
  /* fp32 when the engine accumulates in fp32 (several micro-batches), else grad_dtype */
  zo_dtype hand_dtype;
  int hand_over; /* 1 in the last micro-batch of a step */
  int failed;    /* an engine call in the hook failed: message in zo_last_error() */
  double t_fwd, t_bwd;
  int loss_queued;   /* cuda fused: train_model_forward_queue() queued a forward with its loss */
  float queued_loss; /* otherwise: the loss train_model_forward_queue() computed */
  char desc[384];
  char err[1024];
};

static void set_err(train_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(train_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->err, sizeof m->err, fmt, ap);
  va_end(ap);
}

int train_model_cuda_built(void) { return ZO_TRAIN_MODEL_CUDA; }

/* The streamed model's gradient ring: twice the largest of the @n_params tensors in the hand-over dtype, 64-byte
 * units; SIZE_MAX past size_t. */
static size_t train_model_ring_bytes(const gpt_param_spec *specs, int n_params,
                                     zo_dtype hand_dtype) {
  size_t largest = 0, b;
  for (int i = 0; i < n_params; i++)
    largest = specs[i].n_elems > largest ? specs[i].n_elems : largest;
  if (__builtin_mul_overflow(largest, zo_dtype_size(hand_dtype), &b) || b > SIZE_MAX / 2 - 64)
    return SIZE_MAX;
  return 2 * ((b + 63) / 64 * 64);
}

/* The cuda streamed model's three bf16 gradient scratches: group 0 and twice the largest other group (SIZE_MAX past
 * size_t), each group's tensors back to back, each rounded up to 256 bytes (cuBLAS sees the alignment of
 * gpt_cuda_set_weight()'s contract). */
static size_t cuda_scratch_bytes(const gpt_config *c, const gpt_param_spec *specs, size_t *g0,
                                 size_t *gmax) {
  size_t mx = 0, b;
  for (int g = 1; g < gpt_num_groups(c); g++) {
    const size_t n = gpt_group_layout(c, specs, g, 2, 256, NULL);
    mx = n > mx ? n : mx;
  }
  *g0 = gpt_group_layout(c, specs, 0, 2, 256, NULL);
  *gmax = mx;
  if (mx > SIZE_MAX / 2 || __builtin_add_overflow(2 * mx, *g0, &b)) return SIZE_MAX;
  return b;
}

zo_dtype train_model_hand_dtype(const zo_engine_t *eng) {
  return zo_engine_grad_accum_dtype(eng) == ZO_DTYPE_F32 ? ZO_DTYPE_F32 : zo_engine_grad_dtype(eng);
}

int train_model_bytes(const gpt_config *c, int max_batch, int recompute, int cuda, int streamed,
                      int gemm_bf16, zo_dtype grad_dtype, zo_dtype hand_dtype, size_t app[4]) {
  memset(app, 0, 4 * sizeof app[0]);
  const int np = gpt_num_params(c);
  gpt_param_spec *specs = calloc(np, sizeof *specs);
  if (!specs) return -1;
  gpt_param_specs(c, specs);
  size_t grads = 0;
  for (int i = 0; i < np; i++) grads += specs[i].n_elems * zo_dtype_size(grad_dtype);
  app[ZO_TIER_DEVICE] = grads;
  if (!cuda && streamed) {
    size_t scr, host;
    /* the gradient ring; two fp32 scratches (weights, gradients) of group 0 and of the largest */
    const size_t dev = train_model_ring_bytes(specs, np, hand_dtype);
    free(specs);
    int over = dev == SIZE_MAX;
    over |= __builtin_add_overflow(gpt_group_elems(c, 0), gpt_max_group_elems(c), &scr);
    over |= __builtin_mul_overflow(scr, 2 * sizeof(float), &scr);
    over |= __builtin_add_overflow(scr, gpt_streamed_host_bytes(c, max_batch, recompute), &host);
    if (gemm_bf16) over |= __builtin_add_overflow(host, gpt_gemm_bf16_bytes(c, max_batch), &host);
    app[ZO_TIER_DEVICE] = over ? SIZE_MAX : dev;
    app[ZO_TIER_HOST] = over ? SIZE_MAX : host;
    return 0;
  }
  if (!cuda) {
    free(specs);
    app[ZO_TIER_HOST] = gpt_host_bytes(c, max_batch, recompute);
    return 0;
  }
#if ZO_TRAIN_MODEL_CUDA
  if (streamed) { /* three bf16 gradient scratches instead of the whole model's gradients */
    size_t g0, gmax;
    app[ZO_TIER_DEVICE] = cuda_scratch_bytes(c, specs, &g0, &gmax);
  }
  free(specs);
  if (app[ZO_TIER_DEVICE] != SIZE_MAX &&
      __builtin_add_overflow(app[ZO_TIER_DEVICE], gpt_cuda_device_bytes(c, max_batch, recompute),
                             &app[ZO_TIER_DEVICE]))
    app[ZO_TIER_DEVICE] = SIZE_MAX;
  return 0;
#else
  free(specs);
  return -1;
#endif
}

/* ------------------------------------------------------------------ the hook */

static int hook_calls(train_model *m, int phase, int group, int end) {
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  for (int i = first; i < first + count; i++) {
    const size_t n = m->specs[i].n_elems;
    if (!end) {
      const void *w;
      zo_dtype dt;
      if (zo_engine_fetch(m->eng, m->params[i], &w, &dt) != ZO_OK) return -1;
#if ZO_TRAIN_MODEL_CUDA
      if (m->cuda) {
        /* the engine's device copy, read when the kernels are queued */
        gpt_cuda_set_weight(m->gpu, i, w);
        continue;
      }
#endif
      if (zo_cast(gpt_weight(m->cpu, i), ZO_DTYPE_F32, w, dt, n, 0) != ZO_OK) return -1;
      continue;
    }
    if (phase == GPT_HOOK_BACKWARD && m->hand_over) {
      void *g = (char *)m->dev_grads + m->goff[i] * zo_dtype_size(m->grad_dtype);
      /* cpu: in the model's working precision, as a bf16 or fp16 model produces it (fp16 overflow becomes inf);
       * cuda: the model accumulated it there in bf16 already. */
      if (!m->cuda && zo_cast(g, m->grad_dtype, gpt_grad(m->cpu, i), ZO_DTYPE_F32, n, 0) != ZO_OK)
        return -1;
      if (zo_engine_grad_ready(m->eng, m->params[i], g, m->grad_dtype) != ZO_OK) return -1;
    }
    if (zo_engine_release(m->eng, m->params[i]) != ZO_OK) return -1;
  }
  return 0;
}

#if ZO_TRAIN_MODEL_CUDA
/* Streamed cuda, group @g's gradient scratch and its bytes (the group's own, not the largest). */
static char *cuda_scratch(const train_model *m, int g, size_t *bytes) {
  *bytes = gpt_group_layout(&m->cfg, m->specs, g, 2, 256, NULL);
  return m->gscr_dev[g == 0 ? 0 : 1 + g % 2];
}

/*
 * Streamed cuda, one hook call. Begin: fetch and set each tensor's weights; in backward zero the group's scratch on
 * the model's stream and bind the gradients into it. Group 0's scratch was last handed over in the previous
 * backward: a fence at backward begin(0) orders the zeroing after those copies. A block's scratch (g % 2) was
 * last handed over by group g + 2: the fence at end(g + 1), made before group g + 1 hands over, orders everything
 * the stream queues afterwards (begin(g)'s zeroing, the backward of g) after the copies out of it, but not after
 * those of g + 1, which overlap block g's backward. End: in backward hand each tensor over from the scratch (the
 * engine's copy waits for the model's stream: zo_engine_set_compute_stream), then release.
 */
static int cuda_streamed_hook(train_model *m, int phase, int group, int end) {
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  size_t bytes;
  char *scr = cuda_scratch(m, group, &bytes);
  const int bwd = phase == GPT_HOOK_BACKWARD;
  if (!end) {
    if (bwd && group == 0 && zo_grad_handover_fence(m->ho) != ZO_OK) return -1;
    if (bwd && zo_memset_async(m->stream, scr, 0, bytes) != ZO_OK) return -1;
    for (int i = first; i < first + count; i++) {
      const void *w;
      zo_dtype dt;
      if (zo_engine_fetch(m->eng, m->params[i], &w, &dt) != ZO_OK) return -1;
      /* the engine's device copy, read when the kernels are queued */
      gpt_cuda_set_weight(m->gpu, i, w);
      if (bwd) gpt_cuda_set_grad(m->gpu, i, scr + m->goff[i] * 2);
    }
    return 0;
  }
  if (bwd && group >= 2 && zo_grad_handover_fence(m->ho) != ZO_OK) return -1;
  for (int i = first; i < first + count; i++) {
    if (bwd && zo_grad_handover_put(m->ho, m->params[i], scr + m->goff[i] * 2, ZO_DTYPE_BF16,
                                    m->hand_over) != ZO_OK)
      return -1;
    if (zo_engine_release(m->eng, m->params[i]) != ZO_OK) return -1;
  }
  return 0;
}
#endif

/* Streamed cpu, a group's begin: fetch each tensor, cast it into the group's fp32 scratch and lend it to the
 * model (with train.cpu_gemm "bf16" the blocks' product weights are lent as fetched, in bf16); in backward also
 * lend the gradient scratch (the model zeroes and fills it). */
static int stream_begin(train_model *m, int phase, int group) {
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  const int k = group == 0 ? 0 : 1;
  for (int i = first; i < first + count; i++) {
    const void *w;
    zo_dtype dt;
    float *ws = m->wscr[k] + m->soff[i];
    if (zo_engine_fetch(m->eng, m->params[i], &w, &dt) != ZO_OK) return -1;
    if (m->gemm_bf16 && gpt_gemm_bf16_param(&m->cfg, i)) {
      /* the working copy is the operand: bf16 (train_model_create required the working dtype to
       * be) */
      if (gpt_bind_weight_bf16(m->cpu, i, (const uint16_t *)w)) return 1;
    } else if (zo_cast(ws, ZO_DTYPE_F32, w, dt, m->specs[i].n_elems, 0) != ZO_OK) {
      return -1;
    } else if (gpt_bind_weight(m->cpu, i, ws)) {
      return 1; /* the model's own error (gpt_last_error), not the engine's */
    }
    if (phase == GPT_HOOK_BACKWARD && gpt_bind_grad(m->cpu, i, m->gscr[k] + m->soff[i])) return 1;
  }
  return 0;
}

/* Streamed cpu, hand one tensor's gradient of this micro-batch over: cast into the ring where the hand-over places
 * it (a fence first when the rest of the ring is too short: one per ring's worth, not per tensor), then accumulate,
 * or ready in the last micro-batch. */
static int stream_hand_over(train_model *m, int i, const float *g) {
  const size_t n = m->specs[i].n_elems;
  size_t off;
  if (zo_grad_handover_reserve(m->ho, n * zo_dtype_size(m->hand_dtype), &off, NULL) != ZO_OK)
    return -1;
  if (zo_cast(m->ring + off, m->hand_dtype, g, ZO_DTYPE_F32, n, 0) != ZO_OK) return -1;
  return zo_grad_handover_put(m->ho, m->params[i], m->ring + off, m->hand_dtype, m->hand_over) ==
                 ZO_OK
             ? 0
             : -1;
}

static int stream_end(train_model *m, int phase, int group) {
  int first, count;
  gpt_group_params(&m->cfg, group, &first, &count);
  const int k = group == 0 ? 0 : 1;
  for (int i = first; i < first + count; i++) {
    if (phase == GPT_HOOK_BACKWARD && stream_hand_over(m, i, m->gscr[k] + m->soff[i])) return -1;
    if (zo_engine_release(m->eng, m->params[i]) != ZO_OK) return -1;
  }
  return 0;
}

static int on_layer(void *user, int phase, int group, int end) {
  train_model *m = user;
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda_streamed) {
    if (cuda_streamed_hook(m, phase, group, end) == 0) return 0;
    m->failed = 1;
    return -1;
  }
#endif
  int rc = !m->streamed ? hook_calls(m, phase, group, end)
           : end        ? stream_end(m, phase, group)
                        : stream_begin(m, phase, group);
  if (rc >= 0) return rc;
  m->failed = 1;
  return -1;
}

/* ------------------------------------------------------------------ life */

/* Streamed cpu: the model without weights or gradients, its fp32 scratches, their per-tensor offsets, and the
 * gradient ring of the hand-over. */
static int create_streamed(train_model *m, int max_batch, int recompute, char *err, size_t errlen) {
  if (gpt_create_streamed(&m->cfg, max_batch, recompute, &m->cpu, err, errlen)) return -1;
  m->soff = calloc(m->n_params, sizeof *m->soff);
  if (!m->soff) return snprintf(err, errlen, "out of memory"), -1;
  for (int g = 0; g < gpt_num_groups(&m->cfg);
       g++) /* each tensor 64-byte aligned, as gpt_group_elems() counts */
    gpt_group_layout(&m->cfg, m->specs, g, sizeof(float), 64, m->soff);
  const size_t el[2] = {gpt_group_elems(&m->cfg, 0), gpt_max_group_elems(&m->cfg)};
  for (int k = 0; k < 2; k++) {
    const size_t bytes = (el[k] * sizeof(float) + 63) / 64 * 64;
    m->wscr[k] = aligned_alloc(64, bytes);
    m->gscr[k] = aligned_alloc(64, bytes);
    if (!m->wscr[k] || !m->gscr[k])
      return snprintf(err, errlen, "out of memory for the model's fp32 scratch (2 x %zu bytes)",
                      bytes),
             -1;
  }
  const size_t ring = train_model_ring_bytes(m->specs, m->n_params, m->hand_dtype);
  if (zo_device_malloc(m->dev, ring, (void **)&m->ring) != ZO_OK)
    return snprintf(
               err, errlen,
               "the model's gradient ring (%zu bytes of device memory: twice the largest tensor) "
               "does not fit: %s",
               ring, zo_last_error()),
           -1;
  if (zo_grad_handover_create(m->eng, ring, ZO_GRAD_HANDOVER_ALIGN, NULL, &m->ho) != ZO_OK)
    return snprintf(err, errlen, "%s", zo_last_error()), -1;
  gpt_set_hook(m->cpu, on_layer, m);
  if (m->gemm_bf16) {
    if (gpt_set_gemm_bf16(m->cpu))
      return snprintf(err, errlen, "train.cpu_gemm: %s", gpt_last_error(m->cpu)), -1;
    snprintf(m->desc, sizeof m->desc,
             "cpu (the blocks' products in bf16 with fp32 accumulation, %s; the rest fp32, "
             "OpenBLAS %s; streamed: one layer group's weights at a time%s)",
             gpt_gemm_bf16_isa(), gpt_blas_core(), recompute ? ", activation checkpointing" : "");
    return 0;
  }
  snprintf(m->desc, sizeof m->desc,
           "cpu (fp32, OpenBLAS %s, streamed: one layer group's weights at a time%s)",
           gpt_blas_core(), recompute ? ", activation checkpointing" : "");
  return 0;
}

int train_model_create(const gpt_config *c, int max_batch, int recompute, int streamed,
                       int gemm_bf16, zo_engine_t *eng, zo_device_t *dev, zo_param_t **params,
                       train_model **out, char *err, size_t errlen) {
  train_model *m = calloc(1, sizeof *m);
  if (!m) return snprintf(err, errlen, "out of memory"), -1;
  m->cfg = *c;
  m->eng = eng;
  m->dev = dev;
  m->params = params;
  m->cuda = zo_device_get_kind(dev) == ZO_DEVICE_CUDA;
  m->n_params = gpt_num_params(c);
  m->grad_dtype = zo_engine_grad_dtype(eng);
  m->hand_dtype = train_model_hand_dtype(eng);
  m->streamed = streamed && !m->cuda;
  m->cuda_streamed = streamed && m->cuda;
  if (gemm_bf16 && !m->cuda && (!m->streamed || m->grad_dtype != ZO_DTYPE_BF16)) {
    gpt_gemm_bf16_refusal(err, errlen, m->streamed, m->grad_dtype);
    free(m);
    return -1;
  }
  m->gemm_bf16 = gemm_bf16 && !m->cuda; /* the CUDA model's products are bf16 already */
  m->specs = calloc(m->n_params, sizeof *m->specs);
  m->goff = calloc(m->n_params, sizeof *m->goff);
  if (!m->specs || !m->goff) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  gpt_param_specs(c, m->specs);
  size_t total = 0;
  for (int i = 0; i < m->n_params; i++) m->goff[i] = total, total += m->specs[i].n_elems;
  m->grad_bytes = total * zo_dtype_size(m->grad_dtype);
  size_t g0 = 0, gmax = 0;
  if (m->cuda_streamed) { /* tensor i at goff[i] elements (256-byte units) in its group's bf16 scratch */
    for (int g = 0; g < gpt_num_groups(c); g++) gpt_group_layout(c, m->specs, g, 2, 256, m->goff);
    m->grad_bytes = cuda_scratch_bytes(c, m->specs, &g0, &gmax);
  }

  if (m->cuda) {
#if ZO_TRAIN_MODEL_CUDA
    if (m->grad_dtype != ZO_DTYPE_BF16) {
      snprintf(
          err, errlen,
          "bf16.enabled: zo-train's CUDA model computes in bf16; set \"bf16\": {\"enabled\": true} "
          "(the working dtype is %s)",
          zo_dtype_name(m->grad_dtype));
      goto fail;
    }
    if (gpt_cuda_create(c, max_batch, recompute, NULL, &m->gpu, err, errlen)) goto fail;
    if (zo_stream_wrap(dev, gpt_cuda_stream(m->gpu), &m->stream) != ZO_OK ||
        zo_engine_set_compute_stream(eng, m->stream) != ZO_OK ||
        zo_grad_handover_create(eng, 0, ZO_GRAD_HANDOVER_ALIGN, m->stream, &m->ho) != ZO_OK) {
      snprintf(err, errlen, "%s", zo_last_error());
      goto fail;
    }
    snprintf(m->desc, sizeof m->desc, "cuda (%s, bf16 storage, fp32 accumulation%s)",
             gpt_cuda_device_name(m->gpu), recompute ? ", activation checkpointing" : "");
#else
    snprintf(
        err, errlen,
        "zoffload.device is cuda, but this zo-train was built without CUDA compute (no nvcc at "
        "configure time): rebuild with the CUDA toolkit, or set zoffload.device to \"host\"");
    goto fail;
#endif
  } else if (m->streamed) {
    if (create_streamed(m, max_batch, recompute, err, errlen)) goto fail;
    *out = m;
    return 0;
  } else {
    if (!zo_device_host_addressable(dev)) {
      snprintf(err, errlen,
               "device %s is not host-addressable, and the CPU model reads device memory directly",
               zo_device_name(dev));
      goto fail;
    }
    if (gpt_create_ex(c, max_batch, recompute, &m->cpu, err, errlen)) goto fail;
    gpt_set_hook(m->cpu, on_layer, m);
    snprintf(m->desc, sizeof m->desc, "cpu (fp32, OpenBLAS %s%s)", gpt_blas_core(),
             recompute ? ", activation checkpointing" : "");
  }
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda_streamed) {
    if (m->grad_bytes == SIZE_MAX || zo_device_malloc(dev, m->grad_bytes, &m->dev_grads) != ZO_OK) {
      snprintf(
          err, errlen,
          "the model's gradient scratches (%zu bytes of device memory: group 0's %zu and twice the "
          "largest layer group's %zu, bf16) do not fit: %s",
          m->grad_bytes, g0, gmax, zo_last_error());
      goto fail;
    }
    m->gscr_dev[0] = m->dev_grads;
    m->gscr_dev[1] = (char *)m->dev_grads + g0;
    m->gscr_dev[2] = m->gscr_dev[1] + gmax;
    gpt_cuda_set_hook(m->gpu, on_layer, m);
    *out = m;
    return 0;
  }
#endif
  if (zo_device_malloc(dev, m->grad_bytes, &m->dev_grads) != ZO_OK) {
    snprintf(err, errlen,
             "the model's gradient buffer (%zu bytes of device memory) does not fit: %s",
             m->grad_bytes, zo_last_error());
    goto fail;
  }
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    for (int i = 0; i < m->n_params; i++)
      gpt_cuda_set_grad(m->gpu, i,
                        (char *)m->dev_grads + m->goff[i] * zo_dtype_size(m->grad_dtype));
    gpt_cuda_set_hook(m->gpu, on_layer, m);
  }
#endif
  *out = m;
  return 0;
fail:
  train_model_destroy(m);
  return -1;
}

void train_model_destroy(train_model *m) {
  if (!m) return;
  if (m->dev_grads) zo_device_free(m->dev, m->dev_grads);
  if (m->ring) zo_device_free(m->dev, m->ring);
  zo_grad_handover_destroy(m->ho);
  for (int k = 0; k < 2; k++) {
    free(m->wscr[k]);
    free(m->gscr[k]);
  }
  free(m->soff);
  gpt_destroy(m->cpu);
  /* The handle that wraps the model's CUDA stream first: zo_stream_destroy synchronizes that stream, which
   * gpt_cuda_destroy destroys (a destroyed stream used again is undefined behaviour; test_fakecuda). */
  zo_stream_destroy(m->stream);
  m->stream = NULL;
#if ZO_TRAIN_MODEL_CUDA
  gpt_cuda_destroy(m->gpu);
#endif
  free(m->specs);
  free(m->goff);
  free(m);
}

/* ------------------------------------------------------------------ steps */

int train_model_zero_grad(train_model *m) {
  if (m->streamed || m->cuda_streamed)
    return 0; /* each micro-batch's gradient goes over; the engine sums them */
  if (!m->cuda) {
    gpt_zero_grad(m->cpu);
    return 0;
  }
  if (zo_memset_async(m->stream, m->dev_grads, 0, m->grad_bytes) != ZO_OK) {
    set_err(m, "%s", zo_last_error());
    return -1;
  }
  return 0;
}

/* After a failed pass: the engine's message when the hook failed, else the model's. */
static void pass_error(train_model *m) {
  if (m->failed) {
    set_err(m, "%s", zo_last_error());
    m->failed = 0;
    return;
  }
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    set_err(m, "%s", gpt_cuda_last_error(m->gpu));
    return;
  }
#endif
  set_err(m, "%s", gpt_last_error(m->cpu));
}

/* The NaN loss's message, when the forward itself did not fail. */
static void nan_loss_error(train_model *m) {
  if (!m->err[0]) /* the forward ran: the loss itself is NaN */
    set_err(
        m,
        "the loss is NaN: the weights or activations are no longer finite (the training diverged: "
        "check optimizer.params lr, weight_decay and eps, gradient_clipping, and the fp16 loss "
        "scale)");
}

float train_model_forward(train_model *m, const uint8_t *in, const uint8_t *tg, int B, int T) {
  double t0 = zo_clock_s();
  float l;
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda)
    l = gpt_cuda_forward(m->gpu, in, tg, B, T);
  else
#endif
    l = gpt_forward(m->cpu, in, tg, B, T);
  m->t_fwd += zo_clock_s() - t0;
  if (l != l) {
    pass_error(m);
    nan_loss_error(m);
  }
  return l;
}

int train_model_forward_queue(train_model *m, const uint8_t *in, const uint8_t *tg, int B, int T) {
  m->loss_queued = 0;
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda && gpt_cuda_get_kernels(m->gpu) == GPT_CUDA_KERNELS_FUSED) {
    const double t0 = zo_clock_s();
    m->err[0] = 0;
    const int rc = gpt_cuda_forward_async(m->gpu, in, tg, B, T);
    m->t_fwd += zo_clock_s() - t0;
    if (rc) {
      pass_error(m);
      return -1;
    }
    m->loss_queued = 1;
    return 0;
  }
#endif
  m->queued_loss = train_model_forward(m, in, tg, B, T);
  return m->queued_loss != m->queued_loss ? -1 : 0;
}

float train_model_loss(train_model *m) {
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda && gpt_cuda_get_kernels(m->gpu) == GPT_CUDA_KERNELS_FUSED) {
    if (!m->loss_queued) {
      set_err(m, "train_model_loss: no forward was queued");
      return NAN;
    }
    m->err[0] = 0;
    const float l = gpt_cuda_loss(m->gpu);
    if (l != l) {
      pass_error(m);
      nan_loss_error(m);
    }
    return l;
  }
#endif
  return m->queued_loss;
}

int train_model_set_cuda_kernels(train_model *m, int fused) {
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    if (gpt_cuda_set_kernels(m->gpu, fused ? GPT_CUDA_KERNELS_FUSED : GPT_CUDA_KERNELS_BASELINE)) {
      set_err(m, "train.cuda_kernels: %s", gpt_cuda_last_error(m->gpu));
      return -1;
    }
    if (fused)
      snprintf(m->desc + strlen(m->desc), sizeof m->desc - strlen(m->desc),
               ", fused kernels, attention: %s", gpt_cuda_attention(m->gpu));
    return 0;
  }
#endif
  (void)m;
  (void)fused; /* the CPU model has one kernel set */
  return 0;
}

int train_model_set_kernel_times(train_model *m, int on) {
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    if (gpt_cuda_set_kernel_times(m->gpu, on)) {
      set_err(m, "%s", gpt_cuda_last_error(m->gpu));
      return -1;
    }
    return 0;
  }
#endif
  if (!on) return 0;
  set_err(m, "--kernel-times: times the CUDA model's kernels; this model runs on the cpu");
  return -1;
}

int train_model_kernel_times(train_model *m, double ms[3]) {
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    if (gpt_cuda_kernel_times(m->gpu, ms)) {
      set_err(m, "%s", gpt_cuda_last_error(m->gpu));
      return -1;
    }
    return 0;
  }
#endif
  ms[0] = ms[1] = ms[2] = 0.0;
  set_err(m, "kernel times: the model runs on the cpu");
  return -1;
}

int train_model_backward(train_model *m, float loss_mult, int hand_over) {
  double t0 = zo_clock_s();
  int rc;
  m->hand_over = hand_over;
#if ZO_TRAIN_MODEL_CUDA
  if (m->cuda) {
    rc = gpt_cuda_backward(m->gpu, loss_mult);
    if (rc == 0 && zo_stream_synchronize(m->stream) != ZO_OK) {
      m->failed = 1;
      rc = -1;
    }
  } else
#endif
    rc = gpt_backward(m->cpu, loss_mult);
  m->hand_over = 0;
  m->t_bwd += zo_clock_s() - t0;
  if (rc) pass_error(m);
  return rc;
}

int train_model_sample(train_model *m, const uint8_t *prompt, int prompt_len, int n_new,
                       float temperature, uint64_t seed, uint8_t *out) {
  if (m->streamed) { /* the hook fetches and binds each group, as in training */
    if (gpt_sample(m->cpu, prompt, prompt_len, n_new, temperature, seed, out) == 0) return 0;
    set_err(m, "%s", m->failed ? zo_last_error() : gpt_last_error(m->cpu));
    m->failed = 0;
    return -1;
  }
  if (!m->cuda) { /* each tensor cast into the model's fp32 weights, then released */
    for (int i = 0; i < m->n_params; i++) {
      const void *w;
      zo_dtype dt;
      if (zo_engine_fetch(m->eng, m->params[i], &w, &dt) != ZO_OK ||
          zo_cast(gpt_weight(m->cpu, i), ZO_DTYPE_F32, w, dt, m->specs[i].n_elems, 0) != ZO_OK ||
          zo_engine_release(m->eng, m->params[i]) != ZO_OK) {
        set_err(m, "%s", zo_last_error());
        return -1;
      }
    }
    if (gpt_sample(m->cpu, prompt, prompt_len, n_new, temperature, seed, out) == 0) return 0;
    set_err(m, "%s", gpt_last_error(m->cpu));
    return -1;
  }
#if ZO_TRAIN_MODEL_CUDA
  /* cuda computes from the engine's device copies: every tensor fetched at once, kept while
   * sampling, released. */
  int fetched = 0, rc = -1;
  for (; fetched < m->n_params; fetched++) {
    const void *w;
    zo_dtype dt;
    if (zo_engine_fetch(m->eng, m->params[fetched], &w, &dt) != ZO_OK) {
      set_err(m, "the final weights do not fit on the device at once for sampling: %s",
              zo_last_error());
      rc = 1;
      goto release;
    }
    gpt_cuda_set_weight(m->gpu, fetched, w);
  }
  rc = gpt_cuda_sample(m->gpu, prompt, prompt_len, n_new, temperature, seed, out);
  if (rc) set_err(m, "%s", gpt_cuda_last_error(m->gpu));
release:
  for (int i = 0; i < fetched; i++)
    if (zo_engine_release(m->eng, m->params[i]) != ZO_OK && rc == 0) {
      set_err(m, "%s", zo_last_error());
      rc = -1;
    }
  return rc;
#else
  (void)prompt, (void)prompt_len, (void)n_new, (void)temperature, (void)seed, (void)out;
  return -1;
#endif
}

const char *train_model_error(const train_model *m) { return m->err; }
const char *train_model_describe(const train_model *m) { return m->desc; }
double train_model_forward_seconds(const train_model *m) { return m->t_fwd; }
double train_model_backward_seconds(const train_model *m) { return m->t_bwd; }
