/* CRC-32C, time rendering, Retry-After, back-off, the answer scanner. */
#include <string.h>

#include "t.h"

void test_crc(void)
{
    static const char zeros[32] = {0};
    CHECK_EQ(dsq_crc32c(0, "123456789", 9), 0xE3069283u); /* the check value */
    CHECK_EQ(dsq_crc32c(dsq_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    CHECK_EQ(dsq_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    CHECK_EQ(dsq_crc32c(0, "", 0), 0);
}

void test_time(void)
{
    char out[25];
    CHECK_EQ(dsq_format_time(0, out), 0);
    CHECK_STR(out, "1970-01-01T00:00:00.000Z");
    CHECK_EQ(dsq_format_time(INT64_C(1795712400123), out), 0);
    CHECK_STR(out, "2026-11-26T17:00:00.123Z");
    CHECK_EQ(dsq_format_time(-1, out), 0);
    CHECK_STR(out, "1969-12-31T23:59:59.999Z");
    CHECK_EQ(dsq_format_time(INT64_C(951782400000), out), 0); /* a leap day */
    CHECK_STR(out, "2000-02-29T00:00:00.000Z");
    CHECK_EQ(dsq_format_time(INT64_C(253402300799999), out), 0);
    CHECK_STR(out, "9999-12-31T23:59:59.999Z");
    CHECK_EQ(dsq_format_time(INT64_C(253402300800000), out), -1);
    CHECK_EQ(dsq_format_time(INT64_MIN, out), -1);
}

void test_retry(void)
{
    const int64_t t = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    int64_t w = -1;
    CHECK_EQ(dsq_parse_retry_after("120", 0, &w), 1);
    CHECK_EQ(w, 120000);
    CHECK_EQ(dsq_parse_retry_after(" 5 ", 0, &w), 1);
    CHECK_EQ(w, 5000);
    CHECK_EQ(dsq_parse_retry_after("0", 0, &w), 1);
    CHECK_EQ(w, 0);
    CHECK_EQ(dsq_parse_retry_after("7200", 0, &w), 1);
    CHECK_EQ(w, 3600000);
    CHECK_EQ(dsq_parse_retry_after("99999999999999999999999", 0, &w), 1);
    CHECK_EQ(w, 3600000);
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", t - 30, &w), 1);
    CHECK_EQ(w, 30000);
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", t + 30, &w), 1);
    CHECK_EQ(w, 0); /* in the past: at once */
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", t - 86400, &w), 1);
    CHECK_EQ(w, 3600000); /* a day ahead: capped */
    CHECK_EQ(dsq_parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", t - 2, &w), 1);
    CHECK_EQ(w, 2000);
    CHECK_EQ(dsq_parse_retry_after("Sun Nov  6 08:49:37 1994", t - 3, &w), 1);
    CHECK_EQ(w, 3000);
    CHECK_EQ(dsq_parse_retry_after("Thu, 26 Nov 2026 17:01:00 GMT", INT64_C(1795712400), &w), 1);
    CHECK_EQ(w, 60000);
    w = -7;
    CHECK_EQ(dsq_parse_retry_after("soon", 0, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("", 0, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("-5", 0, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("1.5", 0, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("12abc", 0, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nov 1994 08:49:37", t, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("Sun, 36 Nov 1994 08:49:37 GMT", t, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nox 1994 08:49:37 GMT", t, &w), 0);
    CHECK_EQ(dsq_parse_retry_after("Sun, 06 Nov 1994 25:49:37 GMT", t, &w), 0);
    CHECK_EQ(dsq_parse_retry_after(NULL, 0, &w), 0);
    CHECK_EQ(w, -7); /* untouched */

    {
        dsq_backoff b;
        int64_t bounds[12] = {1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000,
                              300000, 300000, 300000};
        int i;
        dsq_backoff_init(&b, 1000, 300000, 3);
        for (i = 0; i < 12; i++) {
            CHECK_EQ(dsq_backoff_bound(&b), bounds[i]);
            /* full jitter: the draw maps onto [0, bound] */
            if (i % 3 == 0)
                CHECK_EQ(dsq_backoff_fail(&b, (uint64_t)bounds[i]), bounds[i]);
            else if (i % 3 == 1)
                CHECK_EQ(dsq_backoff_fail(&b, (uint64_t)bounds[i] + 1), 0);
            else
                CHECK(dsq_backoff_fail(&b, UINT64_C(0x9E3779B97F4A7C15)) <= bounds[i]);
        }
        CHECK_EQ(dsq_backoff_bound(&b), 300000);
        /* shrinks one step only after 3 successes in a row */
        dsq_backoff_success(&b);
        dsq_backoff_success(&b);
        CHECK_EQ(dsq_backoff_bound(&b), 300000);
        (void)dsq_backoff_fail(&b, 0); /* breaks the run */
        dsq_backoff_success(&b);
        dsq_backoff_success(&b);
        CHECK_EQ(dsq_backoff_bound(&b), 300000);
        dsq_backoff_success(&b);
        CHECK_EQ(dsq_backoff_bound(&b), 256000);
        for (i = 0; i < 3; i++)
            dsq_backoff_success(&b);
        CHECK_EQ(dsq_backoff_bound(&b), 128000);
        for (i = 0; i < 100; i++)
            dsq_backoff_success(&b);
        CHECK_EQ(dsq_backoff_bound(&b), 1000);
        for (i = 0; i < 1000; i++) /* never past the bound */
            CHECK(dsq_backoff_fail(&b, (uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) <= 300000);
    }
}

static const char stored_all[] =
    "{\"success\":true,\"message\":\"Message processed and data stored successfully\"}";
static const char some_refused[] =
    "{\"success\":false,\"message\":\"Some messages were not stored\","
    "\"error\":\"3 of 4 messages were not stored\",\"results\":["
    "{\"success\":true,\"message\":\"Message processed and data stored successfully\"},"
    "{\"success\":false,\"message\":\"Invalid data format\",\"error\":\"Message data must be a valid object\"},"
    "{\"success\":false,\"message\":\"No connections configured\",\"error\":\"No connections found for this device\"},"
    "{\"success\":false,\"message\":\"Invalid message format\",\"error\":\"Message must be a valid JSON object\"}]}";
static const char store_failed[] =
    "{\"success\":false,\"message\":\"Message processed but failed to store data\","
    "\"error\":\"storage error: storage unreachable\",\"results\":["
    "{\"success\":false,\"message\":\"Message processed but failed to store data\",\"error\":\"storage error: storage unreachable\"},"
    "{\"success\":false,\"message\":\"Message processed but failed to store data\",\"error\":\"storage error: storage unreachable\"}]}";
static const char empty_messages[] =
    "{\"success\":false,\"message\":\"Invalid data format\",\"error\":\"Messages must be a non-empty array\"}";
static const char too_many[] =
    "{\"success\":false,\"message\":\"Payload too large\",\"error\":\"Too many messages in one request (at most 1000)\"}";
static const char spaced[] =
    "\xEF\xBB\xBF {\n  \"extra\": {\"a\": [1, 2.5e3, -3, null, {\"b\": \"\\\"}\"}]},\n"
    "  \"message\" : \"Some messages\\u0020were not stored\",\n"
    "  \"results\" : [ {\"message\":\"x\", \"success\" : true } , {\"success\":false} ],\n"
    "  \"success\" : false\n}\n";

void test_answer(void)
{
    dsq_answer a;
    uint8_t r[8];
    memset(r, 0xFF, sizeof r);
    CHECK_EQ(dsq_scan_answer(stored_all, strlen(stored_all), &a, r, 8), 0);
    CHECK_EQ(a.success, 1);
    CHECK_STR(a.message, "Message processed and data stored successfully");
    CHECK_EQ(a.has_results, 0);

    CHECK_EQ(dsq_scan_answer(some_refused, strlen(some_refused), &a, r, 8), 0);
    CHECK_EQ(a.success, 0);
    CHECK_STR(a.message, "Some messages were not stored");
    CHECK_EQ(a.has_results, 1);
    CHECK_EQ(a.results, 4);
    CHECK_EQ(r[0], DSQ_RESULT_STORED);
    CHECK_EQ(r[1], DSQ_RESULT_DATA);
    CHECK_EQ(r[2], DSQ_RESULT_CONNECTIONS);
    CHECK_EQ(r[3], DSQ_RESULT_FORMAT);

    CHECK_EQ(dsq_scan_answer(some_refused, strlen(some_refused), &a, r, 2), 0);
    CHECK_EQ(a.results, 4); /* counted past max */

    CHECK_EQ(dsq_scan_answer(store_failed, strlen(store_failed), &a, r, 8), 0);
    CHECK_EQ(a.success, 0);
    CHECK_EQ(a.results, 2);
    CHECK_EQ(r[0], DSQ_RESULT_OTHER);

    CHECK_EQ(dsq_scan_answer(empty_messages, strlen(empty_messages), &a, r, 8), 0);
    CHECK_EQ(a.success, 0);
    CHECK_STR(a.message, "Invalid data format");
    CHECK_EQ(a.has_results, 0);
    CHECK_EQ(dsq_scan_answer(too_many, strlen(too_many), &a, r, 8), 0);
    CHECK_STR(a.message, "Payload too large");

    CHECK_EQ(dsq_scan_answer(spaced, strlen(spaced), &a, r, 8), 0);
    CHECK_EQ(a.success, 0);
    CHECK_STR(a.message, "Some messages were not stored");
    CHECK_EQ(a.results, 2);
    CHECK_EQ(r[0], DSQ_RESULT_STORED);
    CHECK_EQ(r[1], DSQ_RESULT_OTHER);

    /* not answers */
    CHECK_EQ(dsq_scan_answer("not json", 8, &a, r, 8), -1);
    CHECK_EQ(dsq_scan_answer("", 0, &a, r, 8), -1);
    CHECK_EQ(dsq_scan_answer("[1,2]", 5, &a, r, 8), -1);
    CHECK_EQ(dsq_scan_answer(some_refused, strlen(some_refused) - 3, &a, r, 8), -1); /* cut */
    CHECK_EQ(dsq_scan_answer("{\"success\":tru}", 15, &a, r, 8), -1);
    {
        char deep[200];
        memset(deep, '[', sizeof deep);
        memcpy(deep, "{\"x\":", 5);
        CHECK_EQ(dsq_scan_answer(deep, sizeof deep, &a, r, 8), -1); /* bounded nesting */
    }
}
