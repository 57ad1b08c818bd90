/* sensor: a device that records a reading from a (fake) sensor every few
 * seconds and sends its queue in the same loop. Copy and adapt.
 *
 *   DSQ_TOKEN=... [DSQ_TOKEN2=...] sensor URL SERIAL QUEUE_DIR [INTERVAL_SECONDS]
 *
 * URL is the service's base URL (the SDK appends /api/v1/deviceapi/events).
 * The token comes from the environment only, DSQ_TOKEN (required), with an
 * optional secondary token in DSQ_TOKEN2: never put a token on the command
 * line, where any user can read it (ps, /proc/PID/cmdline). Arguments left
 * out are taken from DSQ_URL, DSQ_SERIAL, DSQ_QUEUE_DIR and DSQ_INTERVAL
 * (default 10 s). Stops on SIGINT or SIGTERM.
 *
 * e.g. DSQ_TOKEN=secret-token-0001 \
 *      sensor http://127.0.0.1:8080 dev-001 /var/lib/sensor/queue 5 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devicesdk.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static const char *arg_or_env(int argc, char **argv, int i, const char *env)
{
    if (i < argc)
        return argv[i];
    return getenv(env);
}

/* An environment variable, NULL if unset or empty. */
static const char *env_or_null(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    (void)nanosleep(&ts, NULL); /* a signal ends it early: fine */
}

/* The fake sensor: a temperature drifting around 21 C. */
static double read_temperature(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return 21.0 + (double)((*state >> 16) % 200) / 100.0 - 1.0;
}

static void log_line(void *ctx, int level, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "sensor: [%d] %s\n", level, msg);
}

static void on_auth_failure(void *ctx, long status, int secondary_in_use)
{
    (void)ctx;
    fprintf(stderr, "sensor: the service refused the token (HTTP %ld, secondary %s)\n", status,
            secondary_in_use ? "in use" : "not in use");
}

static int run(dsq *q, dsq_sender *s, int64_t interval_ms)
{
    unsigned sensor = 1;
    int64_t next_reading = mono_ms();
    while (!stop_requested) {
        int64_t now = mono_ms(), wait;
        int rc;
        if (now >= next_reading) {
            char data[64];
            int64_t seq;
            (void)snprintf(data, sizeof data, "{\"temp\":%.2f}", read_temperature(&sensor));
            seq = dsq_record_now(q, data); /* on disk when it returns */
            if (seq < 0)
                fprintf(stderr, "sensor: record: %s\n", dsq_strerror((int)seq));
            next_reading += interval_ms;
        }
        rc = dsq_sender_step(s, &wait); /* one request at most */
        if (rc != DSQ_OK)
            fprintf(stderr, "sensor: send: %s\n", dsq_strerror(rc));
        now = mono_ms();
        if (wait < 0 || now + wait > next_reading)
            wait = next_reading > now ? next_reading - now : 0;
        sleep_ms(wait);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = arg_or_env(argc, argv, 1, "DSQ_URL"); /* the base URL */
    const char *serial = arg_or_env(argc, argv, 2, "DSQ_SERIAL");
    const char *dir = arg_or_env(argc, argv, 3, "DSQ_QUEUE_DIR");
    const char *every = arg_or_env(argc, argv, 4, "DSQ_INTERVAL");
    const char *token = env_or_null("DSQ_TOKEN"); /* never an argument */
    const char *token2 = env_or_null("DSQ_TOKEN2");
    int64_t interval_ms = (every != NULL ? atoll(every) : 10) * 1000;
    dsq_sender_options so;
    dsq_sender *s;
    dsq_status st;
    char line[1024];
    dsq *q;
    int rc;
    if (argc > 5 || url == NULL || serial == NULL || dir == NULL || token == NULL ||
        interval_ms <= 0) {
        fprintf(stderr, "usage: DSQ_TOKEN=... [DSQ_TOKEN2=...] "
                        "sensor URL SERIAL QUEUE_DIR [INTERVAL_SECONDS]\n"
                        "  URL: the service's base URL (" DSQ_EVENTS_PATH " is appended)\n"
                        "  the token only from the environment: DSQ_TOKEN (required),\n"
                        "  DSQ_TOKEN2 (optional, the secondary token)\n"
                        "  arguments left out: DSQ_URL, DSQ_SERIAL, DSQ_QUEUE_DIR, DSQ_INTERVAL\n");
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    rc = dsq_open(dir, NULL, &q);
    if (rc != DSQ_OK) {
        fprintf(stderr, "sensor: open %s: %s\n", dir, dsq_strerror(rc));
        return 1;
    }
    dsq_sender_options_init(&so);
    so.url = url;
    so.serial = serial;
    so.token = token;
    so.secondary_token = token2; /* NULL: none */
    so.log = log_line;
    so.on_auth_failure = on_auth_failure;
    rc = dsq_sender_open(q, &so, &s);
    if (rc != DSQ_OK) {
        fprintf(stderr, "sensor: sender: %s\n", dsq_strerror(rc));
        dsq_close(q);
        return 1;
    }
    run(q, s, interval_ms);
    dsq_get_status(q, &st);
    if (dsq_status_json(&st, line, sizeof line) == DSQ_OK)
        fprintf(stderr, "sensor: %s\n", line);
    dsq_sender_close(s);
    dsq_close(q);
    return 0;
}
