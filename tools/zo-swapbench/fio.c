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

/* fio's command line for one run, and the buffers its arguments live in (argv points into them). */
typedef struct {
  char file[PATH_MAX * 2 + 32], size[64], io[64], rt[64], bs[64], qd[64], rw[32];
  char *argv[20];
} fio_cmd;

/* Fill @a with the fio command line: @path with ':' escaped (fio splits file names on it), the op, the sizes. */
static void fio_cmd_build(fio_cmd *a, const char *path, int is_write, uint64_t size, uint64_t bytes,
                          double max_sec, uint64_t bs, unsigned qd, variant v) {
  char *w = a->file + snprintf(a->file, sizeof a->file, "--filename=");
  for (const char *p = path; *p && w < a->file + sizeof a->file - 3; p++) {
    if (*p == ':') *w++ = '\\';
    *w++ = *p;
  }
  *w = 0;
  snprintf(a->size, sizeof a->size, "--size=%" PRIu64, size);
  snprintf(a->io, sizeof a->io, "--io_size=%" PRIu64, bytes);
  snprintf(a->rt, sizeof a->rt, "--runtime=%ldms", max_sec > 0 ? (long)(max_sec * 1000 + 0.5) : 0L);
  snprintf(a->bs, sizeof a->bs, "--bs=%" PRIu64, bs);
  snprintf(a->qd, sizeof a->qd, "--iodepth=%u", qd);
  snprintf(a->rw, sizeof a->rw, "--rw=%s", is_write ? "write" : "read");
  char *fixed[] = {"fio",
                   "--name=x",
                   a->file,
                   a->size,
                   a->io,
                   a->bs,
                   a->qd,
                   "--ioengine=io_uring",
                   "--direct=1",
                   a->rw,
                   "--output-format=json"};
  int argc = 0;
  for (; argc < 11; argc++) a->argv[argc] = fixed[argc];
  if (max_sec > 0) a->argv[argc++] = a->rt;
  if (v.regbuf > 0) {
    a->argv[argc++] = "--fixedbufs";
    a->argv[argc++] = "--registerfiles";
  }
  if (v.sqpoll > 0) a->argv[argc++] = "--sqthread_poll";
  a->argv[argc] = NULL;
}

/* Read @fd to its end into a NUL-terminated buffer; NULL when out of memory. */
static char *read_all(int fd) {
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
    ssize_t n = read(fd, out + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  if (out) out[len] = 0;
  return out;
}

/* Run fio with @argv (stderr to /dev/null) and return its stdout in *@out (the caller frees it); -1 with @note. */
static int run_fio(char *const argv[], char **out, char *note, size_t note_n) {
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
    execvp(argv[0], argv);
    _exit(127);
  }
  close(pipefd[1]);
  char *text = read_all(pipefd[0]);
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!text) {
    snprintf(note, note_n, "out of memory reading fio output");
    return -1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(note, note_n, "fio exited with status %d",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(text);
    return -1;
  }
  *out = text;
  return 0;
}

/* fio's completion latency percentile @key ("99.000000") of @opj, in microseconds; -1 when absent. */
static double fio_clat_us(json_t *opj, const char *key) {
  json_t *v = json_object_get(json_object_get(json_object_get(opj, "clat_ns"), "percentile"), key);
  return json_is_number(v) ? json_number_value(v) / 1e3 : -1;
}

/* The op's bandwidth, bytes, seconds, IOPS, completion latency percentiles and the job's CPU time from
 * fio's JSON output @out (fio may print notes before it). */
static int parse_fio_json(const char *out, int is_write, uint64_t bytes, meas *m, char *note,
                          size_t note_n) {
  const char *brace = strchr(out, '{');
  json_error_t jerr;
  json_t *root = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &jerr) : NULL;
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
    m->gbps = json_number_value(bw) / 1e9;
    m->moved = json_is_number(iob) ? (uint64_t)json_number_value(iob) : bytes;
    m->sec = json_is_number(rt) ? json_number_value(rt) / 1e3 : (double)m->moved / (m->gbps * 1e9);
    json_t *iops = json_object_get(opj, "iops");
    m->iops = json_is_number(iops) ? json_number_value(iops) : -1;
    m->p50_us = fio_clat_us(opj, "50.000000");
    m->p99_us = fio_clat_us(opj, "99.000000");
    m->p999_us = fio_clat_us(opj, "99.900000");
    /* usr_cpu / sys_cpu: percent of the job's run time (job_runtime, ms) */
    json_t *usr = json_object_get(job, "usr_cpu"), *sys = json_object_get(job, "sys_cpu");
    json_t *jrt = json_object_get(job, "job_runtime");
    double run_s = json_is_number(jrt) ? json_number_value(jrt) / 1e3 : m->sec;
    m->cpu_s = json_is_number(usr) && json_is_number(sys)
                   ? (json_number_value(usr) + json_number_value(sys)) / 100 * run_s
                   : -1;
    rc = 0;
  }
  json_decref(root);
  return rc;
}

/* Run fio once on @path (':' escaped, as fio splits file names on it) and return bw_bytes of the op. */
int fio_transfer(const char *path, int is_write, uint64_t size, uint64_t bytes, double max_sec,
                 uint64_t bs, unsigned qd, variant v, meas *m, char *note, size_t note_n) {
  fio_cmd cmd;
  fio_cmd_build(&cmd, path, is_write, size, bytes, max_sec, bs, qd, v);
  char *out = NULL;
  if (run_fio(cmd.argv, &out, note, note_n) != 0) return -1;
  int rc = parse_fio_json(out, is_write, bytes, m, note, note_n);
  free(out);
  return rc;
}
