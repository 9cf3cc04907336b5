/* An LD_PRELOAD library for the tests: counts the heap allocations of a
 * process (malloc, calloc, realloc, the aligned forms; C++ new goes through
 * malloc) and the anonymous memory mappings of exactly $MTC_ALLOC_WATCH
 * bytes (the CPU arena is one), and at exit writes to $MTC_ALLOC_COUNT the
 * number of heap calls, the bytes requested, the sizes of the largest ones
 * and the number of watched mappings. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_long calls, bytes, watched;
#define TOP 4
static size_t largest[TOP];
static atomic_flag lock = ATOMIC_FLAG_INIT;

static void record(size_t n) {
  atomic_fetch_add(&calls, 1);
  atomic_fetch_add(&bytes, (long)n);
  while (atomic_flag_test_and_set(&lock))
    ;
  for (int i = 0; i < TOP; ++i)
    if (n > largest[i]) {
      memmove(&largest[i + 1], &largest[i], (TOP - 1 - i) * sizeof(size_t));
      largest[i] = n;
      break;
    }
  atomic_flag_clear(&lock);
}

void *malloc(size_t n) { record(n); return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { record(k * n); return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { record(n); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { record(n); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { record(n); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  record(n);
  *out = __libc_memalign(a, n);
  return *out ? 0 : 12;
}
void *mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) {
  const char *watch = getenv("MTC_ALLOC_WATCH");
  if ((flags & MAP_ANONYMOUS) && watch && n == (size_t)atoll(watch))
    atomic_fetch_add(&watched, 1);
  return (void *)syscall(SYS_mmap, addr, n, prot, flags, fd, off);
}

__attribute__((destructor)) static void report(void) {
  const char *path = getenv("MTC_ALLOC_COUNT");
  if (!path)
    return;
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  fprintf(f, "calls %ld bytes %ld largest", (long)calls, (long)bytes);
  for (int i = 0; i < TOP; ++i)
    fprintf(f, " %zu", largest[i]);
  fprintf(f, " watched %ld\n", (long)watched);
  fclose(f);
}
