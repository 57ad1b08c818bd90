/* The libcurl transport (no `transport` option) against small HTTP servers
 * the test runs on 127.0.0.1: a socket that never answers, Retry-After, a
 * stored answer, a redirect (not followed), answers cut short. Each server
 * is a thread serving a bounded number of connections; every wait it makes
 * is bounded and the test stops it (a byte on a pipe) and joins it. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "t.h"

#define SRV_REQS 4             /* requests kept for the checks */
#define SRV_REQ_BYTES 4096     /* of each (head and body) */
#define SRV_POLL_MS 30000      /* bound on each wait of a server (valgrind is slow) */
#define ANSWERED_TIMEOUT_MS 20000 /* request timeout where the server answers */
#define TOKEN "curl-token-0001"
#define RNG_SEED UINT64_C(0x9e3779b97f4a7c15) /* the jitter drawn: fixed, not 0 */

typedef struct srv {
    int lfd, port, stop[2];
    int max_conns;
    /* answer i to request i, the last one repeating; NULL: no answer (the
     * connection is held until the client closes it). An answer holding
     * "Connection: close" closes the connection once written. */
    const char *answers[SRV_REQS];
    int n_answers;
    pthread_t th;
    /* read by the test after the join */
    int conns, requests;
    char req[SRV_REQS][SRV_REQ_BYTES];
} srv;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A header's value in a request or answer head (case-insensitive name),
 * copied to out; 1 if found. */
static int header(const char *head, const char *name, char *out, size_t cap)
{
    size_t k = strlen(name);
    const char *p = strstr(head, "\r\n");
    while (p != NULL && p[2] != '\r' && p[2] != '\0') {
        const char *line = p + 2, *end = strstr(line, "\r\n");
        if (end == NULL)
            return 0;
        if (strncasecmp(line, name, k) == 0 && line[k] == ':') {
            size_t n = 0;
            line += k + 1;
            while (*line == ' ')
                line++;
            while (line < end && n + 1 < cap)
                out[n++] = *line++;
            out[n] = '\0';
            return 1;
        }
        p = end;
    }
    return 0;
}

/* Waits until fd (or also, if >= 0) is readable: 1 fd, 2 also, 0 stopped,
 * timed out or failed. */
static int wait_in(srv *sv, int fd, int also)
{
    struct pollfd p[3];
    int n = also >= 0 ? 3 : 2, rc;
    memset(p, 0, sizeof p);
    p[0].fd = sv->stop[0];
    p[0].events = POLLIN;
    p[1].fd = fd;
    p[1].events = POLLIN;
    p[2].fd = also;
    p[2].events = POLLIN;
    do {
        rc = poll(p, (nfds_t)n, SRV_POLL_MS);
    } while (rc < 0 && errno == EINTR);
    if (rc <= 0 || p[0].revents != 0)
        return 0;
    if (p[1].revents != 0)
        return 1;
    return 2;
}

/* One request (head, then Content-Length bytes of body) into buf; its
 * length, or 0 at the connection's end (*other: a new connection waits). */
static size_t read_request(srv *sv, int fd, char *buf, size_t cap, int *other)
{
    size_t len = 0, want = 0;
    char v[32];
    *other = 0;
    for (;;) {
        ssize_t r;
        int w = wait_in(sv, fd, len == 0 ? sv->lfd : -1);
        if (w == 2)
            *other = 1;
        if (w != 1)
            return 0;
        r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0)
            return 0;
        len += (size_t)r;
        buf[len] = '\0';
        if (want == 0 && strstr(buf, "\r\n\r\n") != NULL)
            want = (size_t)(strstr(buf, "\r\n\r\n") + 4 - buf) +
                   (header(buf, "Content-Length", v, sizeof v) ? (size_t)atol(v) : 0);
        if ((want != 0 && len >= want) || len == cap - 1)
            return len;
    }
}

static int send_all(int fd, const char *p)
{
    size_t n = strlen(p);
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve_conn(srv *sv, int fd)
{
    char buf[SRV_REQ_BYTES];
    for (;;) {
        int other;
        const char *a;
        size_t n = read_request(sv, fd, buf, sizeof buf, &other);
        if (n == 0)
            return;
        if (sv->requests < SRV_REQS)
            memcpy(sv->req[sv->requests], buf, n + 1);
        a = sv->answers[sv->requests < sv->n_answers ? sv->requests : sv->n_answers - 1];
        sv->requests++;
        if (a == NULL) { /* never answers: holds on until the client goes */
            while (wait_in(sv, fd, -1) == 1 && recv(fd, buf, sizeof buf, 0) > 0) {
            }
            return;
        }
        if (send_all(fd, a) != 0 || strstr(a, "\r\nConnection: close\r\n") != NULL)
            return;
    }
}

static void *serve(void *arg)
{
    srv *sv = (srv *)arg;
    while (sv->conns < sv->max_conns && wait_in(sv, sv->lfd, -1) == 1) {
        int fd = accept(sv->lfd, NULL, NULL);
        if (fd < 0)
            break;
        sv->conns++;
        serve_conn(sv, fd);
        (void)close(fd);
    }
    return NULL;
}

/* Listens on 127.0.0.1, a port the kernel picks, and starts the thread. */
static int srv_start(srv *sv, int max_conns)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    sv->max_conns = max_conns;
    sv->lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (sv->lfd < 0 || bind(sv->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(sv->lfd, 8) != 0 ||
        getsockname(sv->lfd, (struct sockaddr *)&a, &alen) != 0 || pipe(sv->stop) != 0) {
        perror("test server");
        if (sv->lfd >= 0)
            (void)close(sv->lfd);
        return -1;
    }
    sv->port = ntohs(a.sin_port);
    if (pthread_create(&sv->th, NULL, serve, sv) != 0) {
        (void)close(sv->lfd);
        (void)close(sv->stop[0]);
        (void)close(sv->stop[1]);
        return -1;
    }
    return 0;
}

static void srv_stop(srv *sv)
{
    (void)!write(sv->stop[1], "x", 1);
    pthread_join(sv->th, NULL);
    (void)close(sv->lfd);
    (void)close(sv->stop[0]);
    (void)close(sv->stop[1]);
}

/* An answer with a JSON body and its Content-Length. */
static void answer(char *out, size_t cap, const char *status, const char *headers, const char *body)
{
    snprintf(out, cap,
             "HTTP/1.1 %s\r\n%sContent-Type: application/json\r\nContent-Length: %u\r\n\r\n%s",
             status, headers, (unsigned)strlen(body), body);
}

/* A sender on the libcurl transport (no `transport` option), to the server
 * at port; back-off 1 s..4 s, its jitter from a fixed seed. */
static dsq_sender *open_curl_sender(dsq *q, int port, const char *path, long timeout_ms,
                                    long connect_ms)
{
    char url[64];
    dsq_sender_options o;
    dsq_sender *s = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    dsq_sender_options_init(&o);
    o.url = url;
    o.serial = "dev-curl";
    o.token = TOKEN;
    o.request_timeout_ms = timeout_ms;
    o.connect_timeout_ms = connect_ms;
    o.base_backoff_ms = 1000;
    o.max_backoff_ms = 4000;
    CHECK_EQ(dsq_sender_open(q, &o, &s), DSQ_OK);
    if (s != NULL) {
        CHECK(s->curl != NULL);
        CHECK(s->o.transport == dsq__curl_post);
        s->rng = RNG_SEED;
    }
    return s;
}

typedef struct fixture {
    char dir[256];
    dsq *q;
    dsq_sender *s;
    srv sv;
} fixture;

/* A queue with one reading, a server (f->sv's answers set before, or at
 * least before the first step) and a sender on the libcurl transport to
 * it (open_curl_sender's arguments); 0 if all is ready, else all that was
 * started is stopped and freed. */
static int start(fixture *f, int max_conns, const char *path, long timeout_ms, long connect_ms)
{
    t_tmpdir(f->dir);
    f->q = NULL;
    f->s = NULL;
    CHECK_EQ(dsq_open(f->dir, NULL, &f->q), DSQ_OK);
    if (f->q == NULL)
        return -1;
    t_record_n(f->q, 0, 1);
    if (srv_start(&f->sv, max_conns) != 0) {
        t_fail(__FILE__, __LINE__, "the test server did not start");
        dsq_close(f->q);
        t_rmdir(f->dir);
        return -1;
    }
    f->s = open_curl_sender(f->q, f->sv.port, path, timeout_ms, connect_ms);
    if (f->s == NULL) {
        srv_stop(&f->sv);
        dsq_close(f->q);
        t_rmdir(f->dir);
        return -1;
    }
    return 0;
}

/* After srv_stop (the test reads what the server saw in between). */
static void teardown(fixture *f)
{
    dsq_sender_close(f->s);
    dsq_close(f->q);
    t_rmdir(f->dir);
}

/* A wait that is the back-off's first draw: in (0, base], not Retry-After. */
#define CHECK_BACKOFF(wait) do { CHECK((wait) > 0); CHECK((wait) <= 1000); } while (0)

/* 1. The server reads the request and never answers: the step ends at the
 * request timeout, the reading stays queued, the wait is the back-off; a
 * step at once makes no request (no spinning). */
static void test_curl_hang(void)
{
    fixture f;
    dsq_status st;
    int64_t wait = -7, t0, took;
    memset(&f, 0, sizeof f);
    f.sv.n_answers = 1; /* answers[0] NULL: never */
    if (start(&f, 2, "", 300, 1000) != 0)
        return;
    t0 = mono_ms();
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    took = mono_ms() - t0;
    CHECK(took >= 290); /* it did wait for an answer: the request timeout */
    CHECK(took < 3000);
    CHECK_BACKOFF(wait);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.queued, 1);
    CHECK_EQ(st.stored, 0);
    CHECK_EQ(st.requests, 1);
    CHECK_EQ(st.last_http_status, 0);
    CHECK(st.next_attempt_ms > 0);
    t0 = mono_ms();
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK); /* not due: no request */
    CHECK(mono_ms() - t0 < 100);
    CHECK(wait > 0 && wait <= 1000);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.requests, 1);
    srv_stop(&f.sv);
    CHECK_EQ(f.sv.requests, 1);
    CHECK(strncmp(f.sv.req[0], "POST /api/v1/deviceapi/events HTTP/1.1\r\n", 40) == 0);
    teardown(&f);
}

/* 2. 503 with Retry-After through libcurl: the wait is the header's (an
 * hour); 7200 s is capped at an hour. The header's name in any case. */
static void test_curl_retry_after(void)
{
    static const char body[] = "{\"success\":false,\"message\":\"Message processed but failed to store data\"}";
    char a1[512], a2[512], k1[128], k2[128];
    fixture f;
    dsq_status st;
    int64_t wait = -7, wall;
    memset(&f, 0, sizeof f);
    answer(a1, sizeof a1, "503 Service Unavailable", "Retry-After: 3600\r\n", body);
    answer(a2, sizeof a2, "503 Service Unavailable", "retry-after: 7200\r\n", body);
    f.sv.answers[0] = a1;
    f.sv.answers[1] = a2;
    f.sv.n_answers = 2;
    if (start(&f, 2, "", ANSWERED_TIMEOUT_MS, 5000) != 0)
        return;
    wall = dsq__wall_ms();
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(wait, 3600000);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.last_http_status, 503);
    CHECK_EQ(st.queued, 1);
    CHECK(st.next_attempt_ms >= wall + 3600000 && st.next_attempt_ms <= dsq__wall_ms() + 3600000);
    CHECK_EQ(f.s->backoff.step, 0); /* Retry-After: the back-off did not grow */
    f.s->next_at = 0;
    wait = -7;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(wait, 3600000); /* 7200 s, capped */
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.requests, 2);
    CHECK_EQ(st.queued, 1);
    CHECK_EQ(st.stored, 0);
    srv_stop(&f.sv);
    CHECK_EQ(f.sv.requests, 2);
    CHECK(header(f.sv.req[0], "Idempotency-Key", k1, sizeof k1));
    CHECK(header(f.sv.req[1], "Idempotency-Key", k2, sizeof k2));
    CHECK_STR(k1, k2); /* the same batch again */
    teardown(&f);
}

/* 3. A stored answer: the request's line and headers as sent; the reading
 * is settled. The base URL's trailing slash is dropped. */
static void test_curl_stored(void)
{
    static const char body[] = "{\"success\":true,\"message\":\"Message processed and data stored successfully\"}";
    char a1[512], v[256], id[33], key[96];
    const char *req, *req_body;
    fixture f;
    dsq_status st;
    int64_t wait = -7;
    memset(&f, 0, sizeof f);
    answer(a1, sizeof a1, "200 OK", "", body);
    f.sv.answers[0] = a1;
    f.sv.n_answers = 1;
    if (start(&f, 2, "/", ANSWERED_TIMEOUT_MS, 5000) != 0)
        return;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(wait, 0);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.last_http_status, 200);
    CHECK_EQ(st.stored, 1);
    CHECK_EQ(st.queued, 0);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_EQ(wait, -1); /* empty: no request */
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.requests, 1);
    srv_stop(&f.sv);
    CHECK_EQ(f.sv.requests, 1);
    req = f.sv.req[0];
    CHECK(strncmp(req, "POST /api/v1/deviceapi/events HTTP/1.1\r\n", 40) == 0);
    v[0] = '\0';
    CHECK(header(req, "Authorization", v, sizeof v));
    CHECK_STR(v, "Bearer " TOKEN);
    dsq_id_hex(f.q, id);
    snprintf(key, sizeof key, "%s-1-1", id);
    v[0] = '\0';
    CHECK(header(req, "Idempotency-Key", v, sizeof v));
    CHECK_STR(v, key);
    v[0] = '\0';
    CHECK(header(req, "Content-Type", v, sizeof v));
    CHECK_STR(v, "application/json");
    CHECK(!header(req, "Expect", v, sizeof v)); /* no 100-continue */
    req_body = strstr(req, "\r\n\r\n");
    CHECK(req_body != NULL && strncmp(req_body + 4, "{\"serial\":\"dev-curl\",\"messages\":[{", 34) == 0);
    CHECK(req_body != NULL && strstr(req_body, "\"data\":{\"v\":0}}]}") != NULL);
    teardown(&f);
}

/* 4. A redirect to the server itself is not followed: one request, the
 * reading stays queued, the back-off. */
static void test_curl_redirect(void)
{
    static const char ok[] = "{\"success\":true,\"message\":\"Message processed and data stored successfully\"}";
    char a1[512], a2[512], loc[128];
    fixture f;
    dsq_status st;
    int64_t wait = -7;
    memset(&f, 0, sizeof f);
    f.sv.answers[0] = a1;
    f.sv.answers[1] = a2; /* what a followed redirect would get */
    f.sv.n_answers = 2;
    if (start(&f, 2, "", ANSWERED_TIMEOUT_MS, 5000) != 0)
        return;
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/api/v1/deviceapi/elsewhere\r\n", f.sv.port);
    answer(a1, sizeof a1, "302 Found", loc, "{}");
    answer(a2, sizeof a2, "200 OK", "", ok);
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_BACKOFF(wait);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.last_http_status, 302);
    CHECK_EQ(st.queued, 1);
    CHECK_EQ(st.stored, 0);
    CHECK_EQ(st.requests, 1);
    srv_stop(&f.sv); /* a followed redirect would have been read by now */
    CHECK_EQ(f.sv.requests, 1);
    CHECK(strncmp(f.sv.req[0], "POST /api/v1/deviceapi/events HTTP/1.1\r\n", 40) == 0);
    teardown(&f);
}

/* 5. Answers cut short (Content-Length 200, the connection closed early)
 * are network errors (status 0): a 503's Retry-After that came before the
 * cut is not honoured (the back-off is, as in sdk/go, where reading the
 * body fails), and a 200 cut short settles nothing. */
static void test_curl_cut(void)
{
    char a1[512], a2[512];
    fixture f;
    dsq_status st;
    int64_t wait = -7;
    memset(&f, 0, sizeof f);
    snprintf(a1, sizeof a1, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3600\r\n"
             "Content-Type: application/json\r\nContent-Length: 200\r\nConnection: close\r\n\r\n"
             "{\"success\":false,");
    snprintf(a2, sizeof a2, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
             "Content-Length: 200\r\nConnection: close\r\n\r\n{\"success\":true,");
    f.sv.answers[0] = a1;
    f.sv.answers[1] = a2;
    f.sv.n_answers = 2;
    if (start(&f, 2, "", ANSWERED_TIMEOUT_MS, 5000) != 0)
        return;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK_BACKOFF(wait);
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.last_http_status, 0);
    CHECK_EQ(st.queued, 1);
    f.s->next_at = 0;
    wait = -7;
    CHECK_EQ(dsq_sender_step(f.s, &wait), DSQ_OK);
    CHECK(wait > 0 && wait <= 2000); /* the back-off's second draw */
    dsq_get_status(f.q, &st);
    CHECK_EQ(st.last_http_status, 0);
    CHECK_EQ(st.queued, 1);
    CHECK_EQ(st.stored, 0);
    CHECK_EQ(st.requests, 2);
    srv_stop(&f.sv);
    CHECK_EQ(f.sv.requests, 2);
    teardown(&f);
}

/* libcurl takes a proxy from the environment: none for these servers. */
static void set_env(const char *name, const char *value, char **saved)
{
    const char *old = getenv(name);
    *saved = old != NULL ? strdup(old) : NULL;
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

void test_curl(void)
{
    static const char *const names[] = {"no_proxy", "NO_PROXY"};
    char *saved[2];
    size_t i;
    for (i = 0; i < 2; i++)
        set_env(names[i], "127.0.0.1", &saved[i]);
    test_curl_hang();
    test_curl_retry_after();
    test_curl_stored();
    test_curl_redirect();
    test_curl_cut();
    for (i = 0; i < 2; i++) {
        char *ignored;
        set_env(names[i], saved[i], &ignored);
        free(ignored);
        free(saved[i]);
    }
}
