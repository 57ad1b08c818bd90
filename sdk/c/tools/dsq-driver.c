/* dsq-driver: the C SDK driven from the command line, for the Go
 * integration tests.
 *   dsq-driver record DIR N [START]   records N readings {"v": START+i}
 *                                      (time kind 1, now), printing each
 *                                      sequence number once recorded
 *   dsq-driver send DIR URL SERIAL TOKEN [SECONDS]
 *                                      drains the queue (default 60 s) and
 *                                      prints the final status as JSON
 *   dsq-driver dump DIR                 prints each unsettled reading as
 *                                      {"seq":N,"kind":K,"time":T,"data":{...}}
 * Log lines of the sender go to stderr. Exit status: 0 done; 1 usage or
 * error; 2 send stopped with readings left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devicesdk.h"

static int usage(void)
{
    fprintf(stderr, "usage: dsq-driver record DIR N [START]\n"
                    "       dsq-driver send DIR URL SERIAL TOKEN [SECONDS]\n"
                    "       dsq-driver dump DIR\n");
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

static int open_queue(const char *dir, dsq **q)
{
    int rc = dsq_open(dir, NULL, q);
    if (rc != DSQ_OK)
        fprintf(stderr, "dsq-driver: open %s: %s\n", dir, dsq_strerror(rc));
    return rc;
}

static int cmd_record(const char *dir, long long n, long long start)
{
    dsq *q;
    long long i;
    int rc = 0;
    if (open_queue(dir, &q) != DSQ_OK)
        return 1;
    for (i = 0; i < n; i++) {
        char data[64];
        int64_t seq;
        (void)snprintf(data, sizeof data, "{\"v\": %lld}", start + i);
        seq = dsq_record(q, data, DSQ_TIME_WALL, now_ms());
        if (seq < 0) {
            fprintf(stderr, "dsq-driver: record: %s\n", dsq_strerror((int)seq));
            rc = 1;
            break;
        }
        printf("%lld\n", (long long)seq);
        fflush(stdout);
    }
    dsq_close(q);
    return rc;
}

static void log_line(void *ctx, int level, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "[%d] %s\n", level, msg);
}

static int cmd_send(const char *dir, const char *url, const char *serial, const char *token,
                    long long seconds)
{
    dsq *q;
    dsq_sender *s;
    dsq_sender_options o;
    dsq_status st;
    char line[1024];
    int rc;
    if (open_queue(dir, &q) != DSQ_OK)
        return 1;
    dsq_sender_options_init(&o);
    o.url = url;
    o.serial = serial;
    o.token = token;
    o.log = log_line;
    rc = dsq_sender_open(q, &o, &s);
    if (rc != DSQ_OK) {
        fprintf(stderr, "dsq-driver: sender: %s\n", dsq_strerror(rc));
        dsq_close(q);
        return 1;
    }
    rc = dsq_sender_drain(s, seconds * 1000, NULL);
    dsq_get_status(q, &st);
    if (dsq_status_json(&st, line, sizeof line) == DSQ_OK)
        printf("%s\n", line);
    fflush(stdout);
    dsq_sender_close(s);
    dsq_close(q);
    if (rc < 0) {
        fprintf(stderr, "dsq-driver: send: %s\n", dsq_strerror(rc));
        return 1;
    }
    return rc == 0 ? 0 : 2;
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
    long long a = 0, b = 0;
    if (argc >= 4 && strcmp(argv[1], "record") == 0 && argc <= 5) {
        if (parse_ll(argv[3], &a) || a < 0 || (argc == 5 && parse_ll(argv[4], &b)))
            return usage();
        return cmd_record(argv[2], a, b);
    }
    if (argc >= 6 && strcmp(argv[1], "send") == 0 && argc <= 7) {
        a = 60;
        if (argc == 7 && (parse_ll(argv[6], &a) || a < 0))
            return usage();
        return cmd_send(argv[2], argv[3], argv[4], argv[5], a);
    }
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return cmd_dump(argv[2]);
    return usage();
}
