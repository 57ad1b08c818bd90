/* Reading records from the head on, across segments (called with the
 * queue's mutex held). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_SEGMENT_WALK 1000000

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
    for (i = 0; i < MAX_SEGMENT_WALK; i++) {
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
