/* Segment files: finding them by name, their sizes, deleting the settled
 * ones, moving the head past a segment's end; and the scan at open, which
 * checks each record of the unsettled segments and cuts a torn tail.
 * docs/sdk.md, "Queue format (version 1)". */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int parse_seg_name(const char *name, uint64_t *first)
{
    uint64_t v = 0;
    int i;
    if (strlen(name) != 24 || strcmp(name + 20, ".seg") != 0)
        return -1;
    for (i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *first = v;
    return v > 0 ? 0 : -1;
}

int dsq__seg_next(dsq *q, uint64_t after, uint64_t *first)
{
    DIR *d = opendir(q->dir);
    struct dirent *e;
    int found = 0;
    if (d == NULL)
        return DSQ_EIO;
    while ((e = readdir(d)) != NULL) {
        uint64_t f;
        if (parse_seg_name(e->d_name, &f) == 0 && f > after && (!found || f < *first)) {
            *first = f;
            found = 1;
        }
    }
    (void)closedir(d);
    return found;
}

int dsq__seg_size(dsq *q, uint64_t first, uint64_t *size)
{
    char name[32];
    struct stat st;
    if (q->act_fd >= 0 && first == q->act_first) {
        *size = q->act_size;
        return DSQ_OK;
    }
    dsq__seg_name(name, first);
    if (fstatat(q->dirfd, name, &st, 0) != 0)
        return DSQ_EIO;
    *size = (uint64_t)st.st_size;
    return DSQ_OK;
}

int dsq__unlink_seg(dsq *q, uint64_t first)
{
    char name[32];
    uint64_t size;
    if (dsq__seg_size(q, first, &size) != DSQ_OK)
        return DSQ_EIO;
    dsq__seg_name(name, first);
    if (unlinkat(q->dirfd, name, 0) != 0)
        return DSQ_EIO;
    q->bytes = q->bytes >= size ? q->bytes - size : 0;
    return DSQ_OK;
}

/* Removes the segments wholly before the head's. */
int dsq__delete_settled(dsq *q)
{
    uint64_t f = 0;
    int i;
    for (i = 0; i < DSQ_MAX_SEGMENT_WALK; i++) {
        int rc = dsq__seg_next(q, 0, &f);
        if (rc <= 0)
            return rc;
        if (f >= q->head_seg || (q->act_fd >= 0 && f == q->act_first))
            return DSQ_OK;
        rc = dsq__unlink_seg(q, f);
        if (rc != DSQ_OK)
            return rc;
    }
    return DSQ_OK;
}

/* A head at the end of its segment moves to the next segment, if any. */
void dsq__normalize_head(dsq *q)
{
    int i;
    for (i = 0; i < DSQ_MAX_SEGMENT_WALK && q->head_seg != 0; i++) {
        uint64_t size, g;
        if (dsq__seg_size(q, q->head_seg, &size) != DSQ_OK || q->head_off < size)
            return;
        if (dsq__seg_next(q, q->head_seg, &g) != 1)
            return;
        q->head_seg = g;
        q->head = g;
        q->head_off = 0;
    }
}

/* ---- opening: each segment checked, a torn tail cut ---- */

/* Checks the record at off (expected seq): its length on disk, or 0. */
static uint64_t check_record(int fd, uint64_t size, uint64_t off, uint64_t seq)
{
    uint8_t h[DSQ_HEADER_SIZE], buf[4096];
    uint32_t len, crc;
    uint64_t done = 0;
    if (size - off < DSQ_HEADER_SIZE || dsq__pread_full(fd, h, sizeof h, off) != DSQ_OK)
        return 0;
    len = dsq__get_u32(h);
    if (len > DSQ_MAX_RECORD_BYTES || dsq__get_u64(h + 8) != seq ||
        size - off - DSQ_HEADER_SIZE < len)
        return 0;
    crc = dsq_crc32c(0, h + 8, 8);
    while (done < len) {
        size_t n = len - done < sizeof buf ? (size_t)(len - done) : sizeof buf;
        if (dsq__pread_full(fd, buf, n, off + DSQ_HEADER_SIZE + done) != DSQ_OK)
            return 0;
        crc = dsq_crc32c(crc, buf, n);
        done += n;
    }
    return crc == dsq__get_u32(h + 4) ? DSQ_HEADER_SIZE + (uint64_t)len : 0;
}

/* How many readings a cut at off in the last segment loses: the records
 * whose headers still chain (length bound, next sequence number), at least 1. */
static uint64_t count_cut(int fd, uint64_t size, uint64_t off, uint64_t seq)
{
    uint64_t n = 0;
    int i;
    for (i = 0; i < DSQ_MAX_SEGMENT_WALK && size - off >= DSQ_HEADER_SIZE; i++) {
        uint8_t h[DSQ_HEADER_SIZE];
        uint32_t len;
        if (dsq__pread_full(fd, h, sizeof h, off) != DSQ_OK)
            break;
        len = dsq__get_u32(h);
        if (n > 0 && (len > DSQ_MAX_RECORD_BYTES || dsq__get_u64(h + 8) != seq + n))
            break;
        n++;
        if (len > DSQ_MAX_RECORD_BYTES || size - off - DSQ_HEADER_SIZE < len)
            break;
        off += DSQ_HEADER_SIZE + len;
    }
    return n > 0 ? n : 1;
}

/* Checks segment f from off (reading seq first); cuts it at the first bad
 * record. next: the next segment's first sequence number, 0 if f is last.
 * The file is synced first: a process killed before its fsync leaves
 * records in the page cache only, and a power loss would take back what
 * this one trusted, named and sent. */
static int scan_segment(dsq *q, uint64_t f, uint64_t next, uint64_t *off, uint64_t *seq)
{
    char name[32];
    struct stat st;
    uint64_t size, n;
    int fd, i, rc = DSQ_OK;
    dsq__seg_name(name, f);
    fd = openat(q->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            (void)close(fd);
        return DSQ_EIO;
    }
    size = (uint64_t)st.st_size;
    if (*off > size)
        *off = size;
    for (i = 0; *off < size && i < INT32_MAX; i++) {
        n = check_record(fd, size, *off, *seq);
        if (n == 0)
            break;
        *off += n;
        (*seq)++;
        q->queued++;
    }
    if (*off < size) { /* a torn or corrupt tail */
        uint64_t lost = next != 0 ? (next > *seq ? next - *seq : 0) : count_cut(fd, size, *off, *seq);
        q->st.dropped_torn += lost;
        q->st.dropped += lost;
        if (ftruncate(fd, (off_t)*off) != 0 || fsync(fd) != 0)
            rc = DSQ_EIO;
        size = *off;
    }
    q->bytes += size;
    if (rc == DSQ_OK && next == 0) {
        q->act_fd = fd;
        q->act_first = f;
        q->act_size = size;
        return DSQ_OK;
    }
    (void)close(fd);
    return rc;
}

/* After the scan: the next sequence number is never below floor (the end
 * of the batch named in state): numbers a key may have named are not used
 * again. Readings lost past the end on disk (only a disk that lost synced
 * writes, or a queue an older version trusted unsynced) are counted torn;
 * the next reading starts a new segment, after a gap. */
static void raise_next(dsq *q, uint64_t floor)
{
    uint64_t lost;
    if (floor <= q->next_seq)
        return;
    lost = floor - q->next_seq;
    q->st.dropped_torn += lost;
    q->st.dropped += lost;
    if (q->head >= q->next_seq) /* nothing left to send: the head follows */
        q->head = floor;
    q->next_seq = floor;
    q->act_full = 1;
}

/* Walks the segments in order: deletes those settled, checks the others
 * (each synced, and the directory, before its records are trusted). */
int dsq__load_segments(dsq *q, uint64_t state_off, uint64_t floor)
{
    uint64_t f = 0, g = 0;
    int have, i;
    if (dsq__fsync_dir(q) != DSQ_OK)
        return DSQ_EIO;
    have = dsq__seg_next(q, 0, &f);
    q->head_seg = 0;
    q->next_seq = q->head;
    for (i = 0; have == 1 && i < DSQ_MAX_SEGMENT_WALK; i++) {
        int have_g = dsq__seg_next(q, f, &g);
        uint64_t off = 0, seq = f, start;
        int rc;
        if (have_g < 0)
            return have_g;
        if (have_g == 1 && g <= q->head) { /* wholly settled */
            char name[32];
            dsq__seg_name(name, f);
            if (unlinkat(q->dirfd, name, 0) != 0)
                return DSQ_EIO;
            f = g;
            continue;
        }
        if (q->head_seg == 0) {
            if (f < q->head) {
                off = state_off;
                seq = q->head;
            } else {
                q->head = f; /* readings before f are gone */
            }
            q->head_seg = f;
        }
        start = off;
        rc = scan_segment(q, f, have_g == 1 ? g : 0, &off, &seq);
        if (rc != DSQ_OK)
            return rc;
        if (q->head_seg == f) /* the scan only moves forward from start */
            q->head_off = start < off ? start : off;
        if (have_g == 0)
            q->next_seq = seq > q->head ? seq : q->head;
        f = g;
        have = have_g;
    }
    if (have < 0)
        return have;
    raise_next(q, floor);
    return DSQ_OK;
}
