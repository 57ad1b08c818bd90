/* The queue's small files: meta (made at the first open, with the queue's
 * id), state (head, its offset, the batch being sent), both replaced
 * whole (write, sync, rename, sync the directory), and the lock on meta.
 * docs/sdk.md, "Queue format (version 1)". */
#define _DEFAULT_SOURCE /* flock */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h> /* renameat */
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "internal.h"

int dsq__fsync_dir(dsq *q)
{
    return fsync(q->dirfd) == 0 ? DSQ_OK : DSQ_EIO;
}

/* Writes tmp, syncs it, renames it over name, syncs the directory. */
static int replace_file(dsq *q, const char *tmp, const char *name, const void *buf, size_t n)
{
    int fd = openat(q->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc;
    if (fd < 0)
        return DSQ_EIO;
    rc = dsq__pwrite_full(fd, buf, n, 0);
    if (rc == DSQ_OK && fsync(fd) != 0)
        rc = DSQ_EIO;
    if (close(fd) != 0 && rc == DSQ_OK)
        rc = DSQ_EIO;
    if (rc == DSQ_OK && renameat(q->dirfd, tmp, q->dirfd, name) != 0)
        rc = DSQ_EIO;
    if (rc == DSQ_OK)
        rc = dsq__fsync_dir(q);
    return rc;
}

int dsq__write_state(dsq *q)
{
    uint8_t b[DSQ_STATE_SIZE];
    memcpy(b, "DSS1", 4);
    dsq__put_u64(b + 4, q->head);
    dsq__put_u64(b + 12, q->head_off);
    dsq__put_u64(b + 20, q->batch_count > 0 ? q->batch_first : 0);
    dsq__put_u32(b + 28, q->batch_first != 0 ? q->batch_count : 0);
    dsq__put_u32(b + 32, 0);
    dsq__put_u32(b + 36, dsq_crc32c(0, b, 36));
    return replace_file(q, "state.tmp", "state", b, sizeof b);
}

/* Reads state if it is there and whole; else head 1, offset 0. */
int dsq__read_state(dsq *q, uint64_t *off)
{
    uint8_t b[DSQ_STATE_SIZE];
    int fd = openat(q->dirfd, "state", O_RDONLY | O_CLOEXEC);
    int rc;
    q->head = 1;
    *off = 0;
    q->batch_first = 0;
    q->batch_count = 0;
    if (fd < 0)
        return errno == ENOENT ? DSQ_OK : DSQ_EIO;
    rc = dsq__pread_full(fd, b, sizeof b, 0);
    (void)close(fd);
    if (rc != DSQ_OK || memcmp(b, "DSS1", 4) != 0 || dsq__get_u32(b + 36) != dsq_crc32c(0, b, 36))
        return DSQ_OK; /* not whole: as without state (README) */
    q->head = dsq__get_u64(b + 4);
    *off = dsq__get_u64(b + 12);
    q->batch_first = dsq__get_u64(b + 20);
    q->batch_count = dsq__get_u32(b + 28);
    if (q->head == 0)
        q->head = 1;
    if (q->batch_first == 0 || q->batch_count == 0) {
        q->batch_first = 0;
        q->batch_count = 0;
    }
    return DSQ_OK;
}

/* Reads meta, or makes it (with a random id) if the queue is new. */
int dsq__open_meta(dsq *q)
{
    uint8_t b[DSQ_META_SIZE];
    int rc;
    q->meta_fd = openat(q->dirfd, "meta", O_RDWR | O_CLOEXEC);
    if (q->meta_fd < 0 && errno == ENOENT) {
        memcpy(b, "DSQ1", 4);
        dsq__put_u32(b + 4, 1);
        if (dsq__random(b + 8, 16) != 0)
            return DSQ_EIO;
        dsq__put_u32(b + 24, 0);
        dsq__put_u32(b + 28, dsq_crc32c(0, b, 28));
        rc = replace_file(q, "meta.tmp", "meta", b, sizeof b);
        if (rc != DSQ_OK)
            return rc;
        q->meta_fd = openat(q->dirfd, "meta", O_RDWR | O_CLOEXEC);
    }
    if (q->meta_fd < 0)
        return DSQ_EIO;
    if (dsq__pread_full(q->meta_fd, b, sizeof b, 0) != DSQ_OK || memcmp(b, "DSQ1", 4) != 0 ||
        dsq__get_u32(b + 4) != 1 || dsq__get_u32(b + 28) != dsq_crc32c(0, b, 28))
        return DSQ_ECORRUPT;
    memcpy(q->id, b + 8, 16);
    return DSQ_OK;
}

/* flock: held by the open file, so a second open conflicts even in the
 * same process. */
int dsq__lock_queue(dsq *q)
{
    if (flock(q->meta_fd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? DSQ_EBUSY : DSQ_EIO;
    return DSQ_OK;
}
