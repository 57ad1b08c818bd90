/* Unix milliseconds as RFC 3339 UTC with milliseconds and Z. */
#include "internal.h"

/* Howard Hinnant's days_from_civil / civil_from_days. */
int64_t dsq__days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;
    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* v (0 <= v < 10^n) as n decimal digits. */
static void put_digits(char *out, int64_t v, int n)
{
    int i;
    for (i = n - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

int dsq_format_time(int64_t unix_ms, char out[25])
{
    /* years 0000..9999 */
    const int64_t lo = INT64_C(-62167219200000), hi = INT64_C(253402300800000);
    int64_t days, ms_of_day, y;
    int m, d;
    if (unix_ms < lo || unix_ms >= hi)
        return -1;
    days = unix_ms / 86400000;
    ms_of_day = unix_ms % 86400000;
    if (ms_of_day < 0) {
        ms_of_day += 86400000;
        days--;
    }
    civil_from_days(days, &y, &m, &d);
    put_digits(out, y, 4);
    out[4] = '-';
    put_digits(out + 5, m, 2);
    out[7] = '-';
    put_digits(out + 8, d, 2);
    out[10] = 'T';
    put_digits(out + 11, ms_of_day / 3600000, 2);
    out[13] = ':';
    put_digits(out + 14, ms_of_day / 60000 % 60, 2);
    out[16] = ':';
    put_digits(out + 17, ms_of_day / 1000 % 60, 2);
    out[19] = '.';
    put_digits(out + 20, ms_of_day % 1000, 3);
    out[23] = 'Z';
    out[24] = '\0';
    return 0;
}
