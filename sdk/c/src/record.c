/* Recording: a reading checked and appended to the active segment (a new
 * segment started when it is full), room made first (DropOldest drops the
 * oldest segment not being sent; RefuseNewest refuses), one fsync per call.
 * Called under the queue's mutex from dsq_record_all. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* ---- bounds ---- */

/* Drops the oldest segment that is neither being appended to nor holding
 * the batch being sent. 1: dropped; 0: none can be. */
static int drop_oldest(dsq *q)
{
    uint64_t f = 0, g = 0;
    int have = dsq__seg_next(q, 0, &f), i;
    for (i = 0; have == 1 && i < DSQ_MAX_SEGMENT_WALK; i++) {
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
        rc = dsq__unlink_seg(q, f);
        if (rc == DSQ_OK)
            rc = dsq__fsync_dir(q);
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
    for (i = 0; i < DSQ_MAX_SEGMENT_WALK; i++) {
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
 * the next sequence number, when the last is closed. A head at the end of
 * the last segment moves to it (after a gap in the numbers, too). */
static int ensure_segment(dsq *q)
{
    char name[32];
    int fd, rc, at_end;
    if (q->act_fd >= 0 && !q->act_full && q->act_size < q->segment_bytes)
        return DSQ_OK;
    at_end = q->head == q->next_seq ||
             (q->act_fd >= 0 && q->head_seg == q->act_first && q->head_off >= q->act_size);
    if (q->act_fd >= 0 && q->act_dirty) {
        if (fsync(q->act_fd) != 0)
            return DSQ_EIO;
        q->act_dirty = 0;
    }
    dsq__seg_name(name, q->next_seq);
    fd = openat(q->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return DSQ_EIO;
    if (dsq__fsync_dir(q) != DSQ_OK) {
        (void)close(fd);
        return DSQ_EIO;
    }
    if (q->act_fd >= 0)
        (void)close(q->act_fd);
    q->act_fd = fd;
    q->act_first = q->next_seq;
    q->act_size = 0;
    q->act_full = 0;
    if (at_end) { /* nothing queued: the head starts here */
        q->head = q->act_first;
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

/* Without the time since boot (no /proc), a clock before the epoch is
 * recorded as it is: kind 1, sent without a time (batch.c). */
int64_t dsq_record_now(dsq *q, const char *data_json)
{
    int64_t now = dsq__wall_ms(), uptime;
    uint8_t boot[16];
    if (now >= DSQ_CLOCK_EPOCH_MS || dsq__boot_now(&uptime, boot) != 0)
        return dsq_record(q, data_json, DSQ_TIME_WALL, now);
    return dsq_record(q, data_json, DSQ_TIME_BOOT, uptime);
}
