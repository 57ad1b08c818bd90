/* The durable queue: meta, state, segments; opening (with the torn-tail
 * cut), recording, bounds. docs/sdk.md, "Queue format (version 1)". */
#define _DEFAULT_SOURCE /* flock */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_MAX_BYTES (UINT64_C(64) << 20)
#define DEFAULT_SEGMENT_BYTES (UINT64_C(4) << 20)
#define MAX_SEGMENT_WALK 1000000 /* bound on loops over segments */

/* ---- allocation ---- */

void *dsq__alloc(const dsq_allocator *al, size_t n)
{
    if (al->alloc != NULL)
        return al->alloc(al->ctx, n);
    return malloc(n);
}

void dsq__free(const dsq_allocator *al, void *p, size_t n)
{
    if (p == NULL)
        return;
    if (al->alloc != NULL) {
        if (al->free != NULL)
            al->free(al->ctx, p, n);
        return;
    }
    free(p);
}

void dsq_options_init(dsq_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_bytes = DEFAULT_MAX_BYTES;
    o->segment_bytes = DEFAULT_SEGMENT_BYTES;
    o->full_policy = DSQ_DROP_OLDEST;
}

/* ---- files ---- */

static int fsync_dir(dsq *q)
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
        rc = fsync_dir(q);
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
static int read_state(dsq *q, uint64_t *off)
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
static int open_meta(dsq *q)
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
static int lock_queue(dsq *q)
{
    if (flock(q->meta_fd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? DSQ_EBUSY : DSQ_EIO;
    return DSQ_OK;
}

/* ---- segments ---- */

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

static int unlink_seg(dsq *q, uint64_t first)
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
    for (i = 0; i < MAX_SEGMENT_WALK; i++) {
        int rc = dsq__seg_next(q, 0, &f);
        if (rc <= 0)
            return rc;
        if (f >= q->head_seg || (q->act_fd >= 0 && f == q->act_first))
            return DSQ_OK;
        rc = unlink_seg(q, f);
        if (rc != DSQ_OK)
            return rc;
    }
    return DSQ_OK;
}

/* A head at the end of its segment moves to the next segment, if any. */
void dsq__normalize_head(dsq *q)
{
    int i;
    for (i = 0; i < MAX_SEGMENT_WALK && q->head_seg != 0; i++) {
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
    for (i = 0; i < MAX_SEGMENT_WALK && size - off >= DSQ_HEADER_SIZE; i++) {
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
 * record. next: the next segment's first sequence number, 0 if f is last. */
static int scan_segment(dsq *q, uint64_t f, uint64_t next, uint64_t *off, uint64_t *seq)
{
    char name[32];
    struct stat st;
    uint64_t size, n;
    int fd, i, rc = DSQ_OK;
    dsq__seg_name(name, f);
    fd = openat(q->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
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

/* Walks the segments in order: deletes those settled, checks the others. */
static int load_segments(dsq *q, uint64_t state_off)
{
    uint64_t f = 0, g = 0;
    int have = dsq__seg_next(q, 0, &f), i;
    q->head_seg = 0;
    q->next_seq = q->head;
    for (i = 0; have == 1 && i < MAX_SEGMENT_WALK; i++) {
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
    return have < 0 ? have : DSQ_OK;
}

static void free_queue(dsq *q)
{
    dsq_allocator al = q->al;
    if (q->act_fd >= 0)
        (void)close(q->act_fd);
    if (q->meta_fd >= 0)
        (void)close(q->meta_fd);
    if (q->dirfd >= 0)
        (void)close(q->dirfd);
    dsq__free(&al, q->dir, q->dir_size);
    (void)pthread_mutex_destroy(&q->mu);
    dsq__free(&al, q, sizeof *q);
}

static int open_dir(dsq *q, const char *dir)
{
    q->dir_size = strlen(dir) + 1;
    q->dir = (char *)dsq__alloc(&q->al, q->dir_size);
    if (q->dir == NULL)
        return DSQ_ENOMEM;
    memcpy(q->dir, dir, q->dir_size);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return DSQ_EIO;
    q->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return q->dirfd >= 0 ? DSQ_OK : DSQ_EIO;
}

static int load(dsq *q)
{
    uint64_t state_off, head0, off0, batch0;
    uint32_t count0;
    int rc = open_meta(q);
    if (rc == DSQ_OK)
        rc = lock_queue(q);
    if (rc == DSQ_OK)
        rc = read_state(q, &state_off);
    if (rc != DSQ_OK)
        return rc;
    (void)unlinkat(q->dirfd, "state.tmp", 0);
    head0 = q->head;
    off0 = state_off;
    batch0 = q->batch_first;
    count0 = q->batch_count;
    q->head_off = state_off;
    rc = load_segments(q, state_off);
    if (rc != DSQ_OK)
        return rc;
    dsq__normalize_head(q);
    if (q->batch_first != q->head) { /* not a batch at the head: none */
        q->batch_first = 0;
        q->batch_count = 0;
    }
    q->batch_last_seg = UINT64_MAX; /* unknown until rebuilt: protect all */
    if (q->head != head0 || q->head_off != off0 || q->batch_first != batch0 || q->batch_count != count0)
        rc = dsq__write_state(q);
    return rc;
}

int dsq_open(const char *dir, const dsq_options *o, dsq **out)
{
    dsq_options def;
    dsq *q;
    int rc;
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return DSQ_EINVAL;
    if (o == NULL) {
        dsq_options_init(&def);
        o = &def;
    }
    q = (dsq *)dsq__alloc(&o->allocator, sizeof *q);
    if (q == NULL)
        return DSQ_ENOMEM;
    memset(q, 0, sizeof *q);
    q->al = o->allocator;
    q->dirfd = q->meta_fd = q->act_fd = -1;
    q->max_bytes = o->max_bytes > 0 ? o->max_bytes : DEFAULT_MAX_BYTES;
    q->segment_bytes = o->segment_bytes > 0 ? o->segment_bytes : DEFAULT_SEGMENT_BYTES;
    q->policy = o->full_policy;
    q->max_age_ms = o->max_age_ms;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        dsq__free(&q->al, q, sizeof *q);
        return DSQ_ENOMEM;
    }
    rc = open_dir(q, dir);
    if (rc == DSQ_OK)
        rc = load(q);
    if (rc != DSQ_OK) {
        free_queue(q);
        return rc;
    }
    *out = q;
    return DSQ_OK;
}

void dsq_close(dsq *q)
{
    if (q == NULL)
        return;
    if (q->act_fd >= 0 && q->act_dirty)
        (void)fsync(q->act_fd);
    free_queue(q);
}

void dsq_id_hex(const dsq *q, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    int i;
    for (i = 0; i < 16; i++) {
        out[2 * i] = hex[q->id[i] >> 4];
        out[2 * i + 1] = hex[q->id[i] & 15];
    }
    out[32] = '\0';
}

/* ---- bounds ---- */

/* Drops the oldest segment that is neither being appended to nor holding
 * the batch being sent. 1: dropped; 0: none can be. */
static int drop_oldest(dsq *q)
{
    uint64_t f = 0, g = 0;
    int have = dsq__seg_next(q, 0, &f), i;
    for (i = 0; have == 1 && i < MAX_SEGMENT_WALK; i++) {
        int have_g = dsq__seg_next(q, f, &g);
        uint64_t lo, lost;
        int rc;
        if (have_g != 1)
            return have_g < 0 ? have_g : 0; /* f is the last */
        if (q->batch_count > 0 && f >= q->head_seg && f <= q->batch_last_seg) {
            f = g;
            continue;
        }
        lo = f > q->head ? f : q->head;
        lost = g > lo ? g - lo : 0;
        if (f == q->head_seg) {
            q->head = g;
            q->head_seg = g;
            q->head_off = 0;
            dsq__normalize_head(q);
            rc = dsq__write_state(q);
            if (rc != DSQ_OK)
                return rc;
        }
        rc = unlink_seg(q, f);
        if (rc == DSQ_OK)
            rc = fsync_dir(q);
        if (rc != DSQ_OK)
            return rc;
        q->queued = q->queued >= lost ? q->queued - lost : 0;
        q->st.dropped_full += lost;
        q->st.dropped += lost;
        return 1;
    }
    return 0;
}

static int make_room(dsq *q, uint64_t need)
{
    int i;
    for (i = 0; i < MAX_SEGMENT_WALK; i++) {
        int rc;
        if (q->bytes + need <= q->max_bytes)
            return DSQ_OK;
        if (q->policy == DSQ_REFUSE_NEWEST)
            return DSQ_EFULL;
        rc = drop_oldest(q);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return DSQ_EFULL;
    }
    return DSQ_EFULL;
}

/* ---- recording ---- */

/* Makes sure a segment is open for appending; starts a new one, named by
 * the next sequence number, when the last is closed. */
static int ensure_segment(dsq *q)
{
    char name[32];
    int fd, rc;
    if (q->act_fd >= 0 && !q->act_full && q->act_size < q->segment_bytes)
        return DSQ_OK;
    if (q->act_fd >= 0 && q->act_dirty) {
        if (fsync(q->act_fd) != 0)
            return DSQ_EIO;
        q->act_dirty = 0;
    }
    dsq__seg_name(name, q->next_seq);
    fd = openat(q->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return DSQ_EIO;
    if (fsync_dir(q) != DSQ_OK) {
        (void)close(fd);
        return DSQ_EIO;
    }
    if (q->act_fd >= 0)
        (void)close(q->act_fd);
    q->act_fd = fd;
    q->act_first = q->next_seq;
    q->act_size = 0;
    q->act_full = 0;
    if (q->head == q->next_seq) { /* nothing queued: the head starts here */
        q->head_seg = q->act_first;
        q->head_off = 0;
        rc = dsq__write_state(q);
        if (rc == DSQ_OK)
            rc = dsq__delete_settled(q);
        return rc;
    }
    return DSQ_OK;
}

/* A JSON object: '{' ... '}' around, whitespace aside. */
static int looks_like_object(const char *s, size_t n)
{
    size_t a = 0, b = n;
    while (a < n && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r'))
        a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r'))
        b--;
    return b - a >= 2 && s[a] == '{' && s[b - 1] == '}';
}

static int check_reading(const dsq_reading *r, size_t *len)
{
    if (r->data_json == NULL || r->time_kind < DSQ_TIME_NONE || r->time_kind > DSQ_TIME_BOOT)
        return DSQ_EINVAL;
    *len = strlen(r->data_json);
    if (*len > DSQ_MAX_DATA_BYTES)
        return DSQ_ETOOBIG;
    return looks_like_object(r->data_json, *len) ? DSQ_OK : DSQ_EINVAL;
}

/* Appends one record (not synced). */
static int append(dsq *q, const dsq_reading *r, size_t len, const uint8_t boot[16])
{
    uint8_t h[DSQ_HEADER_SIZE + DSQ_PAYLOAD_HEAD];
    uint64_t size = sizeof h + len;
    uint32_t crc;
    int rc = make_room(q, size);
    if (rc == DSQ_OK)
        rc = ensure_segment(q);
    if (rc != DSQ_OK)
        return rc;
    memset(h, 0, sizeof h);
    dsq__put_u32(h, (uint32_t)(DSQ_PAYLOAD_HEAD + len));
    dsq__put_u64(h + 8, q->next_seq);
    h[16] = (uint8_t)r->time_kind;
    dsq__put_u64(h + 24, r->time_kind == DSQ_TIME_NONE ? 0 : (uint64_t)r->time);
    if (r->time_kind == DSQ_TIME_BOOT)
        memcpy(h + 32, boot, 16);
    crc = dsq_crc32c(0, h + 8, 8 + DSQ_PAYLOAD_HEAD);
    dsq__put_u32(h + 4, dsq_crc32c(crc, r->data_json, len));
    q->act_dirty = 1;
    rc = dsq__pwrite_full(q->act_fd, h, sizeof h, q->act_size);
    if (rc == DSQ_OK)
        rc = dsq__pwrite_full(q->act_fd, r->data_json, len, q->act_size + sizeof h);
    if (rc != DSQ_OK) {
        (void)ftruncate(q->act_fd, (off_t)q->act_size);
        return rc;
    }
    q->act_size += size;
    q->bytes += size;
    q->next_seq++;
    q->queued++;
    return DSQ_OK;
}

static int sync_active(dsq *q)
{
    if (q->act_fd < 0 || !q->act_dirty)
        return DSQ_OK;
    if (fsync(q->act_fd) != 0)
        return DSQ_EIO;
    q->act_dirty = 0;
    return DSQ_OK;
}

int64_t dsq_record_all(dsq *q, const dsq_reading *r, size_t n, size_t *recorded)
{
    uint8_t boot[16];
    int64_t uptime, first;
    size_t i;
    int rc = DSQ_OK, srs;
    if (recorded != NULL)
        *recorded = 0;
    if (q == NULL || r == NULL || n == 0)
        return DSQ_EINVAL;
    memset(boot, 0, sizeof boot);
    for (i = 0; i < n; i++) {
        if (r[i].time_kind == DSQ_TIME_BOOT) {
            if (dsq__boot_now(&uptime, boot) != 0)
                return DSQ_EIO;
            break;
        }
    }
    if (pthread_mutex_lock(&q->mu) != 0)
        return DSQ_EIO;
    first = (int64_t)q->next_seq;
    for (i = 0; i < n && rc == DSQ_OK; i++) {
        size_t len;
        rc = check_reading(&r[i], &len);
        if (rc == DSQ_OK)
            rc = append(q, &r[i], len, boot);
        if (rc == DSQ_EFULL)
            q->st.refused_full++;
    }
    srs = sync_active(q);
    if (rc == DSQ_OK)
        rc = srs;
    if (recorded != NULL && srs == DSQ_OK)
        *recorded = rc == DSQ_OK ? n : i - 1;
    (void)pthread_mutex_unlock(&q->mu);
    return rc == DSQ_OK ? first : rc;
}

int64_t dsq_record(dsq *q, const char *data_json, int time_kind, int64_t time)
{
    dsq_reading r;
    r.data_json = data_json;
    r.time_kind = time_kind;
    r.time = time;
    return dsq_record_all(q, &r, 1, NULL);
}

int64_t dsq_record_now(dsq *q, const char *data_json)
{
    int64_t now = dsq__wall_ms(), uptime;
    uint8_t boot[16];
    if (now >= DSQ_CLOCK_EPOCH_MS || dsq__boot_now(&uptime, boot) != 0)
        return dsq_record(q, data_json, DSQ_TIME_WALL, now);
    return dsq_record(q, data_json, DSQ_TIME_BOOT, uptime);
}

/* ---- reading back ---- */

int dsq__cut_corrupt(dsq *q, const dsq_cursor *c)
{
    uint64_t g = 0, lost;
    int have = dsq__seg_next(q, c->seg, &g);
    if (have < 0)
        return have;
    lost = (have == 1 ? g : q->next_seq) - c->seq;
    if (q->act_fd >= 0 && c->seg == q->act_first) {
        if (ftruncate(q->act_fd, (off_t)c->off) != 0 || fsync(q->act_fd) != 0)
            return DSQ_EIO;
        q->bytes -= q->act_size - c->off;
        q->act_size = c->off;
        q->act_full = 1;
    }
    q->st.dropped_corrupt += lost;
    q->st.dropped += lost;
    q->queued = q->queued >= lost ? q->queued - lost : 0;
    if (have == 1) {
        q->head = g;
        q->head_seg = g;
        q->head_off = 0;
    } else {
        q->head = q->next_seq;
        q->head_seg = c->seg;
        q->head_off = c->off;
    }
    return dsq__write_state(q);
}

int dsq_iterate(dsq *q, char *buf, size_t cap, int (*fn)(void *ctx, const dsq_item *it), void *ctx)
{
    dsq_cursor c;
    int rc = DSQ_OK, i;
    if (pthread_mutex_lock(&q->mu) != 0)
        return DSQ_EIO;
    dsq__cursor_at_head(q, &c);
    for (i = 0; i < INT32_MAX; i++) {
        dsq_rec r;
        dsq_item it;
        rc = dsq__cursor_peek(q, &c, &r);
        if (rc <= 0)
            break;
        it.seq = r.seq;
        it.time_kind = r.kind;
        it.time = r.time;
        memcpy(it.boot_id, r.boot, 16);
        it.data_len = r.len - DSQ_PAYLOAD_HEAD;
        it.data = NULL;
        if (it.data_len <= cap) {
            rc = dsq__cursor_read_data(q, &c, &r, buf);
            if (rc != DSQ_OK)
                break;
            it.data = buf;
        } else {
            dsq__cursor_skip(&c, &r);
        }
        if (fn(ctx, &it) != 0)
            break;
    }
    dsq__cursor_close(&c);
    (void)pthread_mutex_unlock(&q->mu);
    return rc < 0 ? rc : DSQ_OK;
}

void dsq_get_status(dsq *q, dsq_status *st)
{
    if (pthread_mutex_lock(&q->mu) != 0) {
        memset(st, 0, sizeof *st);
        return;
    }
    *st = q->st;
    st->queued = q->queued;
    st->bytes_on_disk = q->bytes;
    st->next_seq = q->next_seq;
    (void)pthread_mutex_unlock(&q->mu);
}
