/* The sender's tokens: 401/403 and the secondary token, AuthWait, the
 * tokens set from on_auth_failure; with the other waits a batch meets on
 * its way (Retry-After, network errors, 429, 404). */
#include <string.h>

#include "t.h"

static const char PRIMARY[] = "Bearer secret-token-0001", SECOND[] = "Bearer second";
#define REFUSED {401, "{\"success\":false,\"message\":\"Invalid access token\"}", NULL}
static const t_answer refused = REFUSED;

static int auth_calls;
static void on_auth(void *ctx, long status, int secondary)
{
    (void)ctx;
    (void)secondary;
    if (status == 401)
        auth_calls++;
}

static void test_auth_and_retries(void)
{
    static const t_answer script[] = {
        REFUSED,
        {503, "{\"success\":false,\"message\":\"Failed to process message\"}", "2"},
        {0, NULL, NULL}, /* a network error */
        {429, "{\"success\":false,\"message\":\"Rate limit exceeded\"}", NULL},
        {404, "{\"success\":false,\"message\":\"Device not found\"}", NULL},
        REFUSED,
        {200, T_OK_BODY, NULL},
    };
    char key[96];
    t_fix f;
    dsq_status st;
    int64_t wait = 0;
    int i;
    t_fix_open(&f, NULL);
    t_fix_script(&f, script, sizeof script / sizeof script[0]);
    t_record_n(f.q, 0, 3);
    f.o.secondary_token = "second";
    f.o.on_auth_failure = on_auth;
    f.o.auth_wait_ms = 60000;
    auth_calls = 0;
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 401: the secondary at once */
    CHECK_EQ(wait, 0);
    CHECK_EQ(auth_calls, 1);
    CHECK_STR(f.t.last_auth, PRIMARY);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 503, Retry-After: 2 */
    CHECK_STR(f.t.last_auth, SECOND);
    CHECK(wait > 1900 && wait <= 2000);
    dsq_get_status(f.q, &st);
    CHECK(st.next_attempt_ms > 0);
    CHECK_EQ(st.last_http_status, 503);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* not due: no request */
    CHECK_EQ(f.t.requests, 2);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* network error: back-off */
    CHECK(wait >= 0 && wait <= 4);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 429 without Retry-After */
    CHECK(wait >= 0 && wait <= 4);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 404: AuthWait */
    CHECK(wait > 59000 && wait <= 60000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 401 again: secondary tried */
    CHECK(wait > 59000 && wait <= 60000);
    CHECK_EQ(auth_calls, 2);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, 3); /* nothing dropped by any of these */
    CHECK_EQ(st.dropped + st.refused, 0);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* 200 */
    t_key_of(f.q, key, sizeof key, 1, 3);
    for (i = 0; i < f.t.requests; i++)
        CHECK_STR(f.t.keys[i], key); /* the same batch, the same key, each time */
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 3);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(st.requests, 7);
    CHECK_EQ(st.sent, 21);
    t_fix_close(&f);
}

/* 401/403: the other token at once once after a success, then the other
 * token after each AuthWait (review: a device stayed on a secondary that
 * was not yet valid, never trying the primary again). */
static void test_token_alternation(void)
{
    static const t_answer forbidden = {403, "{\"success\":false,\"message\":\"Forbidden\"}", NULL};
    static const t_answer ok = {200, T_OK_BODY, NULL};
    t_answer script[7];
    t_fix f;
    dsq_status st;
    int64_t wait = -1;
    script[0] = refused;   /* primary: the secondary at once */
    script[1] = refused;   /* secondary: the primary after AuthWait */
    script[2] = forbidden; /* primary: the secondary after AuthWait */
    script[3] = ok;        /* secondary */
    script[4] = refused;   /* secondary, after a success: the primary at once */
    script[5] = ok;        /* primary */
    script[6] = ok;
    t_fix_open(&f, NULL);
    t_fix_script(&f, script, 7);
    t_record_n(f.q, 0, 1);
    f.o.secondary_token = "second";
    f.o.auth_wait_ms = 60000;
    t_fix_sender(&f);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_STR(f.t.last_auth, PRIMARY);
    CHECK_EQ(wait, 0);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_STR(f.t.last_auth, SECOND);
    CHECK(wait > 59000 && wait <= 60000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_STR(f.t.last_auth, PRIMARY); /* the primary again */
    CHECK(wait > 59000 && wait <= 60000);
    f.s->next_at = 0;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_STR(f.t.last_auth, SECOND);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 1);
    t_record_n(f.q, 1, 1);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* stays on the secondary */
    CHECK_STR(f.t.last_auth, SECOND);
    CHECK_EQ(wait, 0);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_STR(f.t.last_auth, PRIMARY);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.stored, 2);
    CHECK_EQ(st.queued, 0);
    t_fix_close(&f);
}

static dsq_sender *hook_sender;
static const char *hook_secondary;
static void set_tokens_hook(void *ctx, long status, int secondary)
{
    (void)ctx;
    (void)status;
    (void)secondary;
    CHECK_EQ(dsq_sender_set_tokens(hook_sender, "new-primary", hook_secondary), DSQ_OK);
}

/* Tokens set by on_auth_failure: the new primary at once, without AuthWait
 * (review: the new secondary was tried, or AuthWait waited). */
static void test_auth_hook_tokens(void)
{
    static const char *const secondaries[] = {"new-second", NULL};
    static const t_answer script[] = {REFUSED, {200, T_OK_BODY, NULL}};
    t_fix f;
    dsq_status st;
    int64_t wait = -1;
    size_t i;
    for (i = 0; i < 2; i++) {
        t_fix_open(&f, NULL);
        t_fix_script(&f, script, 2);
        t_record_n(f.q, 0, 1);
        f.o.secondary_token = "second";
        f.o.auth_wait_ms = 60000;
        f.o.on_auth_failure = set_tokens_hook;
        hook_secondary = secondaries[i];
        t_fix_sender(&f);
        hook_sender = f.s;
        CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
        CHECK_STR(f.t.last_auth, PRIMARY);
        CHECK_EQ(wait, 0);
        CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
        CHECK_STR(f.t.last_auth, "Bearer new-primary");
        dsq_get_status(f.q, &st);
        CHECK_EQ(st.stored, 1);
        t_fix_close(&f);
    }
}

void test_tokens(void)
{
    test_auth_and_retries();
    test_token_alternation();
    test_auth_hook_tokens();
}
