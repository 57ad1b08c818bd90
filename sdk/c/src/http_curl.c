/* The libcurl transport: one POST with a timeout, no redirects, the
 * answer's body into a fixed buffer and its Retry-After header. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "internal.h"

typedef struct curl_ctx {
    CURL *h;
    char auth[DSQ_TOKEN_MAX + 32];
    char key[160];
} curl_ctx;

int dsq__curl_open(const dsq_allocator *al, void **out)
{
    curl_ctx *c;
    *out = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return DSQ_EHTTP;
    c = (curl_ctx *)dsq__alloc(al, sizeof *c);
    if (c == NULL) {
        curl_global_cleanup();
        return DSQ_ENOMEM;
    }
    memset(c, 0, sizeof *c);
    c->h = curl_easy_init();
    if (c->h == NULL) {
        dsq__free(al, c, sizeof *c);
        curl_global_cleanup();
        return DSQ_EHTTP;
    }
    *out = c;
    return DSQ_OK;
}

void dsq__curl_close(const dsq_allocator *al, void *ctx)
{
    curl_ctx *c = (curl_ctx *)ctx;
    if (c == NULL)
        return;
    curl_easy_cleanup(c->h);
    memset(c->auth, 0, sizeof c->auth);
    dsq__free(al, c, sizeof *c);
    curl_global_cleanup();
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    dsq_http_answer *ans = (dsq_http_answer *)ud;
    size_t n = size * nmemb, room = ans->body_cap - ans->body_len;
    if (n > room) {
        ans->body_truncated = 1;
        memcpy(ans->body + ans->body_len, p, room);
        ans->body_len += room;
    } else {
        memcpy(ans->body + ans->body_len, p, n);
        ans->body_len += n;
    }
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    dsq_http_answer *ans = (dsq_http_answer *)ud;
    size_t n = size * nmemb, name = sizeof "Retry-After:" - 1, i = name, j = 0;
    if (n > name && strncasecmp(p, "Retry-After:", name) == 0) {
        while (i < n && (p[i] == ' ' || p[i] == '\t'))
            i++;
        while (i < n && p[i] != '\r' && p[i] != '\n' && j + 1 < sizeof ans->retry_after)
            ans->retry_after[j++] = p[i++];
        ans->retry_after[j] = '\0';
    } else if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        ans->retry_after[0] = '\0'; /* a new answer (after a 1xx) */
    }
    return n;
}

static int set_options(curl_ctx *c, const dsq_http_request *req, dsq_http_answer *ans,
                       struct curl_slist *headers)
{
    CURL *h = c->h;
    int bad = 0;
    curl_easy_reset(h);
    bad |= curl_easy_setopt(h, CURLOPT_URL, req->url) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_POST, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, ans) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HEADERDATA, ans) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, req->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
    bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
    bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) != CURLE_OK;
#endif
    return bad ? -1 : 0;
}

int dsq__curl_post(void *ctx, const dsq_http_request *req, dsq_http_answer *ans)
{
    curl_ctx *c = (curl_ctx *)ctx;
    struct curl_slist *headers = NULL, *t;
    const char *lines[4];
    long code = 0;
    int i, rc = 0;
    (void)snprintf(c->auth, sizeof c->auth, "Authorization: %s", req->authorization);
    (void)snprintf(c->key, sizeof c->key, "Idempotency-Key: %s", req->idempotency_key);
    lines[0] = "Content-Type: application/json";
    lines[1] = c->auth;
    lines[2] = c->key;
    lines[3] = "Expect:"; /* no 100-continue round trip */
    for (i = 0; i < 4; i++) {
        t = curl_slist_append(headers, lines[i]);
        if (t == NULL) {
            curl_slist_free_all(headers);
            return -1;
        }
        headers = t;
    }
    if (set_options(c, req, ans, headers) != 0)
        rc = -1;
    else if (curl_easy_perform(c->h) != CURLE_OK) {
        /* A network error or a timeout: nothing of a partial answer counts
         * (a Retry-After read before the cut would be honoured; sdk/go
         * uses the back-off when the answer cannot be read whole). */
        ans->status = 0;
        ans->retry_after[0] = '\0';
        ans->body_len = 0;
        ans->body_truncated = 0;
    } else if (curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK)
        ans->status = code;
    curl_slist_free_all(headers);
    memset(c->auth, 0, sizeof c->auth);
    return rc;
}
