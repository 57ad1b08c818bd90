/* Reading records from the head on, across segments (called with the
 * queue's mutex held); a corrupt record cut; dsq_iterate. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

void dsq__cursor_at_head(dsq *q, dsq_cursor *c)
{
    c->seg = q->head_seg;
    c->off = q->head_off;
    c->seq = q->head;
    c->fd = -1;
    c->size = 0;
}

void dsq__cursor_close(dsq_cursor *c)
{
    if (c->fd >= 0)
        (void)close(c->fd);
    c->fd = -1;
}

static int cursor_open(dsq *q, dsq_cursor *c)
{
    char name[32];
    struct stat st;
    if (c->fd >= 0)
        return DSQ_OK;
    dsq__seg_name(name, c->seg);
    c->fd = openat(q->dirfd, name, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0)
        return DSQ_EIO;
    if (q->act_fd >= 0 && c->seg == q->act_first) {
        c->size = q->act_size; /* what is written; no more while locked */
        return DSQ_OK;
    }
    if (fstat(c->fd, &st) != 0)
        return DSQ_EIO;
    c->size = (uint64_t)st.st_size;
    return DSQ_OK;
}

int dsq__cursor_peek(dsq *q, dsq_cursor *c, dsq_rec *r)
{
    int i;
    for (i = 0; i < DSQ_MAX_SEGMENT_WALK; i++) {
        uint64_t g;
        int rc;
        if (c->seg == 0)
            return 0;
        rc = cursor_open(q, c);
        if (rc != DSQ_OK)
            return rc;
        if (c->off < c->size)
            break;
        rc = dsq__seg_next(q, c->seg, &g);
        if (rc <= 0)
            return rc;
        dsq__cursor_close(c);
        c->seg = g;
        c->off = 0;
        c->seq = g;
    }
    if (c->size - c->off < sizeof r->raw ||
        dsq__pread_full(c->fd, r->raw, sizeof r->raw, c->off) != DSQ_OK)
        return DSQ_ECORRUPT;
    r->len = dsq__get_u32(r->raw);
    r->crc = dsq__get_u32(r->raw + 4);
    r->seq = dsq__get_u64(r->raw + 8);
    r->kind = r->raw[16];
    r->time = (int64_t)dsq__get_u64(r->raw + 24);
    memcpy(r->boot, r->raw + 32, 16);
    if (r->len > DSQ_MAX_RECORD_BYTES || r->len < DSQ_PAYLOAD_HEAD || r->seq != c->seq ||
        r->kind > DSQ_TIME_BOOT || c->size - c->off - DSQ_HEADER_SIZE < r->len)
        return DSQ_ECORRUPT;
    return 1;
}

int dsq__cursor_read_data(dsq *q, dsq_cursor *c, const dsq_rec *r, char *dst)
{
    size_t n = r->len - DSQ_PAYLOAD_HEAD;
    uint32_t crc;
    (void)q;
    if (dsq__pread_full(c->fd, dst, n, c->off + sizeof r->raw) != DSQ_OK)
        return DSQ_ECORRUPT;
    crc = dsq_crc32c(0, r->raw + 8, 8 + DSQ_PAYLOAD_HEAD);
    if (dsq_crc32c(crc, dst, n) != r->crc)
        return DSQ_ECORRUPT;
    dsq__cursor_skip(c, r);
    return DSQ_OK;
}

void dsq__cursor_skip(dsq_cursor *c, const dsq_rec *r)
{
    c->off += DSQ_HEADER_SIZE + (uint64_t)r->len;
    c->seq++;
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
