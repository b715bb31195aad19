/*
 * test_swap_queue.c - zo_swap_set_queue() (block size and queue depth changed
 * on an idle handle, data and registrations kept, misuse refused) and the ring
 * setup modes (COOP_TASKRUN default, SINGLE_ISSUER|DEFER_TASKRUN, plain, SQPOLL,
 * the pread pool): round trips through wait and through a zo_swap_poll() spin;
 * ZO_SWAP_RING_FLAGS values and conflicts refused at create, and a mode the
 * kernel refuses (simulated with seccomp) an error naming its requirement.
 * Usage: test_swap_queue [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/swap.h"

#define FILE_BYTES (8u << 20)

static uint64_t g_rng = 0xC0FFEEu;

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = zo_test_rand64(&g_rng);
    memcpy(p + i, &v, 8);
  }
}

/* Write @n random bytes at @off in @nreq requests submitted together, read them back with
 * zo_swap_poll() spins (no wait until done) into a cleared buffer, compare. */
static void round_trip(zo_swap_t *sw, zo_swap_file_t *f, unsigned char *src, unsigned char *dst,
                       uint64_t off, size_t n, unsigned nreq, const char *what) {
  fill_random(src, n);
  memset(dst, 0, n);
  size_t part = n / nreq;
  zo_swap_req_t *r[16];
  for (unsigned i = 0; i < nreq; i++)
    CHECK_OK(zo_swap_submit_write(sw, f, off + i * part, src + i * part, part, &r[i]));
  for (unsigned i = 0; i < nreq; i++) CHECK_OK(zo_swap_wait(sw, r[i]));
  for (unsigned i = 0; i < nreq; i++)
    CHECK_OK(zo_swap_submit_read(sw, f, off + i * part, dst + i * part, part, &r[i]));
  for (unsigned i = 0; i < nreq; i++) {
    int done = 0;
    long spins = 0;
    while (!done && spins < 200000000L) {
      if (!CHECK_OK(zo_swap_poll(sw, r[i], &done))) break;
      spins++;
    }
    if (!CHECK(done)) fprintf(stderr, "  (%s: request %u never polled done)\n", what, i);
    CHECK_OK(zo_swap_wait(sw, r[i]));
  }
  if (CHECK_BYTES(what, dst, src, n)) fprintf(stderr, "  (%s)\n", what);
}

static void test_set_queue(const char *root) {
  zo_swap_opts o = {.block_size = 1 << 20, .queue_depth = 16, .rank = 1, .register_files = 1};
  zo_swap_t *sw = NULL;
  if (!CHECK_OK(zo_swap_create(root, &o, &sw))) return;
  size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "q.swp", FILE_BYTES, &f));
  unsigned char *src = aligned_alloc(a, FILE_BYTES), *dst = aligned_alloc(a, FILE_BYTES);
  if (!f || !src || !dst) {
    CHECK(0);
    zo_swap_destroy(sw);
    return;
  }
  struct iovec iov[2] = {{src, FILE_BYTES}, {dst, FILE_BYTES}};
  CHECK_OK(zo_swap_register_buffers(sw, iov, 2));

  /* Data written under one geometry reads back under another. */
  fill_random(src, FILE_BYTES);
  CHECK_OK(zo_swap_write(sw, f, 0, src, FILE_BYTES));
  CHECK_OK(zo_swap_set_queue(sw, 3 * a, 5));
  CHECK_EQ(zo_swap_block_size(sw), 3 * a);
  CHECK_EQ(zo_swap_queue_depth(sw), 5);
  memset(dst, 0, FILE_BYTES);
  CHECK_OK(zo_swap_read(sw, f, 0, dst, FILE_BYTES));
  CHECK_BYTES("read after set_queue(3*align, 5)", dst, src, FILE_BYTES);

  static const struct {
    size_t block;
    unsigned qd;
  } shapes[] = {{4096, 1}, {64 * 1024, 16}, {256 * 1024, 3}, {4 << 20, 2}, {1 << 20, 16}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    CHECK_OK(zo_swap_set_queue(sw, shapes[i].block, shapes[i].qd));
    CHECK_EQ(zo_swap_queue_depth(sw), shapes[i].qd);
    CHECK_EQ(zo_swap_block_size(sw), (shapes[i].block + a - 1) / a * a);
    char what[96];
    snprintf(what, sizeof what, "set_queue block %zu qd %u", shapes[i].block, shapes[i].qd);
    round_trip(sw, f, src, dst, 2 * a, FILE_BYTES - 4 * a, 4, what);
  }
  CHECK_EQ(zo_swap_n_registered_buffers(sw), 2); /* registrations survive */
  CHECK(zo_swap_uses_fixed_files(sw));

  /* 0 keeps a value; misuse is refused and changes nothing. */
  CHECK_OK(zo_swap_set_queue(sw, 0, 7));
  CHECK_EQ(zo_swap_block_size(sw), 1 << 20);
  CHECK_EQ(zo_swap_queue_depth(sw), 7);
  CHECK_ST(zo_swap_set_queue(sw, 0, 17), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "exceeds 16");
  CHECK_ST(zo_swap_set_queue(sw, ((size_t)1 << 30) + 1, 0), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_swap_set_queue(NULL, 4096, 1), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_swap_queue_depth(sw), 7);
  fill_random(src, FILE_BYTES);
  CHECK_OK(zo_swap_write(sw, f, 0, src, FILE_BYTES));
  memset(dst, 0, FILE_BYTES);
  zo_swap_req_t *r = NULL;
  CHECK_OK(zo_swap_submit_read(sw, f, 0, dst, FILE_BYTES, &r));
  CHECK_ST(zo_swap_set_queue(sw, 4096, 1), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), "outstanding");
  CHECK_OK(zo_swap_wait(sw, r));
  CHECK_EQ(zo_swap_block_size(sw), 1 << 20);
  CHECK_BYTES("read after refused set_queue", dst, src, FILE_BYTES);
  zo_swap_destroy(sw);
  free(src);
  free(dst);
}

/* Each ring mode: create, say what it is, round trip through wait and poll. */
static void test_ring_mode(const char *root, const char *env, int single, int sqpoll, int pool,
                           int rank) {
  if (env)
    setenv("ZO_SWAP_RING_FLAGS", env, 1);
  else
    unsetenv("ZO_SWAP_RING_FLAGS");
  if (pool)
    setenv("ZO_SWAP_FORCE_PREAD", "1", 1);
  else
    unsetenv("ZO_SWAP_FORCE_PREAD");
  zo_swap_opts o = {.block_size = 128 * 1024,
                    .queue_depth = 8,
                    .rank = rank,
                    .single_issuer = single,
                    .sqpoll = sqpoll,
                    .sqpoll_idle_ms = 10};
  zo_swap_t *sw = NULL;
  zo_status st = zo_swap_create(root, &o, &sw);
  unsetenv("ZO_SWAP_RING_FLAGS");
  unsetenv("ZO_SWAP_FORCE_PREAD");
  if (!CHECK_OK(st)) return;
  const char *d = zo_swap_describe(sw);
  printf("mode env=%s single=%d sqpoll=%d pool=%d: %s\n", env ? env : "-", single, sqpoll, pool, d);
  CHECK_EQ(zo_swap_uses_io_uring(sw), !pool);
  if (!pool && !sqpoll && (single || (env && !strcmp(env, "defer")))) CHECK_HAS(d, "defer_taskrun");
  if (!pool && !single && !sqpoll && !env) CHECK_HAS(d, "coop_taskrun");
  if (sqpoll) CHECK_HAS(d, ", sqpoll");
  if (env && !strcmp(env, "none")) CHECK(strstr(d, "taskrun") == NULL);
  size_t a = zo_swap_alignment(sw);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "m.swp", FILE_BYTES, &f));
  unsigned char *src = aligned_alloc(a, FILE_BYTES), *dst = aligned_alloc(a, FILE_BYTES);
  if (f && src && dst) {
    char what[96];
    snprintf(what, sizeof what, "ring mode env=%s single=%d sqpoll=%d pool=%d", env ? env : "-",
             single, sqpoll, pool);
    round_trip(sw, f, src, dst, 0, FILE_BYTES, 8, what);
    round_trip(sw, f, src, dst, a, 64 * a, 1, what);
  } else {
    CHECK(0);
  }
  zo_swap_destroy(sw);
  free(src);
  free(dst);
}

/*
 * ZO_SWAP_RING_FLAGS: an unknown value is refused naming the variable and the
 * accepted values; "defer" with the progress thread (whose thread, not the
 * creating one, submits) is refused at create naming the requirement, instead
 * of every transfer failing later with "File exists" (io_uring_enter's EEXIST
 * for a SINGLE_ISSUER ring entered by another task); "defer" and "coop" win
 * over opts.single_issuer either way.
 */
static void test_ring_env(const char *root) {
  zo_swap_t *sw = (zo_swap_t *)1;
  zo_swap_opts o = {.block_size = 128 * 1024, .queue_depth = 8, .rank = 8};
  setenv("ZO_SWAP_RING_FLAGS", "xyz", 1);
  if (!CHECK_ST(zo_swap_create(root, &o, &sw), ZO_ERR_INVALID_ARG))
    zo_swap_destroy(sw); /* was silently ignored */
  CHECK_HAS(zo_last_error(), "ZO_SWAP_RING_FLAGS='xyz' is not one of none, coop, defer");
  printf("ok: %s\n", zo_last_error());
  setenv("ZO_SWAP_RING_FLAGS", "defer", 1);
  zo_swap_opts bg = o;
  bg.progress_thread = 1;
  zo_status st = zo_swap_create(root, &bg, &sw);
  if (st == ZO_OK && sw) { /* if it is taken, it must work: one round trip */
    zo_swap_file_t *f = NULL;
    size_t a = zo_swap_alignment(sw);
    unsigned char *src = aligned_alloc(a, 1 << 20), *dst = aligned_alloc(a, 1 << 20);
    if (CHECK_OK(zo_swap_file_create(sw, "m.swp", 1 << 20, &f)) && src && dst) {
      fill_random(src, 1 << 20);
      CHECK_OK(zo_swap_write(sw, f, 0, src, 1 << 20));
      CHECK_OK(zo_swap_read(sw, f, 0, dst, 1 << 20));
      CHECK_BYTES("defer + progress thread", dst, src, 1 << 20);
    }
    free(src);
    free(dst);
    zo_swap_destroy(sw);
    FAIL_AT(
        "ZO_SWAP_RING_FLAGS=defer with progress_thread was taken; it must be refused at create");
  } else {
    CHECK_EQ(st, ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(), "ZO_SWAP_RING_FLAGS=defer");
    CHECK_HAS(zo_last_error(), "progress_thread");
    CHECK_HAS(zo_last_error(), "SINGLE_ISSUER");
    printf("ok: %s\n", zo_last_error());
  }
  zo_swap_opts sq = o;
  sq.sqpoll = 1;
  sw = NULL;
  if (!CHECK_ST(zo_swap_create(root, &sq, &sw), ZO_ERR_INVALID_ARG))
    zo_swap_destroy(sw); /* was: SQPOLL, defer ignored */
  CHECK_HAS(zo_last_error(), "sqpoll");
  /* coop over opts.single_issuer */
  setenv("ZO_SWAP_RING_FLAGS", "coop", 1);
  zo_swap_opts si = o;
  si.single_issuer = 1;
  sw = NULL;
  if (CHECK_OK(zo_swap_create(root, &si, &sw))) {
    CHECK_HAS(zo_swap_describe(sw), "coop_taskrun");
    zo_swap_destroy(sw);
  }
  unsetenv("ZO_SWAP_RING_FLAGS");
}

/*
 * A kernel that refuses the flags (older than 6.1 answers EINVAL to
 * DEFER_TASKRUN): simulated in a child whose io_uring_setup a seccomp filter
 * fails with EINVAL. ZO_SWAP_RING_FLAGS=defer is then an error naming the
 * requirement, never a quiet fallback; unset, the pool fallback still works.
 */
static void test_ring_env_old_kernel(const char *root) {
  pid_t pid = fork();
  if (pid == 0) {
    struct sock_filter filt[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filt / sizeof filt[0], .filter = filt};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(ZO_TEST_SKIP);
    zo_swap_opts o = {.queue_depth = 8, .rank = 9};
    zo_swap_t *sw = (zo_swap_t *)1;
    setenv("ZO_SWAP_RING_FLAGS", "defer", 1);
    CHECK_ST(zo_swap_create(root, &o, &sw), ZO_ERR_UNSUPPORTED);
    CHECK(sw == NULL);
    CHECK_HAS(zo_last_error(), "ZO_SWAP_RING_FLAGS=defer");
    CHECK_HAS(zo_last_error(),
              "refused: Invalid argument (needs Linux 6.1+ and liburing 2.3+; kernel ");
    printf("ok: old kernel: %s\n", zo_last_error());
    setenv("ZO_SWAP_RING_FLAGS", "none", 1);
    CHECK_ST(zo_swap_create(root, &o, &sw), ZO_ERR_UNSUPPORTED);
    unsetenv("ZO_SWAP_RING_FLAGS");
    if (CHECK_OK(zo_swap_create(root, &o, &sw))) { /* no override: the pool, as before */
      CHECK_EQ(zo_swap_uses_io_uring(sw), 0);
      zo_swap_destroy(sw);
    }
    fflush(stdout);
    _exit(zo_test_failures ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == ZO_TEST_SKIP)
    printf(
        "note: cannot install a seccomp filter; a kernel refusing DEFER_TASKRUN is not covered\n");
  else
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-queue", root, sizeof root))
    return ZO_TEST_SKIP;
  test_set_queue(root);
  test_ring_env(root);
  test_ring_env_old_kernel(root);
  test_ring_mode(root, NULL, 0, 0, 0, 2);
  test_ring_mode(root, NULL, 1, 0, 0, 3);
  test_ring_mode(root, "none", 0, 0, 0, 4);
  test_ring_mode(root, "defer", 0, 0, 0, 5);
  test_ring_mode(root, NULL, 0, 1, 0, 6);
  test_ring_mode(root, NULL, 0, 0, 1, 7);
  CHECK_EQ(zo_test_count_entries(root), 0); /* every private directory removed */
  rmdir(root);
  return zo_test_finish("test_swap_queue");
}
