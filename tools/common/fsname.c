/* fsname.c - file systems by statfs() magic number, for zo-report and zo-swapbench (fsname.h). */
#include "fsname.h"

#include <stdio.h>

enum {
  FS_EXT4 = 0xEF53,
  FS_XFS = 0x58465342,
  FS_BTRFS = 0x9123683E,
  FS_ZFS = 0x2fc12fc1,
  FS_BCACHEFS = 0xca451a4e,
  FS_TMPFS = 0x01021994,
  FS_RAMFS = 0x858458f6,
  FS_OVERLAY = 0x794c7630,
  FS_NFS = 0x6969,
  FS_CIFS = 0xff534d42,
  FS_FUSE = 0x65735546,
  FS_9P = 0x01021997,
};

const char *zo_tool_fs_name(unsigned long type, char *buf, size_t n) {
  switch (type) {
    case FS_EXT4: return "ext4";
    case FS_XFS: return "xfs";
    case FS_BTRFS: return "btrfs";
    case FS_ZFS: return "zfs";
    case FS_BCACHEFS: return "bcachefs";
    case FS_TMPFS: return "tmpfs";
    case FS_RAMFS: return "ramfs";
    case FS_OVERLAY: return "overlayfs";
    case FS_NFS: return "nfs";
    case FS_CIFS: return "cifs";
    case FS_FUSE: return "fuse";
    case FS_9P: return "9p";
    default: snprintf(buf, n, "0x%lx", type); return buf;
  }
}

int zo_tool_fs_is_memory(unsigned long type) { return type == FS_TMPFS || type == FS_RAMFS; }

int zo_tool_fs_anon_dev(unsigned long type) {
  return type == FS_BTRFS || type == FS_ZFS || type == FS_BCACHEFS;
}
