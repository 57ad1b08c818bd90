/* dsq-driver: the C SDK driven from the command line, for the Go
 * integration tests (sdk/go/tools/dsq-driver is its Go twin).
 *   dsq-driver record DIR N [START]   records N readings {"v": START+i}
 *                                      (time kind 1, now), printing each
 *                                      value once it is on disk
 *   dsq-driver send DIR URL SERIAL [SECONDS]
 *                                      drains the queue (default 60 s) and
 *                                      prints the final status as JSON
 *   dsq-driver run DIR URL SERIAL N START [SECONDS]
 *                                      records N readings as record does,
 *                                      stepping the sender between them
 *                                      whenever its wait has passed, then
 *                                      drains and prints the status as send
 *   dsq-driver dump DIR                 prints each unsettled reading as
 *                                      {"seq":N,"kind":K,"time":T,"data":{...}}
 * URL is the service's base URL (http://host:port), passed as it is to
 * dsq_sender_options.url (the SDK drops trailing slashes and appends
 * /api/v1/deviceapi/events; an empty one is an error). Tokens are
 * never on the command line (it shows in /proc/PID/cmdline): send and run
 * take the token from the environment, DSQ_TOKEN (required), and the
 * secondary token from DSQ_TOKEN2 (optional); DSQ_BATCH (optional, a
 * positive integer) sets batch_readings; DSQ_MAX_BACKOFF_MS (optional, a
 * positive integer) sets max_backoff_ms (and base_backoff_ms, if it is
 * below the 1 s default), to keep the waits after an outage short.
 * Log lines of the sender go to stderr. Exit status: 0 done; 1 usage or
 * error; 2 send or run stopped with readings left. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devicesdk.h"

#define MAX_SECONDS 1000000000LL /* SECONDS * 1000 fits an int64_t */

static int usage(void)
{
    fprintf(stderr, "usage: dsq-driver record DIR N [START]\n"
                    "       dsq-driver send DIR URL SERIAL [SECONDS]\n"
                    "       dsq-driver run DIR URL SERIAL N START [SECONDS]\n"
                    "       dsq-driver dump DIR\n"
                    "URL: the service's base URL (" DSQ_EVENTS_PATH " is appended).\n"
                    "send, run: env DSQ_TOKEN (required), DSQ_TOKEN2 (optional),\n"
                    "           DSQ_BATCH (optional, batch_readings > 0),\n"
                    "           DSQ_MAX_BACKOFF_MS (optional, max_backoff_ms > 0)\n");
    return 1;
}

static int parse_ll(const char *s, long long *v)
{
    char *end;
    *v = strtoll(s, &end, 10);
    return (*s != '\0' && *end == '\0') ? 0 : -1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int open_queue(const char *dir, dsq **q)
{
    int rc = dsq_open(dir, NULL, q);
    if (rc != DSQ_OK)
        fprintf(stderr, "dsq-driver: open %s: %s\n", dir, dsq_strerror(rc));
    return rc;
}

/* Records {"v": v} (kind 1, now) and prints v once it is on disk. Returns
 * DSQ_OK or the error (said on stderr). */
static int record_one(dsq *q, long long v)
{
    char data[64];
    int64_t seq;
    (void)snprintf(data, sizeof data, "{\"v\": %lld}", v);
    seq = dsq_record(q, data, DSQ_TIME_WALL, now_ms());
    if (seq < 0) {
        fprintf(stderr, "dsq-driver: record: %s\n", dsq_strerror((int)seq));
        return (int)seq;
    }
    printf("%lld\n", v);
    fflush(stdout);
    return DSQ_OK;
}

static int cmd_record(const char *dir, long long n, long long start)
{
    dsq *q;
    long long i;
    int rc = 0;
    if (open_queue(dir, &q) != DSQ_OK)
        return 1;
    for (i = 0; i < n; i++) {
        if (record_one(q, start + i) != DSQ_OK) {
            rc = 1;
            break;
        }
    }
    dsq_close(q);
    return rc;
}

static void log_line(void *ctx, int level, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "[%d] %s\n", level, msg);
}

/* What send and run take from the environment and the command line. */
typedef struct sender_env {
    const char *token, *token2;
    uint32_t batch;         /* 0: the default */
    int64_t max_backoff_ms; /* 0: the default */
    const char *url;        /* the service's base URL */
} sender_env;

/* A positive integer from the environment variable name (at most max) to
 * *v; unset or empty leaves *v. Returns 0, or 1 after printing why. */
static int env_positive(const char *name, long long max, long long *v)
{
    const char *t = getenv(name);
    if (t == NULL || t[0] == '\0')
        return 0;
    if (parse_ll(t, v) || *v <= 0 || *v > max) {
        fprintf(stderr, "dsq-driver: %s is not a positive integer\n", name);
        return 1;
    }
    return 0;
}

/* Reads DSQ_TOKEN, DSQ_TOKEN2, DSQ_BATCH, DSQ_MAX_BACKOFF_MS and keeps the
 * base URL. Returns 0, or 1 after printing why (usage). */
static int read_env(const char *base, sender_env *e)
{
    long long batch = 0, backoff = 0;
    e->url = base;
    e->token = getenv("DSQ_TOKEN");
    e->token2 = getenv("DSQ_TOKEN2");
    e->batch = 0;
    e->max_backoff_ms = 0;
    if (e->token == NULL || e->token[0] == '\0') {
        fprintf(stderr, "dsq-driver: DSQ_TOKEN is not set\n");
        return usage();
    }
    if (e->token2 != NULL && e->token2[0] == '\0')
        e->token2 = NULL;
    if (env_positive("DSQ_BATCH", (long long)UINT32_MAX, &batch) ||
        env_positive("DSQ_MAX_BACKOFF_MS", MAX_SECONDS * 1000, &backoff))
        return usage();
    e->batch = (uint32_t)batch;
    e->max_backoff_ms = (int64_t)backoff;
    return 0;
}

/* Opens the queue in dir and its sender. Returns 0, or 1 (said on stderr;
 * nothing left open). */
static int open_sender(const char *dir, const sender_env *e, const char *serial, dsq **q,
                       dsq_sender **s)
{
    dsq_sender_options o;
    int rc;
    if (open_queue(dir, q) != DSQ_OK)
        return 1;
    dsq_sender_options_init(&o);
    o.url = e->url;
    o.serial = serial;
    o.token = e->token;
    o.secondary_token = e->token2;
    o.batch_readings = e->batch;
    if (e->max_backoff_ms > 0) {
        o.max_backoff_ms = e->max_backoff_ms;
        if (o.base_backoff_ms > o.max_backoff_ms)
            o.base_backoff_ms = o.max_backoff_ms;
    }
    o.log = log_line;
    rc = dsq_sender_open(*q, &o, s);
    if (rc != DSQ_OK) {
        fprintf(stderr, "dsq-driver: sender: %s\n", dsq_strerror(rc));
        dsq_close(*q);
        return 1;
    }
    return 0;
}

/* Prints the status line, closes both and gives the exit status for rc:
 * 0 (drained), 1 (readings left) or a negative error. */
static int finish(dsq *q, dsq_sender *s, int rc)
{
    dsq_status st;
    char line[1024];
    dsq_get_status(q, &st);
    if (dsq_status_json(&st, line, sizeof line) == DSQ_OK)
        printf("%s\n", line);
    fflush(stdout);
    dsq_sender_close(s);
    dsq_close(q);
    if (rc < 0)
        return 1;
    return rc == 0 ? 0 : 2;
}

static int cmd_send(const char *dir, const char *base, const char *serial, long long seconds)
{
    sender_env e;
    dsq *q;
    dsq_sender *s;
    int rc;
    if (read_env(base, &e) != 0)
        return 1;
    if (open_sender(dir, &e, serial, &q, &s) != 0)
        return 1;
    rc = dsq_sender_drain(s, seconds * 1000, NULL);
    if (rc < 0)
        fprintf(stderr, "dsq-driver: send: %s\n", dsq_strerror(rc));
    return finish(q, s, rc);
}

static int cmd_run(const char *dir, const char *base, const char *serial, long long n,
                   long long start, long long seconds)
{
    sender_env e;
    dsq *q;
    dsq_sender *s;
    int64_t step_at = 0; /* monotonic ms when the sender's wait has passed */
    long long i;
    int rc = 0;
    if (read_env(base, &e) != 0)
        return 1;
    if (open_sender(dir, &e, serial, &q, &s) != 0)
        return 1;
    for (i = 0; i < n && rc == 0; i++) {
        rc = record_one(q, start + i);
        if (rc != DSQ_OK)
            break;
        if (mono_ms() >= step_at) {
            int64_t wait = 0;
            rc = dsq_sender_step(s, &wait);
            if (rc < 0)
                fprintf(stderr, "dsq-driver: send: %s\n", dsq_strerror(rc));
            /* -1: the queue was empty; the next reading is worth a step */
            step_at = mono_ms() + (wait > 0 ? wait : 0);
        }
    }
    if (rc == 0) {
        rc = dsq_sender_drain(s, seconds * 1000, NULL);
        if (rc < 0)
            fprintf(stderr, "dsq-driver: send: %s\n", dsq_strerror(rc));
    }
    return finish(q, s, rc);
}

static int print_item(void *ctx, const dsq_item *it)
{
    (void)ctx;
    printf("{\"seq\":%llu,\"kind\":%d,\"time\":%lld,\"data\":", (unsigned long long)it->seq,
           it->time_kind, (long long)it->time);
    if (it->data != NULL)
        fwrite(it->data, 1, it->data_len, stdout);
    else
        fputs("null", stdout);
    fputs("}\n", stdout);
    return 0;
}

static int cmd_dump(const char *dir)
{
    dsq *q;
    char *buf;
    int rc;
    if (open_queue(dir, &q) != DSQ_OK)
        return 1;
    buf = (char *)malloc(DSQ_MAX_DATA_BYTES);
    if (buf == NULL) {
        dsq_close(q);
        return 1;
    }
    rc = dsq_iterate(q, buf, DSQ_MAX_DATA_BYTES, print_item, NULL);
    fflush(stdout);
    free(buf);
    dsq_close(q);
    if (rc != DSQ_OK)
        fprintf(stderr, "dsq-driver: dump: %s\n", dsq_strerror(rc));
    return rc == DSQ_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    long long a = 0, b = 0, c = 60;
    if (argc >= 4 && strcmp(argv[1], "record") == 0 && argc <= 5) {
        if (parse_ll(argv[3], &a) || a < 0 || (argc == 5 && parse_ll(argv[4], &b)) ||
            b > LLONG_MAX - a)
            return usage();
        return cmd_record(argv[2], a, b);
    }
    if (argc >= 5 && strcmp(argv[1], "send") == 0 && argc <= 6) {
        if (argc == 6 && (parse_ll(argv[5], &c) || c < 0 || c > MAX_SECONDS))
            return usage();
        return cmd_send(argv[2], argv[3], argv[4], c);
    }
    if (argc >= 7 && strcmp(argv[1], "run") == 0 && argc <= 8) {
        if (parse_ll(argv[5], &a) || a < 0 || parse_ll(argv[6], &b) || b > LLONG_MAX - a ||
            (argc == 8 && (parse_ll(argv[7], &c) || c < 0 || c > MAX_SECONDS)))
            return usage();
        return cmd_run(argv[2], argv[3], argv[4], a, b, c);
    }
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return cmd_dump(argv[2]);
    return usage();
}
