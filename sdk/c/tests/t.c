/* Test helpers and main. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"

int t_failures, t_checks;

void t_fail(const char *file, int line, const char *what)
{
    t_failures++;
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
}

void t_tmpdir(char out[256])
{
    const char *base = getenv("TMPDIR");
    snprintf(out, 256, "%s/dsqtest.XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
    if (mkdtemp(out) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
}

void t_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (void)unlink(path);
    }
    closedir(d);
    (void)rmdir(dir);
}

char *t_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long size;
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (char *)malloc((size_t)size + 1);
    *n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

void t_write_file(const char *path, const char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    if (n > 0 && fwrite(buf, 1, n, f) != n)
        exit(2);
    fclose(f);
}

long long t_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Each block carries its size in a header, to count frees exactly. */
static void *count_alloc(void *ctx, size_t n)
{
    t_counter *c = (t_counter *)ctx;
    c->current += n;
    c->count++;
    if (c->current > c->peak)
        c->peak = c->current;
    return malloc(n);
}

static void count_free(void *ctx, void *p, size_t n)
{
    t_counter *c = (t_counter *)ctx;
    c->current -= n;
    free(p);
}

void t_counting_allocator(dsq_allocator *al, t_counter *c)
{
    memset(c, 0, sizeof *c);
    al->alloc = count_alloc;
    al->free = count_free;
    al->ctx = c;
}

/* The state file must name the batch being sent. */
static int state_names(const char *dir, const char *key)
{
    char path[300];
    size_t n = 0;
    char *b, want[64];
    uint64_t first;
    uint32_t count;
    snprintf(path, sizeof path, "%s/state", dir);
    b = t_read_file(path, &n);
    if (b == NULL)
        return 0;
    first = dsq__get_u64((const uint8_t *)b + 20);
    count = dsq__get_u32((const uint8_t *)b + 28);
    free(b);
    snprintf(want, sizeof want, "-%llu-%u", (unsigned long long)first, (unsigned)count);
    return n == 40 && strlen(key) > strlen(want) && strcmp(key + strlen(key) - strlen(want), want) == 0;
}

int t_post(void *ctx, const dsq_http_request *req, dsq_http_answer *ans)
{
    t_transport *t = (t_transport *)ctx;
    t_answer a;
    size_t n;
    if (t->requests < 64)
        snprintf(t->keys[t->requests], sizeof t->keys[0], "%s", req->idempotency_key);
    if (t->requests == 0)
        t->state_ok = 1;
    if (t->dir[0] != '\0' && !state_names(t->dir, req->idempotency_key))
        t->state_ok = 0;
    t->requests++;
    snprintf(t->last_auth, sizeof t->last_auth, "%s", req->authorization);
    snprintf(t->last_url, sizeof t->last_url, "%s", req->url);
    free(t->last_body);
    t->last_body = (char *)malloc(req->body_len + 1);
    memcpy(t->last_body, req->body, req->body_len);
    t->last_body[req->body_len] = '\0';
    t->last_body_len = req->body_len;
    if (t->fn != NULL) {
        memset(&a, 0, sizeof a);
        t->fn(t, req, &a);
    } else {
        a = t->script[t->next < t->script_len ? t->next : t->script_len - 1];
        t->next++;
    }
    ans->status = a.status;
    n = a.body != NULL ? strlen(a.body) : 0;
    if (n > ans->body_cap) {
        n = ans->body_cap;
        ans->body_truncated = 1;
    }
    memcpy(ans->body, a.body != NULL ? a.body : "", n);
    ans->body_len = n;
    snprintf(ans->retry_after, sizeof ans->retry_after, "%s", a.retry_after != NULL ? a.retry_after : "");
    return 0;
}

void t_transport_free(t_transport *t)
{
    free(t->last_body);
    t->last_body = NULL;
}

int t_count(const char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle), i;
    int c = 0;
    for (i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            c++;
    return c;
}

void t_sender_options(dsq_sender_options *o, t_transport *t)
{
    dsq_sender_options_init(o);
    o->url = "http://test.invalid"; /* the base URL */
    o->serial = "dev-001";
    o->token = "secret-token-0001";
    o->base_backoff_ms = 1;
    o->max_backoff_ms = 4;
    o->transport = t_post;
    o->transport_ctx = t;
}

int t_run(dsq_sender *s, int max)
{
    int i;
    for (i = 0; i < max; i++) {
        int64_t wait = 0;
        CHECK_EQ(dsq_sender_step(s, &wait), DSQ_OK);
        if (wait < 0)
            return i;
        s->next_at = 0;
    }
    return i;
}

void t_key_of(dsq *q, char *out, size_t cap, unsigned first, unsigned count)
{
    char id[33];
    dsq_id_hex(q, id);
    snprintf(out, cap, "%s-%u-%u", id, first, count);
}

/* One check that rc is DSQ_OK, at the caller's file and line. */
static void check_ok_at(int rc, const char *what, const char *file, int line)
{
    t_checks++;
    if (rc != DSQ_OK) {
        char m[256];
        snprintf(m, sizeof m, "%s == DSQ_OK (%d: %s)", what, rc, dsq_strerror(rc));
        t_fail(file, line, m);
    }
}

static void fix_open_queue(t_fix *f, const char *file, int line)
{
    f->q = NULL;
    check_ok_at(dsq_open(f->dir, f->has_qo ? &f->qo : NULL, &f->q), "dsq_open(f->dir, ...)", file, line);
}

void t_fix_open_at(t_fix *f, const dsq_options *qo, const char *file, int line)
{
    memset(f, 0, sizeof *f);
    t_tmpdir(f->dir);
    if (qo != NULL) {
        f->qo = *qo;
        f->has_qo = 1;
    }
    t_sender_options(&f->o, &f->t);
    fix_open_queue(f, file, line);
}

void t_fix_script(t_fix *f, const t_answer *script, size_t n)
{
    f->t.script = script;
    f->t.script_len = n;
}

void t_fix_sender_at(t_fix *f, const char *file, int line)
{
    f->s = NULL;
    check_ok_at(dsq_sender_open(f->q, &f->o, &f->s), "dsq_sender_open(f->q, &f->o, &f->s)", file, line);
}

void t_fix_sender_close(t_fix *f)
{
    dsq_sender_close(f->s);
    f->s = NULL;
}

void t_fix_shut(t_fix *f)
{
    t_fix_sender_close(f);
    dsq_close(f->q);
    f->q = NULL;
}

void t_fix_reopen_at(t_fix *f, const char *file, int line)
{
    t_fix_shut(f);
    fix_open_queue(f, file, line);
}

void t_fix_close(t_fix *f)
{
    t_fix_shut(f);
    t_transport_free(&f->t);
    t_rmdir(f->dir);
}

int t_fsync_logging, t_fsync_count;
ino_t t_fsync_inodes[256];
int t_wall_set;
int64_t t_wall_ms;

int __wrap_fsync(int fd)
{
    struct stat st;
    if (t_fsync_logging && t_fsync_count < 256 && fstat(fd, &st) == 0)
        t_fsync_inodes[t_fsync_count++] = st.st_ino;
    return __real_fsync(fd);
}

int t_fsynced(const char *path)
{
    struct stat st;
    int i;
    if (stat(path, &st) != 0)
        return 0;
    for (i = 0; i < t_fsync_count; i++)
        if (t_fsync_inodes[i] == st.st_ino)
            return 1;
    return 0;
}

int __wrap_clock_gettime(clockid_t c, struct timespec *ts)
{
    if (c == CLOCK_REALTIME && t_wall_set) {
        ts->tv_sec = (time_t)(t_wall_ms / 1000);
        ts->tv_nsec = (long)(t_wall_ms % 1000) * 1000000L;
        return 0;
    }
    return __real_clock_gettime(c, ts);
}

int main(void)
{
    struct { const char *name; void (*fn)(void); } tests[] = {
        {"crc", test_crc}, {"time", test_time}, {"queue", test_queue},
        {"torn", test_torn}, {"bounds", test_bounds}, {"retry", test_retry},
        {"answer", test_answer}, {"sender", test_sender}, {"tokens", test_tokens},
        {"clock", test_clock}, {"resend", test_resend}, {"memory", test_memory},
        {"driver", test_driver}, {"curl", test_curl},
    };
    size_t i;
    for (i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = t_failures;
        tests[i].fn();
        printf("%-8s %s\n", tests[i].name, t_failures == before ? "ok" : "FAILED");
    }
    printf("%d checks, %d failures\n", t_checks, t_failures);
    return t_failures == 0 ? 0 : 1;
}

void t_record_n(dsq *q, int from, int n)
{
    int i;
    for (i = from; i < from + n; i++) {
        char d[32];
        snprintf(d, sizeof d, "{\"v\":%d}", i);
        CHECK(dsq_record(q, d, DSQ_TIME_WALL, INT64_C(1795712400000) + i) > 0);
    }
}
