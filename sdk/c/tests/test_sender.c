/* The sender against a scripted transport: batches, the URL, answers and
 * their waits, splits, age and size, a recording thread; the memory bound.
 * Tokens are in test_tokens.c, times in test_clock.c, resends in
 * test_resend.c. */
#include <stdlib.h>
#include <string.h>

#include "t.h"

static const t_answer ok = {200, T_OK_BODY, NULL};

static void test_batches(void)
{
    char key[96];
    t_fix f;
    dsq_status st;
    t_fix_open(&f, NULL);
    t_fix_script(&f, &ok, 1);
    snprintf(f.t.dir, sizeof f.t.dir, "%s", f.dir);
    t_record_n(f.q, 0, 2500);
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 10), 3);
    CHECK_EQ(f.t.requests, 3);
    CHECK_EQ(f.t.state_ok, 1); /* the batch was in state before each send */
    t_key_of(f.q, key, sizeof key, 1, 1000);
    CHECK_STR(f.t.keys[0], key);
    t_key_of(f.q, key, sizeof key, 1001, 1000);
    CHECK_STR(f.t.keys[1], key);
    t_key_of(f.q, key, sizeof key, 2001, 500);
    CHECK_STR(f.t.keys[2], key);
    CHECK_STR(f.t.last_auth, "Bearer secret-token-0001");
    CHECK_STR(f.t.last_url, "http://test.invalid/api/v1/deviceapi/events");
    CHECK_EQ(t_count(f.t.last_body, f.t.last_body_len, "\"data\":"), 500);
    {
        const char *head = "{\"serial\":\"dev-001\",\"messages\":[{\"ts\":\"2026-11-26T17:00:02.000Z\","
                           "\"data\":{\"v\":2000}},{\"ts\":\"2026-11-26T17:00:02.001Z\"";
        const char *tail = ",{\"ts\":\"2026-11-26T17:00:02.499Z\",\"data\":{\"v\":2499}}]}";
        CHECK(strncmp(f.t.last_body, head, strlen(head)) == 0);
        CHECK(f.t.last_body_len > strlen(tail) &&
              strcmp(f.t.last_body + f.t.last_body_len - strlen(tail), tail) == 0);
    }
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 2500);
    CHECK_EQ(st.sent, 2500);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(st.requests, 3);
    CHECK_EQ(st.last_http_status, 200);
    /* settled for good: nothing after a reopen; the settled segments are gone */
    t_fix_reopen(&f);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(st.next_seq, 2501);
    t_fix_close(&f);
}

/* url is the base URL: the path is appended, trailing slashes dropped; an
 * empty base is refused. */
static void test_url(void)
{
    static const char *const bases[] = {"http://test.invalid/", "http://test.invalid///"};
    static const char *const bad[] = {"", "/", "///"};
    t_fix f;
    size_t i;
    t_fix_open(&f, NULL);
    t_fix_script(&f, &ok, 1);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f.o.url = bad[i];
        CHECK_EQ(dsq_sender_open(f.q, &f.o, &f.s), DSQ_EINVAL);
        CHECK(f.s == NULL);
    }
    f.o.url = NULL;
    CHECK_EQ(dsq_sender_open(f.q, &f.o, &f.s), DSQ_EINVAL);
    for (i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        char url[64];
        snprintf(url, sizeof url, "%s", bases[i]);
        f.o.url = url;
        t_fix_sender(&f);
        memset(url, 'x', sizeof url - 1); /* the sender keeps its own copy */
        url[sizeof url - 1] = '\0';
        t_record_n(f.q, (int)i, 1);
        f.t.last_url[0] = '\0';
        CHECK_EQ(t_run(f.s, 10), 1);
        CHECK_STR(f.t.last_url, "http://test.invalid/api/v1/deviceapi/events");
        t_fix_sender_close(&f);
    }
    CHECK_EQ(f.t.requests, 2);
    t_fix_close(&f);
}

static void test_results(void)
{
    static const t_answer a = {200,
        "{\"success\":false,\"message\":\"Some messages were not stored\",\"error\":\"2 of 3 messages were not stored\",\"results\":["
        "{\"success\":true,\"message\":\"Message processed and data stored successfully\"},"
        "{\"success\":false,\"message\":\"Invalid data format\",\"error\":\"Message data must be a valid object\"},"
        "{\"success\":false,\"message\":\"No connections configured\",\"error\":\"No connections found for this device\"}]}",
        NULL};
    t_fix f;
    dsq_status st;
    t_fix_open(&f, NULL);
    t_fix_script(&f, &a, 1);
    t_record_n(f.q, 0, 3);
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 10), 1);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 1);
    CHECK_EQ(st.refused, 2);
    CHECK_EQ(st.refused_data, 1);
    CHECK_EQ(st.refused_connections, 1);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

/* 400 for any batch holding the reading {"v":2}, else stored. */
static void refuse_v2(t_transport *t, const dsq_http_request *req, t_answer *out)
{
    (void)t;
    if (t_count(req->body, req->body_len, "{\"v\":2}") > 0) { /* body: not NUL-terminated */
        out->status = 400;
        out->body = "{\"success\":false,\"message\":\"Invalid data format\",\"error\":\"Message data must be a valid object\"}";
    } else {
        out->status = 200;
        out->body = T_OK_BODY;
    }
}

static void test_split(void)
{
    char key[96];
    const unsigned want[5][2] = {{1, 4}, {1, 2}, {3, 2}, {3, 1}, {4, 1}};
    t_fix f;
    dsq_status st;
    int i;
    t_fix_open(&f, NULL);
    f.t.fn = refuse_v2;
    snprintf(f.t.dir, sizeof f.t.dir, "%s", f.dir);
    t_record_n(f.q, 0, 4);
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 20), 5);
    CHECK_EQ(f.t.requests, 5);
    CHECK_EQ(f.t.state_ok, 1);
    for (i = 0; i < 5; i++) {
        t_key_of(f.q, key, sizeof key, want[i][0], want[i][1]);
        CHECK_STR(f.t.keys[i], key);
    }
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 3);
    CHECK_EQ(st.refused, 1);
    CHECK_EQ(st.refused_data, 1); /* by the 400's message */
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

/* Retry-After: 0 and a date past are not a wait: the back-off is (review:
 * a tight resend loop); a positive one is honoured. */
static void test_retry_after_zero(void)
{
    static const t_answer script[] = {
        {503, "{}", "0"},
        {429, "{}", "0"},
        {503, "{}", "Sun, 06 Nov 1994 08:49:37 GMT"},
        {503, "{}", "2"},
        {200, T_OK_BODY, NULL},
    };
    t_fix f;
    dsq_status st;
    int64_t wait = -1;
    t_fix_open(&f, NULL);
    t_fix_script(&f, script, sizeof script / sizeof script[0]);
    t_record_n(f.q, 0, 2);
    f.o.base_backoff_ms = 1000;
    f.o.max_backoff_ms = 60000;
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(f.s->backoff.step, 1);
    CHECK(wait >= 0 && wait <= 1000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(f.s->backoff.step, 2);
    CHECK(wait >= 0 && wait <= 2000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(f.s->backoff.step, 3);
    CHECK(wait >= 0 && wait <= 4000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 2 s, as said */
    CHECK(wait > 1900 && wait <= 2000);
    CHECK_EQ(f.s->backoff.step, 3);
    f.s->next_at = 0;
    CHECK_EQ(t_run(f.s, 5), 1);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 2);
    CHECK_EQ(f.t.requests, 5);
    t_fix_close(&f);
}

/* MaxAge drops old readings unsent; a reading larger than BatchBytes is
 * refused without a request; 413 for one reading refuses it. */
static void test_age_and_size(void)
{
    static const t_answer script[] = {{413, "{\"success\":false,\"message\":\"Payload too large\"}", NULL},
                                      {413, "{\"success\":false,\"message\":\"Payload too large\"}", NULL},
                                      {200, T_OK_BODY, NULL}};
    char big[2100];
    t_fix f;
    dsq_options qo;
    dsq_status st;
    int64_t now = dsq__wall_ms();
    dsq_options_init(&qo);
    qo.max_age_ms = 60000;
    t_fix_open(&f, &qo);
    t_fix_script(&f, script, 3);
    CHECK_EQ(dsq_record(f.q, "{\"old\":1}", DSQ_TIME_WALL, now - 120000), 1);
    CHECK_EQ(dsq_record(f.q, "{\"old\":2}", DSQ_TIME_WALL, now - 61000), 2);
    memset(big, ' ', sizeof big);
    big[0] = '{';
    big[sizeof big - 2] = '}';
    big[sizeof big - 1] = '\0';
    CHECK_EQ(dsq_record(f.q, big, DSQ_TIME_WALL, now), 3);
    CHECK_EQ(dsq_record(f.q, "{\"new\":1}", DSQ_TIME_WALL, now), 4);
    CHECK_EQ(dsq_record(f.q, "{\"new\":2}", DSQ_TIME_WALL, now), 5);
    f.o.batch_bytes = 1024;
    t_fix_sender(&f);
    CHECK_EQ(t_run(f.s, 10), 3); /* 4-5: 413, split; 4: 413, refused; 5: stored */
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.dropped_age, 2);
    CHECK_EQ(st.dropped, 2);
    CHECK_EQ(st.refused_too_large, 2); /* 3 (too big to send) and 4 (413) */
    CHECK_EQ(st.refused, 2);
    CHECK_EQ(st.stored, 1);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(f.t.requests, 3);
    CHECK(t_count(f.t.last_body, f.t.last_body_len, "{\"new\":2}") == 1);
    t_fix_close(&f);
}

static int recorder_failures;

static void *recorder(void *arg) /* no CHECK here: the counters are not shared */
{
    int i;
    for (i = 0; i < 300; i++)
        if (dsq_record((dsq *)arg, "{\"t\":1}", DSQ_TIME_WALL, 1) != i + 1)
            recorder_failures++;
    return NULL;
}

/* Recording in one thread while another sends: every reading stored once. */
static void test_threads(void)
{
    t_fix f;
    dsq_options qo;
    dsq_status st;
    pthread_t th;
    int64_t deadline;
    int i, step_failures = 0;
    dsq_options_init(&qo);
    qo.segment_bytes = 1000; /* segments come and go while sending */
    t_fix_open(&f, &qo);
    t_fix_script(&f, &ok, 1);
    f.o.batch_readings = 7;
    t_fix_sender(&f);
    CHECK_EQ(pthread_create(&th, NULL, recorder, f.q), 0);
    deadline = dsq__mono_ms() + 60000;
    for (i = 0; i < 10000000 && dsq__mono_ms() < deadline; i++) {
        int64_t wait;
        if (dsq_sender_step(f.s, &wait) != DSQ_OK)
            step_failures++;
        dsq_get_status(f.q, &st);
        if (st.stored == 300)
            break;
        if (wait < 0)
            dsq__sleep_ms(1); /* the recorder has not caught up */
    }
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(recorder_failures, 0);
    CHECK_EQ(step_failures, 0);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 300);
    CHECK_EQ(st.sent, 300);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

void test_sender(void)
{
    test_threads();
    test_age_and_size();
    test_batches();
    test_url();
    test_results();
    test_split();
    test_retry_after_zero();
}

/* The library allocates at open only: a queue and a sender with the
 * default options (1,000 readings, 512 KiB of body) stay within the
 * figure in README.md, and recording and sending allocate nothing. */
#define PEAK_LIMIT_KIB 720

void test_memory(void)
{
    t_fix f;
    dsq_options qo;
    dsq_status st;
    t_counter c;
    size_t after_open;
    dsq_options_init(&qo);
    t_counting_allocator(&qo.allocator, &c);
    t_fix_open(&f, &qo);
    t_fix_script(&f, &ok, 1);
    t_fix_sender(&f);
    after_open = c.count;
    t_record_n(f.q, 0, 3000);
    CHECK_EQ(t_run(f.s, 10), 3);
    t_record_n(f.q, 0, 10);
    CHECK_EQ(t_run(f.s, 10), 1);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 3010);
    CHECK_EQ(c.count, after_open); /* nothing allocated per reading or request */
    printf("memory   peak %zu bytes (%.1f KiB) in %zu allocations; limit %d KiB\n", c.peak,
           (double)c.peak / 1024.0, c.count, PEAK_LIMIT_KIB);
    CHECK(c.peak <= (size_t)PEAK_LIMIT_KIB * 1024);
    t_fix_shut(&f);
    CHECK_EQ(c.current, 0); /* all given back */
    t_fix_close(&f);
}
