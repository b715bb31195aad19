/*
 * zoffload/checkpoint.h - checkpoints of an engine that resume to the last
 * bit, and the consolidated weights in the safetensors format.
 *
 * A checkpoint is a directory ROOT/step-NNNNNNNNNNNN holding
 *   manifest.json    format and version, zoffload version, world size, the
 *                    optimizer step, the loss scaler, a hash of the config,
 *                    dtypes, and per tensor: name, shape, element count, this
 *                    rank's shard, and for each kind of state (master,
 *                    exp_avg, exp_avg_sq) its file, byte offset, byte count
 *                    and CRC32C; plus the caller's own state ("app_state":
 *                    data-loader position, RNG, scheduler) verbatim;
 *   rankRRRRR.bin    this rank's shards: every tensor's fp32 master weights,
 *                    exp_avg and exp_avg_sq (state dtype), each run starting
 *                    at a 4096-byte boundary.
 * Written crash-safe: into ROOT/.tmp-step-N.PID (made new: something
 * already there is refused, named), every file created new (O_EXCL,
 * O_NOFOLLOW) and fsynced, the directory fsynced, renamed into place, ROOT
 * fsynced; then ROOT/latest (a one-line file naming the directory) replaced
 * the same way: written to a new ROOT/.latest.PID.N.tmp (O_EXCL|O_NOFOLLOW:
 * whatever is planted at a name is skipped, never opened or followed),
 * fsynced, renamed, ROOT fsynced. `latest` must be absent or a regular file:
 * a symbolic link, directory, device or FIFO there is refused before anything
 * is written and left as it is. A kill at any moment leaves `latest` naming a
 * complete checkpoint (or no `latest` before the first save completes).
 * A directory of the same name (a reused tag) is swapped with the new one in
 * one step (renameat2 RENAME_EXCHANGE), so the name holds the old checkpoint
 * or the new one, whole, at every moment, with the caller's files
 * (zo_save_opts.files) of the same save; the old copy is removed after
 * `latest` is durable. Older checkpoints beyond keep_last are removed only after the new one and
 * `latest` are durable. One run per ROOT: each save holds the root's lock
 * (zo_checkpoint_lock() below; a run can hold it throughout), so a save while
 * another process holds it is refused, naming that process. Leftovers of a
 * killed save (.tmp-NAME.PID / .old-NAME.PID directories holding only
 * checkpoint files, .latest.PID.N.tmp files, and the .latest.tmp of earlier
 * versions) are removed by the next save when no process runs as PID (those
 * of a live process are left, named in a warning), each named in an info log
 * line and to zo_save_opts.on_removed. A save never replaces a same-named
 * directory that is not a checkpoint (ZO_ERR_IO naming it).
 * Optimizer state on NVMe is copied file to file with copy_file_range(2)
 * (restored through the swap layer's io_uring writes), never through a host
 * copy of the whole state; checksums are computed over the written file in
 * 8 MiB pieces.
 * Thread-safety: as the engine (one thread drives an engine).
 */
#ifndef ZOFFLOAD_CHECKPOINT_H
#define ZOFFLOAD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of zo_engine_save(); NULL means all defaults. */
typedef struct zo_save_opts {
  /* names the directory step-%012lld; < 0 (or opts NULL): the engine's applied step count */
  int64_t tag;
  /* JSON text (an object) stored as "app_state"; NULL: none. Must parse as JSON. */
  const char *app_state;
  int keep_last; /* after this save is durable, keep this many checkpoints: this one and the newest
                            keep_last - 1 older ones; 0: keep all. Only directories named step-<12+ digits> older
                            than this save and holding manifest.json and nothing but manifest*.json and
                            rankNNNNN.bin regular files are removed (one info log line each, and on_removed); any
                            other, and any newer one, is left alone (a warning names it) */
  /* Optional (NULL: none). Called once for each thing zo_engine_save() removed under root, after it is gone:
   * @leftover 0: a checkpoint directory removed by keep_last (after the new checkpoint and `latest` are durable);
   * @leftover 1: a leftover of an interrupted save whose process is gone (a .tmp-NAME.PID or .old-NAME.PID
   * directory, or the file .latest.PID.N.tmp or .latest.tmp; before the new checkpoint is written). Not called for
   * what is left alone or could not be removed (those are warnings). @path is root as the caller gave it, '/', and
   * the entry's name (step-<digits>, .tmp-NAME.<digits>, .old-NAME.<digits>,
   * .latest.<digits>.<digits>.tmp or .latest.tmp): not escaped, valid only during the
   * call. @user is the field below. Called synchronously on the thread that called zo_engine_save(), on rank 0
   * only (the rank that removes); it must not call into this engine. */
  void (*on_removed)(const char *path, int leftover, void *user);
  void *user; /* passed to on_removed */
  /* Optional (NULL: step-%012lld from tag, as above). The checkpoint directory's own name instead, as DeepSpeed's
   * string tags ("global_step20"): 1..255 bytes of printable ASCII other than '/' and space, not starting with '.'
   * (what zo_engine_load() accepts in `latest`); ZO_ERR_INVALID_ARG naming it otherwise. The manifest's "tag" is
   * still @tag as above (the applied step count when < 0). A same-named checkpoint directory is replaced as a
   * step directory is. keep_last must be 0 with a name (ZO_ERR_INVALID_ARG): named directories are never pruned,
   * and leftovers of a killed named save (.tmp-<name>.PID) are removed by later saves as a step's are. */
  const char *name;
  int no_latest; /* 1: `latest` is left as it was (DeepSpeed's save_latest=False); 0: replaced as above */
  /* Optional (NULL / 0: none). The caller's own files, written by rank 0 into the checkpoint directory beside the
   * manifest, inside the same crash-safe save: each is complete and fsynced in the temporary directory before the
   * directory is switched into place, so a kill at any moment leaves the old checkpoint with its old files or the
   * new one with the new files, never a mix (the Python front's client_state.safetensors). At most
   * ZO_SAVE_FILES_MAX; each name 1..64 bytes of [A-Za-z0-9_.-] starting with a letter or digit, not one of the
   * format's own names (manifest*.json, rankNNNNN.bin) and not twice; ZO_ERR_INVALID_ARG naming it otherwise.
   * Rank 0's manifest (manifest.json) lists them under "files" ({name, nbytes, crc32c}; an empty array when none),
   * and zo_engine_load() verifies each before anything is applied; read one back with zo_checkpoint_read_file().
   * Ranks other than 0 pass none (theirs are ignored). */
  const struct zo_save_file *files;
  int n_files;
} zo_save_opts;

/* One caller's file of a save (zo_save_opts.files): @nbytes bytes at @data (any bytes; 0 allowed)
 * as @name. */
typedef struct zo_save_file {
  const char *name;
  const void *data;
  size_t nbytes;
} zo_save_file;
#define ZO_SAVE_FILES_MAX 16

/*
 * zo_checkpoint_read_file() - the caller's file @name that zo_engine_save()
 * stored in the checkpoint directory @dir (zo_save_opts.files), read whole
 * and verified against dir/manifest.json: its size and CRC32C as listed
 * there. On ZO_OK *@data is malloc'd (free() it; never NULL, even for 0
 * bytes) and *@nbytes its size. @dir is a checkpoint directory, not a root
 * (no `latest` is followed). The manifest and the file are opened without
 * following a final symbolic link and without blocking: anything but a
 * regular file is refused, named. Reads only; thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, or @name not a valid file name);
 * ZO_ERR_IO (manifest.json or the file missing or not a regular file, or
 * the manifest lists no file @name; a checkpoint written before
 * zo_save_opts.files existed has no "files" list at all: named); ZO_ERR_CONFIG (the manifest
 * malformed or its "files" entry malformed, naming the manifest and field);
 * ZO_ERR_CORRUPT (size or CRC32C other than listed: file, both values);
 * ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_checkpoint_read_file(const char *dir, const char *name, void **data,
                                         size_t *nbytes);

/*
 * zo_checkpoint_lock() - hold the checkpoint root @root for this run (made
 * if missing; its parent must exist) until zo_checkpoint_unlock(): another
 * process's zo_checkpoint_lock() or zo_engine_save() on that root is
 * refused until then, naming this one. zo_engine_save() takes the same lock
 * for each save by itself; take it for the whole run (zo-train does, with
 * --save, at start-up) so a second run is refused before it trains rather
 * than at its first save, and so its saves cannot interleave with ours.
 * The lock is flock(2) on ROOT/.zoffload-lock, which holds the owner's
 * record (pid, host, process start time, command line; escaped) and is
 * removed by the last unlock; the kernel drops the lock when the process
 * dies, however it dies, and the next run takes the root over. Handles in
 * one process share one lock (a count): this process's engines and callers
 * do not refuse each other. A fork()ed child shares the lock and must not
 * save to the root. A file system without flock (ENOLCK, EOPNOTSUPP: Lustre
 * without -o flock) gives one warning and the root unlocked.
 * Returns ZO_OK and *@lock; ZO_ERR_INVALID_ARG (NULL or empty);
 * ZO_ERR_INVALID_USAGE "checkpoint: root R is in use by another run: pid P
 * on host H, started T, command: C (lock file ...)"; ZO_ERR_IO (the root
 * cannot be made or opened; .zoffload-lock is a symbolic link, not a
 * regular file, or has other hard links: named, never opened through or
 * written); ZO_ERR_SYSTEM; ZO_ERR_OUT_OF_MEMORY. Thread-safe. The lock is
 * the process's: zo_checkpoint_unlock() of a handle a fork()ed child
 * inherited returns without releasing or removing anything (the lock,
 * flock(2)'s, is shared with the parent), and a lock taken in the child is
 * refused while the parent holds the root, naming it.
 */
typedef struct zo_checkpoint_lock zo_checkpoint_lock_t;
ZO_API zo_status zo_checkpoint_lock(const char *root, zo_checkpoint_lock_t **lock);

/* zo_checkpoint_unlock() - release one handle of zo_checkpoint_lock(); the last one in the process empties and
 * removes ROOT/.zoffload-lock, then drops the lock. NULL is accepted. Thread-safe. */
ZO_API void zo_checkpoint_unlock(zo_checkpoint_lock_t *lock);

/*
 * zo_engine_set_param_shape() - record the shape of a registered tensor
 * (for manifests and safetensors); @ndim 1..8 dims whose product must be
 * the tensor's element count. Without it a tensor is 1-D [n_elems].
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (bad ndim, product mismatch: named).
 */
ZO_API zo_status zo_engine_set_param_shape(zo_param_t *p, int ndim, const int64_t *dims);

/*
 * zo_engine_save() - write a checkpoint of everything the engine needs to
 * continue bit-identically (master weights, Adam state on whatever tier it
 * lives, applied step count, loss scaler) plus @opts->app_state, under the
 * directory @root (created if missing; its parent must exist), as described
 * at the top of this file. First finishes every update in flight
 * (zo_engine_synchronize) and settles the NVMe state pipeline. Call between
 * steps: after zo_engine_step() and before the next zo_engine_grad_ready().
 * Synchronous: on return the checkpoint and `latest` are on stable storage.
 * Several ranks: a collective call over the engine's communicator. Every rank
 * writes its shard file and manifest-rankNNNNN.json into rank 0's temporary
 * directory; once all report success rank 0 renames it into place (with a
 * manifest.json) and moves `latest`; every rank returns the same outcome.
 * @saved_dir (may be NULL) receives the checkpoint's path (@cap bytes).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, app_state not a JSON object);
 * ZO_ERR_INVALID_USAGE (another process holds @root: zo_checkpoint_lock()'s
 * message naming it, nothing written; before finalize, or gradients handed over for a
 * step not yet taken: zo_engine_grad_ready() or, between micro-batches,
 * zo_engine_grad_accumulate(), whose partial sums a checkpoint does not keep); ZO_ERR_IO / ZO_ERR_SYSTEM naming the file and offset
 * (a full disk among them), or `latest`, the lock file or the temporary
 * directory's name not what a save may write (a symbolic link, a FIFO:
 * named, left as they are): the partial checkpoint is removed and the
 * previous one and `latest` are untouched; ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_engine_save(zo_engine_t *e, const char *root, const zo_save_opts *opts,
                                char *saved_dir, size_t cap);

/*
 * zo_engine_load() - restore a checkpoint written by zo_engine_save() into
 * an engine with the same tensors (names, element counts) and state dtype,
 * and the same working dtype where either is fp16 (its loss scaler's state
 * belongs to fp16; bf16 and fp32 load as each other), any tier layout (a checkpoint taken with state on nvme loads onto cpu and
 * the reverse). @path: a checkpoint directory, or a root whose `latest`
 * names one. Call after zo_engine_finalize() and before the first
 * zo_engine_grad_ready() of a step (it replaces zo_engine_load_param()).
 * Every checksum is verified before anything is changed: a mismatch, a
 * short file or a bad manifest leaves the engine as it was. Several ranks: a
 * collective call; each rank checks its own part, nothing is applied unless
 * every rank's checks passed, and the working weights are all-gathered after.
 * *@app_state (may be NULL) receives the saved app_state as JSON text,
 * malloc'd (free() it), or NULL when there was none. A checkpoint saved with
 * another config (its hash differs) loads with one warning.
 * The checkpoint is untrusted input: every field is checked before any is
 * applied (step and loss_scaler.iter 0..2^48, last_overflow -1..iter,
 * hysteresis >= 1 with fp16, loss_scale finite in [fp16.min_loss_scale with
 * a dynamic fp16 scaler, else 2^-64, 2^64], crc32c 8 hex digits, the file
 * this rank's rankNNNNN.bin, every byte range inside it). `latest`, the
 * manifest and the shard file are opened without following a final
 * symbolic link and without blocking; anything but a regular file is
 * refused. Bytes quoted from the files in messages are escaped (zo_escape).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG; ZO_ERR_INVALID_USAGE (before finalize,
 * mid-step); ZO_ERR_IO (missing or unreadable file, or not a regular file,
 * named); ZO_ERR_CONFIG (manifest malformed, a field out of range, or
 * tensors/dtypes/world size that do not match this engine: the manifest's
 * path and the first field named; a switch to or from fp16 names the
 * checkpoint directory and both precisions, before the loss scaler's fields); ZO_ERR_CORRUPT (CRC32C mismatch: file,
 * tensor, kind of state, byte offset and length named; a byte range past the
 * end of the shard file; `latest` not naming a directory).
 */
ZO_API zo_status zo_engine_load(zo_engine_t *e, const char *path, char **app_state);

/* Options of zo_engine_load_ex(); NULL, or every field 0, is zo_engine_load()'s behaviour. */
typedef struct zo_load_opts {
  /* 1: the master weights only (DeepSpeed's load_module_only / load_optimizer_states=False): each loaded tensor's
   * fp32 master shard from the checkpoint and its working copy rebuilt from it; exp_avg, exp_avg_sq, the applied
   * step count (Adam's bias correction, and the config's lr schedule, which follows it) and the loss scaler stay as
   * this engine has them (a fresh engine: zeros, step 0, the initial scale). Only the master runs' checksums are
   * verified; the checkpoint's state dtype may differ from this engine's (its Adam state is not read).
   * 0: everything, as zo_engine_load(). */
  int weights_only;
  /* 1: tensors matched by name (DeepSpeed's load_module_strict=False, torch's load_state_dict(strict=False)):
   * each tensor of this engine that the checkpoint holds loads; one it does not hold ("missing") keeps its values
   * and state; a checkpoint tensor this engine did not register ("unexpected") is not read. A matched name whose
   * element count or shard differs is still an error (ZO_ERR_CONFIG naming it, as torch's size mismatch), and so
   * is a name twice in the manifest. 0: the checkpoint's tensors must be this engine's, in registration order. */
  int not_strict;
  /* Optional (NULL: none); used only with not_strict. Called once per unmatched tensor after every rank's checks
   * passed and before anything is applied, missing ones first (registration order, @unexpected 0), then unexpected
   * ones (manifest order, @unexpected 1). @name is valid only during the call (for an unexpected one: the
   * manifest's bytes, any but NUL). Synchronously on the calling thread, on every rank; it must not call into this
   * engine. @user is the field below. */
  void (*on_unmatched)(const char *name, int unexpected, void *user);
  void *user; /* passed to on_unmatched */
  int n_missing,
      n_unexpected; /* out: the counts of the two kinds above (0 when strict); set on ZO_OK */
} zo_load_opts;

/*
 * zo_engine_load_ex() - zo_engine_load() with @opts (may be NULL: the same as
 * zo_engine_load()). Same call rules (after zo_engine_finalize(), between
 * steps; several ranks: a collective call with the same options), the same
 * all-or-nothing checks before anything changes, and the same errors, plus:
 * with @opts->not_strict, ZO_ERR_CONFIG naming a matched tensor whose
 * element count or shard differs or a name the manifest lists twice.
 * *@app_state as zo_engine_load() (the saved one, with weights_only too).
 * Thread-safety: as the engine (one thread drives an engine).
 */
ZO_API zo_status zo_engine_load_ex(zo_engine_t *e, const char *path, zo_load_opts *opts,
                                   char **app_state);

/*
 * zo_engine_export_safetensors() - write the consolidated fp32 master
 * weights of every tensor, cast to @dtype (ZO_DTYPE_F32 or ZO_DTYPE_BF16,
 * round to nearest even), to @path in the safetensors format (8-byte
 * little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets}, "__metadata__": {...}} padded with spaces to 8 bytes, then
 * the tensors back to back in registration order), so PyTorch's
 * safetensors.torch.load_file and Hugging Face load them directly. Shapes
 * are those of zo_engine_set_param_shape() (else 1-D). Written to a new
 * DIR/.NAME.PID.N.tmp beside @path (O_EXCL|O_NOFOLLOW: whatever is planted
 * at a name is skipped, never opened or followed), fsynced and renamed over
 * @path, which must be absent or a regular file: a symbolic link, device,
 * directory or FIFO there is refused (ZO_ERR_IO naming it and what it is)
 * before anything is written, and left as it is. Before writing, temporary
 * files that earlier exports of the same @path left when killed mid-write
 * (DIR/.NAME.PID.N.tmp, regular files only, whose PID no longer runs on this
 * host) are removed, each in an info log line; anything else at such a name
 * (a link, FIFO, directory, a running process's file) is left alone.
 * Several ranks: a collective call; each
 * tensor's master shards are all-gathered and rank 0 writes @path; every
 * rank returns rank 0's outcome. Format: https://github.com/huggingface/safetensors
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (dtype); ZO_ERR_IO naming the file (rank
 * 0's, or another rank's failure reported); ZO_ERR_MPI/NCCL from the gather;
 * ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_engine_export_safetensors(zo_engine_t *e, const char *path, zo_dtype dtype);

/*
 * zo_safetensors_visit_fn - one tensor of a safetensors file, in the order
 * of its data: @name as in the header (NUL-terminated, any bytes but NUL),
 * @dtype its dtype string ("F32", "BF16", "F16", "F64", "I64", "I32", "I16",
 * "I8", "U8", "BOOL", ...), @ndim dims (0..8) in @dims, @data its @nbytes
 * raw little-endian bytes, inside the caller's buffer. Return 0 to go on;
 * non-zero stops the walk (the parse then returns ZO_ERR_INVALID_USAGE).
 */
typedef int (*zo_safetensors_visit_fn)(void *user, const char *name, const char *dtype, int ndim,
                                       const int64_t *dims, const void *data, size_t nbytes);

/*
 * zo_safetensors_parse() - check @n bytes at @buf as a whole safetensors
 * file, then call @fn once per tensor (the "__metadata__" entry skipped).
 * Every field is checked before the first call: an 8-byte little-endian
 * header length that fits in @n and is at most 100 MB, a JSON object header
 * (no duplicate keys), each entry {dtype: a known dtype, shape: at most 8
 * dims each 0..2^62, data_offsets: [begin, end]} with end - begin equal to
 * the shape's product times the dtype's size (overflow-checked), and the
 * tensors covering the data exactly, with neither holes nor overlap. @fn
 * may be NULL (check only). Reads @buf only; thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @buf with @n > 0); ZO_ERR_CORRUPT
 * (the first thing wrong, named: the byte offset or the tensor and its
 * field; names quoted through zo_escape); ZO_ERR_INVALID_USAGE (@fn
 * stopped); ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_safetensors_parse(const void *buf, size_t n, zo_safetensors_visit_fn fn,
                                      void *user);

/*
 * zo_safetensors_read() - zo_safetensors_parse() of the file @path, read
 * whole into memory (opened without following a final symbolic link and
 * without blocking; anything but a regular file is refused, named).
 * Returns as zo_safetensors_parse, or ZO_ERR_IO naming @path.
 */
ZO_API zo_status zo_safetensors_read(const char *path, zo_safetensors_visit_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_CHECKPOINT_H */
