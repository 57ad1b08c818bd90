/* A small scanner for the service's answer {success, message, error?,
 * results?}: reads success, message and each result's success and message;
 * skips everything else. No allocation; nesting bounded. */
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 32

typedef struct scan {
    const char *p, *end;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int take(scan *s, char c)
{
    ws(s);
    if (s->p >= s->end || *s->p != c)
        return -1;
    s->p++;
    return 0;
}

/* A string; its text (escapes decoded, \u as '?' beyond ASCII) is copied
 * to out (cap bytes with the NUL) when out is not NULL. */
static int string(scan *s, char *out, size_t cap)
{
    size_t n = 0;
    if (take(s, '"'))
        return -1;
    while (s->p < s->end && *s->p != '"') {
        char c = *s->p++;
        if (c == '\\') {
            if (s->p >= s->end)
                return -1;
            c = *s->p++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                int i;
                if (s->end - s->p < 4)
                    return -1;
                for (i = 0; i < 4; i++) {
                    char h = *s->p++;
                    v <<= 4;
                    if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                    else return -1;
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default: break; /* \" \\ \/ */
            }
        }
        if (out != NULL && n + 1 < cap)
            out[n++] = c;
    }
    if (s->p >= s->end)
        return -1;
    s->p++;
    if (out != NULL && cap > 0)
        out[n] = '\0';
    return 0;
}

static int literal(scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return -1;
    s->p += n;
    return 0;
}

static int skip_value(scan *s, int depth);

static int skip_container(scan *s, char open, char close, int depth)
{
    if (depth >= MAX_DEPTH || take(s, open))
        return -1;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        if (open == '{' && (string(s, NULL, 0) || take(s, ':')))
            return -1;
        if (skip_value(s, depth + 1))
            return -1;
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == close) {
            s->p++;
            return 0;
        }
        if (*s->p++ != ',')
            return -1;
    }
}

static int skip_value(scan *s, int depth)
{
    ws(s);
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '"': return string(s, NULL, 0);
    case '{': return skip_container(s, '{', '}', depth);
    case '[': return skip_container(s, '[', ']', depth);
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    default:
        if (*s->p != '-' && (*s->p < '0' || *s->p > '9'))
            return -1;
        while (s->p < s->end && strchr("+-.eE0123456789", *s->p) != NULL)
            s->p++;
        return 0;
    }
}

/* true, false, or anything else (-1, skipped). */
static int boolean(scan *s, int depth)
{
    ws(s);
    if (literal(s, "true") == 0)
        return 1;
    if (literal(s, "false") == 0)
        return 0;
    return skip_value(s, depth) == 0 ? -1 : -2;
}

static int reason_of(int success, const char *message)
{
    if (success == 1)
        return DSQ_RESULT_STORED;
    if (strcmp(message, "Invalid message format") == 0)
        return DSQ_RESULT_FORMAT;
    if (strcmp(message, "Invalid data format") == 0)
        return DSQ_RESULT_DATA;
    if (strcmp(message, "No connections configured") == 0)
        return DSQ_RESULT_CONNECTIONS;
    return DSQ_RESULT_OTHER;
}

/* One {success, message, error?}; anything else in results counts as other. */
static int result(scan *s, uint8_t *reason)
{
    char key[16], message[64];
    int success = -1;
    message[0] = '\0';
    ws(s);
    if (s->p < s->end && *s->p != '{') {
        *reason = DSQ_RESULT_OTHER;
        return skip_value(s, 2);
    }
    if (take(s, '{'))
        return -1;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        *reason = DSQ_RESULT_OTHER;
        return 0;
    }
    for (;;) {
        if (string(s, key, sizeof key) || take(s, ':'))
            return -1;
        if (strcmp(key, "success") == 0) {
            success = boolean(s, 3);
            if (success == -2)
                return -1;
        } else if (strcmp(key, "message") == 0) {
            ws(s);
            if (s->p < s->end && *s->p == '"') {
                if (string(s, message, sizeof message))
                    return -1;
            } else if (skip_value(s, 3)) {
                return -1;
            }
        } else if (skip_value(s, 3)) {
            return -1;
        }
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == '}') {
            s->p++;
            break;
        }
        if (*s->p++ != ',')
            return -1;
    }
    *reason = (uint8_t)reason_of(success, message);
    return 0;
}

static int results_array(scan *s, dsq_answer *a, uint8_t *results, size_t max)
{
    if (take(s, '['))
        return -1;
    a->has_results = 1;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        uint8_t reason = DSQ_RESULT_OTHER;
        if (result(s, &reason))
            return -1;
        if (results != NULL && a->results < max)
            results[a->results] = reason;
        a->results++;
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == ']') {
            s->p++;
            return 0;
        }
        if (*s->p++ != ',')
            return -1;
    }
}

int dsq_scan_answer(const char *text, size_t len, dsq_answer *a, uint8_t *results, size_t max)
{
    scan s;
    char key[16];
    s.p = text;
    s.end = text + len;
    memset(a, 0, sizeof *a);
    a->success = -1;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        s.p += 3;
    if (take(&s, '{'))
        return -1;
    ws(&s);
    if (s.p < s.end && *s.p == '}')
        return 0;
    for (;;) {
        if (string(&s, key, sizeof key) || take(&s, ':'))
            return -1;
        if (strcmp(key, "success") == 0) {
            a->success = boolean(&s, 1);
            if (a->success == -2)
                return -1;
        } else if (strcmp(key, "message") == 0) {
            ws(&s);
            if (s.p < s.end && *s.p == '"') {
                if (string(&s, a->message, sizeof a->message))
                    return -1;
            } else if (skip_value(&s, 1)) {
                return -1;
            }
        } else if (strcmp(key, "results") == 0) {
            ws(&s);
            if (s.p < s.end && *s.p == '[') {
                if (results_array(&s, a, results, max))
                    return -1;
            } else if (skip_value(&s, 1)) {
                return -1;
            }
        } else if (skip_value(&s, 1)) {
            return -1;
        }
        ws(&s);
        if (s.p >= s.end)
            return -1;
        if (*s.p == '}')
            return 0;
        if (*s.p++ != ',')
            return -1;
    }
}
