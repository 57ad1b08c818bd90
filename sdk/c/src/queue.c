/* The durable queue: options, open (directory, meta and its lock, state,
 * the segments' scan) and close, the id, the status. The pieces are in
 * meta.c, segments.c, record.c and reader.c. docs/sdk.md, "Queue format
 * (version 1)". */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_MAX_BYTES (UINT64_C(64) << 20)
#define DEFAULT_SEGMENT_BYTES (UINT64_C(4) << 20)

void dsq_options_init(dsq_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_bytes = DEFAULT_MAX_BYTES;
    o->segment_bytes = DEFAULT_SEGMENT_BYTES;
    o->full_policy = DSQ_DROP_OLDEST;
}

static void free_queue(dsq *q)
{
    dsq_allocator al = q->al;
    if (q->act_fd >= 0)
        (void)close(q->act_fd);
    if (q->meta_fd >= 0)
        (void)close(q->meta_fd);
    if (q->dirfd >= 0)
        (void)close(q->dirfd);
    dsq__free(&al, q->dir, q->dir_size);
    (void)pthread_mutex_destroy(&q->mu);
    dsq__free(&al, q, sizeof *q);
}

static int open_dir(dsq *q, const char *dir)
{
    q->dir_size = strlen(dir) + 1;
    q->dir = (char *)dsq__alloc(&q->al, q->dir_size);
    if (q->dir == NULL)
        return DSQ_ENOMEM;
    memcpy(q->dir, dir, q->dir_size);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return DSQ_EIO;
    q->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return q->dirfd >= 0 ? DSQ_OK : DSQ_EIO;
}

static int load(dsq *q)
{
    uint64_t state_off, head0, off0, batch0;
    uint32_t count0;
    int rc = dsq__open_meta(q);
    if (rc == DSQ_OK)
        rc = dsq__lock_queue(q);
    if (rc == DSQ_OK)
        rc = dsq__read_state(q, &state_off);
    if (rc != DSQ_OK)
        return rc;
    (void)unlinkat(q->dirfd, "state.tmp", 0);
    head0 = q->head;
    off0 = state_off;
    batch0 = q->batch_first;
    count0 = q->batch_count;
    q->head_off = state_off;
    /* numbers up to the end of the batch in state may be in a key */
    rc = dsq__load_segments(q, state_off, batch0 != 0 && batch0 + count0 > head0 ? batch0 + count0 : head0);
    if (rc != DSQ_OK)
        return rc;
    dsq__normalize_head(q);
    if (q->batch_first != q->head) { /* not a batch at the head: none */
        q->batch_first = 0;
        q->batch_count = 0;
    }
    q->batch_last_seg = UINT64_MAX; /* unknown until rebuilt: protect all */
    if (q->head != head0 || q->head_off != off0 || q->batch_first != batch0 || q->batch_count != count0)
        rc = dsq__write_state(q);
    return rc;
}

int dsq_open(const char *dir, const dsq_options *o, dsq **out)
{
    dsq_options def;
    dsq *q;
    int rc;
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return DSQ_EINVAL;
    if (o == NULL) {
        dsq_options_init(&def);
        o = &def;
    }
    q = (dsq *)dsq__alloc(&o->allocator, sizeof *q);
    if (q == NULL)
        return DSQ_ENOMEM;
    memset(q, 0, sizeof *q);
    q->al = o->allocator;
    q->dirfd = q->meta_fd = q->act_fd = -1;
    q->max_bytes = o->max_bytes > 0 ? o->max_bytes : DEFAULT_MAX_BYTES;
    q->segment_bytes = o->segment_bytes > 0 ? o->segment_bytes : DEFAULT_SEGMENT_BYTES;
    q->policy = o->full_policy;
    q->max_age_ms = o->max_age_ms;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        dsq__free(&q->al, q, sizeof *q);
        return DSQ_ENOMEM;
    }
    rc = open_dir(q, dir);
    if (rc == DSQ_OK)
        rc = load(q);
    if (rc != DSQ_OK) {
        free_queue(q);
        return rc;
    }
    *out = q;
    return DSQ_OK;
}

void dsq_close(dsq *q)
{
    if (q == NULL)
        return;
    if (q->act_fd >= 0 && q->act_dirty)
        (void)fsync(q->act_fd);
    free_queue(q);
}

void dsq_id_hex(const dsq *q, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    int i;
    for (i = 0; i < 16; i++) {
        out[2 * i] = hex[q->id[i] >> 4];
        out[2 * i + 1] = hex[q->id[i] & 15];
    }
    out[32] = '\0';
}

void dsq_get_status(dsq *q, dsq_status *st)
{
    if (pthread_mutex_lock(&q->mu) != 0) {
        memset(st, 0, sizeof *st);
        return;
    }
    *st = q->st;
    st->queued = q->queued;
    st->bytes_on_disk = q->bytes;
    st->next_seq = q->next_seq;
    (void)pthread_mutex_unlock(&q->mu);
}
