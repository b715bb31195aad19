/*
 * data.h - zo-train's text corpus (models/, part of zo_gpt): load bytes from a
 * file or a directory, split them into train / validation deterministically,
 * and cut batches of byte windows. Not a tokenizer (tokens are raw bytes, ids
 * 0..255) and not a streaming loader: the whole corpus is held in memory.
 *
 * Errors are plain ints (0 ok, -1 error) with a one-line message in the
 * caller's buffer; nothing here exits or aborts. A loader is read-only after
 * data_open(), so any number of threads may call the other functions at once
 * (each with its own rng state).
 */
#ifndef ZO_TRAIN_DATA_H
#define ZO_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default corpus: Debian's fortunes (package `fortunes`). */
#define DATA_DEFAULT_PATH "/usr/share/games/fortunes"
/* Split granularity: the corpus is cut into blocks of this many bytes. */
#define DATA_BLOCK_BYTES 4096

typedef enum data_split { DATA_TRAIN = 0, DATA_VAL = 1 } data_split;

typedef struct data_loader data_loader;

/*
 * data_open() - load the corpus at @path and split it.
 * @path: a regular file (symlinks to one are followed), or a directory whose
 *   entries are read in sorted name order (byte-wise strcmp) and concatenated,
 *   skipping names ending in ".dat" or ".u8", symlinks, and anything that is
 *   not a regular file (subdirectories are not descended into).
 * @val_fraction: in [0, 1): expected share of blocks that go to validation.
 * @split_seed: key of the split hash.
 * @seq_len: the model's T; each split must hold at least seq_len+1 bytes.
 * Split: the corpus is cut into blocks of DATA_BLOCK_BYTES bytes (the last
 * one may be shorter); block k goes to val when
 *   splitmix64(k ^ splitmix64(split_seed)) / 2^64 < val_fraction
 * (splitmix64 = Steele, Lea & Flood's finaliser, the one used to seed
 * xoshiro), so both splits sample the whole corpus. If that puts no block in
 * val although val_fraction > 0 (a small corpus), the block with the smallest
 * hash goes to val; if it puts every block in val, the one with the largest
 * hash goes to train. Each split is then one contiguous byte array, blocks in
 * corpus order. With val_fraction == 0 the val split is empty and val calls
 * fail; only train is size-checked.
 * Returns 0 and *@out, or -1 with a message naming the path in @err: missing
 * path, unreadable file or directory, empty corpus ("corpus 'x' is empty"),
 * a split too small ("corpus 'x' has N bytes; need at least M for seq_len T
 * (train A bytes, val B bytes)"), bad arguments, out of memory.
 */
int data_open(const char *path, double val_fraction, uint64_t split_seed, int seq_len,
              data_loader **out, char *err, size_t errlen);

/* data_close() - free the loader; NULL is accepted. */
void data_close(data_loader *d);

/* data_total_bytes() - corpus size in bytes (train + val). */
size_t data_total_bytes(const data_loader *d);

/* data_num_files() - how many files were concatenated (1 for a plain file). */
int data_num_files(const data_loader *d);

/* data_file_name() - path of the i-th file read, in read order; NULL when out of range. */
const char *data_file_name(const data_loader *d, int i);

/* data_split_bytes() - the bytes of @split (contiguous) and, in *@n, their count. */
const uint8_t *data_split_bytes(const data_loader *d, data_split split, size_t *n);

/*
 * data_next_batch() - B random windows of T+1 bytes from @split: row b gets
 * inputs[b*T .. b*T+T-1] = w[0..T-1] and targets[b*T ..] = w[1..T] (the next
 * byte of each input). Window starts are uniform over [0, n-T-1] (n = split
 * bytes), drawn from a splitmix64 stream whose state is *@rng_state (advanced
 * B times; the same state gives the same batch). @inputs and @targets hold
 * B*T bytes each. Returns 0, or -1 when B < 1, T < 1, a pointer is NULL, or
 * the split holds fewer than T+1 bytes.
 */
int data_next_batch(const data_loader *d, data_split split, int B, int T, uint64_t *rng_state,
                    uint8_t *inputs, uint8_t *targets);

/*
 * data_val_windows() - size of the fixed validation set for window length
 * @T: the first min(@max_windows, (n_val-1)/T) non-overlapping windows of the
 * val split, window w starting at byte w*T. Returns that count (0 when val is
 * too small or an argument is < 1).
 */
int data_val_windows(const data_loader *d, int T, int max_windows);

/*
 * data_val_batch() - windows @first .. @first+@B-1 of the fixed validation set
 * (see data_val_windows()) into inputs/targets (B*T bytes each), same layout
 * as data_next_batch(). Returns 0, or -1 when the range runs past the val
 * split or an argument is bad. Deterministic: no rng.
 */
int data_val_batch(const data_loader *d, int T, int first, int B, uint8_t *inputs,
                   uint8_t *targets);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAIN_DATA_H */
