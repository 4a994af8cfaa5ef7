/* An LD_PRELOAD shim that makes fdatasync/fsync/msync fail or stall, and pwrite write short, on
 * chosen files, for the tests of a disk that fails (tests/test_fsync_failure.py,
 * tests/test_follower_disk_failure.py). Built by the tests with gcc (tests/helpers/fault_shim.py).
 *
 * FSYNC_FAULT_CTL names a control file read at every call; its first word says what a sync call
 * does to a file whose path contains FSYNC_FAULT_MATCH (default "/commitlog/"; for msync, the
 * file mapped at the address given):
 *   (empty) or "ok"   the real call;
 *   "eio"             fail with EIO, every time;
 *   "eio-once"        fail with EIO once, then the control file is emptied (later calls pass);
 *   "eio <call>", "eio-once <call>"   the same for one call only: fdatasync, fsync or msync
 *                     (a new segment's fsync by the pre-allocation is not the flush's fdatasync);
 *   "delay <ms>"      sleep <ms>, then the real call (a slow disk);
 *   "short-pwrite"    sync calls pass; pwrite/pwrite64 of more than one byte writes only the
 *                     first half of the buffer and returns that count (a short write, as a
 *                     signal or a filling disk may cause), every time;
 *   "zero-pwrite"     pwrite/pwrite64 write nothing and return 0, every time (what no regular
 *                     file should do, and what a loop continuing short writes must not spin on).
 *   "stall-write <ms> <pid>"   (with FSYNC_FAULT_WATCH=1 in the environment) in process <pid>
 *                     only: every shared writable mapping of a matching file is made read-only,
 *                     and the control file emptied; the next write into one (an append into the
 *                     mapped commit log) faults, the fault is held <ms> (as a page fault that
 *                     waits on a slow disk holds the writing thread), then the mappings are
 *                     writable again and the write goes on. A thread of the shim's reads the
 *                     control file every 5 ms for it. Logged "stall-write begin <ms>" and
 *                     "stall-write end <ms>", CLOCK_MONOTONIC milliseconds.
 * Every fault injected appends a line to FSYNC_FAULT_CTL".log", so that a test knows the fault
 * was reached. Files on other paths always get the real call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int (*sync_fn)(int);

static int matches(int fd) {
    const char *match = getenv("FSYNC_FAULT_MATCH");
    char link[64], path[4096];
    ssize_t n;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return 0;
    path[n] = 0;
    return strstr(path, match && *match ? match : "/commitlog/") != NULL;
}

static void note(const char *ctl, const char *what, int fd) {
    char log[4096];
    int lfd;
    snprintf(log, sizeof log, "%s.log", ctl);
    lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (lfd >= 0) {
        dprintf(lfd, "%s fd %d pid %d\n", what, fd, (int)getpid());
        close(lfd);
    }
}

/* whether the file mapped at addr (from /proc/self/maps) matches, as matches() does for a descriptor */
static int maps_match(const void *addr) {
    const char *match = getenv("FSYNC_FAULT_MATCH");
    char line[4352];
    unsigned long lo, hi, a = (unsigned long)addr;
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) {
            char *path = strchr(line, '/');
            found = path != NULL && strstr(path, match && *match ? match : "/commitlog/") != NULL ? 1 : -1;
        }
    }
    fclose(f);
    return found == 1;
}

/* the control file's mode, or 0 if none; returns its length */
static ssize_t read_mode(const char *ctl, char *mode, size_t size) {
    int cfd = open(ctl, O_RDONLY);
    ssize_t n;
    if (cfd < 0)
        return 0;
    n = read(cfd, mode, size - 1);
    close(cfd);
    if (n <= 0)
        return 0;
    mode[n] = 0;
    return n;
}

/* 0: call through; -1 with errno set: fail. `hit`: whether the file matches FSYNC_FAULT_MATCH */
static int fault_on(int hit, int fd, const char *what) {
    const char *ctl = getenv("FSYNC_FAULT_CTL");
    char mode[64] = {0};
    int cfd;
    ssize_t n;
    if (ctl == NULL || !hit)
        return 0;
    cfd = open(ctl, O_RDONLY);
    if (cfd < 0)
        return 0;
    n = read(cfd, mode, sizeof mode - 1);
    close(cfd);
    if (n <= 0)
        return 0;
    mode[n] = 0;
    if (strncmp(mode, "eio", 3) == 0) {
        /* "eio <call>", "eio-once <call>": only that call fails (fdatasync, fsync or msync) */
        char *call = strchr(mode, ' ');
        if (call != NULL) {
            call[strcspn(call, "\n")] = 0;
            if (strcmp(call + 1, what) != 0)
                return 0;
        }
    }
    if (strncmp(mode, "eio-once", 8) == 0) {
        cfd = open(ctl, O_WRONLY | O_TRUNC);
        if (cfd >= 0)
            close(cfd);
        note(ctl, what, fd);
        errno = EIO;
        return -1;
    }
    if (strncmp(mode, "eio", 3) == 0) {
        note(ctl, what, fd);
        errno = EIO;
        return -1;
    }
    if (strncmp(mode, "delay ", 6) == 0) {
        long ms = strtol(mode + 6, NULL, 10);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int fault(int fd, const char *what) {
    return getenv("FSYNC_FAULT_CTL") == NULL ? 0 : fault_on(matches(fd), fd, what);
}

int fdatasync(int fd) {
    static sync_fn real;
    if (!real)
        real = (sync_fn)dlsym(RTLD_NEXT, "fdatasync");
    if (fault(fd, "fdatasync") < 0)
        return -1;
    return real(fd);
}

int fsync(int fd) {
    static sync_fn real;
    if (!real)
        real = (sync_fn)dlsym(RTLD_NEXT, "fsync");
    if (fault(fd, "fsync") < 0)
        return -1;
    return real(fd);
}

typedef int (*msync_fn)(void *, size_t, int);

int msync(void *addr, size_t len, int flags) {
    static msync_fn real;
    if (!real)
        real = (msync_fn)dlsym(RTLD_NEXT, "msync");
    if (getenv("FSYNC_FAULT_CTL") != NULL && fault_on(maps_match(addr), -1, "msync") < 0)
        return -1;
    return real(addr, len, flags);
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

/* the count pwrite is let write on a matching file: half of it under "short-pwrite", none under
 * "zero-pwrite" */
static size_t short_count(int fd, size_t count) {
    const char *ctl = getenv("FSYNC_FAULT_CTL");
    char mode[64] = {0};
    if (ctl == NULL || count == 0 || !read_mode(ctl, mode, sizeof mode) || !matches(fd))
        return count;
    if (strncmp(mode, "zero-pwrite", 11) == 0) {
        note(ctl, "zero-pwrite", fd);
        return 0;
    }
    if (count < 2 || strncmp(mode, "short-pwrite", 12) != 0)
        return count;
    note(ctl, "short-pwrite", fd);
    return count / 2;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static pwrite_fn real;
    if (!real)
        real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, short_count(fd, count), offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static pwrite_fn real;
    if (!real)
        real = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, short_count(fd, count), offset);
}

/* -- stall-write: a write into the mapped log that faults and waits ----------------------------- */
#define MAX_REGIONS 64
static unsigned long regions_lo[MAX_REGIONS], regions_hi[MAX_REGIONS];
static volatile int nregions;
static volatile long stall_ms;
static struct sigaction old_segv;

static long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void note_time(const char *what) {
    const char *ctl = getenv("FSYNC_FAULT_CTL");
    char log[4096];
    int lfd;
    snprintf(log, sizeof log, "%s.log", ctl);
    lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (lfd >= 0) {
        dprintf(lfd, "%s %ld pid %d\n", what, mono_ms(), (int)getpid());
        close(lfd);
    }
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    unsigned long a = (unsigned long)si->si_addr;
    int i, n = nregions, ours = 0;
    (void)sig;
    (void)uc;
    for (i = 0; i < n; i++)
        if (a >= regions_lo[i] && a < regions_hi[i])
            ours = 1;
    if (!ours) {
        /* not a stalled write: the faulting instruction runs again under the previous handler */
        sigaction(SIGSEGV, &old_segv, NULL);
        return;
    }
    note_time("stall-write begin");
    struct timespec ts = {stall_ms / 1000, (stall_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    for (i = 0; i < n; i++)
        mprotect((void *)regions_lo[i], regions_hi[i] - regions_lo[i], PROT_READ | PROT_WRITE);
    nregions = 0;
    note_time("stall-write end");
}

/* every shared writable mapping of a matching file, read-only; their count */
static int protect_mappings(void) {
    const char *match = getenv("FSYNC_FAULT_MATCH");
    char line[4352], perms[8];
    unsigned long lo, hi;
    int n = 0, i;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return 0;
    while (n < MAX_REGIONS && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[1] == 'w' && perms[3] == 's' &&
            path != NULL && strstr(path, match && *match ? match : "/commitlog/") != NULL) {
            regions_lo[n] = lo;
            regions_hi[n] = hi;
            n++;
        }
    }
    fclose(f);
    nregions = n;
    for (i = 0; i < n; i++)
        mprotect((void *)regions_lo[i], regions_hi[i] - regions_lo[i], PROT_READ);
    return n;
}

static void *watch(void *arg) {
    const char *ctl = getenv("FSYNC_FAULT_CTL");
    char mode[64];
    long ms, pid;
    (void)arg;
    for (;;) {
        struct timespec tick = {0, 5 * 1000000L};
        nanosleep(&tick, NULL);
        if (nregions || !read_mode(ctl, mode, sizeof mode) || strncmp(mode, "stall-write ", 12) != 0)
            continue;
        if (sscanf(mode + 12, "%ld %ld", &ms, &pid) != 2 || pid != (long)getpid())
            continue;
        int cfd = open(ctl, O_WRONLY | O_TRUNC);
        if (cfd >= 0)
            close(cfd);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        struct sigaction cur;
        sigaction(SIGSEGV, NULL, &cur);
        if (cur.sa_sigaction != on_segv)  /* armed again: keep the handler found the first time */
            sigaction(SIGSEGV, &sa, &old_segv);
        stall_ms = ms;
        char what[64];
        snprintf(what, sizeof what, "stall-write armed %d mappings at", protect_mappings());
        note_time(what);
    }
    return NULL;
}

__attribute__((constructor)) static void start_watch(void) {
    pthread_t t;
    if (getenv("FSYNC_FAULT_WATCH") != NULL && getenv("FSYNC_FAULT_CTL") != NULL &&
        pthread_create(&t, NULL, watch, NULL) == 0)
        pthread_detach(t);
}
