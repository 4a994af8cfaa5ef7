/* loadgen: a load generator for RocketMQ 4.x remoting brokers, in C so that the driver is not
 * what a benchmark measures (the Python drivers cost as much CPU per message as the broker).
 *
 *   loadgen send  [options]   SEND_MESSAGE_V2 (310), one message per request
 *   loadgen batch [options]   SEND_BATCH_MESSAGE (320), --batch messages per request
 *   loadgen pull  [options]   GET_MAX_OFFSET (30) of every queue, then PULL_MESSAGE (11) of
 *                             everything from offset 0 up to those offsets
 *
 * One thread, epoll over --connections non-blocking sockets, --in-flight requests outstanding on
 * each (pipelined; a reply is matched to its request by opaque). Closed loop: every reply
 * releases the next request on its slot. Latency is per request, from the moment the request is
 * queued for write to the moment its reply is parsed, kept in a log-bucketed histogram (1/128
 * relative resolution), so memory does not grow with the run. Replies during --warmup are not
 * counted. "loadgen: window start" / "loadgen: window end" lines on stderr mark the measured
 * window, so that a caller can read other processes' CPU over the same window.
 *
 * Output: one JSON line on stdout. Exit 0 when the run completed (errors, i.e. replies with a
 * non-zero code, are counted and reported, not fatal), 1 on a lost connection or a stall, 2 on a
 * usage error.
 *
 * Wire: docs/formats.md §4 (frame, JSON and ROCKETMQ headers) and §1 (batch body, stored
 * records). The JSON header is what the 4.x Java client writes (fastjson: keys sorted,
 * extFields all strings, control characters as \u00XX).
 *
 * Build: cc -O2 -Wall -Wextra -o build/loadgen bench/loadgen.c   (C11 + POSIX/Linux, libc only)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BENCH_PROG "loadgen"
#include "bench_common.h"

enum { CODE_PULL = 11, CODE_GET_MAX_OFFSET = 30, CODE_SEND_V2 = 310, CODE_SEND_BATCH = 320 };
enum mode { M_SEND, M_BATCH, M_PULL };
enum phase { P_WARMUP, P_MEASURE, P_DRAIN };
enum { SER_JSON = 0, SER_ROCKETMQ = 1 };
#define JAVA_VERSION 395 /* V4_9_4, what the 4.9 client reports */
#define MAX_ERR_CODES 16

/* ------------------------------------------------------------------------------------ options */
static struct {
    enum mode mode;
    char host[64];
    int port;
    const char *topic, *group, *tags, *broker_name;
    int queues, body, batch, in_flight, conns, max_msgs, serialize, sys_flag;
    double seconds, warmup, timeout;
    long long count;
} opt = {.host = "127.0.0.1", .port = 10911, .topic = "BenchTopic", .group = "loadgen", .queues = 4,
         .body = 1024, .batch = 32, .in_flight = 64, .conns = 1, .max_msgs = 32, .seconds = 5,
         .warmup = -1, .timeout = 30};

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ------------------------------------------------------------------- latency histogram (HDR-like)
 * Values below 2^SUB_BITS ns are exact; above, each power of two is split into 2^(SUB_BITS-1)
 * buckets: a percentile is off by at most 1/128 of its value. */
#define SUB_BITS 8
#define HALF (1u << (SUB_BITS - 1))
#define NBUCKETS ((1u << SUB_BITS) + 64u * HALF)
static uint64_t hist[NBUCKETS];
static uint64_t hist_n;

static unsigned bucket_of(uint64_t v) {
    if (v < (1u << SUB_BITS)) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - SUB_BITS + 1;
    return (1u << SUB_BITS) + (shift - 1) * HALF + (unsigned)((v >> shift) - HALF);
}

static double bucket_mid(unsigned b) {
    if (b < (1u << SUB_BITS)) return b;
    unsigned shift = (b - (1u << SUB_BITS)) / HALF + 1;
    uint64_t top = (b - (1u << SUB_BITS)) % HALF + HALF;
    return ((double)(top << shift) + (double)(((top + 1) << shift) - 1)) / 2;
}

static double pct_us(double q) {
    if (!hist_n) return -1;
    uint64_t rank = (uint64_t)(q * (double)hist_n + 0.999999999), seen = 0;
    if (rank < 1) rank = 1;
    for (unsigned b = 0; b < NBUCKETS; b++) {
        seen += hist[b];
        if (seen >= rank) return bucket_mid(b) / 1000.0;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------ buffers */
typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_reserve(buf_t *b, size_t more) { grow(&b->p, &b->cap, b->len, more, 65536); }

static void put(buf_t *b, const void *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void puts_(buf_t *b, const char *s) { put(b, s, strlen(s)); }
static void put_u64(buf_t *b, uint64_t v) {
    char tmp[24];
    int i = 24;
    do tmp[--i] = (char)('0' + v % 10); while (v /= 10);
    put(b, tmp + i, (size_t)(24 - i));
}
static void put_be(buf_t *b, uint64_t v, int bytes) {
    unsigned char tmp[8];
    for (int i = bytes - 1; i >= 0; i--, v >>= 8) tmp[i] = (unsigned char)v;
    put(b, tmp, (size_t)bytes);
}
static void set_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}
static uint32_t be32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}
static uint16_t be16(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint16_t)(u[0] << 8 | u[1]);
}

/* a JSON string as fastjson writes it: quotes, backslashes and control characters escaped */
static void put_json_str(buf_t *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n * 6 + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
        else if (c < 0x20) { memcpy(o, "\\u00", 4); o[4] = hex[c >> 4]; o[5] = hex[c & 15]; o += 6; }
        else *o++ = (char)c;
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

/* ------------------------------------------------------------------------------ request header
 * extFields as (key, value) string pairs, written in either serialization. */
typedef struct { const char *k; const char *v; size_t vlen; } kv_t;

static void put_frame(buf_t *w, int code, int32_t opaque, const kv_t *ext, int n, const char *body,
                      size_t body_len) {
    size_t start = w->len;
    buf_reserve(w, 8);
    w->len += 8; /* length and header length, patched below */
    if (opt.serialize == SER_JSON) {
        puts_(w, "{\"code\":");
        put_u64(w, (uint64_t)code);
        puts_(w, ",\"extFields\":{");
        for (int i = 0; i < n; i++) {
            if (i) puts_(w, ",");
            put_json_str(w, ext[i].k, strlen(ext[i].k));
            puts_(w, ":");
            put_json_str(w, ext[i].v, ext[i].vlen);
        }
        puts_(w, "},\"flag\":0,\"language\":\"JAVA\",\"opaque\":");
        put_u64(w, (uint64_t)opaque);
        puts_(w, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
        put_u64(w, JAVA_VERSION);
        puts_(w, "}");
    } else { /* RocketMQSerializable.rocketMQProtocolEncode */
        put_be(w, (uint64_t)code, 2);
        put_be(w, 0, 1); /* LanguageCode.JAVA */
        put_be(w, JAVA_VERSION, 2);
        put_be(w, (uint32_t)opaque, 4);
        put_be(w, 0, 4); /* flag: request */
        put_be(w, 0, 4); /* no remark */
        size_t ext_at = w->len;
        put_be(w, 0, 4);
        for (int i = 0; i < n; i++) {
            size_t kl = strlen(ext[i].k);
            put_be(w, kl, 2);
            put(w, ext[i].k, kl);
            put_be(w, ext[i].vlen, 4);
            put(w, ext[i].v, ext[i].vlen);
        }
        set_be32(w->p + ext_at, (uint32_t)(w->len - ext_at - 4));
    }
    size_t header_len = w->len - start - 8;
    if (body_len) put(w, body, body_len);
    set_be32(w->p + start, (uint32_t)(w->len - start - 4));
    set_be32(w->p + start + 4, (uint32_t)opt.serialize << 24 | (uint32_t)header_len);
}

/* --------------------------------------------------------------------------- response header */
typedef struct {
    int code;
    int32_t opaque;
    int have_offset, have_next;
    long long offset, next_begin; /* GET_MAX_OFFSET's "offset", PULL's "nextBeginOffset" */
    const char *remark;
    size_t remark_len;
} reply_t;

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *e) { /* p at the opening quote */
    for (p++; p < e; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e, int depth) {
    p = ws(p, e);
    if (p >= e || depth > 64) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
                p = ws(p, e);
                if (p >= e || *p != ':') return NULL;
                p++;
            }
            if (!(p = skip_value(p, e, depth + 1))) return NULL;
            p = ws(p, e);
            if (p >= e) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = ws(p + 1, e);
        }
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ') p++; /* number, literal */
    return p;
}

static long long int_of(const char *p, const char *e) { /* a number, bare or in quotes */
    if (p < e && *p == '"') p++;
    int neg = p < e && *p == '-';
    if (neg) p++;
    long long v = 0;
    while (p < e && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    return neg ? -v : v;
}

static int key_is(const char *k, const char *ke, const char *want) {
    size_t n = strlen(want);
    return (size_t)(ke - k) == n + 2 && memcmp(k + 1, want, n) == 0;
}

static void ext_field(reply_t *r, const char *k, const char *ke, const char *v, const char *ve) {
    if (key_is(k, ke, "offset")) { r->offset = int_of(v, ve); r->have_offset = 1; }
    else if (key_is(k, ke, "nextBeginOffset")) { r->next_begin = int_of(v, ve); r->have_next = 1; }
}

/* Walks the top-level object (and extFields) properly, so that a key inside a string or a
 * nested object is never taken for a field. */
static int parse_json_header(const char *p, const char *e, reply_t *r) {
    p = ws(p, e);
    if (p >= e || *p != '{') return -1;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return 0;
    for (;;) {
        if (p >= e || *p != '"') return -1;
        const char *k = p;
        if (!(p = skip_string(p, e))) return -1;
        const char *ke = p;
        p = ws(p, e);
        if (p >= e || *p++ != ':') return -1;
        p = ws(p, e);
        const char *v = p;
        if (!(p = skip_value(p, e, 0))) return -1;
        if (key_is(k, ke, "code")) r->code = (int)int_of(v, p);
        else if (key_is(k, ke, "opaque")) r->opaque = (int32_t)int_of(v, p);
        else if (key_is(k, ke, "remark") && *v == '"') { r->remark = v + 1; r->remark_len = (size_t)(p - v - 2); }
        else if (key_is(k, ke, "extFields") && *v == '{') {
            const char *q = ws(v + 1, p);
            while (q < p && *q == '"') {
                const char *kk = q, *kke = skip_string(q, p);
                if (!kke) return -1;
                q = ws(kke, p);
                if (q >= p || *q++ != ':') return -1;
                q = ws(q, p);
                const char *vv = q;
                if (!(q = skip_value(q, p, 1))) return -1;
                ext_field(r, kk, kke, vv, q);
                q = ws(q, p);
                if (q < p && *q == ',') q = ws(q + 1, p);
            }
        }
        p = ws(p, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        return p < e && *p == '}' ? 0 : -1;
    }
}

static int parse_rocketmq_header(const char *p, const char *e, reply_t *r) {
    if (e - p < 21) return -1;
    r->code = (int16_t)be16(p);
    r->opaque = (int32_t)be32(p + 5);
    uint32_t rl = be32(p + 13);
    if ((size_t)(e - p) < 21 + (size_t)rl) return -1;
    r->remark = p + 17;
    r->remark_len = rl;
    const char *q = p + 17 + rl;
    uint32_t el = be32(q);
    q += 4;
    if ((size_t)(e - q) < el) return -1;
    const char *qe = q + el;
    while (qe - q >= 6) {
        uint16_t kl = be16(q);
        const char *k = q + 2;
        if (qe - k < kl + 4) return -1;
        uint32_t vl = be32(k + kl);
        const char *v = k + kl + 4;
        if ((size_t)(qe - v) < vl) return -1;
        char key[32];
        if (kl < sizeof key - 2) { /* ext_field compares quoted keys */
            key[0] = '"'; memcpy(key + 1, k, kl); key[kl + 1] = '"';
            ext_field(r, key, key + kl + 2, v, v + vl);
        }
        q = v + vl;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ connections */
typedef struct {
    uint64_t t0;
    int busy, msgs, queue, range;
    long long offset;
} slot_t;

typedef struct {
    int fd, idx, want_out;
    buf_t r, w;
    size_t rpos, wpos;
    slot_t *slots;
    uint32_t *gen;
} conn_t;

static conn_t *conns;
static int epfd;

/* A request's opaque names its slot: slot + in_flight * generation, generation wrapping before
 * int32 overflows. A reply whose opaque is not the slot's current one is a protocol error. */
static int32_t opaque_of(conn_t *c, int s) {
    uint32_t span = 0x7fffffffu / (uint32_t)opt.in_flight;
    c->gen[s] = (c->gen[s] + 1) % span;
    return (int32_t)(c->gen[s] * (uint32_t)opt.in_flight + (uint32_t)s);
}

static void connect_all(void) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1) die("bad address %s", opt.host);
    if ((epfd = epoll_create1(0)) < 0) die("epoll_create1: %s", strerror(errno));
    conns = calloc((size_t)opt.conns, sizeof *conns);
    for (int i = 0; i < opt.conns; i++) {
        conn_t *c = &conns[i];
        c->idx = i;
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect %s:%d: %s", opt.host, opt.port, strerror(errno));
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        c->slots = calloc((size_t)opt.in_flight, sizeof *c->slots);
        c->gen = calloc((size_t)opt.in_flight, sizeof *c->gen);
        buf_reserve(&c->r, 1 << 20);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    }
}

static void flush_writes(conn_t *c) {
    while (c->wpos < c->w.len) {
        ssize_t n = write(c->fd, c->w.p + c->wpos, c->w.len - c->wpos);
        if (n > 0) { c->wpos += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        die("write to %s:%d: %s", opt.host, opt.port, n < 0 ? strerror(errno) : "closed");
    }
    if (c->wpos == c->w.len) c->wpos = c->w.len = 0;
    int want = c->wpos < c->w.len;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
    }
}

/* ------------------------------------------------------------------------------- run state */
static enum phase phase;
static uint64_t t_start, t_measure, t_end, last_progress;
static struct rusage ru_start, ru_end;
static long long msgs, requests, errors, body_bytes, record_bytes; /* in the measured window */
static long long msgs_total, issued_msgs;                          /* the whole run */
static long long outstanding;
static int err_code[MAX_ERR_CODES];
static long long err_count[MAX_ERR_CODES];
static char first_remark[200];

static void count_error(int code, const char *remark, size_t rl) {
    errors++;
    int i = 0;
    while (i < MAX_ERR_CODES && err_count[i] && err_code[i] != code) i++;
    if (i < MAX_ERR_CODES) { err_code[i] = code; err_count[i]++; }
    if (!first_remark[0]) {
        if (rl >= sizeof first_remark) rl = sizeof first_remark - 1;
        if (remark) memcpy(first_remark, remark, rl);
        first_remark[rl] = 0;
        if (!rl) snprintf(first_remark, sizeof first_remark, "code %d", code);
    }
}

/* ------------------------------------------------------------------------------ send, batch */
static char *body;                 /* --body bytes of random data */
static char uniq_prefix[21];       /* as MessageClientIDSetter: ip, pid, a per-process random part */
static uint64_t uniq_counter;

static size_t uniq_props(char *out) { /* "UNIQ_KEY\1<32 hex>\2WAIT\1true[\2TAGS\1<tags>]" */
    size_t n = (size_t)sprintf(out, "UNIQ_KEY\001%s%012llX\002WAIT\001true", uniq_prefix,
                               (unsigned long long)(uniq_counter++ & 0xFFFFFFFFFFFFull));
    if (opt.tags) n += (size_t)sprintf(out + n, "\002TAGS\001%s", opt.tags);
    return n;
}

static buf_t batch_body;

static void issue_send(conn_t *c, int s) {
    static long long rr;
    int q = (int)(rr++ % opt.queues);
    char props[256], qs[16], qn[16], ts[24];
    size_t pl;
    int code, n_msgs;
    const char *b;
    size_t bl;
    if (opt.mode == M_SEND) {
        pl = uniq_props(props);
        code = CODE_SEND_V2, n_msgs = 1, b = body, bl = (size_t)opt.body;
    } else { /* MessageDecoder.encodeMessages: the Java client writes 0 for MAGIC and BODYCRC */
        batch_body.len = 0;
        for (int i = 0; i < opt.batch; i++) {
            char mp[256];
            size_t ml = uniq_props(mp);
            put_be(&batch_body, (uint64_t)(4 * 5 + opt.body + 2 + (int)ml), 4);
            put_be(&batch_body, 0, 4);
            put_be(&batch_body, 0, 4);
            put_be(&batch_body, 0, 4); /* flag */
            put_be(&batch_body, (uint64_t)opt.body, 4);
            put(&batch_body, body, (size_t)opt.body);
            put_be(&batch_body, ml, 2);
            put(&batch_body, mp, ml);
        }
        pl = (size_t)sprintf(props, "WAIT\001true"); /* a MessageBatch's own properties */
        code = CODE_SEND_BATCH, n_msgs = opt.batch, b = batch_body.p, bl = batch_body.len;
    }
    snprintf(qs, sizeof qs, "%d", q);
    snprintf(qn, sizeof qn, "%d", opt.queues);
    snprintf(ts, sizeof ts, "%llu", (unsigned long long)wall_ms());
    /* SendMessageRequestHeaderV2, null fields left out as Java leaves them out */
    kv_t ext[14] = {{"a", opt.group, strlen(opt.group)}, {"b", opt.topic, strlen(opt.topic)},
                    {"c", "TBW102", 6}, {"d", qn, strlen(qn)}, {"e", qs, strlen(qs)}, {"f", "0", 1},
                    {"g", ts, strlen(ts)}, {"h", "0", 1}, {"i", props, pl}, {"j", "0", 1},
                    {"k", "false", 5}, {"m", opt.mode == M_BATCH ? "true" : "false", opt.mode == M_BATCH ? 4 : 5}};
    int n = 12;
    if (opt.broker_name) ext[n++] = (kv_t){"n", opt.broker_name, strlen(opt.broker_name)};
    slot_t *sl = &c->slots[s];
    sl->busy = 1;
    sl->msgs = n_msgs;
    sl->t0 = now_ns();
    put_frame(&c->w, code, opaque_of(c, s), ext, n, b, bl);
    issued_msgs += n_msgs;
    outstanding++;
}

/* --------------------------------------------------------------------------------------- pull
 * The offsets [0, max) of every queue are cut into ranges; a slot takes a range and walks it
 * with pulls (each from the previous reply's nextBeginOffset, at most to the range's end), then
 * takes the next range. Every message is read exactly once, with --in-flight pulls outstanding
 * per connection. */
typedef struct { int queue; long long next, end; } range_t;
static range_t *ranges;
static int n_ranges, next_range;
static long long *max_offsets;

static void issue_pull(conn_t *c, int s) {
    slot_t *sl = &c->slots[s];
    range_t *rg = &ranges[sl->range];
    long long want = rg->end - rg->next;
    if (want > opt.max_msgs) want = opt.max_msgs;
    char qs[16], off[24], mx[24];
    snprintf(qs, sizeof qs, "%d", rg->queue);
    snprintf(off, sizeof off, "%lld", rg->next);
    snprintf(mx, sizeof mx, "%lld", want);
    /* PullMessageRequestHeader; sysFlag 0 (default): no commit, no suspend (the offsets exist); 4
     * (FLAG_SUBSCRIPTION): the subscription comes with the request, as Apache RocketMQ's broker needs
     * from a consumer that sent no heartbeat */
    char sf[16];
    snprintf(sf, sizeof sf, "%d", opt.sys_flag);
    kv_t ext[] = {{"consumerGroup", opt.group, strlen(opt.group)}, {"topic", opt.topic, strlen(opt.topic)},
                  {"queueId", qs, strlen(qs)}, {"queueOffset", off, strlen(off)}, {"maxMsgNums", mx, strlen(mx)},
                  {"sysFlag", sf, strlen(sf)}, {"commitOffset", "0", 1}, {"suspendTimeoutMillis", "0", 1},
                  {"subscription", "*", 1}, {"subVersion", "0", 1}};
    sl->busy = 1;
    sl->queue = rg->queue;
    sl->offset = rg->next;
    sl->t0 = now_ns();
    put_frame(&c->w, CODE_PULL, opaque_of(c, s), ext, (int)(sizeof ext / sizeof ext[0]), NULL, 0);
    outstanding++;
}

static int take_range(slot_t *sl) {
    if (next_range >= n_ranges) return 0;
    sl->range = next_range++;
    return 1;
}

/* the stored records of a pull reply (docs/formats.md §1): count, body bytes; -1 if malformed */
static long long walk_records(const char *p, size_t n, long long *bodies) {
    long long count = 0;
    size_t pos = 0;
    while (pos < n) {
        if (n - pos < 91) return -1;
        uint32_t total = be32(p + pos), magic = be32(p + pos + 4);
        if (total < 91 || total > n - pos || (magic != 0xDAA320A7u && magic != 0xDAA320A8u)) return -1;
        uint32_t sysflag = be32(p + pos + 36);
        size_t at = 84 + (sysflag & 0x10 ? 12 : 0) + (sysflag & 0x20 ? 12 : 0);
        if (at + 4 > total) return -1;
        *bodies += be32(p + pos + at);
        count++;
        pos += total;
    }
    return count;
}

static void setup_pull(void) {
    /* GET_MAX_OFFSET of every queue, all pipelined on the first connection */
    conn_t *c = &conns[0];
    max_offsets = calloc((size_t)opt.queues, sizeof *max_offsets);
    for (int q = 0; q < opt.queues; q++) {
        char qs[16];
        snprintf(qs, sizeof qs, "%d", q);
        kv_t ext[] = {{"topic", opt.topic, strlen(opt.topic)}, {"queueId", qs, strlen(qs)}};
        put_frame(&c->w, CODE_GET_MAX_OFFSET, q + 1, ext, 2, NULL, 0);
    }
    int fl = fcntl(c->fd, F_GETFL);
    fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK); /* a few blocking round trips before the clock */
    if (write(c->fd, c->w.p, c->w.len) != (ssize_t)c->w.len) die("write: %s", strerror(errno));
    c->w.len = 0;
    for (int got = 0; got < opt.queues;) {
        ssize_t n;
        while (c->r.len - c->rpos < 4 || c->r.len - c->rpos < 4 + (size_t)be32(c->r.p + c->rpos)) {
            buf_reserve(&c->r, 65536);
            n = read(c->fd, c->r.p + c->r.len, c->r.cap - c->r.len);
            if (n <= 0) die("GET_MAX_OFFSET: connection closed");
            c->r.len += (size_t)n;
        }
        const char *f = c->r.p + c->rpos;
        uint32_t len = be32(f), hw = be32(f + 4), hl = hw & 0xFFFFFF;
        reply_t r = {.code = -1};
        int bad = (hw >> 24 ? parse_rocketmq_header : parse_json_header)(f + 8, f + 8 + hl, &r);
        if (bad || r.code != 0 || !r.have_offset || r.opaque < 1 || r.opaque > opt.queues)
            die("GET_MAX_OFFSET of queue %d failed: code %d %.*s", got, r.code, (int)r.remark_len,
                r.remark ? r.remark : "");
        max_offsets[r.opaque - 1] = r.offset;
        c->rpos += 4 + len;
        got++;
    }
    fcntl(c->fd, F_SETFL, fl);
    if (c->rpos == c->r.len) c->rpos = c->r.len = 0;
    long long total = 0;
    for (int q = 0; q < opt.queues; q++) total += max_offsets[q];
    long long slots = (long long)opt.conns * opt.in_flight;
    long long chunk = (total + slots - 1) / (slots ? slots : 1);
    if (chunk < opt.max_msgs) chunk = opt.max_msgs;
    ranges = calloc((size_t)(total / chunk + opt.queues + 1), sizeof *ranges);
    for (int q = 0; q < opt.queues; q++)
        for (long long o = 0; o < max_offsets[q]; o += chunk)
            ranges[n_ranges++] = (range_t){q, o, o + chunk < max_offsets[q] ? o + chunk : max_offsets[q]};
}

/* ------------------------------------------------------------------------------------ replies */
static int may_issue(void) {
    if (phase == P_DRAIN) return 0;
    if (opt.count && phase == P_MEASURE && opt.mode != M_PULL) return issued_msgs < opt.count;
    if (opt.count && opt.mode == M_PULL) return msgs < opt.count;
    return 1;
}

static void on_reply(conn_t *c, const char *f, uint32_t len) {
    uint32_t hw = be32(f + 4), hl = hw & 0xFFFFFF;
    if (4 + (uint64_t)hl > len) die("reply header length %u exceeds the frame (%u)", hl, len);
    const char *h = f + 8, *bd = h + hl;
    size_t bl = len - 4 - hl;
    reply_t r = {.code = -1};
    if ((hw >> 24 ? parse_rocketmq_header : parse_json_header)(h, bd, &r))
        die("unparsable reply header: %.*s", (int)(hl < 200 ? hl : 200), h);
    int s = (int)((uint32_t)r.opaque % (uint32_t)opt.in_flight);
    slot_t *sl = &c->slots[s];
    if (r.opaque < 0 || !sl->busy || (uint32_t)r.opaque / (uint32_t)opt.in_flight != c->gen[s])
        die("reply with opaque %d matches no request", r.opaque);
    uint64_t t = now_ns();
    sl->busy = 0;
    outstanding--;
    last_progress = t;
    int counted = phase == P_MEASURE;
    if (counted) {
        hist[bucket_of(t - sl->t0)]++;
        hist_n++;
        requests++;
    }
    if (opt.mode != M_PULL) {
        if (r.code == 0) {
            msgs_total += sl->msgs;
            if (counted) { msgs += sl->msgs; body_bytes += (long long)sl->msgs * opt.body; }
        } else if (counted) count_error(r.code, r.remark, r.remark_len);
        if (may_issue()) issue_send(c, s);
        return;
    }
    range_t *rg = &ranges[sl->range];
    if (r.code == 0) {
        long long bodies = 0, n = walk_records(bd, bl, &bodies);
        if (n < 0 || !r.have_next || r.next_begin != sl->offset + n || n == 0) {
            /* a reply that does not add up would make the read-back count wrong: an error */
            static const char why[] = "pull reply: records do not match nextBeginOffset";
            count_error(-1, why, sizeof why - 1);
            rg->next = rg->end;
        } else {
            msgs += n, msgs_total += n, body_bytes += bodies, record_bytes += (long long)bl;
            rg->next = r.next_begin;
        }
    } else { /* NOT_FOUND, RETRY, OFFSET_MOVED below max offsets: counted, the range given up */
        count_error(r.code, r.remark, r.remark_len);
        rg->next = rg->end;
    }
    if ((rg->next < rg->end || take_range(sl)) && may_issue()) issue_pull(c, s);
}

static void on_readable(conn_t *c) {
    buf_t *b = &c->r;
    if (b->cap - b->len < 65536) {
        if (c->rpos) { /* compact before growing */
            memmove(b->p, b->p + c->rpos, b->len - c->rpos);
            b->len -= c->rpos;
            c->rpos = 0;
        }
        buf_reserve(b, 65536);
    }
    ssize_t n = read(c->fd, b->p + b->len, b->cap - b->len);
    if (n == 0) die("the broker closed connection %d (%lld requests outstanding)", c->idx, outstanding);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        die("read: %s", strerror(errno));
    }
    b->len += (size_t)n;
    while (b->len - c->rpos >= 4) {
        uint32_t len = be32(b->p + c->rpos);
        if (len < 4 || len > (1u << 30)) die("bad frame length %u", len);
        if (b->len - c->rpos < 4 + (size_t)len) {
            buf_reserve(b, 4 + (size_t)len); /* a frame larger than the buffer: make room */
            break;
        }
        on_reply(c, b->p + c->rpos, len);
        c->rpos += 4 + len;
    }
    if (c->rpos == b->len) c->rpos = b->len = 0;
}

/* ------------------------------------------------------------------------------------ main */
static void usage(void) {
    fputs("usage: loadgen send|batch|pull [--addr HOST:PORT] [--topic T] [--queues Q] [--body BYTES]\n"
          "         [--batch M] [--in-flight K] [--connections C] [--seconds S | --count N] [--warmup S]\n"
          "         [--max-msgs N] [--group G] [--tags T] [--broker-name B] [--serialize json|rocketmq]\n"
          "         [--timeout S] [--sys-flag F]\n"
          "  send: SEND_MESSAGE_V2 of BYTES, round robin over Q queues, K in flight per connection\n"
          "  batch: SEND_BATCH_MESSAGE of M messages of BYTES\n"
          "  pull: PULL_MESSAGE of queues 0..Q-1 from offset 0 to their max offsets, N per pull\n"
          "  --count N: issue N messages in the measured window instead of running --seconds\n"
          "             (pull: stop pulling once N were read)\n"
          "  --warmup S: unmeasured seconds first (default 1 for send/batch; pull has none)\n"
          "  --timeout S: give up after S seconds without a reply (default 30)\n"
          "  --sys-flag F: pull's sysFlag (default 0; 4 = the subscription comes with the request)\n", stderr);
    exit(2);
}

static void parse_args(int argc, char **argv) {
    if (argc < 2) usage();
    if (!strcmp(argv[1], "send")) opt.mode = M_SEND;
    else if (!strcmp(argv[1], "batch")) opt.mode = M_BATCH;
    else if (!strcmp(argv[1], "pull")) opt.mode = M_PULL;
    else usage();
    static struct option lo[] = {{"addr", 1, 0, 'a'}, {"topic", 1, 0, 't'}, {"queues", 1, 0, 'q'},
                                 {"body", 1, 0, 'b'}, {"batch", 1, 0, 'm'}, {"in-flight", 1, 0, 'k'},
                                 {"connections", 1, 0, 'c'}, {"seconds", 1, 0, 's'}, {"count", 1, 0, 'n'},
                                 {"warmup", 1, 0, 'w'}, {"max-msgs", 1, 0, 'x'}, {"group", 1, 0, 'g'},
                                 {"tags", 1, 0, 'T'}, {"broker-name", 1, 0, 'B'}, {"serialize", 1, 0, 'S'},
                                 {"timeout", 1, 0, 'o'}, {"sys-flag", 1, 0, 'F'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int ch;
    optind = 2;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'a': {
            const char *colon = strrchr(optarg, ':');
            if (!colon || colon - optarg >= (long)sizeof opt.host) usage();
            memcpy(opt.host, optarg, (size_t)(colon - optarg));
            opt.host[colon - optarg] = 0;
            opt.port = atoi(colon + 1);
            break;
        }
        case 't': opt.topic = optarg; break;
        case 'q': opt.queues = atoi(optarg); break;
        case 'b': opt.body = atoi(optarg); break;
        case 'm': opt.batch = atoi(optarg); break;
        case 'k': opt.in_flight = atoi(optarg); break;
        case 'c': opt.conns = atoi(optarg); break;
        case 's': opt.seconds = atof(optarg); break;
        case 'n': opt.count = atoll(optarg); break;
        case 'w': opt.warmup = atof(optarg); break;
        case 'x': opt.max_msgs = atoi(optarg); break;
        case 'F': opt.sys_flag = atoi(optarg); break;
        case 'g': opt.group = optarg; break;
        case 'T': opt.tags = optarg; break;
        case 'B': opt.broker_name = optarg; break;
        case 'S':
            if (!strcmp(optarg, "json")) opt.serialize = SER_JSON;
            else if (!strcmp(optarg, "rocketmq")) opt.serialize = SER_ROCKETMQ;
            else usage();
            break;
        case 'o': opt.timeout = atof(optarg); break;
        default: usage();
        }
    }
    if (optind != argc || opt.queues < 1 || opt.body < 0 || opt.batch < 1 || opt.in_flight < 1 || opt.conns < 1 ||
        opt.max_msgs < 1 || (opt.seconds <= 0 && !opt.count) || opt.port <= 0 || strlen(opt.topic) > 127 ||
        (opt.tags && strlen(opt.tags) > 100))
        usage();
    if (opt.warmup < 0) opt.warmup = opt.mode == M_PULL ? 0 : 1;
    if (opt.mode == M_PULL) opt.warmup = 0; /* the data is read once: nothing to warm */
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

static void start_window(uint64_t t) {
    phase = P_MEASURE;
    t_measure = t;
    getrusage(RUSAGE_SELF, &ru_start);
    fputs("loadgen: window start\n", stderr);
    fflush(stderr);
}

static void end_window(uint64_t t) {
    phase = P_DRAIN;
    t_end = t;
    getrusage(RUSAGE_SELF, &ru_end);
    fputs("loadgen: window end\n", stderr);
    fflush(stderr);
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN); /* a broker that goes away is reported by write(), not a silent death */
    body = malloc((size_t)opt.body + 1);
    uint64_t x = now_ns() ^ ((uint64_t)getpid() << 32);
    for (int i = 0; i < opt.body; i++) { /* xorshift: incompressible, no libc rand */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        body[i] = (char)x;
    }
    snprintf(uniq_prefix, sizeof uniq_prefix, "7F000001%04X%08X", (unsigned)getpid() & 0xFFFF,
             (unsigned)(x & 0xFFFFFFFF));
    connect_all();
    last_progress = t_start = now_ns();
    if (opt.mode == M_PULL) setup_pull();
    if (opt.warmup > 0) phase = P_WARMUP;
    else start_window(now_ns());
    for (int i = 0; i < opt.conns; i++) {
        for (int s = 0; s < opt.in_flight && may_issue(); s++) {
            if (opt.mode != M_PULL) issue_send(&conns[i], s);
            else if (take_range(&conns[i].slots[s])) issue_pull(&conns[i], s);
        }
        flush_writes(&conns[i]);
    }
    struct epoll_event evs[64];
    for (;;) {
        uint64_t t = now_ns();
        if (phase == P_WARMUP && t - t_start >= (uint64_t)(opt.warmup * 1e9)) {
            /* counted from here: the replies of requests outstanding now count, as in any window */
            start_window(t);
            for (int i = 0; i < opt.conns; i++) /* count mode: slots idle since the warm-up */
                for (int s = 0; s < opt.in_flight && opt.mode != M_PULL; s++)
                    if (!conns[i].slots[s].busy && may_issue()) issue_send(&conns[i], s);
        }
        if (phase == P_MEASURE) {
            int timed_out = !opt.count && t - t_measure >= (uint64_t)(opt.seconds * 1e9);
            int done = !outstanding && (opt.count || opt.mode == M_PULL);
            if (timed_out || done) end_window(timed_out || last_progress < t_measure ? t : last_progress);
        }
        if (phase == P_DRAIN && !outstanding) break;
        if (t - last_progress > (uint64_t)(opt.timeout * 1e9))
            die("no reply for %.0f s with %lld requests outstanding", opt.timeout, outstanding);
        int n = epoll_wait(epfd, evs, 64, 50);
        if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
        }
        for (int i = 0; i < opt.conns; i++) /* everything the replies released, one write each */
            if (conns[i].w.len) flush_writes(&conns[i]);
    }
    double secs = (double)(t_end - t_measure) / 1e9;
    double cu = tv_s(ru_end.ru_utime) - tv_s(ru_start.ru_utime), cs = tv_s(ru_end.ru_stime) - tv_s(ru_start.ru_stime);
    const char *names[] = {"send", "batch", "pull"};
    printf("{\"mode\":\"%s\",\"msgs\":%lld,\"seconds\":%.6f,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f,"
           "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"errors\":%lld,\"cpu_user_s\":%.6f,"
           "\"cpu_sys_s\":%.6f,\"cpu_us_per_msg\":%.4f,\"requests\":%lld,\"body_bytes\":%lld,",
           names[opt.mode], msgs, secs, secs > 0 ? (double)msgs / secs : 0,
           secs > 0 ? (double)body_bytes / secs / 1e6 : 0,
           pct_us(0.5), pct_us(0.99), pct_us(0.999), errors, cu, cs, msgs ? (cu + cs) * 1e6 / (double)msgs : 0,
           requests, body_bytes);
    if (opt.mode == M_PULL) {
        long long total = 0;
        for (int q = 0; q < opt.queues; q++) total += max_offsets[q];
        printf("\"record_bytes\":%lld,\"record_mb_per_s\":%.3f,\"max_offsets_total\":%lld,", record_bytes,
               secs > 0 ? (double)record_bytes / secs / 1e6 : 0, total);
    }
    printf("\"msgs_total\":%lld,\"error_codes\":{", msgs_total);
    for (int i = 0; i < MAX_ERR_CODES && err_count[i]; i++)
        printf("%s\"%d\":%lld", i ? "," : "", err_code[i], err_count[i]);
    printf("},\"first_error\":");
    fflush(stdout);
    buf_t fe = {0};
    put_json_str(&fe, first_remark, strlen(first_remark));
    fwrite(fe.p, 1, fe.len, stdout);
    free(fe.p);
    printf(",\"connections\":%d,\"in_flight\":%d,\"body\":%d,\"batch\":%d,\"queues\":%d,\"max_msgs\":%d,"
           "\"serialize\":\"%s\",\"warmup_s\":%.3f}\n",
           opt.conns, opt.in_flight, opt.body, opt.mode == M_BATCH ? opt.batch : 1, opt.queues, opt.max_msgs,
           opt.serialize ? "rocketmq" : "json", opt.warmup);
    return 0;
}
