/*
 * sluice C API client suite (libmariadb / MariaDB Connector/C).
 *
 * Exercises protocol commands that high-level drivers rarely use, through the
 * endpoint under test (SLUICE_*), and compares with the same backend reached
 * directly (DIRECT_*) where that is meaningful.
 *
 * Build:  cc -O1 -Wall -o capi tests/clients/capi.c $(mariadb_config --cflags --libs)
 * Run:    SLUICE_HOST=127.0.0.1 SLUICE_PORT=... DIRECT_HOST=127.0.0.1 DIRECT_PORT=... ./capi [CHECK...]
 *
 * Environment (defaults in brackets):
 *   SLUICE_HOST [127.0.0.1] SLUICE_PORT [3306] SLUICE_USER [root] SLUICE_PASSWORD [""] SLUICE_DB [test]
 *   DIRECT_HOST [127.0.0.1] DIRECT_PORT [3306] DIRECT_USER [root] DIRECT_PASSWORD [""]
 *   SLUICE_TLS=1       also run the `tls` check (SLUICE_TLS_CA=path optionally verifies the cert)
 *   CAPI_TIMEOUT [300] overall time limit in seconds
 *
 * Output: one line per check (`ok NAME`, `FAIL NAME: reason`, `skip NAME: why`),
 * then exactly `N passed, M failed`.  Exit status 0 only if M == 0.
 * Optional arguments restrict the run to the named checks.
 */
#define _GNU_SOURCE
#include <mysql.h>
#include <errmsg.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* configuration                                                       */

typedef struct {
    const char *name;
    const char *host;
    unsigned port;
    const char *user;
    const char *pass;
    const char *db;
} endpoint_t;

static endpoint_t EP;  /* endpoint under test (the proxy) */
static endpoint_t DI;  /* the same backend, directly */
static int PID;

static const char *env_nonempty(const char *k, const char *d)
{
    const char *v = getenv(k);
    return (v && *v) ? v : d;
}

static const char *env_any(const char *k, const char *d)
{
    const char *v = getenv(k);
    return v ? v : d;
}

/* ------------------------------------------------------------------ */
/* small utilities                                                     */

static char failbuf[2048];
static int npass, nfail, nskip;

#define FAIL(...) do { snprintf(failbuf, sizeof failbuf, __VA_ARGS__); return 0; } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)
#define SKIP(...) do { snprintf(failbuf, sizeof failbuf, __VA_ARGS__); return -1; } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void msleep(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* rotating printf buffers for SQL text */
static const char *sqlf(const char *fmt, ...)
{
    static char bufs[8][8192];
    static int i;
    char *b = bufs[i++ & 7];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof bufs[0], fmt, ap);
    va_end(ap);
    return b;
}

static uint32_t crc_table[256];
static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}
static uint32_t crc32_buf(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* dynamic string */
typedef struct { char *p; size_t len, cap; } dstr;
static void ds_addn(dstr *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 1024;
        while (nc < d->len + n + 1) nc *= 2;
        d->p = realloc(d->p, nc);
        d->cap = nc;
    }
    memcpy(d->p + d->len, s, n);
    d->len += n;
    d->p[d->len] = 0;
}
static void ds_addf(dstr *d, const char *fmt, ...)
{
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof tmp - 1) n = sizeof tmp - 1;
    ds_addn(d, tmp, n);
}
static void ds_free(dstr *d) { free(d->p); d->p = NULL; d->len = d->cap = 0; }
static const char *ds_str(dstr *d) { return d->p ? d->p : ""; }

/* first differing line of two multi-line strings, for messages */
static void first_diff(const char *a, const char *b, char *out, size_t outlen)
{
    int line = 1;
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, outlen, "line %d: endpoint '%.*s' vs direct '%.*s'", line,
                     (int)(la > 300 ? 300 : la), a, (int)(lb > 300 ? 300 : lb), b);
            return;
        }
        a += la + (ea ? 1 : 0);
        b += lb + (eb ? 1 : 0);
        line++;
    }
    snprintf(out, outlen, "(no difference)");
}

/* ------------------------------------------------------------------ */
/* connections and cleanup                                             */

#define OPT_LOCAL_INFILE 1
#define OPT_TLS 2
#define OPT_NODB 4

#define MAXCONN 64
static MYSQL *conns[MAXCONN];
static int nconns;

static MYSQL *xconnect(const endpoint_t *e, unsigned long flags, int opts)
{
    MYSQL *m = mysql_init(NULL);
    if (!m) { snprintf(failbuf, sizeof failbuf, "mysql_init failed"); return NULL; }
    unsigned int ct = 10, rt = 60, wt = 60, proto = MYSQL_PROTOCOL_TCP;
    unsigned long map = 64UL * 1024 * 1024;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    mysql_options(m, MYSQL_OPT_PROTOCOL, &proto);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(m, MYSQL_OPT_MAX_ALLOWED_PACKET, &map);
    unsigned int li = (opts & OPT_LOCAL_INFILE) ? 1 : 0;
    mysql_options(m, MYSQL_OPT_LOCAL_INFILE, &li);
    if (opts & OPT_TLS) {
        my_bool on = 1;
        const char *ca = getenv("SLUICE_TLS_CA");
        mysql_ssl_set(m, NULL, NULL, (ca && *ca) ? ca : NULL, NULL, NULL);
        mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &on);
        my_bool verify = (ca && *ca) ? 1 : 0;
        mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
    }
    if (!mysql_real_connect(m, e->host, e->user, e->pass, (opts & OPT_NODB) ? NULL : e->db,
                            e->port, NULL, flags)) {
        snprintf(failbuf, sizeof failbuf, "connect to %s %s:%u failed: %u (%s) %s", e->name, e->host,
                 e->port, mysql_errno(m), mysql_sqlstate(m), mysql_error(m));
        mysql_close(m);
        return NULL;
    }
    if (nconns < MAXCONN) conns[nconns++] = m;
    return m;
}
#define CONN(var, e, flags, opts) do { if (!((var) = xconnect((e), (flags), (opts)))) return 0; } while (0)

#define MAXCLEAN 64
static char *cleanups[MAXCLEAN];
static int ncleanups;
static char *cleanfiles[MAXCLEAN];
static int ncleanfiles;

static void add_cleanup(const char *sql)
{
    if (ncleanups < MAXCLEAN) cleanups[ncleanups++] = strdup(sql);
}
static void add_cleanup_file(const char *path)
{
    if (ncleanfiles < MAXCLEAN) cleanfiles[ncleanfiles++] = strdup(path);
}

static void run_cleanup(void)
{
    for (int i = nconns - 1; i >= 0; i--) mysql_close(conns[i]);
    nconns = 0;
    if (ncleanups) {
        char saved[sizeof failbuf];
        memcpy(saved, failbuf, sizeof saved);
        MYSQL *d = xconnect(&DI, 0, OPT_NODB);
        if (d) {
            for (int i = ncleanups - 1; i >= 0; i--)
                if (mysql_query(d, cleanups[i]))
                    fprintf(stderr, "# cleanup '%s' failed: %s\n", cleanups[i], mysql_error(d));
            mysql_close(d);
            nconns = 0;
        } else {
            fprintf(stderr, "# cleanup: %s\n", failbuf);
        }
        memcpy(failbuf, saved, sizeof saved);
    }
    for (int i = 0; i < ncleanups; i++) free(cleanups[i]);
    ncleanups = 0;
    for (int i = 0; i < ncleanfiles; i++) { unlink(cleanfiles[i]); free(cleanfiles[i]); }
    ncleanfiles = 0;
}

/* ------------------------------------------------------------------ */
/* query helpers                                                       */

#define Q(m, sql) do { const char *q_ = (sql); \
    if (mysql_query((m), q_)) FAIL("query \"%.150s\" failed: %u (%s) %s", q_, mysql_errno(m), mysql_sqlstate(m), mysql_error(m)); \
} while (0)

static void drain(MYSQL *m)
{
    while (mysql_more_results(m) && mysql_next_result(m) == 0) {
        MYSQL_RES *r = mysql_store_result(m);
        if (r) mysql_free_result(r);
    }
}

/* run a query, return first column of first row as text ("<NULL>" for NULL) */
static int qval(MYSQL *m, const char *sql, char *out, size_t outlen)
{
    if (mysql_query(m, sql)) {
        snprintf(failbuf, sizeof failbuf, "query \"%.150s\" failed: %u (%s) %s", sql, mysql_errno(m),
                 mysql_sqlstate(m), mysql_error(m));
        return -1;
    }
    MYSQL_RES *r = mysql_store_result(m);
    if (!r) {
        snprintf(failbuf, sizeof failbuf, "query \"%.150s\" returned no result set (%u %s)", sql,
                 mysql_errno(m), mysql_error(m));
        return -1;
    }
    MYSQL_ROW row = mysql_fetch_row(r);
    if (!row) {
        mysql_free_result(r);
        snprintf(failbuf, sizeof failbuf, "query \"%.150s\" returned no rows", sql);
        return -1;
    }
    snprintf(out, outlen, "%s", row[0] ? row[0] : "<NULL>");
    mysql_free_result(r);
    drain(m);
    return 0;
}
#define QV(m, sql, buf) do { if (qval((m), (sql), (buf), sizeof(buf))) return 0; } while (0)
#define QVEQ(m, sql, expect) do { char b_[1024]; const char *s_ = (sql); const char *x_ = (expect); QV(m, s_, b_); \
    CHECK(strcmp(b_, x_) == 0, "%.150s: got '%s', want '%s'", s_, b_, x_); } while (0)

static long long qnum(MYSQL *m, const char *sql)
{
    char b[128];
    if (qval(m, sql, b, sizeof b)) return -1;
    return strtoll(b, NULL, 10);
}

/* Session status counters are the backend connection's: through a pooling proxy a session
   reads them on whichever connection serves it. A temporary table keeps the session on one
   connection (as on a direct one), so counters read before and after a check compare. */
static int pin_session(MYSQL *m)
{
    if (mysql_query(m, "CREATE TEMPORARY TABLE IF NOT EXISTS capi_pin (a INT)")) {
        snprintf(failbuf, sizeof failbuf, "pinning the session failed: %s", mysql_error(m));
        return 0;
    }
    return 1;
}

static long long sess_status(MYSQL *m, const char *var)
{
    char b[128];
    if (mysql_query(m, sqlf("SHOW SESSION STATUS LIKE '%s'", var))) {
        snprintf(failbuf, sizeof failbuf, "SHOW STATUS failed: %s", mysql_error(m));
        return -1;
    }
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
    long long v = -1;
    if (row && row[1]) { snprintf(b, sizeof b, "%s", row[1]); v = strtoll(b, NULL, 10); }
    else snprintf(failbuf, sizeof failbuf, "status variable %s not found", var);
    if (r) mysql_free_result(r);
    return v;
}

/* send a command packet the public API has no function for, and read the
   OK/error reply (libmariadb exposes its command sender in MYSQL.methods) */
static int raw_command(MYSQL *m, enum enum_server_command cmd, const void *arg, size_t len)
{
    return m->methods->db_command(m, cmd, (const char *)arg, len, 0, NULL);
}

typedef struct { unsigned code; char state[8]; char msg[600]; } err_t;
static void get_err(MYSQL *m, err_t *e)
{
    e->code = mysql_errno(m);
    snprintf(e->state, sizeof e->state, "%s", mysql_sqlstate(m));
    snprintf(e->msg, sizeof e->msg, "%s", mysql_error(m));
}
static int same_err(const err_t *a, const err_t *b)
{
    return a->code == b->code && strcmp(a->state, b->state) == 0 && strcmp(a->msg, b->msg) == 0;
}
#define CHECK_SAME_ERR(a, b, what) CHECK(same_err(&(a), &(b)), "%s: endpoint error %u (%s) '%s' vs direct %u (%s) '%s'", \
    what, (a).code, (a).state, (a).msg, (b).code, (b).state, (b).msg)

/* run sql expecting failure with the given code; store error */
static int expect_err(MYSQL *m, const char *sql, unsigned code, err_t *e)
{
    if (mysql_query(m, sql) == 0) {
        MYSQL_RES *r = mysql_store_result(m);
        if (r) mysql_free_result(r);
        drain(m);
        snprintf(failbuf, sizeof failbuf, "query \"%.150s\" unexpectedly succeeded (want error %u)", sql, code);
        return 0;
    }
    get_err(m, e);
    if (code && e->code != code) {
        snprintf(failbuf, sizeof failbuf, "query \"%.150s\": got error %u (%s) '%s', want %u", sql, e->code,
                 e->state, e->msg, code);
        return 0;
    }
    return 1;
}
#define EXPECT_ERR(m, sql, code, e) do { if (!expect_err((m), (sql), (code), (e))) return 0; } while (0)

static void ser_fields(dstr *d, MYSQL_FIELD *f, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        ds_addf(d, "field %s org=%s table=%s org_table=%s db=%s type=%d len=%lu flags=%u dec=%u cs=%u\n",
                f[i].name, f[i].org_name ? f[i].org_name : "", f[i].table ? f[i].table : "",
                f[i].org_table ? f[i].org_table : "", f[i].db ? f[i].db : "", (int)f[i].type, f[i].length,
                f[i].flags, f[i].decimals, f[i].charsetnr);
}

/* run sql, serialize every result (metadata, rows, OK info, errors, warnings) into d */
static void capture(MYSQL *m, const char *sql, dstr *d)
{
    if (mysql_query(m, sql)) {
        ds_addf(d, "ERR %u %s %s\n", mysql_errno(m), mysql_sqlstate(m), mysql_error(m));
        return;
    }
    int status;
    do {
        MYSQL_RES *r = mysql_store_result(m);
        if (r) {
            unsigned n = mysql_num_fields(r);
            ser_fields(d, mysql_fetch_fields(r), n);
            MYSQL_ROW row;
            while ((row = mysql_fetch_row(r))) {
                unsigned long *len = mysql_fetch_lengths(r);
                ds_addf(d, "row");
                for (unsigned i = 0; i < n; i++) {
                    if (!row[i]) ds_addf(d, "\t\\N");
                    else { ds_addn(d, "\t", 1); ds_addn(d, row[i], len[i]); }
                }
                ds_addn(d, "\n", 1);
            }
            ds_addf(d, "rows=%llu warnings=%u\n", (unsigned long long)mysql_num_rows(r), mysql_warning_count(m));
            mysql_free_result(r);
        } else if (mysql_field_count(m) == 0) {
            const char *info = mysql_info(m);
            ds_addf(d, "OK affected=%llu insert_id=%llu warnings=%u info=%s\n",
                    (unsigned long long)mysql_affected_rows(m), (unsigned long long)mysql_insert_id(m),
                    mysql_warning_count(m), info ? info : "");
        } else {
            ds_addf(d, "ERR(store) %u %s %s\n", mysql_errno(m), mysql_sqlstate(m), mysql_error(m));
        }
        status = mysql_next_result(m);
        if (status > 0) ds_addf(d, "ERR %u %s %s\n", mysql_errno(m), mysql_sqlstate(m), mysql_error(m));
    } while (status == 0);
}

/* run sql on endpoint and direct, require identical serialized output */
static int compare_sql(MYSQL *a, MYSQL *b, const char *sql, dstr *out_a)
{
    dstr da = {0}, db = {0};
    capture(a, sql, &da);
    capture(b, sql, &db);
    int same = strcmp(ds_str(&da), ds_str(&db)) == 0;
    if (!same) {
        char diff[1400];
        first_diff(ds_str(&da), ds_str(&db), diff, sizeof diff);
        snprintf(failbuf, sizeof failbuf, "\"%.100s\" differs: %s", sql, diff);
    }
    if (out_a) { ds_addn(out_a, ds_str(&da), da.len); }
    ds_free(&da);
    ds_free(&db);
    return same;
}
#define COMPARE(a, b, sql) do { if (!compare_sql((a), (b), (sql), NULL)) return 0; } while (0)

/* ------------------------------------------------------------------ */
/* checks                                                              */

static int check_connect(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    CHECK(strcmp(mysql_get_server_info(c), mysql_get_server_info(d)) == 0, "server version '%s' vs direct '%s'",
          mysql_get_server_info(c), mysql_get_server_info(d));
    CHECK(mysql_get_server_version(c) == mysql_get_server_version(d), "numeric server version differs");
    CHECK(mysql_get_proto_info(c) == 10, "protocol version %u", mysql_get_proto_info(c));
    unsigned long need = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_STATEMENTS |
                         CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS | CLIENT_PLUGIN_AUTH | CLIENT_TRANSACTIONS |
                         CLIENT_LOCAL_FILES | CLIENT_CONNECT_WITH_DB;
    CHECK((c->server_capabilities & need) == need, "server capabilities 0x%lx lack 0x%lx",
          c->server_capabilities, need & ~c->server_capabilities);
    QVEQ(c, "SELECT DATABASE()", EP.db);
    COMPARE(c, d, "SELECT @@version, @@version_comment, @@character_set_client, @@character_set_connection, "
                  "@@character_set_results, @@collation_connection, @@autocommit, @@sql_mode, @@time_zone");
    COMPARE(c, d, "SELECT 1 AS one, 'two' AS two, NULL AS nothing, 3.5 AS dec_val, X'00FF' AS bin");
    return 1;
}

/* the endpoint advertises what the server advertises (TLS and compression
   depend on how the endpoint is configured, so they are not compared) */
static int check_capabilities(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    unsigned long cc = 0, dc = 0, cx = 0, dx = 0;
    CHECK(mariadb_get_infov(c, MARIADB_CONNECTION_SERVER_CAPABILITIES, &cc) == 0, "get server capabilities failed");
    CHECK(mariadb_get_infov(d, MARIADB_CONNECTION_SERVER_CAPABILITIES, &dc) == 0, "get direct capabilities failed");
    CHECK(mariadb_get_infov(c, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &cx) == 0, "get ext capabilities failed");
    CHECK(mariadb_get_infov(d, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &dx) == 0, "get direct ext capabilities failed");
    unsigned long ignore = CLIENT_SSL | CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION | CLIENT_SSL_VERIFY_SERVER_CERT;
    CHECK((cc & ~ignore) == (dc & ~ignore), "server capabilities 0x%lx, direct 0x%lx (endpoint lacks 0x%lx, adds 0x%lx)",
          cc, dc, dc & ~cc & ~ignore, cc & ~dc & ~ignore);
    /* sluice does not offer metadata caching (1 << 4): a statement runs on whichever pooled
       connection is free, so every execute carries its metadata (docs/pooling.md) */
    unsigned long cache_metadata = 1UL << 4;
    if (EP.port != DI.port) dx &= ~cache_metadata;
    CHECK(cx == dx, "MariaDB extended capabilities 0x%lx, direct 0x%lx", cx, dx);
    return 1;
}

static int check_field_list(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    const char *t = sqlf("capi_fl_%d", PID);
    char tname[64];
    snprintf(tname, sizeof tname, "%s", t);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, tname));
    Q(c, sqlf("CREATE TABLE `%s` (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT 'x', "
              "amount DECIMAL(10,2), created DATETIME(6), data BLOB, note_txt TEXT)", tname));

    MYSQL_RES *r = mysql_list_fields(c, tname, NULL);
    CHECK(r, "mysql_list_fields failed: %u %s", mysql_errno(c), mysql_error(c));
    MYSQL_RES *rd = mysql_list_fields(d, tname, NULL);
    CHECK(rd, "direct mysql_list_fields failed: %s", mysql_error(d));
    unsigned n = mysql_num_fields(r);
    CHECK(n == 6, "field count %u, want 6", n);
    CHECK(mysql_num_fields(rd) == n, "field count differs from direct");
    MYSQL_FIELD *f = mysql_fetch_fields(r), *fd = mysql_fetch_fields(rd);
    static const char *names[] = { "id", "name", "amount", "created", "data", "note_txt" };
    static const enum enum_field_types types[] = { MYSQL_TYPE_LONG, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_NEWDECIMAL,
                                                   MYSQL_TYPE_DATETIME, MYSQL_TYPE_BLOB, MYSQL_TYPE_BLOB };
    for (unsigned i = 0; i < n; i++) {
        CHECK(strcmp(f[i].name, names[i]) == 0, "field %u name '%s', want '%s'", i, f[i].name, names[i]);
        CHECK(f[i].type == types[i], "field %s type %d, want %d", f[i].name, f[i].type, types[i]);
        CHECK(strcmp(f[i].table, tname) == 0, "field %s table '%s'", f[i].name, f[i].table);
    }
    CHECK(f[0].flags & PRI_KEY_FLAG, "id lacks PRI_KEY_FLAG (flags %u)", f[0].flags);
    CHECK(f[0].flags & NOT_NULL_FLAG, "id lacks NOT_NULL_FLAG");
    CHECK(f[2].decimals == 2, "amount decimals %u", f[2].decimals);
    CHECK(f[3].decimals == 6, "created decimals %u", f[3].decimals);
    CHECK(f[1].def && strcmp(f[1].def, "x") == 0, "default of name: '%s', want 'x'", f[1].def ? f[1].def : "(null)");
    dstr a = {0}, b = {0};
    ser_fields(&a, f, n);
    ser_fields(&b, fd, n);
    for (unsigned i = 0; i < n; i++) {
        ds_addf(&a, "def %s\n", f[i].def ? f[i].def : "(null)");
        ds_addf(&b, "def %s\n", fd[i].def ? fd[i].def : "(null)");
    }
    int same = strcmp(ds_str(&a), ds_str(&b)) == 0;
    char diff[1400];
    if (!same) first_diff(ds_str(&a), ds_str(&b), diff, sizeof diff);
    ds_free(&a);
    ds_free(&b);
    mysql_free_result(r);
    mysql_free_result(rd);
    CHECK(same, "field metadata differs from direct: %s", diff);

    /* wildcard */
    r = mysql_list_fields(c, tname, "n%");
    CHECK(r, "mysql_list_fields with wildcard failed: %s", mysql_error(c));
    n = mysql_num_fields(r);
    f = mysql_fetch_fields(r);
    CHECK(n == 2 && strcmp(f[0].name, "name") == 0 && strcmp(f[1].name, "note_txt") == 0,
          "wildcard 'n%%' gave %u fields (first '%s')", n, n ? f[0].name : "");
    mysql_free_result(r);

    /* unknown table: same error as direct */
    const char *missing = sqlf("capi_fl_missing_%d", PID);
    err_t e1, e2;
    r = mysql_list_fields(c, missing, NULL);
    CHECK(!r, "mysql_list_fields on missing table succeeded");
    get_err(c, &e1);
    r = mysql_list_fields(d, missing, NULL);
    CHECK(!r, "direct mysql_list_fields on missing table succeeded");
    get_err(d, &e2);
    CHECK(e1.code == 1146, "missing table error %u '%s', want 1146", e1.code, e1.msg);
    CHECK_SAME_ERR(e1, e2, "list_fields missing table");
    QVEQ(c, "SELECT 'still alive'", "still alive");
    return 1;
}

static void stat_shape(const char *s, char *out, size_t n)
{
    size_t j = 0;
    for (; *s && j + 1 < n; s++) {
        if ((*s >= '0' && *s <= '9') || *s == '.') {
            if (j == 0 || out[j - 1] != '#') out[j++] = '#';
        } else out[j++] = *s;
    }
    out[j] = 0;
}

static int check_statistics(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    const char *s = mysql_stat(c);
    CHECK(s, "mysql_stat failed: %u %s", mysql_errno(c), mysql_error(c));
    char sc[512];
    snprintf(sc, sizeof sc, "%s", s);
    CHECK(strncmp(sc, "Uptime: ", 8) == 0, "mysql_stat returned '%s'", sc);
    CHECK(strstr(sc, "Threads: ") && strstr(sc, "Questions: ") && strstr(sc, "Queries per second avg: "),
          "mysql_stat lacks fields: '%s'", sc);
    const char *sd = mysql_stat(d);
    CHECK(sd, "direct mysql_stat failed");
    char shape_c[512], shape_d[512];
    stat_shape(sc, shape_c, sizeof shape_c);
    stat_shape(sd, shape_d, sizeof shape_d);
    CHECK(strcmp(shape_c, shape_d) == 0, "mysql_stat shape '%s' vs direct '%s'", shape_c, shape_d);
    QVEQ(c, "SELECT 42", "42");
    return 1;
}

static int check_set_option(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0); /* no CLIENT_MULTI_STATEMENTS */
    CONN(d, &DI, 0, 0);
    const char *multi = "SELECT 1 AS a; SELECT 2 AS b";
    err_t e0, e1, ed;
    EXPECT_ERR(c, multi, 1064, &e0);
    EXPECT_ERR(d, multi, 1064, &ed);
    CHECK_SAME_ERR(e0, ed, "multi-statement without option");

    CHECK(mysql_set_server_option(c, MYSQL_OPTION_MULTI_STATEMENTS_ON) == 0, "set option ON failed: %u %s",
          mysql_errno(c), mysql_error(c));
    Q(c, multi);
    MYSQL_RES *r = mysql_store_result(c);
    CHECK(r, "no first result");
    MYSQL_ROW row = mysql_fetch_row(r);
    CHECK(row && strcmp(row[0], "1") == 0 && strcmp(mysql_fetch_field_direct(r, 0)->name, "a") == 0,
          "first result wrong");
    mysql_free_result(r);
    CHECK(mysql_more_results(c), "no more results flag after first statement");
    CHECK(mysql_next_result(c) == 0, "mysql_next_result failed: %s", mysql_error(c));
    r = mysql_store_result(c);
    CHECK(r, "no second result");
    row = mysql_fetch_row(r);
    CHECK(row && strcmp(row[0], "2") == 0, "second result wrong");
    mysql_free_result(r);
    CHECK(mysql_next_result(c) == -1, "expected end of results");

    CHECK(mysql_set_server_option(c, MYSQL_OPTION_MULTI_STATEMENTS_OFF) == 0, "set option OFF failed: %s",
          mysql_error(c));
    EXPECT_ERR(c, multi, 1064, &e1);
    CHECK_SAME_ERR(e1, ed, "multi-statement after option OFF");
    QVEQ(c, "SELECT 'single'", "single");

    /* switching it on for the direct connection too gives the same results */
    CHECK(mysql_set_server_option(c, MYSQL_OPTION_MULTI_STATEMENTS_ON) == 0, "set option ON (2) failed");
    CHECK(mysql_set_server_option(d, MYSQL_OPTION_MULTI_STATEMENTS_ON) == 0, "direct set option ON failed");
    COMPARE(c, d, "SELECT 'x' AS x; DO 1; SELECT 'y' AS y, 2 AS z");
    return 1;
}

static int check_ping(void)
{
    MYSQL *c;
    CONN(c, &EP, 0, 0);
    CHECK(mysql_ping(c) == 0, "ping failed: %u %s", mysql_errno(c), mysql_error(c));
    CHECK(mysql_ping(c) == 0, "second ping failed: %u %s", mysql_errno(c), mysql_error(c));
    QVEQ(c, "SELECT 'after ping'", "after ping");
    CHECK(mysql_ping(c) == 0, "third ping failed");
    return 1;
}

static int check_init_db(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char dbname[64], missing[64];
    snprintf(dbname, sizeof dbname, "capi_db_%d", PID);
    snprintf(missing, sizeof missing, "capi_nodb_%d", PID);
    add_cleanup(sqlf("DROP DATABASE IF EXISTS `%s`", dbname));
    Q(d, sqlf("CREATE DATABASE `%s`", dbname));
    CHECK(mysql_select_db(c, dbname) == 0, "select_db(%s) failed: %u %s", dbname, mysql_errno(c), mysql_error(c));
    QVEQ(c, "SELECT DATABASE()", dbname);
    Q(c, "CREATE TABLE in_new_db (a INT)");
    QVEQ(d, sqlf("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA='%s' AND TABLE_NAME='in_new_db'",
                 dbname), "1");

    err_t e1, e2;
    CHECK(mysql_select_db(c, missing) != 0, "select_db of a missing database succeeded");
    get_err(c, &e1);
    CHECK(e1.code == 1049, "unknown database gave %u '%s', want 1049", e1.code, e1.msg);
    CHECK(strcmp(e1.state, "42000") == 0, "sqlstate %s, want 42000", e1.state);
    CHECK(strstr(e1.msg, missing) != NULL, "message '%s' does not name the database", e1.msg);
    CHECK(mysql_select_db(d, missing) != 0, "direct select_db of a missing database succeeded");
    get_err(d, &e2);
    CHECK_SAME_ERR(e1, e2, "unknown database");
    QVEQ(c, "SELECT DATABASE()", dbname);
    CHECK(mysql_select_db(c, EP.db) == 0, "select_db back failed: %s", mysql_error(c));
    QVEQ(c, "SELECT DATABASE()", EP.db);
    return 1;
}

static int check_change_user(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char user[64], pw[64], cur[128];
    snprintf(user, sizeof user, "capi_cu_%d", PID);
    snprintf(pw, sizeof pw, "Pw-%d-secret", PID);
    snprintf(cur, sizeof cur, "%s@%%", user);
    add_cleanup(sqlf("DROP USER IF EXISTS '%s'@'%%'", user));
    Q(d, sqlf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, pw));
    Q(d, sqlf("GRANT SELECT ON `%s`.* TO '%s'@'%%'", EP.db, user));

    Q(c, "SET @cu_var = 42");
    Q(c, "SET SESSION sql_mode = 'ANSI_QUOTES'");
    QVEQ(c, "SELECT @cu_var", "42");
    unsigned long tid_before = mysql_thread_id(c);
    CHECK(mysql_change_user(c, user, pw, EP.db) == 0, "change_user to %s failed: %u %s", user, mysql_errno(c),
          mysql_error(c));
    QVEQ(c, "SELECT CURRENT_USER()", cur);
    char u[256];
    QV(c, "SELECT USER()", u);
    CHECK(strncmp(u, user, strlen(user)) == 0 && u[strlen(user)] == '@', "USER() is '%s'", u);
    QVEQ(c, "SELECT @cu_var IS NULL", "1");
    QVEQ(c, "SELECT DATABASE()", EP.db);
    QVEQ(c, "SELECT @@session.sql_mode = @@global.sql_mode", "1");
    CHECK(mysql_thread_id(c) == tid_before, "thread id changed by change_user");
    /* the new user's privileges are in effect */
    err_t e1, e2;
    EXPECT_ERR(c, sqlf("CREATE TABLE capi_cu_denied_%d (a INT)", PID), 1142, &e1);

    /* back to the original user */
    CHECK(mysql_change_user(c, EP.user, EP.pass, EP.db) == 0, "change_user back failed: %u %s", mysql_errno(c),
          mysql_error(c));
    QV(c, "SELECT CURRENT_USER()", u);
    CHECK(strncmp(u, EP.user, strlen(EP.user)) == 0 && u[strlen(EP.user)] == '@', "CURRENT_USER() is '%s'", u);

    /* wrong password: 1045, same as direct */
    CHECK(mysql_change_user(c, user, "definitely-wrong", EP.db) != 0, "change_user with wrong password succeeded");
    get_err(c, &e1);
    CHECK(e1.code == 1045, "wrong password gave %u '%s', want 1045", e1.code, e1.msg);
    CHECK(strcmp(e1.state, "28000") == 0, "sqlstate %s, want 28000", e1.state);
    CHECK(mysql_change_user(d, user, "definitely-wrong", EP.db) != 0, "direct change_user with wrong pw succeeded");
    get_err(d, &e2);
    CHECK_SAME_ERR(e1, e2, "change_user wrong password");
    /* MariaDB keeps the connection open, still authenticated as the previous user */
    COMPARE(c, d, "SELECT CURRENT_USER(), DATABASE(), @@session.sql_mode = @@global.sql_mode");
    QV(c, "SELECT CURRENT_USER()", u);
    CHECK(strncmp(u, EP.user, strlen(EP.user)) == 0 && u[strlen(EP.user)] == '@',
          "after failed change_user CURRENT_USER() is '%s'", u);

    /* a fresh connection as the new user works, with the password */
    endpoint_t eu = EP;
    eu.user = user;
    eu.pass = pw;
    MYSQL *cu;
    CONN(cu, &eu, 0, 0);
    QVEQ(cu, "SELECT CURRENT_USER()", cur);
    return 1;
}

static int check_reset_connection(void)
{
    MYSQL *c;
    CONN(c, &EP, 0, 0);
    char tmp[64], id1[64], id2[64];
    snprintf(tmp, sizeof tmp, "capi_rc_tmp_%d", PID);
    QV(c, "SELECT CONNECTION_ID()", id1);
    unsigned long tid = mysql_thread_id(c);
    Q(c, "SET @rc_var = 7");
    Q(c, sqlf("CREATE TEMPORARY TABLE `%s` (a INT)", tmp));
    Q(c, sqlf("INSERT INTO `%s` VALUES (1),(2)", tmp));
    Q(c, "SET SESSION sql_mode = 'ANSI_QUOTES'");
    QVEQ(c, sqlf("SELECT COUNT(*) FROM `%s`", tmp), "2");
    CHECK(mysql_reset_connection(c) == 0, "mysql_reset_connection failed: %u %s", mysql_errno(c), mysql_error(c));
    QVEQ(c, "SELECT @rc_var IS NULL", "1");
    err_t e;
    EXPECT_ERR(c, sqlf("SELECT COUNT(*) FROM `%s`", tmp), 1146, &e);
    QVEQ(c, "SELECT @@session.sql_mode = @@global.sql_mode", "1");
    QVEQ(c, "SELECT DATABASE()", EP.db);
    QV(c, "SELECT CONNECTION_ID()", id2);
    CHECK(strcmp(id1, id2) == 0, "CONNECTION_ID changed from %s to %s", id1, id2);
    CHECK(mysql_thread_id(c) == tid, "mysql_thread_id changed");
    /* the temporary table name is free again */
    Q(c, sqlf("CREATE TEMPORARY TABLE `%s` (b INT)", tmp));
    Q(c, sqlf("DROP TEMPORARY TABLE `%s`", tmp));
    return 1;
}

/* --- KILL --- */

typedef struct {
    MYSQL *m;
    const char *sql;
    int rc;
    err_t e;
    char val[64];
    double elapsed;
} sleeper_t;

static void *sleeper_main(void *arg)
{
    sleeper_t *s = arg;
    double t0 = now_s();
    s->rc = mysql_query(s->m, s->sql);
    if (s->rc) {
        get_err(s->m, &s->e);
    } else {
        /* the server sends the column metadata before evaluating SLEEP(), so an
           interruption arrives as an error packet in place of the row: it shows up
           in mysql_store_result, not in mysql_query */
        MYSQL_RES *r = mysql_store_result(s->m);
        MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
        snprintf(s->val, sizeof s->val, "%s", row ? (row[0] ? row[0] : "<NULL>") : "<no row>");
        if (!r && mysql_errno(s->m)) { get_err(s->m, &s->e); s->rc = -2; }
        if (r) mysql_free_result(r);
    }
    s->elapsed = now_s() - t0;
    return NULL;
}

static int wait_processlist(MYSQL *d, const char *cond, int want_present, int timeout_ms)
{
    char b[64];
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        if (qval(d, sqlf("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE %s", cond), b, sizeof b))
            return 0;
        if ((atoi(b) > 0) == want_present) return 1;
        msleep(50);
    }
    return 0;
}

static int kill_scenario(int use_connection_id)
{
    MYSQL *a, *b, *d;
    CONN(a, &EP, 0, 0);
    CONN(b, &EP, 0, 0);
    CONN(d, &DI, 0, OPT_NODB);
    unsigned long tid = mysql_thread_id(a);
    char cid_s[64];
    QV(a, "SELECT CONNECTION_ID()", cid_s);
    unsigned long cid = strtoul(cid_s, NULL, 10);
    CHECK(tid == cid, "mysql_thread_id %lu != CONNECTION_ID() %lu", tid, cid);
    unsigned long id = use_connection_id ? cid : tid;

    /* KILL QUERY during SLEEP(10): MariaDB aborts the statement with 1317 */
    char sql[128], cond[256];
    snprintf(sql, sizeof sql, "SELECT SLEEP(10) AS s /* capi_kill_%d_%d */", PID, use_connection_id);
    snprintf(cond, sizeof cond, "INFO LIKE 'SELECT SLEEP(10)%%capi_kill_%d_%d%%'", PID, use_connection_id);
    sleeper_t s = { .m = a, .sql = sql };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, sleeper_main, &s) == 0, "pthread_create failed");
    int seen = wait_processlist(d, cond, 1, 5000);
    if (!seen) {
        pthread_join(th, NULL);
        FAIL("SLEEP query never appeared in the backend processlist");
    }
    double tk = now_s();
    int krc = mysql_query(b, sqlf("KILL QUERY %lu", id));
    err_t ke;
    if (krc) get_err(b, &ke);
    pthread_join(th, NULL); /* bounded: SLEEP(10) and a 60 s read timeout */
    double waited = now_s() - tk;
    CHECK(krc == 0, "KILL QUERY %lu failed: %u %s", id, ke.code, ke.msg);
    CHECK(s.rc != 0, "SLEEP finished without error (value %s) after %.1fs; MariaDB gives error 1317", s.val,
          s.elapsed);
    CHECK(s.e.code == 1317, "killed SLEEP gave error %u (%s) '%s', want 1317", s.e.code, s.e.state, s.e.msg);
    CHECK(strcmp(s.e.state, "70100") == 0, "killed SLEEP sqlstate %s, want 70100", s.e.state);
    CHECK(strcmp(s.e.msg, "Query execution was interrupted") == 0, "killed SLEEP message '%s'", s.e.msg);
    CHECK(waited < 5.0, "SLEEP ended %.1fs after KILL QUERY", waited);
    /* MariaDB has already sent the column metadata: the error replaces the row */
    CHECK(s.rc == -2, "the 1317 error came with the query response itself, not after the result set metadata");
    /* the connection survives KILL QUERY */
    QVEQ(a, "SELECT 'survived'", "survived");
    QVEQ(a, "SELECT CONNECTION_ID()", cid_s);

    /* unknown thread id: same error as direct */
    err_t e1, e2;
    EXPECT_ERR(b, "KILL 4000000000", 1094, &e1);
    EXPECT_ERR(d, "KILL 4000000000", 1094, &e2);
    CHECK_SAME_ERR(e1, e2, "KILL unknown id");

    /* kill the whole connection: with the thread id through a raw COM_PROCESS_KILL
       (libmariadb's mysql_kill() sends a "KILL n" query instead), with the
       CONNECTION_ID() value through mysql_kill() */
    if (use_connection_id) {
        CHECK(mysql_kill(b, id) == 0, "mysql_kill(%lu) failed: %u %s", id, mysql_errno(b), mysql_error(b));
    } else {
        unsigned char idb[4] = { id & 0xff, (id >> 8) & 0xff, (id >> 16) & 0xff, (id >> 24) & 0xff };
        CHECK(raw_command(b, COM_PROCESS_KILL, idb, 4) == 0, "COM_PROCESS_KILL %lu failed: %u %s", id, mysql_errno(b),
              mysql_error(b));
        /* unknown id through COM_PROCESS_KILL: same error as direct */
        unsigned char bad[4] = { 0xff, 0xff, 0xff, 0x7f };
        CHECK(raw_command(b, COM_PROCESS_KILL, bad, 4) != 0, "COM_PROCESS_KILL of an unknown id succeeded");
        get_err(b, &e1);
        CHECK(raw_command(d, COM_PROCESS_KILL, bad, 4) != 0, "direct COM_PROCESS_KILL of an unknown id succeeded");
        get_err(d, &e2);
        CHECK(e1.code == 1094, "COM_PROCESS_KILL unknown id gave %u '%s'", e1.code, e1.msg);
        CHECK_SAME_ERR(e1, e2, "COM_PROCESS_KILL unknown id");
    }
    /* Directly, the killed thread leaves the processlist. Through a proxy the id is the proxy's
       own (a pooled backend thread may carry the same number): the check is the client side. */
    if (EP.port == DI.port && strcmp(EP.host, DI.host) == 0)
        CHECK(wait_processlist(d, sqlf("ID = %lu", cid), 0, 5000), "killed connection %lu still in processlist", cid);
    int rc = mysql_query(a, "SELECT 'should fail'");
    err_t ae;
    get_err(a, &ae);
    if (rc == 0) {
        MYSQL_RES *r = mysql_store_result(a);
        if (r) mysql_free_result(r);
        FAIL("query on killed connection succeeded");
    }
    CHECK(ae.code == CR_SERVER_GONE_ERROR || ae.code == CR_SERVER_LOST, "killed connection gave %u '%s', want 2006/2013",
          ae.code, ae.msg);
    CHECK(mysql_ping(a) != 0, "ping on killed connection succeeded");
    QVEQ(b, "SELECT 'killer alive'", "killer alive");
    return 1;
}
static int check_kill_thread_id(void) { return kill_scenario(0); }
static int check_kill_connection_id(void) { return kill_scenario(1); }

/* COM_PROCESS_INFO through mysql_list_processes */
static int check_process_info(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    MYSQL_RES *r = mysql_list_processes(c);
    CHECK(r, "mysql_list_processes failed: %u %s", mysql_errno(c), mysql_error(c));
    MYSQL_RES *rd = mysql_list_processes(d);
    CHECK(rd, "direct mysql_list_processes failed: %s", mysql_error(d));
    static const char *names[] = { "Id", "User", "Host", "db", "Command", "Time", "State", "Info", "Progress" };
    unsigned n = mysql_num_fields(r);
    int ok_names = n == 9 && mysql_num_fields(rd) == 9;
    for (unsigned i = 0; ok_names && i < n; i++)
        ok_names = strcmp(mysql_fetch_field_direct(r, i)->name, names[i]) == 0 &&
                   strcmp(mysql_fetch_field_direct(rd, i)->name, names[i]) == 0;
    /* Directly, the list shows this connection's own id. Through a proxy the list is the
       backend's, with its thread ids (sluice's session ids are its own, see README): there the
       check is that this session's backend connection is listed running the request. */
    char me[32];
    snprintf(me, sizeof me, "%lu", mysql_thread_id(c));
    int same_endpoint = EP.port == DI.port && strcmp(EP.host, DI.host) == 0;
    int found = 0;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(r)))
        if (row[4] && strcmp(row[4], "Processlist") == 0 && row[1] && strcmp(row[1], EP.user) == 0 &&
            (!same_endpoint || (row[0] && strcmp(row[0], me) == 0)))
            found = 1;
    mysql_free_result(r);
    mysql_free_result(rd);
    CHECK(ok_names, "process list has %u columns or unexpected names", n);
    CHECK(found, "own thread %s not listed with Command 'Processlist'", me);
    QVEQ(c, "SELECT 'after process info'", "after process info");
    return 1;
}

/* command bytes the server does not accept: same error as direct, connection usable */
static int check_unknown_command(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    static const int cmds[] = { 0x63, COM_SLEEP, COM_TIME, 0xf0 };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        err_t e1, e2;
        CHECK(raw_command(c, cmds[i], "", 0) != 0, "command 0x%02x succeeded", cmds[i]);
        get_err(c, &e1);
        CHECK(raw_command(d, cmds[i], "", 0) != 0, "direct command 0x%02x succeeded", cmds[i]);
        get_err(d, &e2);
        CHECK(e1.code == 1047 && strcmp(e1.state, "08S01") == 0, "command 0x%02x gave %u (%s) '%s', want 1047 (08S01)",
              cmds[i], e1.code, e1.state, e1.msg);
        CHECK_SAME_ERR(e1, e2, "unknown command");
        QVEQ(c, "SELECT 'still usable'", "still usable");
    }
    return 1;
}

/* --- prepared statements --- */

#define STMT_OK(st, call) do { if (call) FAIL("%s failed: %u (%s) %s", #call, mysql_stmt_errno(st), mysql_stmt_sqlstate(st), mysql_stmt_error(st)); } while (0)

static MYSQL_STMT *prep(MYSQL *m, const char *sql)
{
    MYSQL_STMT *st = mysql_stmt_init(m);
    if (!st) { snprintf(failbuf, sizeof failbuf, "mysql_stmt_init failed"); return NULL; }
    if (mysql_stmt_prepare(st, sql, strlen(sql))) {
        snprintf(failbuf, sizeof failbuf, "prepare \"%.150s\" failed: %u (%s) %s", sql, mysql_stmt_errno(st),
                 mysql_stmt_sqlstate(st), mysql_stmt_error(st));
        mysql_stmt_close(st);
        return NULL;
    }
    return st;
}
#define PREP(var, m, sql) do { if (!((var) = prep((m), (sql)))) return 0; } while (0)

static const char *UNI = "h\xc3\xa9llo w\xc3\xb6rld \xf0\x9f\x9a\x80 \xe6\x97\xa5\xe6\x9c\xac";

/* Two sessions run the same statement text with different parameter types, binding once and
   executing many times: libmariadb sends the types on the first execute only. Through a pool
   both run on the same server statement, so the proxy must send each session's own types
   where the statement last ran with the other's. */
static int check_stmt_shared_types(void)
{
    MYSQL *a, *b;
    CONN(a, &EP, 0, 0);
    CONN(b, &EP, 0, 0);
    MYSQL_STMT *sa, *sb;
    PREP(sa, a, "SELECT ? AS v");
    PREP(sb, b, "SELECT ? AS v");
    long long num = 0;
    char str[32];
    unsigned long str_len = 0;
    MYSQL_BIND pa, pb;
    memset(&pa, 0, sizeof pa);
    memset(&pb, 0, sizeof pb);
    pa.buffer_type = MYSQL_TYPE_LONGLONG; pa.buffer = &num;
    pb.buffer_type = MYSQL_TYPE_STRING; pb.buffer = str; pb.length = &str_len;
    STMT_OK(sa, mysql_stmt_bind_param(sa, &pa));
    STMT_OK(sb, mysql_stmt_bind_param(sb, &pb));
    for (int i = 0; i < 20; i++) {
        num = 1000000007LL * (i + 1);
        snprintf(str, sizeof str, "text-%d", i);
        str_len = strlen(str);
        MYSQL_STMT *order[2] = { i % 2 ? sb : sa, i % 2 ? sa : sb };
        for (int k = 0; k < 2; k++) {
            MYSQL_STMT *st = order[k];
            STMT_OK(st, mysql_stmt_execute(st));
            char got[64];
            unsigned long got_len = 0;
            MYSQL_BIND r;
            memset(&r, 0, sizeof r);
            r.buffer_type = MYSQL_TYPE_STRING; r.buffer = got; r.buffer_length = sizeof got - 1; r.length = &got_len;
            STMT_OK(st, mysql_stmt_bind_result(st, &r));
            MYSQL_RES *meta = mysql_stmt_result_metadata(st);
            CHECK(meta != NULL, "no result metadata");
            enum enum_field_types type = mysql_fetch_field_direct(meta, 0)->type;
            mysql_free_result(meta);
            int rc = mysql_stmt_fetch(st);
            CHECK(rc == 0, "round %d: fetch returned %d: %s", i, rc, mysql_stmt_error(st));
            got[got_len] = 0;
            char want[64];
            if (st == sa) snprintf(want, sizeof want, "%lld", num); else snprintf(want, sizeof want, "%s", str);
            CHECK(strcmp(got, want) == 0, "round %d: session %c got '%s', want '%s'", i, st == sa ? 'a' : 'b', got, want);
            CHECK((st == sa) == (type == MYSQL_TYPE_LONGLONG), "round %d: session %c got column type %d", i,
                  st == sa ? 'a' : 'b', type);
            CHECK(mysql_stmt_fetch(st) == MYSQL_NO_DATA, "round %d: more than one row", i);
        }
    }
    STMT_OK(sa, mysql_stmt_close(sa));
    STMT_OK(sb, mysql_stmt_close(sb));
    return 1;
}

static int check_stmt_types(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_types_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, c_int INT, c_big BIGINT, c_dbl DOUBLE, c_dec DECIMAL(20,6), "
              "c_vc VARCHAR(100) CHARACTER SET utf8mb4, c_blob BLOB, c_date DATE, c_dt DATETIME(6), c_time TIME, "
              "c_null INT) DEFAULT CHARSET=utf8mb4", t));

    MYSQL_STMT *ins;
    PREP(ins, c, sqlf("INSERT INTO `%s` VALUES (?,?,?,?,?,?,?,?,?,?,?)", t));
    CHECK(mysql_stmt_param_count(ins) == 11, "INSERT param count %lu", mysql_stmt_param_count(ins));
    CHECK(mysql_stmt_field_count(ins) == 0, "INSERT field count %u", mysql_stmt_field_count(ins));
    CHECK(mysql_stmt_result_metadata(ins) == NULL, "INSERT has result metadata");

    int id = 1;
    int c_int = -123456789;
    long long c_big = 9007199254740993LL;
    double c_dbl = 3.141592653589793;
    const char *c_dec = "-12345678901234.123456";
    unsigned char blob[256];
    for (int i = 0; i < 256; i++) blob[i] = (unsigned char)i;
    MYSQL_TIME dt_date = {0}, dt_dt = {0}, dt_time = {0};
    dt_date.year = 2024; dt_date.month = 2; dt_date.day = 29; dt_date.time_type = MYSQL_TIMESTAMP_DATE;
    dt_dt.year = 2023; dt_dt.month = 12; dt_dt.day = 31; dt_dt.hour = 23; dt_dt.minute = 59; dt_dt.second = 59;
    dt_dt.second_part = 123456; dt_dt.time_type = MYSQL_TIMESTAMP_DATETIME;
    dt_time.hour = 100; dt_time.minute = 2; dt_time.second = 3; dt_time.neg = 1; dt_time.time_type = MYSQL_TIMESTAMP_TIME;
    unsigned long dec_len = strlen(c_dec), vc_len = strlen(UNI), blob_len = sizeof blob;
    my_bool nul = 1, notnul = 0;

    MYSQL_BIND p[11];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &id;
    p[1].buffer_type = MYSQL_TYPE_LONG; p[1].buffer = &c_int;
    p[2].buffer_type = MYSQL_TYPE_LONGLONG; p[2].buffer = &c_big;
    p[3].buffer_type = MYSQL_TYPE_DOUBLE; p[3].buffer = &c_dbl;
    p[4].buffer_type = MYSQL_TYPE_NEWDECIMAL; p[4].buffer = (void *)c_dec; p[4].length = &dec_len;
    p[5].buffer_type = MYSQL_TYPE_STRING; p[5].buffer = (void *)UNI; p[5].length = &vc_len;
    p[6].buffer_type = MYSQL_TYPE_BLOB; p[6].buffer = blob; p[6].length = &blob_len;
    p[7].buffer_type = MYSQL_TYPE_DATE; p[7].buffer = &dt_date;
    p[8].buffer_type = MYSQL_TYPE_DATETIME; p[8].buffer = &dt_dt;
    p[9].buffer_type = MYSQL_TYPE_TIME; p[9].buffer = &dt_time;
    p[10].buffer_type = MYSQL_TYPE_NULL;
    for (int i = 1; i < 10; i++) p[i].is_null = &notnul;
    STMT_OK(ins, mysql_stmt_bind_param(ins, p));
    STMT_OK(ins, mysql_stmt_execute(ins));
    CHECK(mysql_stmt_affected_rows(ins) == 1, "affected rows %llu", (unsigned long long)mysql_stmt_affected_rows(ins));
    /* second row: all NULL via is_null */
    id = 2;
    for (int i = 1; i < 10; i++) p[i].is_null = &nul;
    STMT_OK(ins, mysql_stmt_bind_param(ins, p));
    STMT_OK(ins, mysql_stmt_execute(ins));
    /* third row: same statement re-executed with other values */
    id = 3; c_int = 2147483647; c_big = -9223372036854775807LL - 1; c_dbl = -0.5;
    for (int i = 1; i < 10; i++) p[i].is_null = &notnul;
    STMT_OK(ins, mysql_stmt_bind_param(ins, p));
    STMT_OK(ins, mysql_stmt_execute(ins));
    STMT_OK(ins, mysql_stmt_close(ins));

    const char *sel_sql = sqlf("SELECT c_int, c_big, c_dbl, c_dec, c_vc, c_blob, c_date, c_dt, c_time, c_null "
                               "FROM `%s` WHERE id = ?", t);
    MYSQL_STMT *sel, *seld;
    PREP(sel, c, sel_sql);
    PREP(seld, d, sel_sql);
    CHECK(mysql_stmt_param_count(sel) == 1, "SELECT param count %lu", mysql_stmt_param_count(sel));
    CHECK(mysql_stmt_field_count(sel) == 10, "SELECT field count %u", mysql_stmt_field_count(sel));
    MYSQL_RES *meta = mysql_stmt_result_metadata(sel), *metad = mysql_stmt_result_metadata(seld);
    CHECK(meta && metad, "no result metadata");
    CHECK(mysql_num_fields(meta) == 10, "metadata field count %u", mysql_num_fields(meta));
    static const enum enum_field_types want_types[] = {
        MYSQL_TYPE_LONG, MYSQL_TYPE_LONGLONG, MYSQL_TYPE_DOUBLE, MYSQL_TYPE_NEWDECIMAL, MYSQL_TYPE_VAR_STRING,
        MYSQL_TYPE_BLOB, MYSQL_TYPE_DATE, MYSQL_TYPE_DATETIME, MYSQL_TYPE_TIME, MYSQL_TYPE_LONG };
    MYSQL_FIELD *mf = mysql_fetch_fields(meta);
    for (int i = 0; i < 10; i++)
        CHECK(mf[i].type == want_types[i], "column %s type %d, want %d", mf[i].name, mf[i].type, want_types[i]);
    CHECK(strcmp(mf[4].name, "c_vc") == 0 && mf[4].charsetnr == 45, "c_vc meta name=%s charsetnr=%u", mf[4].name,
          mf[4].charsetnr);
    CHECK(mf[5].charsetnr == 63 && (mf[5].flags & BINARY_FLAG), "blob meta charsetnr=%u flags=%u", mf[5].charsetnr,
          mf[5].flags);
    dstr ma = {0}, mb = {0};
    ser_fields(&ma, mf, 10);
    ser_fields(&mb, mysql_fetch_fields(metad), 10);
    int same = strcmp(ds_str(&ma), ds_str(&mb)) == 0;
    char diff[1400];
    if (!same) first_diff(ds_str(&ma), ds_str(&mb), diff, sizeof diff);
    ds_free(&ma);
    ds_free(&mb);
    mysql_free_result(meta);
    mysql_free_result(metad);
    CHECK(same, "prepared result metadata differs from direct: %s", diff);

    int qid;
    MYSQL_BIND qp[1];
    memset(qp, 0, sizeof qp);
    qp[0].buffer_type = MYSQL_TYPE_LONG; qp[0].buffer = &qid;
    STMT_OK(sel, mysql_stmt_bind_param(sel, qp));

    int r_int; long long r_big; double r_dbl; char r_dec[64], r_vc[200]; unsigned char r_blob[300];
    MYSQL_TIME r_date, r_dt, r_time; int r_null;
    unsigned long len[10]; my_bool isnull[10], err[10];
    MYSQL_BIND rb[10];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_LONG; rb[0].buffer = &r_int;
    rb[1].buffer_type = MYSQL_TYPE_LONGLONG; rb[1].buffer = &r_big;
    rb[2].buffer_type = MYSQL_TYPE_DOUBLE; rb[2].buffer = &r_dbl;
    rb[3].buffer_type = MYSQL_TYPE_STRING; rb[3].buffer = r_dec; rb[3].buffer_length = sizeof r_dec;
    rb[4].buffer_type = MYSQL_TYPE_STRING; rb[4].buffer = r_vc; rb[4].buffer_length = sizeof r_vc;
    rb[5].buffer_type = MYSQL_TYPE_BLOB; rb[5].buffer = r_blob; rb[5].buffer_length = sizeof r_blob;
    rb[6].buffer_type = MYSQL_TYPE_DATE; rb[6].buffer = &r_date;
    rb[7].buffer_type = MYSQL_TYPE_DATETIME; rb[7].buffer = &r_dt;
    rb[8].buffer_type = MYSQL_TYPE_TIME; rb[8].buffer = &r_time;
    rb[9].buffer_type = MYSQL_TYPE_LONG; rb[9].buffer = &r_null;
    /* libmariadb does not clear the error flags of fixed-size columns itself */
    memset(len, 0, sizeof len);
    memset(isnull, 0, sizeof isnull);
    memset(err, 0, sizeof err);
    for (int i = 0; i < 10; i++) { rb[i].length = &len[i]; rb[i].is_null = &isnull[i]; rb[i].error = &err[i]; }
    STMT_OK(sel, mysql_stmt_bind_result(sel, rb));

    /* row 1 */
    qid = 1;
    STMT_OK(sel, mysql_stmt_execute(sel));
    STMT_OK(sel, mysql_stmt_store_result(sel));
    CHECK(mysql_stmt_num_rows(sel) == 1, "row count %llu", (unsigned long long)mysql_stmt_num_rows(sel));
    memset(r_dec, 0, sizeof r_dec);
    memset(r_vc, 0, sizeof r_vc);
    int frc = mysql_stmt_fetch(sel);
    for (int i = 0; i < 10; i++) CHECK(!err[i], "row 1 column %d truncated (len %lu)", i, len[i]);
    CHECK(frc == 0, "fetch row 1 returned %d: %s", frc, mysql_stmt_error(sel));
    for (int i = 0; i < 9; i++) CHECK(!isnull[i], "column %d unexpectedly NULL", i);
    CHECK(r_int == -123456789, "INT %d", r_int);
    CHECK(r_big == 9007199254740993LL, "BIGINT %lld", r_big);
    CHECK(r_dbl == 3.141592653589793, "DOUBLE %.17g", r_dbl);
    CHECK(len[3] == strlen(c_dec) && strcmp(r_dec, c_dec) == 0, "DECIMAL '%s'", r_dec);
    CHECK(len[4] == strlen(UNI) && memcmp(r_vc, UNI, len[4]) == 0, "VARCHAR '%.*s' (len %lu)", (int)len[4], r_vc, len[4]);
    CHECK(len[5] == 256 && memcmp(r_blob, blob, 256) == 0, "BLOB len %lu or bytes differ", len[5]);
    CHECK(r_date.year == 2024 && r_date.month == 2 && r_date.day == 29, "DATE %u-%u-%u", r_date.year, r_date.month,
          r_date.day);
    CHECK(r_dt.year == 2023 && r_dt.month == 12 && r_dt.day == 31 && r_dt.hour == 23 && r_dt.minute == 59 &&
          r_dt.second == 59 && r_dt.second_part == 123456, "DATETIME(6) %u-%u-%u %u:%u:%u.%lu", r_dt.year,
          r_dt.month, r_dt.day, r_dt.hour, r_dt.minute, r_dt.second, r_dt.second_part);
    CHECK(r_time.neg == 1 && r_time.day * 24 + r_time.hour == 100 && r_time.minute == 2 && r_time.second == 3,
          "TIME neg=%d day=%u hour=%u min=%u sec=%u", r_time.neg, r_time.day, r_time.hour, r_time.minute,
          r_time.second);
    CHECK(isnull[9], "c_null not NULL");
    CHECK(mysql_stmt_fetch(sel) == MYSQL_NO_DATA, "more than one row");
    STMT_OK(sel, mysql_stmt_free_result(sel));

    /* row 2: all NULL */
    qid = 2;
    STMT_OK(sel, mysql_stmt_execute(sel));
    frc = mysql_stmt_fetch(sel);
    CHECK(frc == 0, "fetch row 2 returned %d: %s", frc, mysql_stmt_error(sel));
    for (int i = 0; i < 10; i++) CHECK(isnull[i], "row 2 column %d not NULL", i);
    CHECK(mysql_stmt_fetch(sel) == MYSQL_NO_DATA, "row 2: more than one row");

    /* row 3: extreme ints, unbuffered fetch */
    qid = 3;
    STMT_OK(sel, mysql_stmt_execute(sel));
    frc = mysql_stmt_fetch(sel);
    CHECK(frc == 0, "fetch row 3 returned %d: %s", frc, mysql_stmt_error(sel));
    CHECK(r_int == 2147483647 && r_big == (-9223372036854775807LL - 1) && r_dbl == -0.5,
          "row 3 values %d %lld %g", r_int, r_big, r_dbl);
    CHECK(mysql_stmt_fetch(sel) == MYSQL_NO_DATA, "row 3: more than one row");
    STMT_OK(sel, mysql_stmt_close(sel));
    mysql_stmt_close(seld);

    /* the same rows via the text protocol, as seen directly */
    const char *text = sqlf("SELECT id, c_int, c_big, c_dbl, c_dec, c_vc, HEX(c_blob), c_date, c_dt, c_time, c_null "
                            "FROM `%s` ORDER BY id", t);
    dstr out = {0};
    if (!compare_sql(c, d, text, &out)) { ds_free(&out); return 0; }
    int has = strstr(ds_str(&out), "\t-100:02:03\t") && strstr(ds_str(&out), "\t2023-12-31 23:59:59.123456\t") &&
              strstr(ds_str(&out), "\t-12345678901234.123456\t");
    ds_free(&out);
    CHECK(has, "text protocol values not as expected");
    return 1;
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 7 + (i >> 8) + seed) & 0xff);
}

static int check_stmt_long_data(void)
{
    MYSQL *c;
    CONN(c, &EP, 0, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_long_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, data LONGBLOB, txt LONGTEXT)", t));
    const size_t N = 3 * 1024 * 1024;
    unsigned char *buf = malloc(N), *back = malloc(N + 16);
    fill_pattern(buf, N, 3);
    uint32_t crc = crc32_buf(buf, N);

    MYSQL_STMT *st;
    PREP(st, c, sqlf("INSERT INTO `%s` VALUES (?, ?, ?)", t));
    int id = 1;
    MYSQL_BIND p[3];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &id;
    p[1].buffer_type = MYSQL_TYPE_LONG_BLOB;
    p[2].buffer_type = MYSQL_TYPE_STRING;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    size_t chunk = 100000; /* deliberately not a power of two */
    for (size_t off = 0; off < N; off += chunk) {
        size_t n = N - off < chunk ? N - off : chunk;
        if (mysql_stmt_send_long_data(st, 1, (const char *)buf + off, n)) {
            FAIL("send_long_data at %zu failed: %u %s", off, mysql_stmt_errno(st), mysql_stmt_error(st));
        }
    }
    STMT_OK(st, mysql_stmt_send_long_data(st, 2, "text part one, ", 15));
    STMT_OK(st, mysql_stmt_send_long_data(st, 2, "part two", 8));
    STMT_OK(st, mysql_stmt_execute(st));
    CHECK(mysql_stmt_affected_rows(st) == 1, "affected rows %llu", (unsigned long long)mysql_stmt_affected_rows(st));
    STMT_OK(st, mysql_stmt_close(st));

    QVEQ(c, sqlf("SELECT LENGTH(data) FROM `%s` WHERE id = 1", t), "3145728");
    QVEQ(c, sqlf("SELECT CRC32(data) FROM `%s` WHERE id = 1", t), sqlf("%u", crc));
    QVEQ(c, sqlf("SELECT txt FROM `%s` WHERE id = 1", t), "text part one, part two");

    /* read it back through the binary protocol */
    MYSQL_STMT *sel;
    PREP(sel, c, sqlf("SELECT data FROM `%s` WHERE id = 1", t));
    STMT_OK(sel, mysql_stmt_execute(sel));
    unsigned long blen = 0;
    my_bool bnull = 0;
    MYSQL_BIND rb[1];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_LONG_BLOB; rb[0].buffer = back; rb[0].buffer_length = N + 16;
    rb[0].length = &blen; rb[0].is_null = &bnull;
    STMT_OK(sel, mysql_stmt_bind_result(sel, rb));
    int frc = mysql_stmt_fetch(sel);
    CHECK(frc == 0, "fetch of 3 MB blob returned %d: %s", frc, mysql_stmt_error(sel));
    CHECK(blen == N && memcmp(back, buf, N) == 0, "3 MB blob read back differs (len %lu)", blen);
    CHECK(mysql_stmt_fetch(sel) == MYSQL_NO_DATA, "extra row");
    mysql_stmt_close(sel);
    free(buf);
    free(back);
    return 1;
}

static int check_stmt_reset(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_reset_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, data TEXT)", t));

    if (!pin_session(c)) return 0;
    long long before = sess_status(c, "Com_stmt_reset");
    if (before < 0) return 0;
    MYSQL_STMT *st;
    PREP(st, c, sqlf("INSERT INTO `%s` VALUES (?, ?)", t));
    int id = 1;
    MYSQL_BIND p[2];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &id;
    p[1].buffer_type = MYSQL_TYPE_STRING;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    STMT_OK(st, mysql_stmt_send_long_data(st, 1, "garbage-", 8));
    /* COM_STMT_RESET must discard the long data accumulated on the server */
    STMT_OK(st, mysql_stmt_reset(st));
    STMT_OK(st, mysql_stmt_send_long_data(st, 1, "good", 4));
    STMT_OK(st, mysql_stmt_execute(st));
    mysql_stmt_close(st);
    QVEQ(c, sqlf("SELECT data FROM `%s` WHERE id = 1", t), "good");
    long long after = sess_status(c, "Com_stmt_reset");
    CHECK(after - before == 1, "Com_stmt_reset grew by %lld, want 1", after - before);

    /* reset a statement in the middle of a result, then execute again */
    Q(c, sqlf("INSERT INTO `%s` VALUES (2,'b'),(3,'c'),(4,'d')", t));
    MYSQL_STMT *sel;
    PREP(sel, c, sqlf("SELECT id FROM `%s` ORDER BY id", t));
    unsigned long ct = CURSOR_TYPE_READ_ONLY;
    STMT_OK(sel, mysql_stmt_attr_set(sel, STMT_ATTR_CURSOR_TYPE, &ct));
    int v;
    MYSQL_BIND rb[1];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_LONG; rb[0].buffer = &v;
    STMT_OK(sel, mysql_stmt_execute(sel));
    STMT_OK(sel, mysql_stmt_bind_result(sel, rb));
    CHECK(mysql_stmt_fetch(sel) == 0 && v == 1, "first fetch gave %d", v);
    STMT_OK(sel, mysql_stmt_reset(sel));
    STMT_OK(sel, mysql_stmt_execute(sel));
    STMT_OK(sel, mysql_stmt_bind_result(sel, rb));
    int got = 0, sum = 0;
    while (mysql_stmt_fetch(sel) == 0) { got++; sum += v; }
    CHECK(got == 4 && sum == 10, "after reset: %d rows, sum %d", got, sum);
    mysql_stmt_close(sel);
    QVEQ(c, "SELECT 'ok after reset'", "ok after reset");
    (void)d;
    return 1;
}

/* prepare/execute/close once; return deltas of the Com_stmt_* counters */
static int stmt_counter_run(MYSQL *m, long long delta[3])
{
    static const char *vars[3] = { "Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close" };
    long long b[3], a[3];
    if (!pin_session(m)) return 0;
    for (int i = 0; i < 3; i++) if ((b[i] = sess_status(m, vars[i])) < 0) return 0;
    MYSQL_STMT *st;
    PREP(st, m, "SELECT 1 + ?");
    int x = 41;
    MYSQL_BIND p[1];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &x;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    STMT_OK(st, mysql_stmt_execute(st));
    long long r = 0;
    MYSQL_BIND rb[1];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_LONGLONG; rb[0].buffer = &r;
    STMT_OK(st, mysql_stmt_bind_result(st, rb));
    CHECK(mysql_stmt_fetch(st) == 0 && r == 42, "SELECT 1 + 41 gave %lld", r);
    CHECK(mysql_stmt_close(st) == 0, "mysql_stmt_close failed");
    for (int i = 0; i < 3; i++) if ((a[i] = sess_status(m, vars[i])) < 0) return 0;
    for (int i = 0; i < 3; i++) delta[i] = a[i] - b[i];
    return 1;
}

static int check_stmt_close(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    long long dc[3], dd[3];
    if (!stmt_counter_run(c, dc)) return 0;
    if (!stmt_counter_run(d, dd)) return 0;
    /* through sluice the server statement may stay open for other sessions (closed when its
       connection's statement cache evicts it), so the close is not always forwarded */
    CHECK(dc[0] == 1 && dc[1] == 1 && dc[2] <= 1, "endpoint Com_stmt prepare/execute/close deltas %lld/%lld/%lld, want 1/1/≤1",
          dc[0], dc[1], dc[2]);
    CHECK(dd[0] == 1 && dd[1] == 1 && dd[2] == 1, "direct deltas %lld/%lld/%lld", dd[0], dd[1], dd[2]);
    /* many prepare/close cycles leave no statements behind on the session */
    for (int i = 0; i < 200; i++) {
        MYSQL_STMT *st;
        PREP(st, c, "SELECT ?");
        CHECK(mysql_stmt_close(st) == 0, "close %d failed", i);
    }
    /* a closed handle id is unknown to the server: EXECUTE by name does not see it either */
    QVEQ(c, "SELECT 'alive'", "alive");
    return 1;
}

/* fetch the 10-row table through a read-only cursor with prefetch 2 */
static int cursor_run(MYSQL *m, const char *t, long long *fetch_delta)
{
    if (!pin_session(m)) return 0;
    long long before = sess_status(m, "Com_stmt_fetch");
    if (before < 0) return 0;
    MYSQL_STMT *st;
    PREP(st, m, sqlf("SELECT id, name FROM `%s` ORDER BY id", t));
    unsigned long ct = CURSOR_TYPE_READ_ONLY, pf = 2;
    STMT_OK(st, mysql_stmt_attr_set(st, STMT_ATTR_CURSOR_TYPE, &ct));
    STMT_OK(st, mysql_stmt_attr_set(st, STMT_ATTR_PREFETCH_ROWS, &pf));
    STMT_OK(st, mysql_stmt_execute(st));
    CHECK(m->server_status & SERVER_STATUS_CURSOR_EXISTS, "server status 0x%x lacks CURSOR_EXISTS", m->server_status);
    int id;
    char name[32];
    unsigned long nlen;
    MYSQL_BIND rb[2];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_LONG; rb[0].buffer = &id;
    rb[1].buffer_type = MYSQL_TYPE_STRING; rb[1].buffer = name; rb[1].buffer_length = sizeof name; rb[1].length = &nlen;
    STMT_OK(st, mysql_stmt_bind_result(st, rb));
    for (int i = 1; i <= 10; i++) {
        int rc = mysql_stmt_fetch(st);
        CHECK(rc == 0, "cursor fetch %d returned %d: %s", i, rc, mysql_stmt_error(st));
        char want[32];
        snprintf(want, sizeof want, "row%02d", i);
        CHECK(id == i && strcmp(name, want) == 0, "cursor row %d: id=%d name=%s", i, id, name);
    }
    CHECK(mysql_stmt_fetch(st) == MYSQL_NO_DATA, "cursor returned more than 10 rows");
    mysql_stmt_close(st);
    long long after = sess_status(m, "Com_stmt_fetch");
    if (after < 0) return 0;
    *fetch_delta = after - before;
    return 1;
}

static int check_cursor(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_cursor_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, name VARCHAR(10))", t));
    Q(c, sqlf("INSERT INTO `%s` SELECT seq, CONCAT('row', LPAD(seq, 2, '0')) FROM seq_1_to_10", t));
    long long fc, fd;
    if (!cursor_run(c, t, &fc)) return 0;
    if (!cursor_run(d, t, &fd)) return 0;
    CHECK(fc >= 5, "only %lld COM_STMT_FETCH for 10 rows with prefetch 2", fc);
    CHECK(fc == fd, "COM_STMT_FETCH count %lld, direct %lld", fc, fd);

    /* two cursors open at once on the same connection, interleaved with a plain query */
    MYSQL_STMT *s1, *s2;
    PREP(s1, c, sqlf("SELECT id FROM `%s` ORDER BY id", t));
    PREP(s2, c, sqlf("SELECT id * 100 FROM `%s` ORDER BY id DESC", t));
    unsigned long ct = CURSOR_TYPE_READ_ONLY, pf1 = 2, pf2 = 3;
    STMT_OK(s1, mysql_stmt_attr_set(s1, STMT_ATTR_CURSOR_TYPE, &ct));
    STMT_OK(s1, mysql_stmt_attr_set(s1, STMT_ATTR_PREFETCH_ROWS, &pf1));
    STMT_OK(s2, mysql_stmt_attr_set(s2, STMT_ATTR_CURSOR_TYPE, &ct));
    STMT_OK(s2, mysql_stmt_attr_set(s2, STMT_ATTR_PREFETCH_ROWS, &pf2));
    STMT_OK(s1, mysql_stmt_execute(s1));
    STMT_OK(s2, mysql_stmt_execute(s2));
    int v1, v2;
    long long v2l;
    MYSQL_BIND b1[1], b2[1];
    memset(b1, 0, sizeof b1);
    memset(b2, 0, sizeof b2);
    b1[0].buffer_type = MYSQL_TYPE_LONG; b1[0].buffer = &v1;
    b2[0].buffer_type = MYSQL_TYPE_LONGLONG; b2[0].buffer = &v2l;
    STMT_OK(s1, mysql_stmt_bind_result(s1, b1));
    STMT_OK(s2, mysql_stmt_bind_result(s2, b2));
    for (int i = 1; i <= 10; i++) {
        int rc = mysql_stmt_fetch(s1);
        CHECK(rc == 0 && v1 == i, "cursor 1 fetch %d: rc=%d v=%d (%s)", i, rc, v1, mysql_stmt_error(s1));
        rc = mysql_stmt_fetch(s2);
        v2 = (int)v2l;
        CHECK(rc == 0 && v2 == (11 - i) * 100, "cursor 2 fetch %d: rc=%d v=%d (%s)", i, rc, v2, mysql_stmt_error(s2));
        if (i == 5) QVEQ(c, "SELECT 'between fetches'", "between fetches");
    }
    CHECK(mysql_stmt_fetch(s1) == MYSQL_NO_DATA, "cursor 1 not exhausted");
    CHECK(mysql_stmt_fetch(s2) == MYSQL_NO_DATA, "cursor 2 not exhausted");
    mysql_stmt_close(s1);
    mysql_stmt_close(s2);
    return 1;
}

static int check_stmt_bulk(void)
{
    MYSQL *c;
    CONN(c, &EP, 0, 0);
    unsigned long ext = 0;
    mariadb_get_infov(c, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &ext);
    if (!(ext & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32))) {
        MYSQL *d;
        CONN(d, &DI, 0, 0);
        unsigned long dext = 0;
        mariadb_get_infov(d, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &dext);
        CHECK(!(dext & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32)), "endpoint hides STMT_BULK_OPERATIONS the server has");
        SKIP("server does not support bulk operations");
    }
    char t[64];
    snprintf(t, sizeof t, "capi_bulk_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, name VARCHAR(20))", t));
    MYSQL_STMT *st;
    PREP(st, c, sqlf("INSERT INTO `%s` VALUES (?, ?)", t));
    enum { NR = 5 };
    int ids[NR] = { 1, 2, 3, 4, 5 };
    char *names[NR] = { "one", "two", "three", NULL, "five" };
    unsigned long lens[NR] = { 3, 3, 5, 0, 4 };
    char ind[NR] = { STMT_INDICATOR_NONE, STMT_INDICATOR_NONE, STMT_INDICATOR_NONE, STMT_INDICATOR_NULL,
                     STMT_INDICATOR_NONE };
    unsigned int size = NR;
    STMT_OK(st, mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &size));
    MYSQL_BIND p[2];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = ids;
    p[1].buffer_type = MYSQL_TYPE_STRING; p[1].buffer = names; p[1].length = lens; p[1].u.indicator = ind;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    long long before = sess_status(c, "Com_stmt_execute");
    if (before < 0) return 0;
    STMT_OK(st, mysql_stmt_execute(st));
    long long after = sess_status(c, "Com_stmt_execute");
    CHECK(after - before == 1, "array execute counted %lld Com_stmt_execute, want 1 (one COM_STMT_BULK_EXECUTE)",
          after - before);
    CHECK(mysql_stmt_affected_rows(st) == NR, "bulk insert affected %llu rows, want %d",
          (unsigned long long)mysql_stmt_affected_rows(st), NR);
    mysql_stmt_close(st);
    QVEQ(c, sqlf("SELECT GROUP_CONCAT(id, '=', IFNULL(name, 'NULL') ORDER BY id) FROM `%s`", t),
         "1=one,2=two,3=three,4=NULL,5=five");
    return 1;
}

static int check_multi_statements(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, CLIENT_MULTI_STATEMENTS, 0);
    CONN(d, &DI, CLIENT_MULTI_STATEMENTS, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_multi_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, v VARCHAR(10))", t));
    Q(c, sqlf("SELECT 1 AS a, 'x' AS b; INSERT INTO `%s` VALUES (1,'one'),(2,'two'); SELECT COUNT(*) AS n FROM `%s`",
              t, t));
    MYSQL_RES *r = mysql_store_result(c);
    CHECK(r && mysql_num_fields(r) == 2, "first result missing");
    MYSQL_ROW row = mysql_fetch_row(r);
    CHECK(row && strcmp(row[0], "1") == 0 && strcmp(row[1], "x") == 0, "first result row wrong");
    mysql_free_result(r);
    CHECK(mysql_more_results(c), "no more results after first");
    CHECK(mysql_next_result(c) == 0, "next_result 1 failed: %s", mysql_error(c));
    r = mysql_store_result(c);
    CHECK(!r && mysql_field_count(c) == 0, "INSERT produced a result set");
    CHECK(mysql_affected_rows(c) == 2, "INSERT affected %llu", (unsigned long long)mysql_affected_rows(c));
    CHECK(mysql_info(c) && strcmp(mysql_info(c), "Records: 2  Duplicates: 0  Warnings: 0") == 0, "INSERT info '%s'",
          mysql_info(c) ? mysql_info(c) : "(null)");
    CHECK(mysql_next_result(c) == 0, "next_result 2 failed: %s", mysql_error(c));
    r = mysql_store_result(c);
    CHECK(r, "third result missing");
    row = mysql_fetch_row(r);
    CHECK(row && strcmp(row[0], "2") == 0, "count is %s", row ? row[0] : "(none)");
    mysql_free_result(r);
    CHECK(!mysql_more_results(c), "more results after the last statement");
    CHECK(mysql_next_result(c) == -1, "next_result at end not -1");

    /* error in the middle stops the batch; same as direct */
    COMPARE(c, d, sqlf("SELECT 1; SELECT * FROM capi_no_such_table_%d; SELECT 3", PID));
    COMPARE(c, d, sqlf("SELECT id, v FROM `%s` ORDER BY id; UPDATE `%s` SET v = 'uno' WHERE id = 1; "
                       "SELECT v FROM `%s` WHERE id = 1; UPDATE `%s` SET v = 'one' WHERE id = 1", t, t, t, t));
    QVEQ(c, "SELECT 'after'", "after");
    return 1;
}

/* run the CALL through a prepared statement, serialize all results */
static int call_ps_capture(MYSQL *m, const char *proc, dstr *out)
{
    MYSQL_STMT *st;
    PREP(st, m, sqlf("CALL `%s`(?, ?, ?)", proc));
    CHECK(mysql_stmt_param_count(st) == 3, "CALL param count %lu", mysql_stmt_param_count(st));
    int a = 5;
    char c_in[32] = "hi";
    unsigned long c_len = 2;
    my_bool bnull = 1;
    int bdummy = 0;
    MYSQL_BIND p[3];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &a;
    p[1].buffer_type = MYSQL_TYPE_LONG; p[1].buffer = &bdummy; p[1].is_null = &bnull;
    p[2].buffer_type = MYSQL_TYPE_STRING; p[2].buffer = c_in; p[2].length = &c_len; p[2].buffer_length = sizeof c_in;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    STMT_OK(st, mysql_stmt_execute(st));
    int rs = 0, rc;
    do {
        unsigned nf = mysql_stmt_field_count(st);
        int outp = (m->server_status & SERVER_PS_OUT_PARAMS) ? 1 : 0;
        ds_addf(out, "result %d fields=%u out_params=%d\n", rs, nf, outp);
        if (nf > 0) {
            MYSQL_RES *meta = mysql_stmt_result_metadata(st);
            CHECK(meta, "no metadata for result %d", rs);
            MYSQL_FIELD *f = mysql_fetch_fields(meta);
            for (unsigned i = 0; i < nf; i++) ds_addf(out, "  col %s type=%d\n", f[i].name, f[i].type);
            mysql_free_result(meta);
            char vals[8][64];
            unsigned long lens[8];
            my_bool nulls[8];
            MYSQL_BIND rb[8];
            CHECK(nf <= 8, "too many columns");
            memset(rb, 0, sizeof rb);
            for (unsigned i = 0; i < nf; i++) {
                rb[i].buffer_type = MYSQL_TYPE_STRING; rb[i].buffer = vals[i]; rb[i].buffer_length = 64;
                rb[i].length = &lens[i]; rb[i].is_null = &nulls[i];
            }
            STMT_OK(st, mysql_stmt_bind_result(st, rb));
            int frc;
            while ((frc = mysql_stmt_fetch(st)) == 0) {
                ds_addf(out, "  row");
                for (unsigned i = 0; i < nf; i++) ds_addf(out, " %.*s", nulls[i] ? 2 : (int)lens[i], nulls[i] ? "\\N" : vals[i]);
                ds_addf(out, "\n");
            }
            CHECK(frc == MYSQL_NO_DATA, "fetch in result %d returned %d: %s", rs, frc, mysql_stmt_error(st));
        } else {
            ds_addf(out, "  affected=%lld\n", (long long)mysql_stmt_affected_rows(st));
        }
        rs++;
        CHECK(rs < 10, "too many results");
        rc = mysql_stmt_next_result(st);
        CHECK(rc <= 0, "mysql_stmt_next_result failed: %u %s", mysql_stmt_errno(st), mysql_stmt_error(st));
    } while (rc == 0);
    mysql_stmt_close(st);
    return 1;
}

static int check_sp_out_params(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, CLIENT_MULTI_RESULTS, 0);
    CONN(d, &DI, CLIENT_MULTI_RESULTS, 0);
    CHECK(c->server_capabilities & CLIENT_PS_MULTI_RESULTS, "server lacks CLIENT_PS_MULTI_RESULTS");
    char proc[64];
    snprintf(proc, sizeof proc, "capi_proc_%d", PID);
    add_cleanup(sqlf("DROP PROCEDURE IF EXISTS `%s`.`%s`", EP.db, proc));
    Q(c, sqlf("CREATE PROCEDURE `%s`(IN a INT, OUT b INT, INOUT c VARCHAR(20)) BEGIN "
              "SELECT a AS first_col; "
              "SELECT a * 2 AS second_col, 'two' AS label UNION ALL SELECT a * 3, 'three'; "
              "SET b = a * 10; SET c = CONCAT(c, '!'); END", proc));
    dstr oc = {0}, od = {0};
    if (!call_ps_capture(c, proc, &oc)) return 0;
    if (!call_ps_capture(d, proc, &od)) return 0;
    const char *want =
        "result 0 fields=1 out_params=0\n  col first_col type=3\n  row 5\n"
        "result 1 fields=2 out_params=0\n  col second_col type=8\n  col label type=253\n  row 10 two\n  row 15 three\n"
        "result 2 fields=2 out_params=1\n  col b type=3\n  col c type=253\n  row 50 hi!\n"
        "result 3 fields=0 out_params=0\n  affected=0\n";
    int same = strcmp(ds_str(&oc), ds_str(&od)) == 0, exact = strcmp(ds_str(&oc), want) == 0;
    char diff[1400];
    if (!same) first_diff(ds_str(&oc), ds_str(&od), diff, sizeof diff);
    else if (!exact) first_diff(ds_str(&oc), want, diff, sizeof diff);
    ds_free(&oc);
    ds_free(&od);
    CHECK(same, "CALL results differ from direct: %s", diff);
    CHECK(exact, "CALL results not as expected: %s", diff);

    /* the same procedure through the text protocol */
    Q(c, "SET @b = NULL, @c = 'yo'");
    Q(d, "SET @b = NULL, @c = 'yo'");
    COMPARE(c, d, sqlf("CALL `%s`(7, @b, @c)", proc));
    QVEQ(c, "SELECT CONCAT(@b, ',', @c)", "70,yo!");
    return 1;
}

static int show_warnings_compare(MYSQL *c, MYSQL *d, const char *sql, unsigned want_count, const char *want_sub)
{
    dstr a = {0};
    /* the statement itself, then SHOW WARNINGS, on both */
    if (!compare_sql(c, d, sql, NULL)) return 0;
    if (mysql_warning_count(c) != want_count) {
        snprintf(failbuf, sizeof failbuf, "\"%s\": warning_count %u, want %u", sql, mysql_warning_count(c), want_count);
        return 0;
    }
    if (!compare_sql(c, d, "SHOW WARNINGS", &a)) { ds_free(&a); return 0; }
    int ok = strstr(ds_str(&a), want_sub) != NULL;
    if (!ok) snprintf(failbuf, sizeof failbuf, "SHOW WARNINGS after \"%s\" lacks '%s': %.500s", sql, want_sub, ds_str(&a));
    ds_free(&a);
    return ok;
}

static int check_warnings(void)
{
    MYSQL *c, *d;
    CONN(c, &EP, 0, 0);
    CONN(d, &DI, 0, 0);
    char t[64];
    snprintf(t, sizeof t, "capi_warn_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, "SET SESSION sql_mode = 'ERROR_FOR_DIVISION_BY_ZERO'");
    Q(d, "SET SESSION sql_mode = 'ERROR_FOR_DIVISION_BY_ZERO'");
    QVEQ(c, "SELECT 1/0", "<NULL>");
    CHECK(mysql_warning_count(c) == 1, "warning_count after SELECT 1/0: %u", mysql_warning_count(c));
    if (!show_warnings_compare(c, d, "SELECT 1/0 AS q", 1, "row\tWarning\t1365\tDivision by 0\n")) return 0;
    QVEQ(c, "SELECT @@warning_count", "1");

    Q(c, sqlf("CREATE TABLE `%s` (v VARCHAR(3), n TINYINT)", t));
    Q(c, "SET SESSION sql_mode = ''");
    Q(d, "SET SESSION sql_mode = ''");
    Q(c, sqlf("INSERT INTO `%s` VALUES ('abcdef', 1000), ('ok', 1)", t));
    CHECK(mysql_warning_count(c) == 2, "warning_count after truncating insert: %u", mysql_warning_count(c));
    CHECK(mysql_info(c) && strcmp(mysql_info(c), "Records: 2  Duplicates: 0  Warnings: 2") == 0, "info '%s'",
          mysql_info(c) ? mysql_info(c) : "(null)");
    if (!show_warnings_compare(c, d, sqlf("INSERT INTO `%s` VALUES ('abcdef', 1000), ('ok', 1)", t), 2,
                               "row\tWarning\t1265\tData truncated for column 'v' at row 1\n"
                               "row\tWarning\t1264\tOut of range value for column 'n' at row 1\n"))
        return 0;
    QVEQ(c, sqlf("SELECT GROUP_CONCAT(v, ':', n) FROM `%s`", t), "abc:127,ok:1,abc:127,ok:1,abc:127,ok:1");

    /* strict mode: the same insert is an error, and SHOW WARNINGS lists it */
    Q(c, "SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
    Q(d, "SET SESSION sql_mode = 'STRICT_ALL_TABLES'");
    err_t e1, e2;
    EXPECT_ERR(c, sqlf("INSERT INTO `%s` VALUES ('abcdef', 1)", t), 1406, &e1);
    EXPECT_ERR(d, sqlf("INSERT INTO `%s` VALUES ('abcdef', 1)", t), 1406, &e2);
    CHECK_SAME_ERR(e1, e2, "strict insert");
    CHECK(strcmp(e1.state, "22001") == 0, "sqlstate %s", e1.state);
    COMPARE(c, d, "SHOW WARNINGS");

    /* warnings from a prepared statement */
    MYSQL_STMT *st;
    PREP(st, c, "SELECT CAST('12abc' AS SIGNED)");
    STMT_OK(st, mysql_stmt_execute(st));
    STMT_OK(st, mysql_stmt_store_result(st));
    CHECK(mysql_stmt_warning_count(st) == 1, "prepared statement warning count %d", mysql_stmt_warning_count(st));
    mysql_stmt_close(st);
    COMPARE(c, d, "SELECT CAST('12abc' AS SIGNED) AS v; SHOW WARNINGS");
    return 1;
}

static int check_local_infile(void)
{
    MYSQL *c, *d, *n;
    CONN(c, &EP, 0, OPT_LOCAL_INFILE);
    CONN(d, &DI, 0, OPT_LOCAL_INFILE);
    char t[64], path[256], missing[256];
    snprintf(t, sizeof t, "capi_infile_%d", PID);
    snprintf(path, sizeof path, "/tmp/capi_infile_%d.tsv", PID);
    snprintf(missing, sizeof missing, "/tmp/capi_infile_missing_%d.tsv", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    add_cleanup_file(path);
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot create %s", path);
    for (int i = 1; i <= 10000; i++) fprintf(f, "%d\tname_%d\t%d.%02d\n", i, i, i, i % 100);
    fclose(f);
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(10,2))", t));
    Q(c, sqlf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s`", path, t));
    CHECK(mysql_affected_rows(c) == 10000, "LOAD DATA affected %llu", (unsigned long long)mysql_affected_rows(c));
    CHECK(mysql_info(c) && strcmp(mysql_info(c), "Records: 10000  Deleted: 0  Skipped: 0  Warnings: 0") == 0,
          "LOAD DATA info '%s'", mysql_info(c) ? mysql_info(c) : "(null)");
    QVEQ(c, sqlf("SELECT COUNT(*) FROM `%s`", t), "10000");
    QVEQ(c, sqlf("SELECT SUM(id) FROM `%s`", t), "50005000");
    QVEQ(c, sqlf("SELECT name FROM `%s` WHERE id = 9999", t), "name_9999");
    QVEQ(c, sqlf("SELECT amount FROM `%s` WHERE id = 1234", t), "1234.34");

    /* again with duplicates: IGNORE reports them */
    Q(c, sqlf("LOAD DATA LOCAL INFILE '%s' IGNORE INTO TABLE `%s`", path, t));
    CHECK(mysql_affected_rows(c) == 0, "duplicate LOAD affected %llu", (unsigned long long)mysql_affected_rows(c));

    /* missing file: error, same as direct, connection usable */
    err_t e1, e2;
    EXPECT_ERR(c, sqlf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s`", missing, t), 0, &e1);
    EXPECT_ERR(d, sqlf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s`", missing, t), 0, &e2);
    CHECK_SAME_ERR(e1, e2, "missing local file");
    CHECK(strstr(e1.msg, missing) != NULL, "missing-file error '%s' does not name the file", e1.msg);
    QVEQ(c, "SELECT 'usable'", "usable");
    QVEQ(c, sqlf("SELECT COUNT(*) FROM `%s`", t), "10000");

    /* a client without local infile enabled is refused, as directly */
    MYSQL *dn;
    CONN(n, &EP, 0, 0);
    CONN(dn, &DI, 0, 0);
    EXPECT_ERR(n, sqlf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s`", path, t), 0, &e1);
    EXPECT_ERR(dn, sqlf("LOAD DATA LOCAL INFILE '%s' INTO TABLE `%s`", path, t), 0, &e2);
    CHECK_SAME_ERR(e1, e2, "local infile disabled");
    CHECK(e1.code == 4166, "local infile disabled gave %u '%s', want 4166", e1.code, e1.msg);
    QVEQ(n, "SELECT 'usable too'", "usable too");
    return 1;
}

static int big_len_query(MYSQL *c, size_t sql_len)
{
    /* SELECT LENGTH('<pad>') with total SQL length sql_len; command packet payload is sql_len + 1 */
    const char *pre = "SELECT LENGTH('", *post = "')";
    size_t pad = sql_len - strlen(pre) - strlen(post);
    char *q = malloc(sql_len + 1);
    memcpy(q, pre, strlen(pre));
    memset(q + strlen(pre), 'p', pad);
    memcpy(q + strlen(pre) + pad, post, strlen(post) + 1);
    int rc = mysql_real_query(c, q, sql_len);
    free(q);
    if (rc) FAIL("query of %zu bytes failed: %u %s", sql_len, mysql_errno(c), mysql_error(c));
    MYSQL_RES *r = mysql_store_result(c);
    MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
    char got[32] = "";
    if (row) snprintf(got, sizeof got, "%s", row[0]);
    if (r) mysql_free_result(r);
    CHECK(strtoull(got, NULL, 10) == pad, "query of %zu bytes: LENGTH = '%s', want %zu", sql_len, got, pad);
    return 1;
}

static int big_repeat(MYSQL *c, unsigned long n)
{
    Q(c, sqlf("SELECT REPEAT('y', %lu)", n));
    MYSQL_RES *r = mysql_store_result(c);
    CHECK(r, "REPEAT(%lu) store failed: %u %s", n, mysql_errno(c), mysql_error(c));
    MYSQL_ROW row = mysql_fetch_row(r);
    unsigned long *len = mysql_fetch_lengths(r);
    int ok = row && row[0] && len[0] == n;
    for (unsigned long i = 0; ok && i < n; i++) if (row[0][i] != 'y') ok = 0;
    unsigned long got = (row && len) ? len[0] : 0;
    mysql_free_result(r);
    CHECK(ok, "REPEAT('y', %lu) came back with length %lu or wrong bytes", n, got);
    return 1;
}

static int check_large_packets(void)
{
    MYSQL *c;
    CONN(c, &EP, 0, 0);
    long long map = qnum(c, "SELECT @@max_allowed_packet");
    CHECK(map >= 64LL * 1024 * 1024, "backend max_allowed_packet is %lld; this check needs >= 64M", map);
    char t[64];
    snprintf(t, sizeof t, "capi_large_%d", PID);
    add_cleanup(sqlf("DROP TABLE IF EXISTS `%s`.`%s`", EP.db, t));
    Q(c, sqlf("CREATE TABLE `%s` (id INT PRIMARY KEY, data LONGBLOB)", t));

    const size_t N = 20 * 1024 * 1024;
    char *data = malloc(N);
    for (size_t i = 0; i < N; i++) data[i] = 'a' + (char)((i * 31 + (i >> 10)) % 26);
    uint32_t crc = crc32_buf((unsigned char *)data, N);

    /* 20 MB string literal in a plain query */
    const char *pre = "SELECT LENGTH(x), CRC32(x) FROM (SELECT '", *post = "' AS x) AS t";
    size_t ql = strlen(pre) + N + strlen(post);
    char *q = malloc(ql + 1);
    memcpy(q, pre, strlen(pre));
    memcpy(q + strlen(pre), data, N);
    memcpy(q + strlen(pre) + N, post, strlen(post) + 1);
    int rc = mysql_real_query(c, q, ql);
    CHECK(rc == 0, "20 MB query failed: %u %s", mysql_errno(c), mysql_error(c));
    MYSQL_RES *r = mysql_store_result(c);
    MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
    CHECK(row && strcmp(row[0], "20971520") == 0 && strtoul(row[1], NULL, 10) == crc,
          "20 MB query result: length %s crc %s (want 20971520 %u)", row ? row[0] : "-", row ? row[1] : "-", crc);
    mysql_free_result(r);

    /* 20 MB INSERT, read back through the text protocol */
    const char *ipre = sqlf("INSERT INTO `%s` VALUES (1, '", t), *ipost = "')";
    size_t il = strlen(ipre) + N + strlen(ipost);
    q = realloc(q, il + 1);
    memcpy(q, ipre, strlen(ipre));
    memcpy(q + strlen(ipre), data, N);
    memcpy(q + strlen(ipre) + N, ipost, strlen(ipost) + 1);
    rc = mysql_real_query(c, q, il);
    CHECK(rc == 0, "20 MB INSERT failed: %u %s", mysql_errno(c), mysql_error(c));
    free(q);
    QVEQ(c, sqlf("SELECT CONCAT(LENGTH(data), ' ', CRC32(data)) FROM `%s` WHERE id = 1", t), sqlf("20971520 %u", crc));
    Q(c, sqlf("SELECT data FROM `%s` WHERE id = 1", t));
    r = mysql_store_result(c);
    CHECK(r, "store of 20 MB row failed: %u %s", mysql_errno(c), mysql_error(c));
    row = mysql_fetch_row(r);
    unsigned long *len = mysql_fetch_lengths(r);
    int same = row && len[0] == N && memcmp(row[0], data, N) == 0;
    mysql_free_result(r);
    CHECK(same, "20 MB row read back differs");

    /* 20 MB parameter in a single COM_STMT_EXECUTE (no long data) */
    MYSQL_STMT *st;
    PREP(st, c, sqlf("INSERT INTO `%s` VALUES (?, ?)", t));
    int id = 2;
    unsigned long dlen = N;
    MYSQL_BIND p[2];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_LONG; p[0].buffer = &id;
    p[1].buffer_type = MYSQL_TYPE_LONG_BLOB; p[1].buffer = data; p[1].length = &dlen;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    STMT_OK(st, mysql_stmt_execute(st));
    mysql_stmt_close(st);
    QVEQ(c, sqlf("SELECT CONCAT(LENGTH(data), ' ', CRC32(data)) FROM `%s` WHERE id = 2", t), sqlf("20971520 %u", crc));
    free(data);

    /* 20 MB value generated by the server */
    if (!big_repeat(c, 20 * 1024 * 1024)) return 0;
    /* packets around the 16 MB split boundary (0xFFFFFF payload needs an empty trailing packet) */
    for (size_t sl = 0xFFFFFD; sl <= 0xFFFFFF; sl++)
        if (!big_len_query(c, sl)) return 0;
    for (unsigned long n = 16777210; n <= 16777212; n++)
        if (!big_repeat(c, n)) return 0;
    QVEQ(c, "SELECT 'after large packets'", "after large packets");
    return 1;
}

static int check_tls(void)
{
    const char *v = getenv("SLUICE_TLS");
    if (!v || strcmp(v, "1") != 0) SKIP("SLUICE_TLS is not 1");
    MYSQL *c;
    CONN(c, &EP, 0, OPT_TLS);
    const char *cipher = mysql_get_ssl_cipher(c);
    CHECK(cipher && *cipher, "no TLS cipher on the client connection");
    QVEQ(c, "SELECT 'over tls'", "over tls");
    if (!big_repeat(c, 1024 * 1024 + 17)) return 0;
    MYSQL_STMT *st;
    PREP(st, c, "SELECT CONCAT('tls-', ?)");
    char in[8] = "ps";
    unsigned long inlen = 2;
    MYSQL_BIND p[1];
    memset(p, 0, sizeof p);
    p[0].buffer_type = MYSQL_TYPE_STRING; p[0].buffer = in; p[0].length = &inlen;
    STMT_OK(st, mysql_stmt_bind_param(st, p));
    STMT_OK(st, mysql_stmt_execute(st));
    char out[32] = "";
    unsigned long olen = 0;
    MYSQL_BIND rb[1];
    memset(rb, 0, sizeof rb);
    rb[0].buffer_type = MYSQL_TYPE_STRING; rb[0].buffer = out; rb[0].buffer_length = sizeof out; rb[0].length = &olen;
    STMT_OK(st, mysql_stmt_bind_result(st, rb));
    CHECK(mysql_stmt_fetch(st) == 0 && strcmp(out, "tls-ps") == 0, "prepared over TLS gave '%s'", out);
    mysql_stmt_close(st);
    return 1;
}

/* ------------------------------------------------------------------ */

static const struct { const char *name; int (*fn)(void); } CHECKS[] = {
    { "connect", check_connect },
    { "capabilities", check_capabilities },
    { "field_list", check_field_list },
    { "statistics", check_statistics },
    { "set_option", check_set_option },
    { "ping", check_ping },
    { "init_db", check_init_db },
    { "change_user", check_change_user },
    { "reset_connection", check_reset_connection },
    { "kill_thread_id", check_kill_thread_id },
    { "kill_connection_id", check_kill_connection_id },
    { "process_info", check_process_info },
    { "unknown_command", check_unknown_command },
    { "stmt_types", check_stmt_types },
    { "stmt_shared_types", check_stmt_shared_types },
    { "stmt_long_data", check_stmt_long_data },
    { "stmt_reset", check_stmt_reset },
    { "stmt_close", check_stmt_close },
    { "cursor", check_cursor },
    { "stmt_bulk", check_stmt_bulk },
    { "multi_statements", check_multi_statements },
    { "sp_out_params", check_sp_out_params },
    { "warnings", check_warnings },
    { "local_infile", check_local_infile },
    { "large_packets", check_large_packets },
    { "tls", check_tls },
};

static void on_alarm(int sig)
{
    (void)sig;
    char msg[128];
    int n = snprintf(msg, sizeof msg, "FAIL timeout: suite exceeded its time limit\n%d passed, %d failed\n", npass,
                     nfail + 1);
    if (write(1, msg, n) < 0) {}
    _exit(1);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    crc_init();
    PID = (int)getpid();
    EP = (endpoint_t){ "endpoint", env_nonempty("SLUICE_HOST", "127.0.0.1"),
                       (unsigned)atoi(env_nonempty("SLUICE_PORT", "3306")), env_nonempty("SLUICE_USER", "root"),
                       env_any("SLUICE_PASSWORD", ""), env_nonempty("SLUICE_DB", "test") };
    DI = (endpoint_t){ "direct", env_nonempty("DIRECT_HOST", "127.0.0.1"),
                       (unsigned)atoi(env_nonempty("DIRECT_PORT", "3306")), env_nonempty("DIRECT_USER", "root"),
                       env_any("DIRECT_PASSWORD", ""), EP.db };
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)atoi(env_nonempty("CAPI_TIMEOUT", "300")));
    if (mysql_library_init(0, NULL, NULL)) { printf("FAIL init: mysql_library_init\n0 passed, 1 failed\n"); return 1; }

    int endpoint_down = 0;
    for (size_t i = 0; i < sizeof CHECKS / sizeof CHECKS[0]; i++) {
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++) if (strcmp(argv[a], CHECKS[i].name) == 0) want = 1;
            if (!want) continue;
        }
        failbuf[0] = 0;
        if (endpoint_down) {
            nfail++;
            printf("FAIL %s: not run, the endpoint could not be used (see connect)\n", CHECKS[i].name);
            continue;
        }
        double t0 = now_s();
        int r = CHECKS[i].fn();
        run_cleanup();
        double el = now_s() - t0;
        if (r > 0) { npass++; printf("ok %s\n", CHECKS[i].name); }
        else if (r < 0) { nskip++; printf("skip %s: %s\n", CHECKS[i].name, failbuf); }
        else {
            nfail++;
            printf("FAIL %s: %s\n", CHECKS[i].name, failbuf[0] ? failbuf : "(no reason)");
            if (strcmp(CHECKS[i].name, "connect") == 0) endpoint_down = 1;
        }
        if (getenv("CAPI_VERBOSE")) fprintf(stderr, "# %s took %.2fs\n", CHECKS[i].name, el);
    }
    mysql_library_end();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail == 0 ? 0 : 1;
}
