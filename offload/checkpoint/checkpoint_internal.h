/*
 * checkpoint_internal.h - what checkpoint/save.c, checkpoint/load.c and
 * safetensors.c share: the root lock held around one save and whether the
 * process a leftover is named after is gone (checkpoint/lock.c), the format's
 * constants and the file helpers of checkpoint/save.c. Not installed; the public
 * calls are in zoffload/checkpoint.h.
 */
#ifndef ZO_CHECKPOINT_INTERNAL_H
#define ZO_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

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

/* The checkpoint format (manifest "format", "format_version"), the rank file's alignment, checksum read size. */
#define CKPT_FORMAT "zoffload-checkpoint"
#define CKPT_FORMAT_VERSION 1
#define CKPT_ALIGN 4096
#define CKPT_CHUNK ((size_t)8 << 20) /* bytes per read while checksumming */

/* The manifest's names of the three state kinds: "master", "exp_avg", "exp_avg_sq". */
extern const char *const ck_kind[3];

/* @a "/" @b into @out (@cap bytes); ZO_ERR_INVALID_ARG naming both when it does not fit. */
zo_status ck_join(char *out, size_t cap, const char *a, const char *b);
/* All @n bytes of @fd at @off; ZO_ERR_IO naming @path and the offset on an error or a short file. */
zo_status ck_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);
/* @path opened read-only, O_NOFOLLOW, a regular file (refused naming it otherwise), with its size. */
zo_status ck_open_regular(const char *path, int *fd_out, uint64_t *size);
/* The whole regular file @path, at most @max bytes, NUL-terminated, into *@text (malloc'd) and *@n. */
zo_status ck_read_small(const char *path, size_t max, char **text, size_t *n);
/* CRC32C of @n bytes of @fd at @off, read through @buf (CKPT_CHUNK bytes). */
zo_status ck_file_crc(int fd, uint64_t off, uint64_t n, void *buf, const char *path, uint32_t *crc);
/* This rank's manifest file name: "manifest.json" on one rank, "manifest-rankNNNNN.json" on several. */
void ck_manifest_name(const zo_engine_t *e, char *out, size_t cap);
/* CRC32C of zo_config_describe(@cfg): the manifest's "config_hash". */
uint32_t ck_config_hash(const zo_config_t *cfg);
/* Whether @n is a name zo_save_opts.files takes: 1..64 bytes of [A-Za-z0-9_.-], a letter or digit first, none of
 * the format's own names (manifest.json, manifest-rankNNNNN.json, rankNNNNN.bin). */
int ck_file_name_ok(const char *n);
/* Whether the @len bytes at @s are a checkpoint directory's name: 1..255 bytes of printable ASCII without '/' or
 * space, not starting with '.' (what zo_save_opts.name takes and zo_engine_load() accepts in `latest`). */
int ck_dir_name_ok(const char *s, size_t len);
/* Whether @s (may be NULL) is a CRC32C as the manifest writes it: exactly 8 hex digits. */
int ck_hex8(const char *s);
/* A manifest may list a million tensors at a few hundred bytes each; more than this is not one. */
#define CKPT_MANIFEST_MAX ((size_t)1 << 30)
/*
 * ck_fault() - a test hook for the crash-safety tests (tests/test_ckpt_kill.c, python/tests/test_save_kill.py):
 * when the environment's ZO_CKPT_KILL_AT names @stage, the process kills itself with SIGKILL there, as a power cut
 * or the OOM killer would, after one line on stderr. The stages of a save, in order: "locked" (root locked, names
 * chosen), "tmp-made", "rank-file" (this rank's shard file written), "manifest-half" (half of the manifest
 * written), "manifest", "file-half" (half of a caller's file written), "files" (the caller's files written), "synced" (the temporary
 * directory fsynced), "placed" (switched into place), "root-synced", "latest" (`latest` replaced),
 * "old-removed" (the replaced copy removed). Unset or another name: nothing.
 */
void ck_fault(const char *stage);

#endif /* ZO_CHECKPOINT_INTERNAL_H */
