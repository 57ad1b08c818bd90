/* Builds a batch's body from the head of the queue:
 * {"serial":"...","messages":[{"ts":"...","data":{...}},...]}
 * Called with the queue's mutex held. No allocation: the body buffer and
 * the items array were allocated when the sender was opened. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MAX_SKIPS 1000000 /* readings settled unsent in one build */
/* A message's opening with a ts: {"ts":"<24 chars>","data": (and a comma
 * before all but the first). A new batch counts every message with it, so
 * that its resend fits whatever times it then carries. */
#define TS_OPENING (sizeof "{\"ts\":\"" - 1 + 24 + sizeof "\",\"data\":" - 1)

/* What the build knows of now, read once per build. */
typedef struct now_info {
    int64_t wall_ms;
    int have_boot; /* 1: read, -1: unreadable, 0: not yet */
    int64_t uptime_ms;
    uint8_t boot[16];
} now_info;

/* Why a reading is not put in the batch. */
enum { TAKE = 0, WAIT_CLOCK = 1, SKIP_AGED = 2 };

typedef struct build {
    dsq_sender *s;
    dsq *q;
    int resend;
    uint64_t end;  /* resend: the first sequence number past the batch */
    uint32_t max_n;
    size_t cap;
    size_t budget; /* the body's size with a ts on every message */
    now_info now;
    int head_moved;
} build;

static int append(build *b, const char *text, size_t n)
{
    if (b->s->body_len + n > b->cap)
        return -1;
    memcpy(b->s->body + b->s->body_len, text, n);
    b->s->body_len += n;
    return 0;
}

/* The reading's time as Unix ms: 1 with *ts; 0 without a time; and
 * whether it must wait for the clock instead. A wall time before the clock
 * epoch is a clock that was not set: no time. */
static int reading_time(build *b, const dsq_rec *r, int64_t *ts, int *wait)
{
    *wait = 0;
    if (r->kind == DSQ_TIME_WALL) {
        *ts = r->time;
        return r->time >= DSQ_CLOCK_EPOCH_MS;
    }
    if (r->kind != DSQ_TIME_BOOT)
        return 0;
    if (b->now.have_boot == 0)
        b->now.have_boot = dsq__boot_now(&b->now.uptime_ms, b->now.boot) == 0 ? 1 : -1;
    if (b->now.have_boot != 1 || memcmp(b->now.boot, r->boot, 16) != 0)
        return 0; /* its boot ended: no time */
    if (b->now.wall_ms >= DSQ_CLOCK_EPOCH_MS) {
        *ts = b->now.wall_ms - (b->now.uptime_ms - r->time);
        return 1;
    }
    if (!b->resend && !b->s->o.send_without_time &&
        b->now.uptime_ms - r->time < b->s->o.clock_wait_ms)
        *wait = 1;
    return 0;
}

/* The message's opening: `,{"ts":"...","data":` or `,{"data":` (no comma
 * before the first). *has_ts is cleared if ts is not a year 0..9999. */
static size_t opening(char *out, size_t cap, int first, int *has_ts, int64_t ts)
{
    char when[25];
    int n;
    if (*has_ts && dsq_format_time(ts, when) == 0)
        n = snprintf(out, cap, "%s{\"ts\":\"%s\",\"data\":", first ? "" : ",", when);
    else {
        *has_ts = 0;
        n = snprintf(out, cap, "%s{\"data\":", first ? "" : ",");
    }
    return n > 0 ? (size_t)n : 0;
}

/* Settles the reading at the head unsent (too large, or too old). */
static void settle_unsent(build *b, const dsq_cursor *c, int aged)
{
    dsq *q = b->q;
    q->head = c->seq;
    q->head_seg = c->seg;
    q->head_off = c->off;
    q->queued = q->queued > 0 ? q->queued - 1 : 0;
    if (aged) {
        q->st.dropped_age++;
        q->st.dropped++;
    } else {
        q->st.refused_too_large++;
        q->st.refused++;
    }
    b->head_moved = 1;
}

static int is_aged(build *b, int has_ts, int64_t ts)
{
    int64_t age = b->q->max_age_ms;
    return !b->resend && age > 0 && has_ts && ts < b->now.wall_ms - age;
}

/* Adds the reading at c (header r) to the body. 1: added; 0: the batch
 * ends before it; <0: error (DSQ_ECORRUPT: its data failed the checksum). */
static int add_reading(build *b, dsq_cursor *c, const dsq_rec *r, uint32_t n, int *clock_wait)
{
    dsq_sender *s = b->s;
    char open[64];
    size_t olen, dlen = r->len - DSQ_PAYLOAD_HEAD, mark = s->body_len;
    size_t most = (n == 0 ? 0 : 1) + TS_OPENING + dlen + 1; /* with a ts */
    int64_t ts = 0;
    int wait, has_ts, rc, fits;
    if (b->resend && r->seq >= b->end)
        return 0; /* past the named batch (a gap after lost readings) */
    has_ts = reading_time(b, r, &ts, &wait);
    if (wait) {
        *clock_wait = n == 0;
        return 0;
    }
    if (is_aged(b, has_ts, ts)) {
        if (n > 0)
            return 0;
        dsq__cursor_skip(c, r);
        settle_unsent(b, c, 1);
        return 2;
    }
    olen = opening(open, sizeof open, n == 0, &has_ts, ts);
    /* and "]}". A new batch is budgeted with a ts on every message; a
     * resend then fits, unless batch_bytes is smaller since (README). */
    fits = b->resend ? s->body_len + olen + dlen + 1 + 2 <= b->cap
                     : b->budget + most + 2 <= b->cap;
    if (!fits) {
        if (n > 0)
            return 0;
        dsq__cursor_skip(c, r); /* too large to send ever */
        settle_unsent(b, c, 0);
        return 2;
    }
    (void)append(b, open, olen);
    rc = dsq__cursor_read_data(b->q, c, r, s->body + s->body_len);
    if (rc != DSQ_OK) {
        s->body_len = mark;
        return rc;
    }
    s->body_len += dlen;
    (void)append(b, "}", 1);
    b->budget += most;
    if (!has_ts && r->kind != DSQ_TIME_NONE)
        s->body_no_time++; /* counted when the answer settles it */
    s->items[n].seq = r->seq;
    s->items[n].seg = c->seg;
    s->items[n].end_off = c->off;
    return 1;
}

static uint32_t batch_limit(dsq_sender *s, dsq *q)
{
    uint32_t n = s->o.batch_readings;
    if (q->head < s->limit_until) {
        uint64_t left = s->limit_until - q->head;
        if (s->limit_count < n)
            n = s->limit_count;
        if (left < n)
            n = (uint32_t)left;
    }
    return n > 0 ? n : 1;
}

/* Fills the body; returns the number of readings in it or an error. */
static int fill(build *b, int *clock_wait)
{
    dsq_sender *s = b->s;
    dsq_cursor c;
    uint32_t n = 0;
    int i, rc = DSQ_OK;
    size_t start = s->body_len;
    dsq__cursor_at_head(b->q, &c);
    for (i = 0; i < MAX_SKIPS && n < b->max_n; i++) {
        dsq_rec r;
        rc = dsq__cursor_peek(b->q, &c, &r);
        if (rc > 0)
            rc = add_reading(b, &c, &r, n, clock_wait);
        if (rc == DSQ_ECORRUPT && n == 0) { /* at the head: cut it, go on */
            rc = dsq__cut_corrupt(b->q, &c);
            dsq__cursor_close(&c);
            b->head_moved = 1;
            if (rc != DSQ_OK)
                break;
            s->body_len = start;
            b->budget = start;
            dsq__cursor_at_head(b->q, &c);
            continue;
        }
        if (rc <= 0)
            break;
        if (rc == 1)
            n++;
    }
    dsq__cursor_close(&c);
    if (rc < 0 && rc != DSQ_ECORRUPT)
        return rc;
    return (int)n;
}

int dsq__build_batch(dsq_sender *s, int *clock_wait)
{
    build b;
    dsq *q = s->q;
    char head[64];
    int n, hn, rc = DSQ_OK;
    memset(&b, 0, sizeof b);
    b.s = s;
    b.q = q;
    b.resend = q->batch_first != 0 && q->batch_count > 0;
    b.end = q->batch_first + q->batch_count;
    b.max_n = b.resend ? q->batch_count : batch_limit(s, q);
    if (b.max_n > s->o.batch_readings)
        b.max_n = s->o.batch_readings; /* an older, larger batch: split (README) */
    b.cap = s->o.batch_bytes;
    b.now.wall_ms = dsq__wall_ms();
    *clock_wait = 0;
    s->body_valid = 0;
    s->body_len = 0;
    s->body_no_time = 0;
    hn = snprintf(head, sizeof head, "{\"serial\":\"");
    if (append(&b, head, (size_t)hn) || append(&b, s->serial_json, strlen(s->serial_json)) ||
        append(&b, "\",\"messages\":[", 14))
        return DSQ_EINVAL;
    b.budget = s->body_len;
    n = fill(&b, clock_wait);
    if (n < 0)
        return n;
    (void)append(&b, "]}", 2);
    if (b.head_moved)
        dsq__normalize_head(q);
    if (n > 0 && (q->batch_first != q->head || q->batch_count != (uint32_t)n || b.head_moved)) {
        q->batch_first = q->head;
        q->batch_count = (uint32_t)n;
        rc = dsq__write_state(q);
    } else if (n == 0 && (b.head_moved || q->batch_count != 0)) {
        q->batch_first = 0;
        q->batch_count = 0;
        rc = dsq__write_state(q);
    }
    if (rc == DSQ_OK && b.head_moved)
        rc = dsq__delete_settled(q);
    if (rc != DSQ_OK)
        return rc;
    if (n > 0) {
        q->batch_last_seg = s->items[n - 1].seg;
        s->body_first = q->batch_first;
        s->body_count = q->batch_count;
        s->body_valid = 1;
    }
    return n;
}
