/* The queue: round trip, torn tails, flipped bytes, bounds. */
#include <stdlib.h>
#include <string.h>

#include "t.h"

typedef struct collected {
    int n;
    uint64_t seq[256];
    int kind[256];
    int64_t time[256];
    char data[256][48];
} collected;

static int collect(void *ctx, const dsq_item *it)
{
    collected *c = (collected *)ctx;
    if (c->n < 256) {
        size_t n = it->data_len < 47 ? it->data_len : 47;
        c->seq[c->n] = it->seq;
        c->kind[c->n] = it->time_kind;
        c->time[c->n] = it->time;
        memcpy(c->data[c->n], it->data != NULL ? it->data : "", it->data != NULL ? n : 0);
        c->data[c->n][it->data != NULL ? n : 0] = '\0';
    }
    c->n++;
    return 0;
}

static void read_all(dsq *q, collected *c)
{
    char buf[1024];
    memset(c, 0, sizeof *c);
    CHECK_EQ(dsq_iterate(q, buf, sizeof buf, collect, c), DSQ_OK);
}

/* Queue options: the defaults but for the bounds given (0: the default)
 * and the policy; o, for t_fix_open. */
static const dsq_options *opts(dsq_options *o, uint64_t max_bytes, uint64_t seg_bytes, int policy)
{
    dsq_options_init(o);
    if (max_bytes)
        o->max_bytes = max_bytes;
    if (seg_bytes)
        o->segment_bytes = seg_bytes;
    o->full_policy = policy;
    return o;
}

static void test_round_trip(void)
{
    t_fix f;
    dsq_options qo;
    dsq *q2;
    collected c;
    dsq_status st;
    dsq_reading rs[10];
    char texts[10][32];
    size_t rec = 99;
    int i;
    t_fix_open(&f, opts(&qo, 0, 0, DSQ_DROP_OLDEST));
    CHECK_EQ(dsq_record(f.q, "{\"a\":1}", DSQ_TIME_NONE, 0), 1);
    CHECK_EQ(dsq_record(f.q, " {\"b\":\"x\"} ", DSQ_TIME_WALL, INT64_C(1795712400123)), 2);
    CHECK_EQ(dsq_record(f.q, "{\"c\":[1,2]}", DSQ_TIME_BOOT, 4242), 3);
    CHECK_EQ(dsq_record(f.q, "[1]", DSQ_TIME_WALL, 0), DSQ_EINVAL);
    CHECK_EQ(dsq_record(f.q, "{\"a\":1}", 7, 0), DSQ_EINVAL);
    CHECK_EQ(dsq_record(f.q, "", DSQ_TIME_WALL, 0), DSQ_EINVAL);
    for (i = 0; i < 10; i++) {
        snprintf(texts[i], sizeof texts[i], "{\"i\":%d}", i);
        rs[i].data_json = texts[i];
        rs[i].time_kind = DSQ_TIME_WALL;
        rs[i].time = 1000 + i;
    }
    CHECK_EQ(dsq_record_all(f.q, rs, 10, &rec), 4);
    CHECK_EQ(rec, 10);
    CHECK_EQ(dsq_open(f.dir, NULL, &q2), DSQ_EBUSY); /* one process at a time */

    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, 13);
    CHECK_EQ(st.next_seq, 14);
    CHECK_EQ(st.dropped, 0);
    read_all(f.q, &c);
    CHECK_EQ(c.n, 13);
    CHECK_EQ(c.seq[0], 1);
    CHECK_EQ(c.kind[0], DSQ_TIME_NONE);
    CHECK_STR(c.data[0], "{\"a\":1}");
    CHECK_EQ(c.kind[1], DSQ_TIME_WALL);
    CHECK_EQ(c.time[1], INT64_C(1795712400123));
    CHECK_STR(c.data[1], " {\"b\":\"x\"} ");
    CHECK_EQ(c.kind[2], DSQ_TIME_BOOT);
    CHECK_EQ(c.time[2], 4242);
    CHECK_EQ(c.seq[12], 13);
    CHECK_STR(c.data[12], "{\"i\":9}");
    CHECK_EQ(c.time[12], 1009);
    CHECK_EQ(dsq_record(f.q, "{\"z\":0}", DSQ_TIME_WALL, 5), 14);
    t_fix_close(&f);

    /* many segments: the order holds across them */
    t_fix_open(&f, opts(&qo, 0, 200, DSQ_DROP_OLDEST));
    t_record_n(f.q, 0, 40);
    t_fix_reopen(&f);
    read_all(f.q, &c);
    CHECK_EQ(c.n, 40);
    for (i = 0; i < 40 && i < c.n; i++) {
        char want[32];
        snprintf(want, sizeof want, "{\"v\":%d}", i);
        CHECK_EQ(c.seq[i], i + 1);
        CHECK_STR(c.data[i], want);
    }
    {
        char path[300];
        snprintf(path, sizeof path, "%s/00000000000000000001.seg", f.dir);
        CHECK(t_file_size(path) >= 200);
        CHECK(t_file_size(path) < 200 + 60);
    }
    t_fix_close(&f);
}

/* The last segment's path and the offset where its last record starts. */
static void last_record(const char *dir, char path[300], size_t *start, size_t *end)
{
    char *b;
    size_t n = 0, off = 0, prev = 0;
    snprintf(path, 300, "%s/00000000000000000001.seg", dir);
    b = t_read_file(path, &n);
    while (off < n) {
        prev = off;
        off += 16 + dsq__get_u32((const uint8_t *)b + off);
    }
    free(b);
    *start = prev;
    *end = n;
}

static void check_survivors(const char *dir, int survivors, uint64_t torn)
{
    dsq_options o;
    dsq *q = NULL;
    dsq_status st;
    collected c;
    int i;
    CHECK_EQ(dsq_open(dir, opts(&o, 0, 0, DSQ_DROP_OLDEST), &q), DSQ_OK);
    if (q == NULL)
        return;
    dsq_get_status(q, &st);
    CHECK_EQ(st.queued, survivors);
    CHECK_EQ(st.dropped_torn, torn);
    CHECK_EQ(st.dropped, torn);
    read_all(q, &c);
    CHECK_EQ(c.n, survivors);
    for (i = 0; i < survivors && i < c.n; i++) {
        char want[32];
        snprintf(want, sizeof want, "{\"v\":%d}", i);
        CHECK_STR(c.data[i], want);
    }
    CHECK_EQ(dsq_record(q, "{\"after\":1}", DSQ_TIME_NONE, 0), survivors + 1);
    dsq_close(q);
}

static void test_torn_tail(void)
{
    char path[300];
    t_fix f;
    dsq_options qo;
    char *orig;
    size_t n = 0, start, end, off;
    int cases = 0;
    t_fix_open(&f, opts(&qo, 0, 0, DSQ_DROP_OLDEST));
    t_record_n(f.q, 0, 5);
    t_fix_shut(&f);
    last_record(f.dir, path, &start, &end);
    orig = t_read_file(path, &n);
    CHECK_EQ(n, end);
    /* cut at every offset inside the last record */
    for (off = start; off < end; off++) {
        t_write_file(path, orig, off);
        check_survivors(f.dir, 4, off > start ? 1 : 0);
        CHECK_EQ(t_file_size(path), start + 16 + 32 + strlen("{\"after\":1}"));
        cases++;
    }
    CHECK_EQ(cases, end - start);
    /* a flipped byte anywhere in the last record */
    for (off = start; off < end; off++) {
        orig[off] ^= 0x20;
        t_write_file(path, orig, n);
        orig[off] ^= 0x20;
        check_survivors(f.dir, 4, 1);
    }
    /* intact again: all five */
    t_write_file(path, orig, n);
    check_survivors(f.dir, 5, 0);
    free(orig);
    t_fix_close(&f);

    /* a bad record in a closed segment: the rest of it is cut and counted
     * exactly (the next segment's name says where it ended) */
    t_fix_open(&f, opts(&qo, 0, 150, DSQ_DROP_OLDEST));
    t_record_n(f.q, 0, 8); /* segments of 3 records: 1-3, 4-6, 7-8 */
    t_fix_shut(&f);
    snprintf(path, sizeof path, "%s/00000000000000000004.seg", f.dir);
    CHECK(t_file_size(path) > 0);
    orig = t_read_file(path, &n);
    orig[16 + 55 + 20] ^= 1; /* in the second record (seq 5) */
    t_write_file(path, orig, n);
    free(orig);
    {
        dsq_status st;
        collected c;
        t_fix_reopen(&f);
        dsq_get_status(f.q, &st);
        CHECK_EQ(st.dropped_torn, 2); /* 5 and 6 */
        CHECK_EQ(st.queued, 6);
        read_all(f.q, &c);
        CHECK_EQ(c.n, 6);
        CHECK_EQ(c.seq[3], 4);
        CHECK_EQ(c.seq[4], 7);
    }
    t_fix_close(&f);
}

/* Open syncs each segment it keeps, and the directory, before it trusts
 * their records: a process killed before its fsync leaves them in the page
 * cache only (review: a power loss then took back readings already named
 * and sent, and their numbers were used again). */
static void test_open_syncs(void)
{
    static const char *const segs[] = {"00000000000000000001.seg", "00000000000000000004.seg",
                                       "00000000000000000007.seg"};
    char path[300];
    t_fix f;
    dsq_options qo;
    size_t i;
    t_fix_open(&f, opts(&qo, 0, 150, DSQ_DROP_OLDEST));
    t_record_n(f.q, 0, 8); /* segments 1-3, 4-6, 7-8 */
    t_fix_shut(&f);
    t_fsync_count = 0;
    t_fsync_logging = 1;
    t_fix_reopen(&f);
    t_fsync_logging = 0;
    for (i = 0; i < sizeof segs / sizeof segs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", f.dir, segs[i]);
        CHECK(t_file_size(path) > 0);
        CHECK(t_fsynced(path));
    }
    CHECK(t_fsynced(f.dir));
    t_fix_close(&f);
}

void test_queue(void)
{
    test_round_trip();
    test_open_syncs();
}

void test_torn(void)
{
    test_torn_tail();
}

void test_bounds(void)
{
    t_fix f;
    dsq_options qo;
    dsq_status st;
    collected c;
    int i, refused = 0, ok = 0;
    /* records are 16 + 32 + 8..9 bytes; segments close past 150 bytes */
    t_fix_open(&f, opts(&qo, 600, 150, DSQ_DROP_OLDEST));
    t_record_n(f.q, 0, 100);
    dsq_get_status(f.q, &st);
    CHECK(st.bytes_on_disk <= 600);
    CHECK(st.dropped_full > 0);
    CHECK_EQ(st.dropped, st.dropped_full);
    CHECK_EQ(st.queued + st.dropped_full, 100);
    CHECK_EQ(st.refused_full, 0);
    read_all(f.q, &c);
    CHECK_EQ(c.n, st.queued);
    CHECK_EQ(c.seq[c.n - 1], 100); /* the newest kept, contiguous */
    for (i = 1; i < c.n; i++)
        CHECK_EQ(c.seq[i], c.seq[i - 1] + 1);
    /* the counts and the head survive a reopen */
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, c.n);
    t_fix_close(&f);

    t_fix_open(&f, opts(&qo, 600, 150, DSQ_REFUSE_NEWEST));
    for (i = 0; i < 100; i++) {
        int64_t r = dsq_record(f.q, "{\"v\":1}", DSQ_TIME_WALL, 1);
        if (r == DSQ_EFULL)
            refused++;
        else if (r > 0)
            ok++;
    }
    dsq_get_status(f.q, &st);
    CHECK_EQ(ok, 10); /* 10 records of 55 bytes fit in 600 */
    CHECK_EQ(refused, 90);
    CHECK_EQ(st.refused_full, 90);
    CHECK_EQ(st.dropped, 0);
    CHECK_EQ(st.queued, 10);
    CHECK(st.bytes_on_disk <= 600);
    read_all(f.q, &c);
    CHECK_EQ(c.n, 10);
    CHECK_EQ(c.seq[9], 10);
    t_fix_close(&f);
}
