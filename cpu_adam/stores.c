/*
 * stores.c - the store kind of the fused Adam update's in-place streams (adam_stores.h): the ZO_ADAM_STORES
 * setting and the pure decision of the pool's store probe. The probe itself (timing segments of a task on the
 * pool's threads) is pool.c's; the kernels honour the choice (adam_avx2.c, adam_avx512.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adam_stores.h"
#include "base_internal.h"

zo_adam_stores zo_adam_stores_env(void) {
  const char *env = getenv("ZO_ADAM_STORES");
  if (!env || !*env || !strcmp(env, "auto")) return ZO_STORES_AUTO;
  if (!strcmp(env, "regular")) return ZO_STORES_REGULAR;
  if (!strcmp(env, "nt")) return ZO_STORES_NT;
  if (!strcmp(env, "probe")) return ZO_STORES_PROBE;
  zo_warn_once("ZO_ADAM_STORES=%s is not one of auto, regular, nt, probe; using auto", env);
  return ZO_STORES_AUTO;
}

int zo_adam_stores_decide(const double *t_regular, const double *t_nt, int pairs, double *ratio,
                          double *lowest) {
  double r[64];
  if (ratio) *ratio = 0;
  if (lowest) *lowest = 0;
  if (!t_regular || !t_nt || pairs < 1 || pairs > 64) return 0;
  for (int k = 0; k < pairs; k++) {
    if (!(t_regular[k] > 0 && t_nt[k] > 0 && isfinite(t_regular[k]) && isfinite(t_nt[k]))) return 0;
    double x = t_regular[k] / t_nt[k];
    int i = k;
    for (; i > 0 && r[i - 1] > x; i--) r[i] = r[i - 1]; /* insertion sort: at most 64 */
    r[i] = x;
  }
  double med = pairs % 2 ? r[pairs / 2] : 0.5 * (r[pairs / 2 - 1] + r[pairs / 2]);
  if (ratio) *ratio = med;
  if (lowest) *lowest = r[0];
  return med >= ZO_STORES_NT_WIN && r[0] > 1.0;
}
