/*
 * checkpoint_internal.h - what checkpoint.c and safetensors.c take from
 * checkpoint_lock.c: the root lock held around one save, and whether the
 * process a leftover is named after is gone. Not installed; the public lock
 * calls are in zoffload/checkpoint.h.
 */
#ifndef ZO_CHECKPOINT_INTERNAL_H
#define ZO_CHECKPOINT_INTERNAL_H

#include "zoffload/checkpoint.h"

#define ZO_CKPT_LOCK_NAME ".zoffload-lock" /* the lock file in a checkpoint root */

/*
 * zo_ckpt_save_begin() - zo_checkpoint_lock(@root) (made if missing), then this process's save mutex of the root:
 * one save at a time per root in a process. zo_ckpt_save_end() undoes both (NULL: nothing). Errors as
 * zo_checkpoint_lock().
 */
zo_status zo_ckpt_save_begin(const char *root, zo_checkpoint_lock_t **lock);
void zo_ckpt_save_end(zo_checkpoint_lock_t *lock);

/*
 * zo_ckpt_pid_gone() - 1 when no process other than this one runs as @pid on this host (kill(pid, 0) says ESRCH,
 * or @pid is ours: this process's saves on a root do not overlap), so what a save named after @pid left behind
 * may go; 0 when it runs (or may: EPERM).
 */
int zo_ckpt_pid_gone(long pid);

#endif /* ZO_CHECKPOINT_INTERNAL_H */
