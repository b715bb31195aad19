/*
 * swap_internal.h - test hooks of the swap module (fault injection). Not
 * installed; the public interface is zoffload/swap.h.
 */
#ifndef ZO_SWAP_INTERNAL_H
#define ZO_SWAP_INTERNAL_H

#include "zoffload/swap.h"

/*
 * zo_swap_test_inject() - make the @kth_completion-th piece completion from
 * now on (1-based, counted over every CQE, or every pread/pwrite on the
 * fallback path, resubmissions included) report @res instead of its real
 * result: a negative errno (-EIO, -ENOSPC) or a short byte count. The real
 * transfer still happened; a short count therefore makes the library redo
 * the rest, which must leave the data intact. kth_completion <= 0 disarms.
 * One injection is armed at a time; it fires once.
 */
void zo_swap_test_inject(zo_swap_t *sw, int kth_completion, int res);

/*
 * zo_swap_test_completions() - piece completions accounted since create
 * (CQEs, or pread/pwrite calls on the fallback path), resubmissions included;
 * lets tests see that a short transfer was resumed.
 */
unsigned long zo_swap_test_completions(const zo_swap_t *sw);

/*
 * zo_swap_test_refuse_direct() - make later zo_swap_file_create() calls see
 * O_DIRECT refused (EINVAL, as tmpfs and overlayfs used to answer), so tests
 * cover the buffered fallback on a file system that takes O_DIRECT.
 */
void zo_swap_test_refuse_direct(zo_swap_t *sw);

#endif /* ZO_SWAP_INTERNAL_H */
