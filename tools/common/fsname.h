/* fsname.h - the name of a file system, as the tools print it (tools/common/fsname.c). */
#ifndef ZO_TOOLS_FSNAME_H
#define ZO_TOOLS_FSNAME_H

#include <stddef.h>

/*
 * zo_tool_fs_name() - the file system's name for statfs()'s f_type @type ("ext4", "xfs", "tmpfs",
 * "nfs", ...: the ones a swap directory is likely on), else its number "0x..." written into @buf
 * (@n bytes), which is returned then. Thread-safe.
 */
const char *zo_tool_fs_name(unsigned long type, char *buf, size_t n);

/* 1 when @type keeps its files in memory (tmpfs, ramfs): what is measured there is RAM, not a drive. */
int zo_tool_fs_is_memory(unsigned long type);

/* 1 when @type reports an anonymous device number for a file system on a real disk (btrfs, zfs,
 * bcachefs): a major number of 0 does not mean "not on a block device" there. */
int zo_tool_fs_anon_dev(unsigned long type);

#endif
