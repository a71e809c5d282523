/* libtheseus_audit_nccl.so — the LD_AUDIT shim that makes a program which
 * loads NCCL load Theseus instead, without relinking it:
 *
 *   LD_AUDIT=/prefix/lib/libtheseus_audit_nccl.so python train.py
 *
 * The dynamic linker asks la_objsearch for every library name it looks up;
 * when the original name (flag LA_SER_ORIG) is libnccl.so or libnccl.so.2,
 * with or without a directory, the shim answers with the path of
 * libtheseus_nccl.so. That path is, in order of precedence:
 *   MSCCLPP_NCCL_AUDIT_TARGET, THESEUS_NCCL_AUDIT_TARGET (a full path), or
 *   libtheseus_nccl.so in the directory the shim itself was loaded from.
 * The real NCCL named by THESEUS_NCCL_LIB_PATH (Theseus's fallback) is never
 * redirected.
 *
 * Plain C on purpose: an audit module runs in its own link namespace with
 * its own libc, before the program; a second Go runtime is not possible
 * there. Strings returned to the linker live in static storage. Nothing is
 * redirected if libnccl is already loaded (the linker checks that before
 * asking), and LD_AUDIT is ignored for setuid programs.
 *
 * With THESEUS_DEBUG=INFO (or TRACE) each redirection is logged to stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char target[PATH_MAX];
static char skip[PATH_MAX];
static int verbose;
static int ready;

static const char* env2(const char* name) {
  char a[128], b[128];
  snprintf(a, sizeof a, "MSCCLPP_%s", name);
  snprintf(b, sizeof b, "THESEUS_%s", name);
  const char* v = getenv(a);
  return v && *v ? v : getenv(b);
}

static void copy(char* dst, const char* src) {
  size_t n = strlen(src);
  if (n >= PATH_MAX) n = PATH_MAX - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
}

static void setup(void) {
  if (ready) return;
  ready = 1;
  const char* t = env2("NCCL_AUDIT_TARGET");
  if (t && *t) {
    copy(target, t);
  } else {
    Dl_info info;
    if (dladdr((void*)&setup, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
      const char* slash = strrchr(info.dli_fname, '/');
      size_t dir = (size_t)(slash - info.dli_fname);
      const char* lib = "/libtheseus_nccl.so";
      if (dir + strlen(lib) < PATH_MAX) {
        memcpy(target, info.dli_fname, dir);
        memcpy(target + dir, lib, strlen(lib) + 1);
      }
    }
  }
  const char* s = env2("NCCL_LIB_PATH");
  if (s && *s) {
    char real[PATH_MAX];
    copy(skip, realpath(s, real) ? real : s);
  }
  const char* d = env2("DEBUG");
  verbose = d && (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0);
  if (!target[0]) {
    static const char msg[] = "THESEUS WARN audit: cannot locate libtheseus_nccl.so; set THESEUS_NCCL_AUDIT_TARGET\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
  }
}

unsigned int la_version(unsigned int version) {
  setup();
  /* Returning 0, or more than the running glibc knows, gets us ignored. */
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

static int is_nccl(const char* name) {
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  return strcmp(base, "libnccl.so") == 0 || strcmp(base, "libnccl.so.2") == 0;
}

char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
  (void)cookie;
  if (flag != LA_SER_ORIG || !is_nccl(name)) return (char*)name;
  setup();
  if (!target[0]) return (char*)name;
  if (skip[0]) {
    char real[PATH_MAX];
    if (strcmp(name, skip) == 0 || (strchr(name, '/') && realpath(name, real) && strcmp(real, skip) == 0))
      return (char*)name;
  }
  if (verbose) {
    char line[PATH_MAX + 128];
    int n = snprintf(line, sizeof line, "%d THESEUS INFO audit: %s -> %s\n", (int)getpid(), name, target);
    if (n > 0) {
      ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
      (void)w;
    }
  }
  return target;
}
