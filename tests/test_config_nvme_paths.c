/*
 * test_config_nvme_paths.c - zero_optimization.offload_*.nvme_path as a string or a list: the list's
 * directories in order (nvme_path its first), a string unchanged, zo_config_describe and
 * zo_config_nvme_dirs giving the list (one directory once nvme_path alone is overridden), zo_config_nvme_dirs_shared
 * telling the same lists of both blocks from different ones,
 * and bad lists (empty, too long, a non-string, an empty or repeated entry) refused naming the JSON path
 * and the entry's index. Exit 0 pass, 1 fail.
 */
#include <stdio.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"

/* A config with offload_optimizer on nvme at @nvme (JSON text). */
static zo_status parse(const char *nvme, zo_config_t *c) {
  char json[4096];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2, "
           "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": %s}}}",
           nvme);
  return zo_config_parse(json, strlen(json), "t.json", NULL, c);
}

static void refused(const char *nvme, const char *want) {
  static zo_config_t c;
  if (!CHECK_ST(parse(nvme, &c), ZO_ERR_CONFIG)) return;
  CHECK_HAS(zo_last_error(), want);
}

int main(void) {
  static zo_config_t c;
  /* a list: every directory, in order */
  if (CHECK_OK(parse("[\"/nvme0\", \"/nvme1\", \"/mnt/n2\"]", &c))) {
    CHECK(!strcmp(c.zero.offload_optimizer.nvme_path, "/nvme0"));
    CHECK_EQ(c.zero.offload_optimizer.n_nvme_paths, 3);
    const char *p = c.zero.offload_optimizer.nvme_paths;
    CHECK(!strcmp(p, "/nvme0"));
    p += strlen(p) + 1;
    CHECK(!strcmp(p, "/nvme1"));
    p += strlen(p) + 1;
    CHECK(!strcmp(p, "/mnt/n2"));
    char d[8192];
    zo_config_describe(&c, d, sizeof d);
    CHECK_HAS(d, "offload_optimizer.nvme_path = [/nvme0, /nvme1, /mnt/n2]");
    const char *dirs[ZO_CONFIG_MAX_NVME_PATHS];
    CHECK_EQ(zo_config_nvme_dirs(&c, 0, dirs), 3);
    CHECK(!strcmp(dirs[2], "/mnt/n2"));
    CHECK_EQ(zo_config_nvme_dirs(&c, 1, dirs), 1); /* offload_param: absent */
    CHECK(!strcmp(dirs[0], ""));
    /* a tool setting nvme_path alone (zo-train --nvme-path) gets that one directory */
    snprintf(c.zero.offload_optimizer.nvme_path, sizeof c.zero.offload_optimizer.nvme_path, "/x");
    CHECK_EQ(zo_config_nvme_dirs(&c, 0, dirs), 1);
    CHECK(!strcmp(dirs[0], "/x"));
    zo_config_describe(&c, d, sizeof d);
    CHECK_HAS(d, "offload_optimizer.nvme_path = /x\n");
  }
  /* a string: as before, no list */
  if (CHECK_OK(parse("\"/nvme0\"", &c))) {
    CHECK(!strcmp(c.zero.offload_optimizer.nvme_path, "/nvme0"));
    CHECK_EQ(c.zero.offload_optimizer.n_nvme_paths, 0);
  }
  /* a one-entry list is that directory */
  if (CHECK_OK(parse("[\"/nvme0\"]", &c))) {
    CHECK(!strcmp(c.zero.offload_optimizer.nvme_path, "/nvme0"));
    CHECK_EQ(c.zero.offload_optimizer.n_nvme_paths, 1);
  }
  refused("[]", "zero_optimization.offload_optimizer.nvme_path: expected 1..16 directories, got 0");
  refused("[\"/a\", 5]", "zero_optimization.offload_optimizer.nvme_path[1]: expected a directory");
  refused("[\"/a\", \"\"]", "zero_optimization.offload_optimizer.nvme_path[1]: empty path");
  refused("[\"/a\", \"/b\", \"/a\"]",
          "zero_optimization.offload_optimizer.nvme_path[2]: '/a' is also entry 0");
  refused("[\"/0\",\"/1\",\"/2\",\"/3\",\"/4\",\"/5\",\"/6\",\"/7\",\"/8\",\"/9\",\"/10\",\"/11\","
          "\"/12\",\"/13\",\"/14\",\"/15\",\"/16\"]",
          "expected 1..16 directories, got 17");
  refused("{\"a\": 1}", "zero_optimization.offload_optimizer.nvme_path: expected a path string or "
                        "a list of them");
  /* both blocks on nvme: the same list, or no directory in common */
  static const char *const blocks =
      "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
      "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": %s}, "
      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": %s}}}";
  const char *cases[][3] = {{"[\"/a\", \"/b\"]", "[\"/a\", \"/b\"]", NULL},
                            {"[\"/a\", \"/b\"]", "[\"/c\", \"/d\"]", NULL},
                            {"\"/a\"", "\"/a\"", NULL},
                            {"[\"/a\", \"/b\"]", "[\"/c\", \"/b\"]",
                             "zero_optimization.offload_param.nvme_path[1]: '/b' is also in"},
                            {"[\"/a\", \"/b\"]", "\"/a\"",
                             "zero_optimization.offload_param.nvme_path: '/a' is also in"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char json[1024];
    snprintf(json, sizeof json, blocks, cases[k][0], cases[k][1]);
    zo_status st = zo_config_parse(json, strlen(json), "t.json", NULL, &c);
    if (!cases[k][2]) {
      if (CHECK_OK(st)) CHECK_EQ(zo_config_nvme_dirs_shared(&c), k != 1); /* one handle, or two */
    } else if (CHECK_ST(st, ZO_ERR_CONFIG)) {
      CHECK_HAS(zo_last_error(), cases[k][2]);
    }
  }
  return zo_test_finish("test_config_nvme_paths");
}
