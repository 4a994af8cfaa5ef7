/* An LD_PRELOAD shim that makes fdatasync/fsync fail or stall on chosen files, for the tests of a
 * disk that fails (tests/test_fsync_failure.py). Built by the tests with gcc.
 *
 * FSYNC_FAULT_CTL names a control file read at every call; its first word says what the call
 * does to a descriptor whose path contains FSYNC_FAULT_MATCH (default "/commitlog/"):
 *   (empty) or "ok"   the real call;
 *   "eio"             fail with EIO, every time;
 *   "eio-once"        fail with EIO once, then the control file is emptied (later calls pass);
 *   "delay <ms>"      sleep <ms>, then the real call (a slow disk).
 * Every failure injected appends a line to FSYNC_FAULT_CTL".log", so that a test knows the fault
 * was reached. Descriptors on other paths always get the real call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* 0: call through; -1 with errno set: fail */
static int fault(int fd, const char *what) {
    const char *ctl = getenv("FSYNC_FAULT_CTL");
    char mode[64] = {0};
    int cfd;
    ssize_t n;
    if (ctl == NULL || !matches(fd))
        return 0;
    cfd = open(ctl, O_RDONLY);
    if (cfd < 0)
        return 0;
    n = read(cfd, mode, sizeof mode - 1);
    close(cfd);
    if (n <= 0)
        return 0;
    mode[n] = 0;
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
