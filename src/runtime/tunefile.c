/* Tune files: the kernel parameters clattn-tune measured on one device, read at context creation.
 *
 * One text file per device, found at params.tune_file / CLATTN_TUNE_FILE, else at
 * clattn-tune-<key>.txt in the cache directory (cache_dir, else $XDG_CACHE_HOME/clattn, else
 * $HOME/.cache/clattn), key = FNV-1a 64 of the platform name, device name and vendor. Lines:
 *     clattn-tune 1                      format, first
 *     platform <platform name> / <platform version>
 *     device <device name> / <vendor>
 *     driver <driver version>
 *     clattn <clattn version>
 *     <op>[@<bucket>]=<variant>[:NAME=value]...     entries, CLATTN_TUNE's syntax
 * plus blank lines and '#' comments. The four key lines must equal the context's: a file written
 * for another device, driver or clattn is stale. A stale file, or one with a line that does not
 * parse or an entry this device refuses (the same checks as CLATTN_TUNE), is ignored whole; the
 * context is created anyway and clattn_context_tune_note says why. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TUNE_MAX_BYTES (64 * 1024)

/* The default tune file's directory for ctx, or "" when there is none (no cache_dir, no XDG or
 * HOME) or it is too long for the file's path (*too_long then 1); dir has CLATTN_PATH_MAX
 * bytes. */
static void default_dir(const clattn_context *ctx, char *dir, int *too_long)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = -1;
    if (ctx->cache_dir[0])
        n = snprintf(dir, CLATTN_PATH_MAX, "%s", ctx->cache_dir);
    else if (xdg && xdg[0] == '/')
        n = snprintf(dir, CLATTN_PATH_MAX, "%s/clattn", xdg);
    else if (home && home[0])
        n = snprintf(dir, CLATTN_PATH_MAX, "%s/.cache/clattn", home);
    *too_long = n >= CLATTN_PATH_MAX - 48;
    if (n < 0 || *too_long)
        dir[0] = '\0';
}

/* Sets ctx->tune_path from the setting (already in ctx->tune_path as given) or the default. */
static int resolve_path(clattn_context *ctx)
{
    char dir[CLATTN_PATH_MAX];
    int too_long;
    if (ctx->tune_path[0])
        return 1;
    default_dir(ctx, dir, &too_long);
    if (!dir[0]) {
        snprintf(ctx->tune_note, sizeof ctx->tune_note, "no tune file: %s (CLATTN_CACHE_DIR, "
                 "XDG_CACHE_HOME or HOME); CLATTN_TUNE_FILE names one",
                 too_long ? "the cache directory is too long for its path" : "no cache directory");
        return 0;
    }
    uint64_t h = CLATTN_FNV_OFFSET;
    h = clattn__fnv1a(h, ctx->platform_name, strlen(ctx->platform_name) + 1);
    h = clattn__fnv1a(h, ctx->name, strlen(ctx->name) + 1);
    h = clattn__fnv1a(h, ctx->vendor, strlen(ctx->vendor) + 1);
    size_t n = strlen(dir) + 48;
    char *path = malloc(n);
    if (!path)
        return 0;
    snprintf(path, n, "%s/clattn-tune-%016llx.txt", dir, (unsigned long long)h);
    free(ctx->tune_path);
    ctx->tune_path = path;
    return 1;
}

/* The whole regular file at path (malloc'd, NUL-terminated), or NULL with the reason in why. */
static char *read_file(const char *path, char *why, size_t n)
{
    struct stat sb;
    char *text = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO there must not block the context */
    if (fd < 0) {
        snprintf(why, n, "%s", errno == ENOENT ? "no such file" : strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        snprintf(why, n, "not a regular file");
    else if (sb.st_size > TUNE_MAX_BYTES)
        snprintf(why, n, "over %d bytes", TUNE_MAX_BYTES);
    else if (!(text = malloc((size_t)sb.st_size + 1)))
        snprintf(why, n, "out of host memory");
    else if (read(fd, text, (size_t)sb.st_size) != (ssize_t)sb.st_size) {
        snprintf(why, n, "read failed");
        free(text);
        text = NULL;
    } else if (memchr(text, '\0', (size_t)sb.st_size)) {
        snprintf(why, n, "corrupt: a NUL byte"); /* the lines after it would go unread */
        free(text);
        text = NULL;
    } else {
        text[sb.st_size] = '\0';
    }
    close(fd);
    return text;
}

/* 1 when key line `line` (after its keyword) equals want, else 0 with the mismatch in why. */
static int key_matches(const char *what, const char *got, const char *want, char *why, size_t n)
{
    if (strcmp(got, want) == 0)
        return 1;
    snprintf(why, n, "stale: written for %s '%s', this is '%s' (run clattn-tune again)", what, got,
             want);
    return 0;
}

/* Checks one entry line with the override's rules; 1 when this device takes it. The entry is
 * tried as the only tune-file entry, no override in the way. */
static int entry_ok(clattn_context *ctx, const char *line, char *why, size_t n)
{
    char op[64], *tuning = ctx->tuning, *tuned = ctx->tuned;
    const char *eq = strchr(line, '=');
    size_t oplen = eq ? (size_t)(eq - line) : 0;
    clattn_tuning t;
    if (strchr(line, ',')) { /* ctx->tuned joins the lines with commas */
        snprintf(why, n, "entry '%.80s': one entry per line, no ','", line);
        return 0;
    }
    if (!eq || oplen == 0 || oplen >= sizeof op) {
        snprintf(why, n, "line '%.80s' is not op[@bucket]=variant[:NAME=value]...", line);
        return 0;
    }
    memcpy(op, line, oplen);
    op[oplen] = '\0';
    char *at = strchr(op, '@');
    if (at) {
        *at = '\0';
        if (!clattn__bucket_known(op, at + 1)) {
            snprintf(why, n, "entry '%.80s': op %s has no bucket '%s'", line, op, at + 1);
            return 0;
        }
    }
    ctx->tuning = "";
    ctx->tuned = (char *)line;
    clattn_status st = clattn__tune_bucket(ctx, op, at ? at + 1 : NULL, &t);
    ctx->tuning = tuning;
    ctx->tuned = tuned;
    if (st != CLATTN_SUCCESS)
        snprintf(why, n, "entry '%.80s': %.900s", line, ctx->err);
    return st == CLATTN_SUCCESS;
}

/* 1 when the entries so far (comma-separated) hold one for line's op[@bucket]. */
static int duplicate(const char *entries, const char *line)
{
    size_t klen = strcspn(line, "=");
    const char *e = entries;
    while (*e) {
        if (strcspn(e, "=") == klen && strncmp(e, line, klen) == 0)
            return 1;
        e += strcspn(e, ",");
        if (*e == ',')
            e++;
    }
    return 0;
}

/* Parses text into ctx->tuned; 0 with the reason in why when the file must be ignored. */
static int parse(clattn_context *ctx, char *text, int *entries, char *why, size_t n)
{
    char platform[600], device[600];
    const char *keys[4] = {NULL, NULL, NULL, NULL};
    size_t used = 0, cap = strlen(text) + 1;
    char *out = calloc(1, cap), *save = NULL;
    int lineno = 0, ok = out != NULL;
    snprintf(platform, sizeof platform, "%s / %s", ctx->platform_name, ctx->platform_version);
    snprintf(device, sizeof device, "%s / %s", ctx->name, ctx->vendor);
    for (char *line = strtok_r(text, "\n", &save); ok && line; line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') /* CRLF; a CR inside a line is left to fail below */
            line[len - 1] = '\0';
        if (lineno++ == 0) {
            ok = strcmp(line, "clattn-tune 1") == 0;
            if (!ok)
                snprintf(why, n, "corrupt: the first line is not 'clattn-tune 1'");
        } else if (!line[0] || line[0] == '#') {
            continue;
        } else if (strncmp(line, "platform ", 9) == 0) {
            keys[0] = line + 9;
        } else if (strncmp(line, "device ", 7) == 0) {
            keys[1] = line + 7;
        } else if (strncmp(line, "driver ", 7) == 0) {
            keys[2] = line + 7;
        } else if (strncmp(line, "clattn ", 7) == 0) {
            keys[3] = line + 7;
        } else if ((ok = entry_ok(ctx, line, why, n)) && duplicate(out, line)) {
            ok = 0; /* as CLATTN_TUNE: which of the two was meant is not known */
            snprintf(why, n, "entry '%.80s': a second entry for its op", line);
        } else if (ok) {
            used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", line);
            (*entries)++;
        }
    }
    ok = ok && (keys[0] && keys[1] && keys[2] && keys[3]
                    ? key_matches("platform", keys[0], platform, why, n) &&
                          key_matches("device", keys[1], device, why, n) &&
                          key_matches("driver", keys[2], ctx->driver, why, n) &&
                          key_matches("clattn", keys[3], clattn_version(), why, n)
                    : (snprintf(why, n, "corrupt: a platform, device, driver or clattn line is "
                                        "missing"), 0));
    if (ok) {
        free(ctx->tuned);
        ctx->tuned = out;
    } else {
        free(out);
    }
    return ok;
}

void clattn__load_tune_file(clattn_context *ctx)
{
    char why[1024] = "";
    int entries = 0;
    if (strcmp(ctx->tune_path, "off") == 0) {
        ctx->tune_path[0] = '\0';
        snprintf(ctx->tune_note, sizeof ctx->tune_note, "no tune file: off");
        return;
    }
    if (!resolve_path(ctx))
        return;
    char *text = read_file(ctx->tune_path, why, sizeof why);
    if (!text && strcmp(why, "no such file") == 0)
        snprintf(ctx->tune_note, sizeof ctx->tune_note, "no tune file at %s: the table's "
                 "choices (clattn-tune writes one)", ctx->tune_path);
    else if (text && parse(ctx, text, &entries, why, sizeof why))
        snprintf(ctx->tune_note, sizeof ctx->tune_note, "tune file %s: %d entr%s in use",
                 ctx->tune_path, entries, entries == 1 ? "y" : "ies");
    else
        snprintf(ctx->tune_note, sizeof ctx->tune_note, "tune file %s ignored: %s",
                 ctx->tune_path, why);
    free(text);
    clattn__clear_error(ctx);
    /* the note quotes the file's lines: a corrupt file's control bytes stay out of it */
    for (char *c = ctx->tune_note; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
            *c = '?';
}

const char *clattn_context_tune_path(const clattn_context *ctx)
{
    return ctx && ctx->tune_path ? ctx->tune_path : "";
}

const char *clattn_context_tune_note(const clattn_context *ctx)
{
    return ctx ? ctx->tune_note : "";
}
