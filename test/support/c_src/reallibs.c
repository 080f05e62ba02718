/* reallibs.c - server-like use of real Debian C libraries, to test leak reports: a program, or
 * with REALLIBS_NIF the NIF Mtrace.Test.RealLibs (test/rules_test.exs).
 * Build: gcc -O1 -g -o reallibs reallibs.c -lssl -lcrypto -lz -lxml2 -lsqlite3 -lyaml
 * Only 5 blocks are lost on purpose: 3 x malloc(777), 2 x strdup(40 chars) -> 41 bytes. */
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include <zlib.h>

/* Globals that keep library state until exit (never freed). */
SSL_CTX *g_server_ctx, *g_client_ctx;
z_stream g_zs;
unsigned char *g_zout;
xmlDocPtr g_doc;
sqlite3 *g_db;
yaml_parser_t g_yaml;
void *volatile g_sink; /* a volatile pointer: every store happens */

static void die(const char *what)
{
    fprintf(stderr, "error: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* ---------------- deliberate leaks (the program's, not the NIF's) ---------------- */
#ifndef REALLIBS_NIF
__attribute__((noinline)) static void leak_five(void)
{
    for (int i = 0; i < 3; i++) {
        char *p = malloc(777);
        memset(p, 'A' + i, 777);
        g_sink = p; /* the pointer is forgotten when overwritten */
    }
    char *s1 = strdup("0123456789012345678901234567890123456789"); /* 40 chars + NUL */
    g_sink = s1;
    char *s2 = strdup("abcdefghijabcdefghijabcdefghijabcdefghij");
    g_sink = s2;
    g_sink = NULL;
}
#endif

/* Scrub the stack region deeper calls used, so stale pointers do not linger. */
__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char buf[64 * 1024];
    memset((char *)buf, 0, sizeof buf);
}

/* ---------------- OpenSSL ---------------- */
static EVP_PKEY *g_key_tmp;
static X509 *g_cert_tmp;

static void make_cert(EVP_PKEY **pkey, X509 **pcert)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    if (!k) die("EVP_EC_gen");
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 4242);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 30);
    X509_set_pubkey(x, k);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "C", MBSTRING_ASC, (const unsigned char *)"FR", -1, -1, 0);
    X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)"mtrace test", -1, -1,
                               0);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                               0);
    X509_set_issuer_name(x, n);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:localhost");
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    if (!X509_sign(x, k, EVP_sha256())) die("X509_sign");
    *pkey = k;
    *pcert = x;
}

static void setup_ssl(void)
{
    EVP_PKEY *k;
    X509 *x;
    make_cert(&k, &x);

    g_server_ctx = SSL_CTX_new(TLS_server_method());
    if (!g_server_ctx) die("server ctx");
    if (SSL_CTX_use_certificate(g_server_ctx, x) != 1) die("use cert");
    if (SSL_CTX_use_PrivateKey(g_server_ctx, k) != 1) die("use key");
    if (SSL_CTX_check_private_key(g_server_ctx) != 1) die("check key");

    g_client_ctx = SSL_CTX_new(TLS_client_method());
    if (!g_client_ctx) die("client ctx");
    if (SSL_CTX_load_verify_locations(g_client_ctx, "/etc/ssl/certs/ca-certificates.crt", NULL) !=
        1)
        die("load CA file");
    SSL_CTX_set_default_verify_paths(g_client_ctx);
    /* also trust our own self-signed cert, and verify the peer for real */
    X509_STORE_add_cert(SSL_CTX_get_cert_store(g_client_ctx), x);
    SSL_CTX_set_verify(g_client_ctx, SSL_VERIFY_PEER, NULL);

    /* the contexts hold their own references */
    X509_free(x);
    EVP_PKEY_free(k);
    g_key_tmp = NULL;
    g_cert_tmp = NULL;
}

static int tls_round(int round)
{
    SSL *c = SSL_new(g_client_ctx), *s = SSL_new(g_server_ctx);
    BIO *cb, *sb;
    if (!c || !s) die("SSL_new");
    if (!BIO_new_bio_pair(&cb, 0, &sb, 0)) die("bio pair");
    SSL_set_bio(c, cb, cb);
    SSL_set_bio(s, sb, sb);
    SSL_set_connect_state(c);
    SSL_set_accept_state(s);
    SSL_set_tlsext_host_name(c, "localhost");
    if (round & 1) SSL_set_max_proto_version(c, TLS1_2_VERSION);

    int cdone = 0, sdone = 0, iter = 0;
    while (!(cdone && sdone)) {
        if (++iter > 1000) die("handshake loop");
        if (!cdone) {
            int r = SSL_do_handshake(c);
            if (r == 1)
                cdone = 1;
            else {
                int err = SSL_get_error(c, r);
                if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) die("client hs");
            }
        }
        if (!sdone) {
            int r = SSL_do_handshake(s);
            if (r == 1)
                sdone = 1;
            else {
                int err = SSL_get_error(s, r);
                if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) die("server hs");
            }
        }
    }
    if (SSL_get_verify_result(c) != X509_V_OK) die("verify result");

    char msg[4096], got[4096];
    long total = 0;
    for (int i = 0; i < 8; i++) {
        memset(msg, 'a' + i, sizeof msg);
        if (SSL_write(c, msg, sizeof msg) != (int)sizeof msg) die("client write");
        int n, have = 0;
        while (have < (int)sizeof msg) {
            n = SSL_read(s, got + have, sizeof got - have);
            if (n <= 0) die("server read");
            have += n;
        }
        if (memcmp(msg, got, sizeof msg)) die("mismatch");
        if (SSL_write(s, got, 100) != 100) die("server write");
        n = SSL_read(c, got, sizeof got);
        if (n != 100) die("client read");
        total += have + n;
    }
    SSL_shutdown(c);
    SSL_shutdown(s);
    SSL_shutdown(c);
    if (round == 0) printf("tls: %s %s\n", SSL_get_version(c), SSL_get_cipher(c));
    SSL_free(c);
    SSL_free(s);
    return (int)total;
}

/* ---------------- zlib ---------------- */
static void do_zlib(void)
{
    size_t n = 100 * 1024;
    unsigned char *in = malloc(n), *comp, *back = malloc(n);
    uLongf clen;
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)((i * 7 + round) % 251 ^ (i >> 9));
        z_stream d;
        memset(&d, 0, sizeof d);
        if (deflateInit(&d, 6) != Z_OK) die("deflateInit");
        clen = deflateBound(&d, n);
        comp = malloc(clen);
        d.next_in = in;
        d.avail_in = n;
        d.next_out = comp;
        d.avail_out = clen;
        if (deflate(&d, Z_FINISH) != Z_STREAM_END) die("deflate");
        clen = d.total_out;
        deflateEnd(&d);
        z_stream f;
        memset(&f, 0, sizeof f);
        if (inflateInit(&f) != Z_OK) die("inflateInit");
        f.next_in = comp;
        f.avail_in = clen;
        f.next_out = back;
        f.avail_out = n;
        if (inflate(&f, Z_FINISH) != Z_STREAM_END) die("inflate");
        inflateEnd(&f);
        if (memcmp(in, back, n)) die("zlib mismatch");
        free(comp);
    }
    /* one stream kept mid-use in a global */
    memset(&g_zs, 0, sizeof g_zs);
    if (deflateInit2(&g_zs, 9, Z_DEFLATED, 15, 9, Z_DEFAULT_STRATEGY) != Z_OK) die("deflateInit2");
    g_zout = malloc(64 * 1024);
    g_zs.next_in = in;
    g_zs.avail_in = n / 2;
    g_zs.next_out = g_zout;
    g_zs.avail_out = 64 * 1024;
    if (deflate(&g_zs, Z_NO_FLUSH) != Z_OK) die("deflate mid");
    g_zs.next_in = NULL;
    g_zs.avail_in = 0;
    free(in);
    free(back);
    printf("zlib: kept stream, total_in=%lu total_out=%lu\n", g_zs.total_in, g_zs.total_out);
}

/* ---------------- libxml2 ---------------- */
static void do_xml(void)
{
    char buf[8192];
    for (int d = 0; d < 4; d++) {
        int len = snprintf(buf, sizeof buf,
                           "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                           "<config version=\"%d\" xmlns:x=\"urn:x\">",
                           d);
        for (int i = 0; i < 40; i++)
            len +=
                snprintf(buf + len, sizeof buf - len,
                         "<item id=\"%d\" x:kind=\"k%d\"><name>item-%d-%d</name><v>%d</v></item>",
                         i, i % 3, d, i, i * d);
        len += snprintf(buf + len, sizeof buf - len, "</config>");
        xmlDocPtr doc = xmlReadMemory(buf, len, "mem.xml", NULL, 0);
        if (!doc) die("xml parse");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        int count = 0;
        for (xmlNodePtr c = root->children; c; c = c->next)
            if (c->type == XML_ELEMENT_NODE) count++;
        if (count != 40) die("xml count");
        if (d == 2)
            g_doc = doc;
        else
            xmlFreeDoc(doc);
    }
    printf("xml: kept doc root=%s\n", xmlDocGetRootElement(g_doc)->name);
}

/* ---------------- sqlite3 ---------------- */
static void do_sqlite(void)
{
    char *err = NULL;
    if (sqlite3_open(":memory:", &g_db) != SQLITE_OK) die("sqlite open");
    if (sqlite3_exec(g_db,
                     "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);"
                     "CREATE INDEX t_name ON t(name);",
                     NULL, NULL, &err) != SQLITE_OK)
        die(err);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(g_db, "INSERT INTO t(name, v) VALUES (?, ?)", -1, &st, NULL);
    for (int i = 0; i < 500; i++) {
        char name[32];
        snprintf(name, sizeof name, "row-%d", i);
        sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(st, 2, i * 1.5);
        if (sqlite3_step(st) != SQLITE_DONE) die("insert");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_prepare_v2(g_db, "SELECT count(*), sum(v) FROM t WHERE name LIKE 'row-1%'", -1, &st,
                       NULL);
    if (sqlite3_step(st) != SQLITE_ROW) die("select");
    printf("sqlite: count=%d sum=%g\n", sqlite3_column_int(st, 0), sqlite3_column_double(st, 1));
    sqlite3_finalize(st);
    sqlite3_prepare_v2(g_db, "SELECT name FROM t WHERE name = ?", -1, &st, NULL);
    sqlite3_bind_text(st, 1, "row-42", -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) die("select 2");
    sqlite3_finalize(st);
}

/* ---------------- libyaml ---------------- */
static const char yaml_doc[] =
    "server:\n  host: localhost\n  port: 8443\n  tls: {cert: a.pem, key: a.key}\n"
    "routes:\n  - path: /a\n    to: backend-a\n  - path: /b\n    to: backend-b\n"
    "limits: [1, 2, 3, 4, 5]\n";

static void do_yaml(void)
{
    if (!yaml_parser_initialize(&g_yaml)) die("yaml init");
    yaml_parser_set_input_string(&g_yaml, (const unsigned char *)yaml_doc, strlen(yaml_doc));
    int events = 0, scalars = 0;
    yaml_event_t ev;
    for (;;) { /* stop part-way: the parser stays mid-document in the global */
        if (!yaml_parser_parse(&g_yaml, &ev)) die("yaml parse");
        events++;
        if (ev.type == YAML_SCALAR_EVENT) scalars++;
        int end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        if (end || scalars == 9) break;
    }
    printf("yaml: %d events, %d scalars, parser kept\n", events, scalars);
}

#ifdef REALLIBS_NIF
#include <erl_nif.h>

/* run(): the same work in a node, once (a second run would replace the globals, and lose what
 * they held). */
static ERL_NIF_TERM run(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    static int ran;
    (void)argc;
    (void)argv;
    if (ran++) return enif_make_badarg(env);
    setup_ssl();
    long t = 0;
    for (int r = 0; r < 6; r++)
        t += tls_round(r);
    do_zlib();
    do_xml();
    do_sqlite();
    do_yaml();
    scrub_stack();
    return enif_make_long(env, t);
}

static ErlNifFunc funcs[] = {{"run", 0, run, ERL_NIF_DIRTY_JOB_CPU_BOUND}};
ERL_NIF_INIT(Elixir.Mtrace.Test.RealLibs, funcs, NULL, NULL, NULL, NULL)
#else
int main(void)
{
    leak_five();
    scrub_stack();
    setup_ssl();
    long t = 0;
    for (int r = 0; r < 6; r++)
        t += tls_round(r);
    printf("tls: 6 rounds, %ld bytes\n", t);
    do_zlib();
    do_xml();
    do_sqlite();
    do_yaml();
    scrub_stack();
    return 0; /* no cleanup: globals keep the libraries' state */
}
#endif
