/*
 * fio.c - zo-swapbench's third engine: one fio run (io_uring engine, O_DIRECT) per measurement, its JSON
 * output parsed for the op's bandwidth. Not a fio wrapper for anything else.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "swapbench.h"

/* ---- engine 3: fio's io_uring engine ------------------------------------------------------------------ */

int have_program(const char *name) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

/* Run fio once on @path (':' escaped, as fio splits file names on it) and return bw_bytes of the op. */
int fio_transfer(const char *path, int is_write, uint64_t size, uint64_t bytes, double max_sec, uint64_t bs,
                        unsigned qd, variant v, double *gbps, double *sec, uint64_t *moved, char *note, size_t note_n) {
  char a_file[PATH_MAX * 2 + 32], a_size[64], a_io[64], a_rt[64], a_bs[64], a_qd[64], a_rw[32];
  char *w = a_file + snprintf(a_file, sizeof a_file, "--filename=");
  for (const char *p = path; *p && w < a_file + sizeof a_file - 3; p++) {
    if (*p == ':') *w++ = '\\';
    *w++ = *p;
  }
  *w = 0;
  snprintf(a_size, sizeof a_size, "--size=%" PRIu64, size);
  snprintf(a_io, sizeof a_io, "--io_size=%" PRIu64, bytes);
  snprintf(a_rt, sizeof a_rt, "--runtime=%ldms", max_sec > 0 ? (long)(max_sec * 1000 + 0.5) : 0L);
  snprintf(a_bs, sizeof a_bs, "--bs=%" PRIu64, bs);
  snprintf(a_qd, sizeof a_qd, "--iodepth=%u", qd);
  snprintf(a_rw, sizeof a_rw, "--rw=%s", is_write ? "write" : "read");
  char *argv[20] = {"fio", "--name=x", a_file, a_size, a_io, a_bs, a_qd, "--ioengine=io_uring", "--direct=1", a_rw,
                    "--output-format=json"};
  int argc = 11;
  if (max_sec > 0) argv[argc++] = a_rt;
  if (v.regbuf > 0) {
    argv[argc++] = "--fixedbufs";
    argv[argc++] = "--registerfiles";
  }
  if (v.sqpoll > 0) argv[argc++] = "--sqthread_poll";
  argv[argc] = NULL;

  int pipefd[2];
  if (pipe(pipefd) != 0) {
    snprintf(note, note_n, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(note, note_n, "fork: %s", strerror(errno));
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    execvp("fio", argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  for (;;) {
    if (!out) break;
    if (len + 4096 > cap) {
      char *n = realloc(out, cap * 2);
      if (!n) {
        free(out);
        out = NULL;
        break;
      }
      out = n;
      cap *= 2;
    }
    ssize_t n = read(pipefd[0], out + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!out) {
    snprintf(note, note_n, "out of memory reading fio output");
    return -1;
  }
  out[len] = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(note, note_n, "fio exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(out);
    return -1;
  }
  /* fio may print notes before its JSON document. */
  char *brace = strchr(out, '{');
  json_error_t jerr;
  json_t *root = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &jerr) : NULL;
  free(out);
  if (!root) {
    snprintf(note, note_n, "fio output is not JSON");
    return -1;
  }
  int rc = -1;
  json_t *job = json_array_get(json_object_get(root, "jobs"), 0);
  json_t *opj = json_object_get(job, is_write ? "write" : "read");
  json_t *bw = json_object_get(opj, "bw_bytes");
  json_t *iob = json_object_get(opj, "io_bytes");
  json_t *rt = json_object_get(opj, "runtime"); /* ms */
  json_t *jerr_code = json_object_get(job, "error");
  if (jerr_code && json_integer_value(jerr_code) != 0) {
    snprintf(note, note_n, "fio job error %" JSON_INTEGER_FORMAT, json_integer_value(jerr_code));
  } else if (!json_is_number(bw) || json_number_value(bw) <= 0) {
    snprintf(note, note_n, "fio JSON has no %s.bw_bytes", is_write ? "write" : "read");
  } else {
    *gbps = json_number_value(bw) / 1e9;
    *moved = json_is_number(iob) ? (uint64_t)json_number_value(iob) : bytes;
    *sec = json_is_number(rt) ? json_number_value(rt) / 1e3 : (double)*moved / (*gbps * 1e9);
    rc = 0;
  }
  json_decref(root);
  return rc;
}
