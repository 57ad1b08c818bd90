/* The sender: sends the batch at the head and settles it by the answer
 * (docs/sdk.md, "Sending"). Allocates only in dsq_sender_open. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define DEFAULT_BATCH_READINGS 1000u
#define DEFAULT_BATCH_BYTES (512u * 1024u)
#define ANSWER_BYTES_PER_READING 160u /* a result with its error message */
#define CLOCK_POLL_MS 1000
#define AUTH_LEN (DSQ_TOKEN_MAX + 8)   /* "Bearer " and the NUL */

void dsq_sender_options_init(dsq_sender_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_readings = DEFAULT_BATCH_READINGS;
    o->batch_bytes = DEFAULT_BATCH_BYTES;
    o->request_timeout_ms = 30000;
    o->connect_timeout_ms = 10000;
    o->base_backoff_ms = 1000;
    o->max_backoff_ms = 5 * 60 * 1000;
    o->backoff_calm = 3;
    o->auth_wait_ms = 5 * 60 * 1000;
    o->clock_wait_ms = 60 * 60 * 1000;
}

static void logf_(dsq_sender *s, int level, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    if (s->o.log == NULL)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->o.log(s->o.ctx, level, line);
}

/* xorshift64*: the jitter's randomness, seeded from /dev/urandom. */
static uint64_t next_random(dsq_sender *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * UINT64_C(2685821657736338717);
}

/* The size of text JSON-escaped (without quotes), and the escaping. */
static size_t json_escaped_len(const char *t)
{
    size_t n = 0;
    for (; *t != '\0'; t++) {
        unsigned char c = (unsigned char)*t;
        n += (c == '"' || c == '\\') ? 2 : (c < 0x20 ? 6 : 1);
    }
    return n;
}

static void json_escape(char *out, const char *t)
{
    for (; *t != '\0'; t++) {
        unsigned char c = (unsigned char)*t;
        if (c == '"' || c == '\\') {
            *out++ = '\\';
            *out++ = (char)c;
        } else if (c < 0x20) {
            (void)snprintf(out, 7, "\\u%04x", c);
            out += 6;
        } else {
            *out++ = (char)c;
        }
    }
    *out = '\0';
}

/* A token: 1..4096 visible ASCII characters (it goes in a header). */
static int token_ok(const char *t)
{
    size_t n = 0;
    if (t == NULL)
        return 0;
    for (; t[n] != '\0'; n++) {
        if (n >= DSQ_TOKEN_MAX || t[n] < 0x21 || t[n] > 0x7e)
            return 0;
    }
    return n > 0;
}

int dsq_sender_set_tokens(dsq_sender *s, const char *token, const char *secondary)
{
    if (!token_ok(token) || (secondary != NULL && !token_ok(secondary)))
        return DSQ_EINVAL;
    (void)snprintf(s->auth[0], AUTH_LEN, "Bearer %s", token);
    s->has_secondary = secondary != NULL;
    if (secondary != NULL)
        (void)snprintf(s->auth[1], AUTH_LEN, "Bearer %s", secondary);
    s->using_secondary = 0;
    s->switched = 0;
    s->token_gen++; /* from on_auth_failure: the new primary at once */
    return DSQ_OK;
}

static void fill_defaults(dsq_sender_options *o)
{
    dsq_sender_options d;
    dsq_sender_options_init(&d);
    if (o->batch_readings == 0)
        o->batch_readings = d.batch_readings;
    if (o->batch_bytes < 1024)
        o->batch_bytes = o->batch_bytes == 0 ? d.batch_bytes : 1024;
    if (o->request_timeout_ms <= 0)
        o->request_timeout_ms = d.request_timeout_ms;
    if (o->connect_timeout_ms <= 0)
        o->connect_timeout_ms = d.connect_timeout_ms;
    if (o->base_backoff_ms <= 0)
        o->base_backoff_ms = d.base_backoff_ms;
    if (o->max_backoff_ms <= 0)
        o->max_backoff_ms = d.max_backoff_ms;
    if (o->backoff_calm == 0)
        o->backoff_calm = d.backoff_calm;
    if (o->auth_wait_ms <= 0)
        o->auth_wait_ms = d.auth_wait_ms;
    if (o->clock_wait_ms <= 0)
        o->clock_wait_ms = d.clock_wait_ms;
}

/* One block for the buffers: items first (aligned as malloc aligns).
 * url_len: the base URL's length, trailing slashes dropped; the endpoint's
 * URL (base and DSQ_EVENTS_PATH) and the escaped serial go at its end. */
static int alloc_block(dsq_sender *s, size_t url_len, size_t serial_len)
{
    size_t items = (size_t)s->o.batch_readings * sizeof(dsq_batch_item);
    char *p;
    s->answer_cap = 1024 + (size_t)s->o.batch_readings * ANSWER_BYTES_PER_READING;
    s->alloc_size = items + s->o.batch_readings + s->o.batch_bytes + s->answer_cap +
                    2 * AUTH_LEN + url_len + sizeof DSQ_EVENTS_PATH + serial_len + 1;
    s->block = dsq__alloc(&s->q->al, s->alloc_size);
    if (s->block == NULL)
        return DSQ_ENOMEM;
    p = (char *)s->block;
    s->items = (dsq_batch_item *)(void *)p;
    p += items;
    s->results = (uint8_t *)p;
    p += s->o.batch_readings;
    s->body = p;
    p += s->o.batch_bytes;
    s->answer = p;
    p += s->answer_cap;
    s->auth[0] = p;
    p += AUTH_LEN;
    s->auth[1] = p;
    p += AUTH_LEN;
    s->strings = p;
    s->serial_json = p + url_len + sizeof DSQ_EVENTS_PATH;
    return DSQ_OK;
}

static void free_sender(dsq_sender *s)
{
    dsq_allocator al = s->q->al;
    if (s->curl != NULL)
        dsq__curl_close(&al, s->curl);
    dsq__free(&al, s->block, s->alloc_size);
    dsq__free(&al, s, sizeof *s);
}

int dsq_sender_open(dsq *q, const dsq_sender_options *o, dsq_sender **out)
{
    dsq_sender *s;
    size_t url_len, serial_len;
    int rc;
    *out = NULL;
    if (q == NULL || o == NULL || o->url == NULL || o->serial == NULL || o->serial[0] == '\0' ||
        !token_ok(o->token) || (o->secondary_token != NULL && !token_ok(o->secondary_token)) ||
        q->has_sender)
        return DSQ_EINVAL;
    url_len = strlen(o->url); /* the base URL, without its trailing slashes */
    while (url_len > 0 && o->url[url_len - 1] == '/')
        url_len--;
    if (url_len == 0)
        return DSQ_EINVAL;
    s = (dsq_sender *)dsq__alloc(&q->al, sizeof *s);
    if (s == NULL)
        return DSQ_ENOMEM;
    memset(s, 0, sizeof *s);
    s->q = q;
    s->o = *o;
    fill_defaults(&s->o);
    serial_len = json_escaped_len(o->serial);
    rc = alloc_block(s, url_len, serial_len);
    if (rc == DSQ_OK && s->o.transport == NULL) {
        rc = dsq__curl_open(&q->al, &s->curl);
        s->o.transport = dsq__curl_post;
        s->o.transport_ctx = s->curl;
    }
    if (rc == DSQ_OK && dsq__random(&s->rng, sizeof s->rng) != 0)
        rc = DSQ_EIO;
    if (rc != DSQ_OK) {
        free_sender(s);
        return rc;
    }
    s->rng |= 1;
    memcpy(s->strings, o->url, url_len);
    memcpy(s->strings + url_len, DSQ_EVENTS_PATH, sizeof DSQ_EVENTS_PATH);
    s->o.url = s->strings;
    json_escape(s->serial_json, o->serial);
    s->o.serial = NULL;
    s->o.token = NULL;
    s->o.secondary_token = NULL;
    (void)dsq_sender_set_tokens(s, o->token, o->secondary_token);
    dsq_backoff_init(&s->backoff, s->o.base_backoff_ms, s->o.max_backoff_ms, s->o.backoff_calm);
    q->has_sender = 1;
    *out = s;
    return DSQ_OK;
}

void dsq_sender_close(dsq_sender *s)
{
    if (s == NULL)
        return;
    s->q->has_sender = 0;
    free_sender(s);
}

/* ---- settling ---- */

/* The batch's first k readings leave the queue; the batch is done. */
static int settle(dsq_sender *s, uint32_t k)
{
    dsq *q = s->q;
    const dsq_batch_item *last = &s->items[k - 1];
    int rc;
    q->head = last->seq + 1;
    q->head_seg = last->seg;
    q->head_off = last->end_off;
    dsq__normalize_head(q);
    q->batch_first = 0;
    q->batch_count = 0;
    q->queued = q->queued >= k ? q->queued - k : 0;
    s->body_valid = 0;
    rc = dsq__write_state(q);
    if (rc == DSQ_OK)
        rc = dsq__delete_settled(q);
    return rc;
}

/* The batch of n > 1 was refused as a whole: its first half is the new
 * batch; the rest follows in batches no larger than its other half. */
static int split(dsq_sender *s, uint32_t n)
{
    dsq *q = s->q;
    uint32_t half = n / 2;
    s->limit_until = s->items[n - 1].seq + 1;
    s->limit_count = n - half;
    q->batch_count = half;
    q->batch_last_seg = s->items[half - 1].seg;
    s->body_valid = 0;
    return dsq__write_state(q);
}

static void count_refused(dsq *q, int reason)
{
    q->st.refused++;
    switch (reason) {
    case DSQ_RESULT_FORMAT: q->st.refused_format++; break;
    case DSQ_RESULT_DATA: q->st.refused_data++; break;
    case DSQ_RESULT_CONNECTIONS: q->st.refused_connections++; break;
    case DSQ_RESULT_TOO_LARGE: q->st.refused_too_large++; break;
    default: q->st.refused_other++; break;
    }
}

/* Why a single reading was refused (400 or 413), by the answer. */
static int single_reason(const dsq_http_answer *ans)
{
    dsq_answer a;
    if (ans->status == 413)
        return DSQ_RESULT_TOO_LARGE;
    if (dsq_scan_answer(ans->body, ans->body_len, &a, NULL, 0) != 0)
        return DSQ_RESULT_OTHER;
    if (strcmp(a.message, "Invalid message format") == 0)
        return DSQ_RESULT_FORMAT;
    if (strcmp(a.message, "Invalid data format") == 0)
        return DSQ_RESULT_DATA;
    return DSQ_RESULT_OTHER;
}

/* A retry: Retry-After if given and positive (at most 1 h), else the
 * back-off (a Retry-After of 0 or a date past must not make a tight loop). */
static void retry_later(dsq_sender *s, const dsq_http_answer *ans, int64_t now)
{
    int64_t wait;
    if (ans->retry_after[0] != '\0' &&
        dsq_parse_retry_after(ans->retry_after, dsq__wall_ms() / 1000, &wait) && wait > 0) {
        s->backoff.successes = 0;
    } else {
        wait = dsq_backoff_fail(&s->backoff, next_random(s));
    }
    s->next_at = now + wait;
    logf_(s, DSQ_LOG_WARN, "devicesdk: HTTP %ld, retrying the batch in %lld ms", ans->status,
          (long long)wait);
}

/* 200: success true stores all; success false with one result per reading
 * settles each by its result. 1: settled; 0: an answer not understood. */
static int settle_200(dsq_sender *s, const dsq_http_answer *ans, uint32_t n)
{
    dsq *q = s->q;
    dsq_answer a;
    uint32_t i, stored = 0;
    if (ans->body_truncated ||
        dsq_scan_answer(ans->body, ans->body_len, &a, s->results, s->o.batch_readings) != 0)
        return 0;
    if (a.success == 1) {
        q->st.stored += n;
        q->st.no_time += s->body_no_time;
    } else if (a.success == 0 && a.has_results && a.results == n) {
        for (i = 0; i < n; i++) {
            if (s->results[i] == DSQ_RESULT_STORED)
                stored++;
            else
                count_refused(q, s->results[i]);
        }
        q->st.stored += stored;
        q->st.no_time += s->body_no_time;
        logf_(s, DSQ_LOG_WARN, "devicesdk: %u of %u readings refused by the service",
              (unsigned)(n - stored), (unsigned)n);
    } else {
        return 0;
    }
    return settle(s, n) == DSQ_OK ? 1 : -1;
}

/* 401/403: new tokens from on_auth_failure are tried at once; else the
 * other token, at once if it was not tried since the last success, else
 * after AuthWait: each AuthWait the other token is tried, so a device goes
 * back to a primary that became valid again, or on to a secondary that did. */
static int on_auth(dsq_sender *s, long status, int64_t now)
{
    uint32_t gen = s->token_gen;
    if (s->o.on_auth_failure != NULL)
        s->o.on_auth_failure(s->o.ctx, status, s->using_secondary);
    if (s->token_gen != gen) {
        logf_(s, DSQ_LOG_WARN, "devicesdk: HTTP %ld, trying the new token", status);
        s->next_at = now;
        return DSQ_OK;
    }
    if (!s->has_secondary) {
        logf_(s, DSQ_LOG_ERROR, "devicesdk: HTTP %ld, the token was refused; waiting", status);
        s->next_at = now + s->o.auth_wait_ms;
        return DSQ_OK;
    }
    s->using_secondary = !s->using_secondary;
    if (!s->switched) {
        s->switched = 1;
        logf_(s, DSQ_LOG_WARN, "devicesdk: HTTP %ld, trying the %s token", status,
              s->using_secondary ? "secondary" : "primary");
        s->next_at = now;
        return DSQ_OK;
    }
    logf_(s, DSQ_LOG_ERROR, "devicesdk: HTTP %ld, both tokens refused; the %s one next, after a wait",
          status, s->using_secondary ? "secondary" : "primary");
    s->next_at = now + s->o.auth_wait_ms;
    return DSQ_OK;
}

/* Handles one answer to the batch of n readings (mutex held). */
static int handle(dsq_sender *s, const dsq_http_answer *ans, uint32_t n, int64_t now)
{
    dsq *q = s->q;
    long st = ans->status;
    int rc;
    s->next_at = now;
    if (st == 200) {
        rc = settle_200(s, ans, n);
        if (rc < 0)
            return DSQ_EIO;
        if (rc == 1) {
            dsq_backoff_success(&s->backoff);
            s->switched = 0;
            return DSQ_OK;
        }
        logf_(s, DSQ_LOG_WARN, "devicesdk: an answer 200 not understood");
        retry_later(s, ans, now);
        return DSQ_OK;
    }
    if ((st == 400 || st == 413) && n > 1) {
        logf_(s, DSQ_LOG_WARN, "devicesdk: HTTP %ld for %u readings: splitting", st, (unsigned)n);
        return split(s, n);
    }
    if (st == 400 || st == 413) {
        logf_(s, DSQ_LOG_WARN, "devicesdk: HTTP %ld: reading %llu refused for good", st,
              (unsigned long long)s->items[0].seq);
        count_refused(q, single_reason(ans));
        return settle(s, 1);
    }
    if (st == 401 || st == 403)
        return on_auth(s, st, now);
    if (st == 404) {
        logf_(s, DSQ_LOG_ERROR, "devicesdk: HTTP 404: device not found; waiting");
        s->next_at = now + s->o.auth_wait_ms;
        return DSQ_OK;
    }
    retry_later(s, ans, now); /* 429, 5xx, network errors, anything else */
    return DSQ_OK;
}

/* ---- stepping ---- */

static int lock(dsq *q)
{
    return pthread_mutex_lock(&q->mu) == 0 ? DSQ_OK : DSQ_EIO;
}

/* The batch to send: the one built, or a new build. */
static int prepare(dsq_sender *s, int *clock_wait)
{
    dsq *q = s->q;
    *clock_wait = 0;
    if (s->body_valid && q->batch_count > 0 && s->body_first == q->batch_first &&
        s->body_count == q->batch_count)
        return (int)q->batch_count;
    return dsq__build_batch(s, clock_wait);
}

static int send_batch(dsq_sender *s, uint32_t n, dsq_http_answer *ans)
{
    char id[33], key[80];
    dsq_http_request req;
    dsq_id_hex(s->q, id);
    (void)snprintf(key, sizeof key, "%s-%llu-%u", id, (unsigned long long)s->body_first,
                   (unsigned)n);
    memset(&req, 0, sizeof req);
    req.url = s->o.url;
    req.body = s->body;
    req.body_len = s->body_len;
    req.authorization = s->auth[s->using_secondary];
    req.idempotency_key = key;
    req.timeout_ms = s->o.request_timeout_ms;
    req.connect_timeout_ms = s->o.connect_timeout_ms;
    memset(ans, 0, sizeof *ans);
    ans->body = s->answer;
    ans->body_cap = s->answer_cap;
    if (s->o.transport(s->o.transport_ctx, &req, ans) != 0)
        ans->status = 0;
    return DSQ_OK;
}

int dsq_sender_step(dsq_sender *s, int64_t *wait_ms)
{
    dsq *q = s->q;
    dsq_http_answer ans;
    int64_t now = dsq__mono_ms();
    int n, clock_wait, rc;
    if (now < s->next_at) {
        *wait_ms = s->next_at - now;
        return DSQ_OK;
    }
    if (lock(q) != DSQ_OK)
        return DSQ_EIO;
    n = prepare(s, &clock_wait);
    q->st.next_attempt_ms = 0;
    (void)pthread_mutex_unlock(&q->mu);
    if (n <= 0) {
        *wait_ms = clock_wait ? CLOCK_POLL_MS : -1;
        return n < 0 ? n : DSQ_OK;
    }
    send_batch(s, (uint32_t)n, &ans);
    now = dsq__mono_ms();
    if (lock(q) != DSQ_OK)
        return DSQ_EIO;
    q->st.requests++;
    q->st.sent += (uint64_t)n;
    q->st.last_http_status = ans.status;
    rc = handle(s, &ans, (uint32_t)n, now);
    q->st.next_attempt_ms = s->next_at > now ? dsq__wall_ms() + (s->next_at - now) : 0;
    (void)pthread_mutex_unlock(&q->mu);
    *wait_ms = s->next_at > now ? s->next_at - now : 0;
    return rc;
}

int dsq_sender_drain(dsq_sender *s, int64_t timeout_ms, volatile int *stop)
{
    int64_t deadline = dsq__mono_ms() + timeout_ms;
    int i;
    for (i = 0; i < INT32_MAX && (stop == NULL || !*stop); i++) {
        int64_t wait, left;
        int rc = dsq_sender_step(s, &wait);
        if (rc != DSQ_OK)
            return rc;
        if (wait < 0)
            return 0;
        left = deadline - dsq__mono_ms();
        if (left <= 0)
            break;
        dsq__sleep_ms(wait < left ? (wait < 200 ? wait : 200) : left);
    }
    return 1;
}
