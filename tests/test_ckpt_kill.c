/*
 * test_ckpt_kill.c - a save killed at any moment leaves a whole checkpoint:
 * the old one or the new one, each with its own caller's file
 * (zo_save_opts.files), never a mix and never one without its file.
 *
 * For a reused tag ("best", as DeepSpeed users save their best model) and
 * for per-step tags ("gen<N>" with `latest` moved), a child process saves
 * generation 1, then another saves generation 2 with ZO_CKPT_KILL_AT set to
 * each stage of a save in turn (ck_fault in offload/checkpoint/save.c: locked,
 * tmp-made, rank-file, manifest-half, manifest, file-half, files, synced,
 * placed, root-synced, latest, old-removed) and dies by SIGKILL there. Then
 * a fresh engine loads `latest`: it must load, its weights must be one
 * generation's throughout, the caller's file read through
 * zo_checkpoint_read_file() must be the same generation's, and the kill at
 * "placed" or later must show generation 2 (the switch is one step); a next
 * save must go through and leave nothing of the killed one behind. Then 50
 * kills at random moments of a loop of saves (reused and per-step tags, 25
 * each), each followed by the same checks.
 *
 * usage: test_ckpt_kill [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_rig.h"
#include "zo_test.h"
#include "zoffload/checkpoint.h"

#define FILE_NAME "client_state.bin"
#define FILE_BYTES ((size_t)256 << 10) /* big enough that a kill can land mid-write */

static const char *const k_stages[] = {"locked",   "tmp-made",    "rank-file", "manifest-half",
                                       "manifest", "file-half",   "files",     "synced",
                                       "placed",   "root-synced", "latest",    "old-removed"};
/* The first stage whose kill leaves the new checkpoint loading: "placed" for a reused tag (its name switched to the
 * new one), "latest" for per-step tags (`latest` moved to it). */
enum {
  N_STAGES = sizeof k_stages / sizeof k_stages[0],
  FIRST_NEW_REUSED = 8,
  FIRST_NEW_PER_STEP = 10
};

/* Generation @g's weights (g + i / 64) and caller's file (every byte g, the first 8 bytes the generation). */
static void gen_values(int g, float *w) {
  for (int i = 0; i < 64; i++) w[i] = (float)g + (float)i / 64.f;
}

static unsigned char *gen_file(int g) {
  unsigned char *b = malloc(FILE_BYTES);
  if (!b) return NULL;
  memset(b, g & 0xff, FILE_BYTES);
  memcpy(b, &g, sizeof g);
  return b;
}

/* Save generation @g under @root, as "best" (@per_step 0) or "gen<g>"; returns the status. */
static zo_status save_gen(ckpt_rig *r, const char *root, int g, int per_step) {
  float w[64];
  gen_values(g, w);
  zo_status st = zo_engine_load_param(r->e, r->p, w);
  unsigned char *b = gen_file(g);
  if (!b) return ZO_ERR_OUT_OF_MEMORY;
  char name[32];
  snprintf(name, sizeof name, per_step ? "gen%d" : "best", g);
  zo_save_file f = {.name = FILE_NAME, .data = b, .nbytes = FILE_BYTES};
  zo_save_opts o = {.tag = g, .name = name, .files = &f, .n_files = 1};
  if (st == ZO_OK) st = zo_engine_save(r->e, root, &o, NULL, 0);
  free(b);
  return st;
}

/* In a child: open an engine, save generations @from..@to (to < 0: forever), writing one byte to @ready_fd (may
 * be -1) before the first save; exit 0 when all saved, 1 on an error. */
static pid_t child_saves(const char *root, int from, int to, int per_step, const char *kill_at,
                         int ready_fd) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (kill_at) setenv("ZO_CKPT_KILL_AT", kill_at, 1);
  ckpt_rig r;
  if (ckpt_rig_open(&r, 0) != ZO_OK) _exit(1);
  if (ready_fd >= 0 && write(ready_fd, "r", 1) != 1) _exit(1);
  for (int g = from; to < 0 || g <= to; g++)
    if (save_gen(&r, root, g, per_step) != ZO_OK) {
      fprintf(stderr, "child: save of generation %d: %s\n", g, zo_last_error());
      _exit(1);
    }
  ckpt_rig_close(&r);
  _exit(0);
}

/* The generation `latest` under @root loads as, checked whole: weights of one generation, the caller's file of the
 * same one. Returns it, or -1 after a failed check. */
static int loaded_gen(const char *root) {
  ckpt_rig r;
  int g = -1;
  if (!CHECK_OK(ckpt_rig_open(&r, 0))) return -1;
  char latest[4300], dir[4600];
  FILE *f = NULL;
  snprintf(latest, sizeof latest, "%s/latest", root);
  if (CHECK_OK(zo_engine_load(r.e, root, NULL)) && CHECK((f = fopen(latest, "r")) != NULL)) {
    char name[300] = "";
    CHECK(fscanf(f, "%299s", name) == 1);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    float w[64], want[64];
    size_t so, sn;
    void *data = NULL;
    size_t n = 0;
    if (CHECK_OK(zo_engine_get_master(r.e, r.p, w, &so, &sn)) &&
        CHECK_OK(zo_checkpoint_read_file(dir, FILE_NAME, &data, &n)) && CHECK_EQ(n, FILE_BYTES)) {
      int fg;
      memcpy(&fg, data, sizeof fg);
      gen_values(fg, want);
      unsigned char *b = gen_file(fg);
      if (b && CHECK_BYTES("weights of the file's generation", w, want, sizeof w) == 0 &&
          CHECK_BYTES("the caller's file", data, b, FILE_BYTES) == 0)
        g = fg;
      free(b);
    }
    free(data);
  }
  if (f) fclose(f);
  ckpt_rig_close(&r);
  return g;
}

/* Nothing but checkpoints, `latest` and the lock file under @root: no .tmp-/.old- directory, no .latest.*.tmp. */
static int root_clean(const char *root) {
  DIR *d = opendir(root);
  if (!CHECK(d != NULL)) return 0;
  struct dirent *de;
  int ok = 1;
  while ((de = readdir(d)))
    if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        strcmp(de->d_name, ".zoffload-lock"))
      ok = FAIL_AT("%s/%s left behind", root, de->d_name);
  closedir(d);
  return ok;
}

static int wait_child(pid_t pid, int *sig) {
  int ws;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return -1;
  *sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void one_stage(const char *base, int per_step, int s) {
  char root[4200];
  snprintf(root, sizeof root, "%s/%s-%s", base, per_step ? "step" : "best", k_stages[s]);
  if (!CHECK(mkdir(root, 0755) == 0)) return;
  int sig = 0;
  if (!CHECK_EQ(wait_child(child_saves(root, 1, 1, per_step, NULL, -1), &sig), 0)) return;
  wait_child(child_saves(root, 2, 2, per_step, k_stages[s], -1), &sig);
  if (!CHECK_EQ(sig, SIGKILL)) fprintf(stderr, "  stage %s was not reached\n", k_stages[s]);
  int g = loaded_gen(root);
  fprintf(stderr, "%s tag, killed at %-13s -> loads generation %d\n",
          per_step ? "per-step" : "reused", k_stages[s], g);
  CHECK_EQ(g, s >= (per_step ? FIRST_NEW_PER_STEP : FIRST_NEW_REUSED) ? 2 : 1);
  /* the next save goes through, removes what the killed one left, and is what loads */
  if (CHECK_EQ(wait_child(child_saves(root, 3, 3, per_step, NULL, -1), &sig), 0)) {
    CHECK_EQ(loaded_gen(root), 3);
    root_clean(root);
  }
}

static void random_kills(const char *base, int per_step, int rounds, uint64_t *rng) {
  char root[4200];
  snprintf(root, sizeof root, "%s/random-%s", base, per_step ? "step" : "best");
  if (!CHECK(mkdir(root, 0755) == 0)) return;
  int sig = 0;
  if (!CHECK_EQ(wait_child(child_saves(root, 1, 1, per_step, NULL, -1), &sig), 0)) return;
  /* how long one save takes here, so the kills spread over several saves */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_EQ(wait_child(child_saves(root, 2, 6, per_step, NULL, -1), &sig), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double save_s =
      ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / 5;
  int g_next = 7, seen_new = 0;
  for (int k = 0; k < rounds; k++) {
    int pfd[2];
    if (!CHECK(pipe(pfd) == 0)) return;
    const int from = g_next;
    pid_t pid = child_saves(root, from, -1, per_step, NULL, pfd[1]);
    close(pfd[1]);
    char c;
    CHECK(read(pfd[0], &c, 1) == 1); /* its engine is open */
    close(pfd[0]);
    const double delay = zo_test_rand_uniform(rng, 0, 3.0 * save_s);
    struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    wait_child(pid, &sig);
    int g = loaded_gen(root);
    if (!CHECK(g >= 1 && g < from + 1000)) break;
    if (g >= from) seen_new++;
    g_next = (g > from ? g : from) + 1000; /* well past anything the killed child reached */
  }
  fprintf(
      stderr,
      "%d random kills, %s tag: every load whole; %d of them loaded a generation the killed process "
      "saved (one save %.1f ms)\n",
      rounds, per_step ? "per-step" : "reused", seen_new, save_s * 1e3);
  if (CHECK_EQ(wait_child(child_saves(root, g_next, g_next, per_step, NULL, -1), &sig), 0))
    root_clean(root);
}

int main(int argc, char **argv) {
  char base[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "ckpt-kill", base, sizeof base))
    return ZO_TEST_SKIP;
  for (int per_step = 0; per_step < 2; per_step++)
    for (int s = 0; s < N_STAGES; s++) one_stage(base, per_step, s);
  uint64_t rng = 0x5eed2026ull ^ (uint64_t)getpid();
  random_kills(base, 0, 25, &rng);
  random_kills(base, 1, 25, &rng);
  return zo_test_finish("test_ckpt_kill");
}
