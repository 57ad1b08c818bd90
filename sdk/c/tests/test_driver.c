/* tools/dsq-driver.c's settings from the environment (its main renamed). */
#include <fcntl.h>
#include <unistd.h>

#define main dsq_driver_main
#include "../tools/dsq-driver.c"
#undef main

#include "t.h"

/* read_env with stderr silenced (a refusal prints the usage). */
static int quiet_read_env(sender_env *e)
{
    int saved = dup(2), null = open("/dev/null", O_WRONLY), rc;
    fflush(stderr);
    if (null >= 0)
        (void)dup2(null, 2);
    rc = read_env("http://127.0.0.1:9", e);
    fflush(stderr);
    if (saved >= 0) {
        (void)dup2(saved, 2);
        (void)close(saved);
    }
    if (null >= 0)
        (void)close(null);
    return rc;
}

/* DSQ_MAX_BACKOFF_MS sets max_backoff_ms for send and run (and the base,
 * when below it); unset, the default; not a positive integer, usage. */
void test_driver(void)
{
    static const char *const bad[] = {"0", "-5", "abc", "12x"};
    char dir[256];
    sender_env e;
    dsq *q = NULL;
    dsq_sender *s = NULL;
    size_t i;
    t_tmpdir(dir);
    setenv("DSQ_TOKEN", "driver-token", 1);
    unsetenv("DSQ_TOKEN2");
    unsetenv("DSQ_BATCH");
    setenv("DSQ_MAX_BACKOFF_MS", "4000", 1);
    CHECK_EQ(quiet_read_env(&e), 0);
    CHECK_EQ(e.max_backoff_ms, 4000);
    CHECK_EQ(open_sender(dir, &e, "dev-1", &q, &s), 0);
    if (s != NULL) {
        CHECK_EQ(s->o.max_backoff_ms, 4000);
        CHECK_EQ(s->o.base_backoff_ms, 1000);
        CHECK_EQ(s->backoff.max_ms, 4000);
        dsq_sender_close(s);
        dsq_close(q);
    }
    setenv("DSQ_MAX_BACKOFF_MS", "250", 1);
    CHECK_EQ(quiet_read_env(&e), 0);
    CHECK_EQ(open_sender(dir, &e, "dev-1", &q, &s), 0);
    if (s != NULL) {
        CHECK_EQ(s->backoff.max_ms, 250);
        CHECK_EQ(s->backoff.base_ms, 250);
        dsq_sender_close(s);
        dsq_close(q);
    }
    unsetenv("DSQ_MAX_BACKOFF_MS");
    CHECK_EQ(quiet_read_env(&e), 0);
    CHECK_EQ(open_sender(dir, &e, "dev-1", &q, &s), 0);
    if (s != NULL) {
        CHECK_EQ(s->o.max_backoff_ms, 5 * 60 * 1000);
        dsq_sender_close(s);
        dsq_close(q);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("DSQ_MAX_BACKOFF_MS", bad[i], 1);
        CHECK_EQ(quiet_read_env(&e), 1);
    }
    unsetenv("DSQ_MAX_BACKOFF_MS");
    unsetenv("DSQ_TOKEN");
    t_rmdir(dir);
}
