/* Shared by clattn-check and clattn-tune: why a context could not be made with the environment's
 * settings. */
#ifndef CLATTN_TOOLS_SETTING_ERROR_H
#define CLATTN_TOOLS_SETTING_ERROR_H
#include <clattn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library's last context error into buf, naming CLATTN_TUNE where the library names only
 * the setting (its tuning messages start "tuning:" for params.tuning and CLATTN_TUNE alike). */
static inline void setting_error(char *buf, size_t n)
{
    const char *e = clattn_last_error(NULL), *tune = getenv("CLATTN_TUNE");
    if (strncmp(e, "tuning:", 7) == 0 && tune && *tune)
        snprintf(buf, n, "CLATTN_TUNE=%.60s: %s", tune, e);
    else
        snprintf(buf, n, "%s", e);
}
#endif
