/*
 * gpt_cuda_lt.cu - cuBLASLt matmuls with epilogues for the fused kernel set
 * (API in gpt_cuda_lt.h): descriptors and the heuristic's algorithm made
 * once per problem and cached, pointers set per call.
 */
#include "gpt_cuda_lt.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cuda_device.h"
#include "seterr.h"

/* One cached problem: its descriptors, the chosen algorithm, the bias-gradient type it was found
 * with. */
typedef struct lt_entry {
  zgc_lt_problem p;
  int supported; /* 1: algo valid; 0: no algorithm */
  int grad_f32;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
} lt_entry;

struct zgc_lt {
  cublasLtHandle_t h;
  void *ws;
  size_t ws_bytes;
  lt_entry cache[ZGC_LT_CACHE];
  int n_cached;
  int n_unsupported;
};

static int fail_lt(char *err, size_t errlen, cublasStatus_t st, const char *call) {
  seterr(err, errlen, "%s failed: %s (%s)", call, cublasGetStatusName(st),
         cublasGetStatusString(st));
  return ZGC_LT_ERROR;
}

int zgc_lt_create(void *ws, size_t ws_bytes, zgc_lt **out, char *err, size_t errlen) {
  *out = NULL;
  zgc_lt *lt = (zgc_lt *)calloc(1, sizeof *lt);
  if (!lt) {
    seterr(err, errlen, "out of host memory (%zu bytes of cuBLASLt cache)", sizeof *lt);
    return -1;
  }
  const cublasStatus_t st = cublasLtCreate(&lt->h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    free(lt);
    fail_lt(err, errlen, st, "cublasLtCreate");
    return -1;
  }
  lt->ws = ws;
  lt->ws_bytes = ws_bytes;
  *out = lt;
  return 0;
}

static void entry_free(lt_entry *e) {
  if (e->desc) (void)cublasLtMatmulDescDestroy(e->desc);
  if (e->la) (void)cublasLtMatrixLayoutDestroy(e->la);
  if (e->lb) (void)cublasLtMatrixLayoutDestroy(e->lb);
  if (e->ld) (void)cublasLtMatrixLayoutDestroy(e->ld);
  memset(e, 0, sizeof *e);
}

void zgc_lt_destroy(zgc_lt *lt) {
  if (!lt) return;
  for (int i = 0; i < lt->n_cached; i++) entry_free(&lt->cache[i]);
  if (lt->h) (void)cublasLtDestroy(lt->h);
  free(lt);
}

int zgc_lt_unsupported(const zgc_lt *lt) { return lt ? lt->n_unsupported : 0; }

static int same_problem(const zgc_lt_problem *a, const zgc_lt_problem *b) {
  /* alpha is a per-call scalar (host pointer mode): not part of the plan; beta 0 or not is */
  return a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K &&
         a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd && a->d_f32 == b->d_f32 &&
         a->epi == b->epi && a->ld_aux == b->ld_aux && (a->beta != 0.0f) == (b->beta != 0.0f);
}

static cublasLtEpilogue_t lt_epilogue(zgc_epi e) {
  switch (e) {
    case ZGC_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case ZGC_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case ZGC_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case ZGC_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

static int has_grad(zgc_epi e) { return e == ZGC_EPI_DGELU_BGRAD || e == ZGC_EPI_BGRADB; }

/* The epilogue's pointers into @e's descriptor (the heuristic reads their alignment). */
static cublasStatus_t set_ptrs(lt_entry *e, const void *bias, void *aux, void *bias_grad) {
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const zgc_epi epi = e->p.epi;
  if (epi == ZGC_EPI_BIAS || epi == ZGC_EPI_GELU_AUX_BIAS)
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias);
  else if (has_grad(epi))
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad,
                                        sizeof bias_grad);
  if (st == CUBLAS_STATUS_SUCCESS && (epi == ZGC_EPI_GELU_AUX_BIAS || epi == ZGC_EPI_DGELU_BGRAD))
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                        sizeof aux);
  return st;
}

/*
 * Descriptors of @e->p with bias-gradient type fp32 (@grad_f32) or the
 * output's, and the heuristic's first algorithm for them. Returns ZGC_LT_OK,
 * ZGC_LT_UNSUPPORTED (descriptors freed) or ZGC_LT_ERROR.
 */
static int plan_entry(zgc_lt *lt, lt_entry *e, int grad_f32, const void *bias, void *aux,
                      void *bias_grad, char *err, size_t errlen) {
  const zgc_lt_problem *p = &e->p;
  const cudaDataType_t dt = p->d_f32 ? CUDA_R_32F : CUDA_R_16BF;
  cublasStatus_t st = cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return fail_lt(err, errlen, st, "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = lt_epilogue(p->epi);
  st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (st == CUBLAS_STATUS_SUCCESS &&
      (p->epi == ZGC_EPI_GELU_AUX_BIAS || p->epi == ZGC_EPI_DGELU_BGRAD)) {
    const int64_t ld_aux = p->ld_aux;
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
                                        sizeof ld_aux);
  }
  if (st == CUBLAS_STATUS_SUCCESS && has_grad(p->epi) && grad_f32) {
    const int32_t bt = CUDA_R_32F;
    st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                        sizeof bt);
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = set_ptrs(e, bias, aux, bias_grad);
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail_lt(err, errlen, st, "cublasLtMatmulDescSetAttribute");
  /* op(A) is M x K, op(B) K x N: the stored shapes are the transposes when transposed */
  st = cublasLtMatrixLayoutCreate(&e->la, CUDA_R_16BF, p->ta ? p->K : p->M, p->ta ? p->M : p->K,
                                  p->lda);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&e->lb, CUDA_R_16BF, p->tb ? p->N : p->K, p->tb ? p->K : p->N,
                                    p->ldb);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&e->ld, dt, p->M, p->N, p->ldd);
  if (st != CUBLAS_STATUS_SUCCESS) return fail_lt(err, errlen, st, "cublasLtMatrixLayoutCreate");

  cublasLtMatmulPreference_t pref;
  st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail_lt(err, errlen, st, "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = lt->ws_bytes;
  /* no split-K reduction in the bf16 output type: fp32 accumulation all the way, as the baseline's
   * cuBLAS */
  const uint32_t red =
      CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const uint32_t align = 16;
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &red, sizeof red);
  for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
       st == CUBLAS_STATUS_SUCCESS && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
    st = cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &align,
                                              sizeof align);
  if (st != CUBLAS_STATUS_SUCCESS) {
    (void)cublasLtMatmulPreferenceDestroy(pref);
    return fail_lt(err, errlen, st, "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(lt->h, e->desc, e->la, e->lb, e->ld, e->ld, pref, 1, &res,
                                      &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found < 1))
    return ZGC_LT_UNSUPPORTED;
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail_lt(err, errlen, st, "cublasLtMatmulAlgoGetHeuristic");
  e->algo = res.algo;
  e->grad_f32 = grad_f32;
  e->supported = 1;
  return ZGC_LT_OK;
}

/* The cached entry of @p, planned on a miss (fp32 bias gradient first, then the output's type).
 * NULL on error. */
static lt_entry *lookup(zgc_lt *lt, const zgc_lt_problem *p, lt_entry *tmp, const void *bias,
                        void *aux, void *bias_grad, char *err, size_t errlen) {
  for (int i = 0; i < lt->n_cached; i++)
    if (same_problem(&lt->cache[i].p, p)) return &lt->cache[i];
  lt_entry *e = lt->n_cached < ZGC_LT_CACHE ? &lt->cache[lt->n_cached] : tmp;
  memset(e, 0, sizeof *e);
  e->p = *p;
  int rc = plan_entry(lt, e, has_grad(p->epi), bias, aux, bias_grad, err, errlen);
  if (rc == ZGC_LT_UNSUPPORTED && has_grad(p->epi) && !p->d_f32) {
    entry_free(e);
    e->p = *p;
    rc = plan_entry(lt, e, 0, bias, aux, bias_grad, err, errlen);
  }
  if (rc == ZGC_LT_ERROR) {
    entry_free(e);
    return NULL;
  }
  if (rc == ZGC_LT_UNSUPPORTED) {
    entry_free(e); /* descriptors not needed: remembered as unsupported */
    e->p = *p;
    e->supported = 0;
  }
  if (e != tmp) {
    lt->n_cached++;
    if (!e->supported) lt->n_unsupported++;
  }
  return e;
}

int zgc_lt_matmul(zgc_lt *lt, cudaStream_t s, const zgc_lt_problem *p, const void *A, const void *B,
                  void *D, const void *bias, void *aux, void *bias_grad, int *grad_f32, char *err,
                  size_t errlen) {
  if (!zgc_aligned16(A) || !zgc_aligned16(B) || !zgc_aligned16(D) || !zgc_aligned16(bias) ||
      !zgc_aligned16(aux) || !zgc_aligned16(bias_grad))
    return ZGC_LT_UNSUPPORTED;
  if ((p->epi == ZGC_EPI_GELU_AUX_BIAS || p->epi == ZGC_EPI_DGELU_BGRAD) && p->beta != 0.0f)
    return ZGC_LT_UNSUPPORTED;
  lt_entry tmp, *e = lookup(lt, p, &tmp, bias, aux, bias_grad, err, errlen);
  if (!e) return ZGC_LT_ERROR;
  if (!e->supported) return ZGC_LT_UNSUPPORTED;
  cublasStatus_t st = set_ptrs(e, bias, aux, bias_grad);
  if (st != CUBLAS_STATUS_SUCCESS) {
    fail_lt(err, errlen, st, "cublasLtMatmulDescSetAttribute (pointers)");
    if (e == &tmp) entry_free(&tmp);
    return ZGC_LT_ERROR;
  }
  if (grad_f32) *grad_f32 = e->grad_f32;
  const float alpha = p->alpha, beta = p->beta;
  st = cublasLtMatmul(lt->h, e->desc, &alpha, A, e->la, B, e->lb, &beta, D, e->ld, D, e->ld,
                      &e->algo, lt->ws, lt->ws_bytes, s);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* nothing launched: the problem joins the fallbacks */
    if (e == &tmp) {
      entry_free(&tmp);
      return ZGC_LT_UNSUPPORTED;
    }
    entry_free(e);
    e->p = *p;
    e->supported = 0;
    lt->n_unsupported++;
    return ZGC_LT_UNSUPPORTED;
  }
  if (e == &tmp) entry_free(&tmp);
  if (st != CUBLAS_STATUS_SUCCESS) return fail_lt(err, errlen, st, "cublasLtMatmul");
  return ZGC_LT_OK;
}
