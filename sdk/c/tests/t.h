/* A minimal test harness: CHECK macros and helpers shared by the tests. */
#ifndef DSQ_T_H
#define DSQ_T_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "internal.h"

extern int t_failures, t_checks;
void t_fail(const char *file, int line, const char *what);

#define CHECK(c) do { t_checks++; if (!(c)) t_fail(__FILE__, __LINE__, #c); } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); t_checks++; \
    if (a_ != b_) { char m_[256]; snprintf(m_, sizeof m_, "%s == %s (%lld != %lld)", #a, #b, a_, b_); \
    t_fail(__FILE__, __LINE__, m_); } } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); t_checks++; \
    if (strcmp(a_, b_) != 0) { char m_[512]; snprintf(m_, sizeof m_, "%s == %s (\"%s\" != \"%s\")", #a, #b, a_, b_); \
    t_fail(__FILE__, __LINE__, m_); } } while (0)

/* A fresh empty directory under $TMPDIR (or /tmp); t_rmdir removes it. */
void t_tmpdir(char out[256]);
void t_rmdir(const char *dir);
/* A file's bytes (malloc'd) and size; writing a file whole. */
char *t_read_file(const char *path, size_t *n);
void t_write_file(const char *path, const char *buf, size_t n);
/* Records n readings {"v": from+i} (time kind 1), checking each. */
void t_record_n(dsq *q, int from, int n);
long long t_file_size(const char *path);

/* Counts the library's allocations. */
typedef struct t_counter {
    size_t current, peak, count;
} t_counter;
void t_counting_allocator(dsq_allocator *al, t_counter *c);

/* A scripted transport: answers from a list, records the requests. */
typedef struct t_answer {
    long status;
    const char *body;
    const char *retry_after;
} t_answer;

typedef struct t_transport {
    const t_answer *script;  /* used in order; the last one repeats */
    size_t script_len, next;
    /* or an answer computed from the request (when not NULL) */
    void (*fn)(struct t_transport *t, const dsq_http_request *req, t_answer *out);
    char dir[256];           /* the queue's dir: state is checked on each call */
    int requests;
    char keys[64][96];       /* the first 64 keys */
    char last_auth[128];
    char last_url[256];
    char *last_body;         /* malloc'd copy */
    size_t last_body_len;
    int state_ok;            /* the state named the batch on every call */
    void *user;
} t_transport;

int t_post(void *ctx, const dsq_http_request *req, dsq_http_answer *ans);
void t_transport_free(t_transport *t);
/* Counts the occurrences of needle in hay[0..n). */
int t_count(const char *hay, size_t n, const char *needle);

/* Default sender options for tests (fast back-off, the scripted transport). */
void t_sender_options(dsq_sender_options *o, t_transport *t);

/* The service's answer when all readings were stored. */
#define T_OK_BODY "{\"success\":true,\"message\":\"Message processed and data stored successfully\"}"
/* Steps until idle or max steps (checking each); waits are skipped (not
 * slept). The number of steps that did not find the queue idle. */
int t_run(dsq_sender *s, int max);
/* The idempotency key of the batch of count readings from first. */
void t_key_of(dsq *q, char *out, size_t cap, unsigned first, unsigned count);

/* A test's usual set-up: a fresh dir, a zeroed scripted transport (its
 * script is the test's: t_fix_script, or t.fn), the default test sender
 * options on it (f->o, to change before t_fix_sender), and the queue open
 * in dir (with qo, kept for reopens; NULL: the library's defaults). Each
 * open is one check, reported at the caller's line. */
typedef struct t_fix {
    char dir[256];
    t_transport t;
    dsq_sender_options o;
    dsq_options qo;
    int has_qo;
    dsq *q;          /* NULL while shut */
    dsq_sender *s;   /* NULL until t_fix_sender */
} t_fix;

#define t_fix_open(f, qo) t_fix_open_at((f), (qo), __FILE__, __LINE__)
#define t_fix_sender(f) t_fix_sender_at((f), __FILE__, __LINE__)
#define t_fix_reopen(f) t_fix_reopen_at((f), __FILE__, __LINE__)
void t_fix_open_at(t_fix *f, const dsq_options *qo, const char *file, int line);
/* The transport answers script[0..n), the last one repeating. */
void t_fix_script(t_fix *f, const t_answer *script, size_t n);
/* Opens the sender on f->q with f->o (checked DSQ_OK). */
void t_fix_sender_at(t_fix *f, const char *file, int line);
void t_fix_sender_close(t_fix *f);
/* Closes the sender and the queue; the dir and the transport stay. */
void t_fix_shut(t_fix *f);
/* A restart: t_fix_shut, then the queue opened again (not the sender). */
void t_fix_reopen_at(t_fix *f, const char *file, int line);
/* Closes whatever is open, frees the transport, removes the dir. */
void t_fix_close(t_fix *f);

/* fsync and clock_gettime are wrapped (-Wl,--wrap, Makefile). While
 * t_fsync_logging is set, the inode of each file synced is logged. */
extern int t_fsync_logging;
extern int t_fsync_count;
extern ino_t t_fsync_inodes[256];
int t_fsynced(const char *path); /* was path's inode logged */
/* While t_wall_set is set, the wall clock reads t_wall_ms. */
extern int t_wall_set;
extern int64_t t_wall_ms;
int __real_fsync(int fd);
int __wrap_fsync(int fd);
int __real_clock_gettime(clockid_t c, struct timespec *ts);
int __wrap_clock_gettime(clockid_t c, struct timespec *ts);

void test_crc(void);
void test_time(void);
void test_queue(void);
void test_torn(void);
void test_bounds(void);
void test_retry(void);
void test_answer(void);
void test_sender(void);
void test_tokens(void);
void test_clock(void);
void test_resend(void);
void test_memory(void);
void test_driver(void);
void test_curl(void);

#endif
