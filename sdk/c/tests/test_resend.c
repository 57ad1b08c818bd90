/* A batch whose answer did not come: resent as it was, after a restart,
 * while DropOldest makes room, and after a power loss took back records
 * it had named. (The resend after the clock wait is in test_clock.c.) */
#include <stdlib.h>
#include <string.h>

#include "t.h"

static const t_answer ok = {200, T_OK_BODY, NULL};

/* A batch whose answer did not come is sent again after a restart, as it
 * was (same first reading, length and key), though more was recorded. */
static void test_restart(void)
{
    static const t_answer lost = {0, NULL, NULL};
    char key[96];
    t_fix f;
    dsq_status st;
    int64_t wait;
    t_fix_open(&f, NULL);
    t_fix_script(&f, &lost, 1);
    t_record_n(f.q, 0, 5);
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);

    t_fix_reopen(&f);
    t_record_n(f.q, 5, 5);
    f.t.script = &ok;
    f.o.batch_bytes = 4096; /* other settings now */
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 10), 2);
    t_key_of(f.q, key, sizeof key, 1, 5);
    CHECK_STR(f.t.keys[0], key);
    CHECK_STR(f.t.keys[1], key);
    t_key_of(f.q, key, sizeof key, 6, 5);
    CHECK_STR(f.t.keys[2], key);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 10);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

/* DropOldest never drops the segment of the batch being sent. */
static void test_drop_spares_batch(void)
{
    static const t_answer lost = {503, "{}", NULL};
    char key[96], *first_body;
    t_fix f;
    dsq_options qo;
    dsq_status st;
    int64_t wait;
    dsq_options_init(&qo);
    qo.max_bytes = 600;
    qo.segment_bytes = 150;
    t_fix_open(&f, &qo);
    t_fix_script(&f, &lost, 1);
    t_record_n(f.q, 0, 2);
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* batch 1-2 in flight */
    first_body = f.t.last_body;
    f.t.last_body = NULL;
    t_record_n(f.q, 2, 60);
    dsq_get_status(f.q, &st);
    CHECK(st.dropped_full > 0);
    CHECK(st.bytes_on_disk <= 600);
    f.t.script = &ok;
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    t_key_of(f.q, key, sizeof key, 1, 2);
    CHECK_STR(f.t.keys[1], key);
    CHECK_STR(f.t.last_body, first_body); /* resent as it was */
    free(first_body);
    t_run(f.s, 20);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(st.stored + st.dropped_full, 62);
    t_fix_close(&f);
}

/* Sends 10 readings {"v":0..9} in one batch whose answer is lost, then
 * cuts the first segment to keep bytes (a power loss after a process that
 * trusted unsynced records had named and sent them). The fixture is left
 * shut, its transport answering 200 from now on. */
static void named_then_lost(t_fix *f, long keep)
{
    static const t_answer lost = {503, "{}", NULL};
    int64_t wait;
    char path[300], *b;
    size_t n = 0;
    t_fix_open(f, NULL);
    t_fix_script(f, &lost, 1);
    t_record_n(f->q, 0, 10);
    t_fix_sender(f);
    CHECK_EQ(dsq_sender_step(f->s, &wait), DSQ_OK); /* id-1-10 named and sent */
    t_fix_shut(f);
    snprintf(path, sizeof path, "%s/00000000000000000001.seg", f->dir);
    b = t_read_file(path, &n);
    CHECK(b != NULL && n >= (size_t)keep);
    t_write_file(path, b, (size_t)keep);
    free(b);
    f->t.script = &ok;
}

/* After such a loss the numbers of the named batch are not used again
 * (review: new readings went out under id-1-10 and the service answered
 * them from its cache, unstored). */
static void test_power_loss(void)
{
    char key[96];
    t_fix f;
    dsq_status st;
    int64_t wait;
    /* all ten lost */
    named_then_lost(&f, 0);
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.next_seq, 11);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(st.dropped_torn, 10);
    CHECK_EQ(dsq_record(f.q, "{\"new\":0}", DSQ_TIME_WALL, INT64_C(1795712400000)), 11);
    t_record_n(f.q, 101, 9);
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 10), 1);
    t_key_of(f.q, key, sizeof key, 11, 10);
    CHECK_STR(f.t.keys[1], key);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 10);
    CHECK_EQ(st.queued, 0);
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.next_seq, 21);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);

    /* the last five lost: the first five go alone (a new key: they may be
     * stored twice, never lost), the new ones after the gap */
    named_then_lost(&f, 5 * (16 + 32 + 7));
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.next_seq, 11);
    CHECK_EQ(st.queued, 5);
    CHECK_EQ(st.dropped_torn, 5);
    CHECK_EQ(dsq_record(f.q, "{\"new\":0}", DSQ_TIME_WALL, INT64_C(1795712400000)), 11);
    t_record_n(f.q, 101, 4);
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    t_key_of(f.q, key, sizeof key, 1, 5);
    CHECK_STR(f.t.keys[1], key);
    CHECK_EQ(t_count(f.t.last_body, f.t.last_body_len, "\"data\":"), 5);
    CHECK_EQ(t_count(f.t.last_body, f.t.last_body_len, "{\"v\":4}"), 1);
    CHECK_EQ(t_count(f.t.last_body, f.t.last_body_len, "new"), 0);
    CHECK_EQ(t_run(f.s, 10), 1);
    t_key_of(f.q, key, sizeof key, 11, 5);
    CHECK_STR(f.t.keys[2], key);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 10);
    CHECK_EQ(st.queued, 0);
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.next_seq, 16);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

void test_resend(void)
{
    test_restart();
    test_drop_spares_batch();
    test_power_loss();
}
