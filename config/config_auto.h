/*
 * config_auto.h - private: filling in "auto" values of a parsed JSON config
 * (config_auto.c) before config.c reads it. Not installed.
 */
#ifndef ZO_CONFIG_AUTO_H
#define ZO_CONFIG_AUTO_H

#include <jansson.h>

#include "zoffload/config.h"

/*
 * cfg_fill_auto() - replace every "auto" string at a key zo_config_auto
 * lists (zoffload/config.h) in @root with the value from @a, logging each
 * once; "auto" elsewhere is left for the parser's type error. @src names the
 * document. Returns ZO_OK, or ZO_ERR_CONFIG naming the key when @a lacks the
 * value it needs (also when @a is NULL), ZO_ERR_OUT_OF_MEMORY.
 */
zo_status cfg_fill_auto(json_t *root, const zo_config_auto *a, int world_size, const char *src);

#endif /* ZO_CONFIG_AUTO_H */
