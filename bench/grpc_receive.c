/* grpc_receive: a driver of the gRPC front's consume path (apache.rocketmq.v2.MessagingService),
 * in C on libnghttp2's client API, so that the driver is not what a benchmark measures (the
 * grpc.aio driver of bench/grpc_bench.py spends 33-41 CPU-us per message itself).
 *
 *   grpc_receive --addr 127.0.0.1:8081 --topic T --group G [--in-flight 8] [--batch 32]
 *                [--invisible 30] [--long-poll 1] [--seconds 5] [--warmup 1] [--broker broker-a]
 *                [--telemetry HEX] [--deadline S]
 *
 * --telemetry: a TelemetryCommand's protobuf bytes (hex; the client's Settings) sent on a Telemetry
 * stream opened first and kept open, as every 5.x client does; the receives start once the server
 * answered it. Apache RocketMQ's Java proxy needs it: a ReceiveMessage from a client whose settings
 * it has not seen fails (ReceiveMessageActivity reads the subscription from them).
 *
 * One HTTP/2 connection, --in-flight slots. Each slot loops: ReceiveMessage of up to --batch
 * messages (pop, --invisible seconds invisible), the receipt handles read from the answer's
 * stream, then one AckMessage with all of them; the next receive when the ack is answered. A
 * receive that brings no message means the group caught up: that slot stops, and the measured
 * window ends at the last ack answered before the first such receive (or at --seconds). Messages are counted when their
 * ack is answered OK; during --warmup they are not counted. "grpc_receive: window start" /
 * "grpc_receive: window end" on stderr mark the window (the caller reads the broker's CPU there).
 *
 * Output: one JSON line on stdout: msgs, seconds, msgs_per_s, receives, acks, p50/p99 of the
 * receive calls and of the ack calls (us), the driver's own CPU per message. Exit 0 when the run
 * completed, 1 on a lost connection, a stall (--timeout) or a call answered with an error.
 *
 * Wire: the few protobuf fields of proto/apache/rocketmq/v2/{service,definition}.proto that
 * the calls need, encoded and read by hand.
 *
 * Build: make build/grpc_receive (cc -O2 ... -lnghttp2; Debian's libnghttp2-dev)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BENCH_PROG "grpc_receive"
#include "bench_common.h"

#define MAX_SLOTS 1024
#define HIST_BUCKETS 4096 /* log-bucketed: 1/128 relative resolution up to ~2^32 ns */

static struct {
    char host[64];
    int port, in_flight, batch;
    const char *topic, *group, *broker, *client_id, *telemetry;
    double seconds, warmup, timeout, invisible, long_poll, deadline;
} opt = {.host = "127.0.0.1", .port = 8081, .in_flight = 8, .batch = 32, .topic = "BenchClientTopic",
         .group = "bench_grpc_receive_h2", .broker = "broker-a", .client_id = "grpc_receive@bench",
         .seconds = 5, .warmup = 1, .timeout = 30, .invisible = 30, .long_poll = 1};

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* ---------------------------------------------------------------------------- histogram */
typedef struct { uint64_t b[HIST_BUCKETS]; uint64_t n; } hist;

static int bucket(uint64_t ns) {
    if (ns < 128) return (int)ns;
    int e = 63 - __builtin_clzll(ns); /* >= 7 */
    int i = 128 * (e - 6) + (int)((ns >> (e - 7)) & 127);
    return i < HIST_BUCKETS ? i : HIST_BUCKETS - 1;
}

static uint64_t bucket_ns(int i) {
    if (i < 128) return (uint64_t)i;
    int e = i / 128 + 6;
    return ((uint64_t)(128 + i % 128)) << (e - 7);
}

static void hist_add(hist *h, uint64_t ns) { h->b[bucket(ns)]++; h->n++; }

static double hist_q(const hist *h, double q) {
    if (!h->n) return 0;
    uint64_t want = (uint64_t)(q * (double)(h->n - 1)) + 1, seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++)
        if ((seen += h->b[i]) >= want) return bucket_ns(i) / 1e3;
    return 0;
}

/* ---------------------------------------------------------------------------- buffers */
typedef struct { uint8_t *p; size_t len, cap; } buf;

static void buf_need(buf *b, size_t more) { grow(&b->p, &b->cap, b->len, more, 4096); }

static void put(buf *b, const void *p, size_t n) { buf_need(b, n); memcpy(b->p + b->len, p, n); b->len += n; }
static void put_byte(buf *b, uint8_t c) { put(b, &c, 1); }

static void put_varint(buf *b, uint64_t v) {
    while (v >= 0x80) { put_byte(b, (uint8_t)(v | 0x80)); v >>= 7; }
    put_byte(b, (uint8_t)v);
}

static void put_bytes(buf *b, int field, const void *p, size_t n) {
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    put(b, p, n);
}

static void put_str(buf *b, int field, const char *s) { put_bytes(b, field, s, strlen(s)); }
static void put_msg(buf *b, int field, const buf *m) { put_bytes(b, field, m->p, m->len); }
static void put_uint(buf *b, int field, uint64_t v) { put_varint(b, (uint64_t)field << 3); put_varint(b, v); }

/* a gRPC message: the compressed flag, the length (big-endian), the protobuf */
static void grpc_frame(buf *out, const buf *pb) {
    uint8_t h[5] = {0, (uint8_t)(pb->len >> 24), (uint8_t)(pb->len >> 16), (uint8_t)(pb->len >> 8), (uint8_t)pb->len};
    out->len = 0;
    put(out, h, 5);
    put(out, pb->p, pb->len);
}

/* ---------------------------------------------------------------------------- protobuf reading */
typedef struct { const uint8_t *p, *end; } rd;

static int get_varint(rd *r, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && r->p < r->end; s += 7) {
        uint8_t c = *r->p++;
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 1;
    }
    return 0;
}

/* the next field: its number, its wire type, and for length-delimited its bytes in *sub; 0 at the end */
static int next_field(rd *r, int *field, int *wt, rd *sub, uint64_t *val) {
    uint64_t key;
    if (r->p >= r->end || !get_varint(r, &key)) return 0;
    *field = (int)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0: return get_varint(r, val);
    case 1: if (r->end - r->p < 8) return 0; r->p += 8; return 1;
    case 5: if (r->end - r->p < 4) return 0; r->p += 4; return 1;
    case 2: {
        uint64_t n;
        if (!get_varint(r, &n) || (uint64_t)(r->end - r->p) < n) return 0;
        sub->p = r->p;
        sub->end = r->p + n;
        r->p += n;
        return 1;
    }
    default: return 0;
    }
}

/* Status{code = 1}: its code */
static uint64_t status_code(rd s) {
    int f, wt;
    rd sub;
    uint64_t v, code = 0;
    while (next_field(&s, &f, &wt, &sub, &v))
        if (f == 1 && wt == 0) code = v;
    return code;
}

/* ------------------------------------------------------------------------------ the calls */
enum { K_RECEIVE, K_ACK };
enum { CODE_OK = 20000, CODE_MESSAGE_NOT_FOUND = 40401 };

typedef struct slot {
    int index, kind, stream, done;
    uint64_t t0;
    buf rx;    /* the answer's DATA */
    buf req;   /* the request's gRPC frame */
    size_t sent;
    buf ack;   /* the AckMessageEntry list of the last receive */
    int handles;
    int grpc_status; /* from the trailers; -1 when none */
} slot;

static slot slots[MAX_SLOTS];
static buf receive_frame;  /* the same ReceiveMessageRequest every time */
static buf ack_head;       /* AckMessageRequest's group and topic */
static nghttp2_session *session;
static int sock;

static enum { P_WARMUP, P_MEASURE, P_DONE } phase = P_WARMUP;
static uint64_t t_start, t_window, t_end, last_progress, t_last_ack;
static double cpu_window;
static long long msgs, receives, acks, empty_receives, warm_msgs;
static hist h_receive, h_ack;
static int active;
static buf telemetry_frame;   /* --telemetry's TelemetryCommand, framed */
static size_t telemetry_sent;
static int32_t telemetry_stream = -1;
static int telemetry_answered;

static ssize_t read_request(nghttp2_session *s, int32_t stream, uint8_t *out, size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *user) {
    (void)s; (void)stream; (void)user;
    slot *sl = src->ptr;
    size_t n = sl->req.len - sl->sent;
    if (n > len) n = len;
    memcpy(out, sl->req.p + sl->sent, n);
    sl->sent += n;
    if (sl->sent == sl->req.len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* the Telemetry stream's request: the settings, then nothing more (the stream stays open) */
static ssize_t read_telemetry(nghttp2_session *s, int32_t stream, uint8_t *out, size_t len, uint32_t *flags,
                              nghttp2_data_source *src, void *user) {
    (void)s; (void)stream; (void)flags; (void)src; (void)user;
    size_t n = telemetry_frame.len - telemetry_sent;
    if (n == 0) return NGHTTP2_ERR_DEFERRED;
    if (n > len) n = len;
    memcpy(out, telemetry_frame.p + telemetry_sent, n);
    telemetry_sent += n;
    return (ssize_t)n;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}

static char authority[96];
/* what the 5.x Java client tells about itself on every call: the Java proxy reads the language
 * (ClientActivity: LanguageCode.valueOf) and refuses a Telemetry stream without it */
/* --deadline: each call's grpc-timeout, as the 5.x clients send it (the Java proxy's receive needs
 * one: it reads the time left); a receive gets its long polling time on top */
static char receive_timeout[24], ack_timeout[24];
#define CLIENT_NV NV("x-mq-language", "JAVA"), NV("x-mq-client-version", "5.0.7"), NV("x-mq-protocol", "v2")

static void submit(slot *sl, int kind) {
    const char *path = kind == K_RECEIVE ? "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
                                         : "/apache.rocketmq.v2.MessagingService/AckMessage";
    nghttp2_nv hdrs[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":path", path),
                         NV(":authority", authority), NV("content-type", "application/grpc"),
                         NV("te", "trailers"), NV("x-mq-client-id", opt.client_id), CLIENT_NV,
                         NV("grpc-timeout", kind == K_RECEIVE ? receive_timeout : ack_timeout)};
    size_t nhdrs = sizeof hdrs / sizeof hdrs[0] - (opt.deadline > 0 ? 0 : 1);
    sl->kind = kind;
    sl->rx.len = 0;
    sl->sent = 0;
    sl->grpc_status = -1;
    if (kind == K_RECEIVE) {
        sl->req.len = 0;
        put(&sl->req, receive_frame.p, receive_frame.len);
    } else {
        buf pb = {0};
        put(&pb, ack_head.p, ack_head.len);
        put(&pb, sl->ack.p, sl->ack.len);
        grpc_frame(&sl->req, &pb);
        free(pb.p);
    }
    nghttp2_data_provider dp = {.source = {.ptr = sl}, .read_callback = read_request};
    sl->t0 = now_ns();
    int32_t id = nghttp2_submit_request(session, NULL, hdrs, nhdrs, &dp, sl);
    if (id < 0) die("submit: %s", nghttp2_strerror(id));
    sl->stream = id;
}

/* a receive's answer: ReceiveMessageResponse messages, each a status, a message or a delivery
 * timestamp; each message's system_properties (3) give message_id (3) and receipt_handle (12) */
static void parse_receive(slot *sl) {
    sl->ack.len = 0;
    sl->handles = 0;
    const uint8_t *p = sl->rx.p, *end = sl->rx.p + sl->rx.len;
    while (end - p >= 5) {
        size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if ((size_t)(end - p - 5) < n) die("a truncated gRPC message in a receive's answer");
        if (p[0]) die("a compressed gRPC message in a receive's answer");
        rd r = {p + 5, p + 5 + n}, sub;
        p += 5 + n;
        int f, wt;
        uint64_t v;
        while (next_field(&r, &f, &wt, &sub, &v)) {
            if (f == 1 && wt == 2) {
                uint64_t code = status_code(sub);
                if (code != CODE_OK && code != CODE_MESSAGE_NOT_FOUND)
                    die("ReceiveMessage answered status %llu", (unsigned long long)code);
            } else if (f == 2 && wt == 2) { /* Message */
                rd m = sub, sp, id = {0}, handle = {0};
                int mf, mwt, got = 0;
                while (next_field(&m, &mf, &mwt, &sp, &v)) {
                    if (mf != 3 || mwt != 2) continue;
                    rd s = sp, x;
                    int sf, swt;
                    while (next_field(&s, &sf, &swt, &x, &v)) {
                        if (sf == 3 && swt == 2) id = x;
                        else if (sf == 12 && swt == 2) { handle = x; got = 1; }
                    }
                }
                if (!got) die("a received message without a receipt handle");
                buf e = {0};
                put_bytes(&e, 1, id.p, (size_t)(id.end - id.p));
                put_bytes(&e, 2, handle.p, (size_t)(handle.end - handle.p));
                put_msg(&sl->ack, 3, &e);
                free(e.p);
                sl->handles++;
            }
        }
    }
}

static void parse_ack(slot *sl) {
    const uint8_t *p = sl->rx.p;
    if (sl->rx.len < 5) die("AckMessage answered no message (grpc-status %d)", sl->grpc_status);
    size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    if (sl->rx.len < 5 + n) die("a truncated AckMessage answer");
    rd r = {p + 5, p + 5 + n}, sub;
    int f, wt;
    uint64_t v, code = 0;
    while (next_field(&r, &f, &wt, &sub, &v))
        if (f == 1 && wt == 2) code = status_code(sub);
    if (code != CODE_OK) die("AckMessage answered status %llu", (unsigned long long)code);
}

static void end_window(uint64_t t) {
    if (phase != P_MEASURE) return;
    t_end = t;
    cpu_window = cpu_s() - cpu_window;
    phase = P_DONE;
    fputs("grpc_receive: window end\n", stderr);
    fflush(stderr);
}

static void call_done(slot *sl) {
    uint64_t t = now_ns();
    last_progress = t;
    if (sl->grpc_status != 0)
        die("%s ended with grpc-status %d", sl->kind == K_RECEIVE ? "ReceiveMessage" : "AckMessage", sl->grpc_status);
    if (phase == P_WARMUP && t - t_start >= (uint64_t)(opt.warmup * 1e9)) {
        phase = P_MEASURE;
        t_window = t;
        cpu_window = cpu_s();
        fputs("grpc_receive: window start\n", stderr);
        fflush(stderr);
    }
    if (phase == P_MEASURE && t - t_window >= (uint64_t)(opt.seconds * 1e9)) end_window(t);
    if (sl->kind == K_RECEIVE) {
        parse_receive(sl);
        if (phase == P_MEASURE) { receives++; hist_add(&h_receive, t - sl->t0); }
        if (!sl->handles) { /* caught up: the window ends with the last ack, not this long poll's wait */
            empty_receives++;
            end_window(t_last_ack > t_window ? t_last_ack : t);
            sl->done = 1;
            active--;
            return;
        }
        submit(sl, K_ACK);
    } else {
        parse_ack(sl);
        if (phase == P_MEASURE) { acks++; msgs += sl->handles; hist_add(&h_ack, t - sl->t0); t_last_ack = t; }
        else if (phase == P_WARMUP) warm_msgs += sl->handles;
        if (phase == P_DONE) { sl->done = 1; active--; return; }
        submit(sl, K_RECEIVE);
    }
}

/* ------------------------------------------------------------------------- nghttp2 callbacks */
static ssize_t send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *user) {
    (void)s; (void)flags; (void)user;
    ssize_t n = send(sock, data, len, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
    return n;
}

static int data_cb(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data, size_t len, void *user) {
    (void)flags; (void)user;
    if (stream == telemetry_stream) { telemetry_answered = 1; return 0; }
    slot *sl = nghttp2_session_get_stream_user_data(s, stream);
    if (sl) put(&sl->rx, data, len);
    return 0;
}

static int header_cb(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
    (void)flags; (void)user;
    slot *sl = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    if (sl && namelen == 11 && !memcmp(name, "grpc-status", 11)) {
        char v[16] = {0};
        memcpy(v, value, valuelen < 15 ? valuelen : 15);
        sl->grpc_status = atoi(v);
    }
    return 0;
}

static int close_cb(nghttp2_session *s, int32_t stream, uint32_t error, void *user) {
    (void)user;
    slot *sl = nghttp2_session_get_stream_user_data(s, stream);
    if (stream == telemetry_stream && !telemetry_answered) die("the Telemetry stream closed unanswered (error %u)", error);
    if (!sl) return 0;
    if (error) die("stream %d closed with HTTP/2 error %u", stream, error);
    call_done(sl);
    return 0;
}

/* ------------------------------------------------------------------------------------ main */
static uint8_t in[1 << 18];

/* one turn: nghttp2's output written, then what the socket holds read (waiting at most 100 ms) */
static void pump(void) {
    int rv = nghttp2_session_send(session);
    if (rv) die("send: %s", nghttp2_strerror(rv));
    struct pollfd pfd = {.fd = sock, .events = POLLIN | (nghttp2_session_want_write(session) ? POLLOUT : 0)};
    if (poll(&pfd, 1, 100) < 0 && errno != EINTR) die("poll: %s", strerror(errno));
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = recv(sock, in, sizeof in, 0);
        if (n == 0) die("the front closed the connection");
        if (n < 0) {
            if (errno != EINTR && errno != EAGAIN) die("recv: %s", strerror(errno));
        } else if ((rv = (int)nghttp2_session_mem_recv(session, in, (size_t)n)) < 0) {
            die("recv: %s", nghttp2_strerror(rv));
        }
    }
}

static void open_telemetry(void) {
    buf pb = {0};
    size_t n = strlen(opt.telemetry);
    if (n % 2) die("--telemetry: an odd number of hex digits");
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(opt.telemetry + i, "%2x", &v) != 1) die("--telemetry: not hex at %zu", i);
        put_byte(&pb, (uint8_t)v);
    }
    grpc_frame(&telemetry_frame, &pb);
    free(pb.p);
    nghttp2_nv hdrs[] = {NV(":method", "POST"), NV(":scheme", "http"),
                         NV(":path", "/apache.rocketmq.v2.MessagingService/Telemetry"), NV(":authority", authority),
                         NV("content-type", "application/grpc"), NV("te", "trailers"),
                         NV("x-mq-client-id", opt.client_id), CLIENT_NV};
    nghttp2_data_provider dp = {.read_callback = read_telemetry};
    telemetry_stream = nghttp2_submit_request(session, NULL, hdrs, sizeof hdrs / sizeof hdrs[0], &dp, NULL);
    if (telemetry_stream < 0) die("submit: %s", nghttp2_strerror(telemetry_stream));
    uint64_t t0 = now_ns();
    while (!telemetry_answered) {
        pump();
        if (now_ns() - t0 > (uint64_t)(opt.timeout * 1e9)) die("the Telemetry stream unanswered for %.0f s", opt.timeout);
    }
}

static void build_requests(void) {
    buf group = {0}, topic = {0}, broker = {0}, mq = {0}, filter = {0}, inv = {0}, lp = {0}, pb = {0};
    put_str(&group, 2, opt.group);
    put_str(&topic, 2, opt.topic);
    put_str(&broker, 1, opt.broker);
    put_msg(&mq, 1, &topic);
    put_msg(&mq, 4, &broker);
    put_uint(&filter, 1, 1); /* FilterType.TAG */
    put_str(&filter, 2, "*");
    put_uint(&inv, 1, (uint64_t)opt.invisible);
    put_uint(&lp, 1, (uint64_t)opt.long_poll);
    put_msg(&pb, 1, &group);
    put_msg(&pb, 2, &mq);
    put_msg(&pb, 3, &filter);
    put_uint(&pb, 4, (uint64_t)opt.batch);
    put_msg(&pb, 5, &inv);
    put_msg(&pb, 7, &lp);
    grpc_frame(&receive_frame, &pb);
    put_msg(&ack_head, 1, &group);
    put_msg(&ack_head, 2, &topic);
    free(group.p); free(topic.p); free(broker.p); free(mq.p); free(filter.p); free(inv.p); free(lp.p); free(pb.p);
}

static void usage(void) {
    fputs("usage: grpc_receive --addr HOST:PORT --topic T --group G [--in-flight N] [--batch N] [--invisible S]\n"
          "                    [--long-poll S] [--seconds S] [--warmup S] [--timeout S] [--broker NAME] [--client-id ID]\n"
          "                    [--telemetry HEX] [--deadline S]\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv) {
    static const struct option longs[] = {
        {"addr", 1, 0, 'a'}, {"topic", 1, 0, 't'}, {"group", 1, 0, 'g'}, {"in-flight", 1, 0, 'n'},
        {"batch", 1, 0, 'b'}, {"invisible", 1, 0, 'i'}, {"long-poll", 1, 0, 'l'}, {"seconds", 1, 0, 's'},
        {"warmup", 1, 0, 'w'}, {"timeout", 1, 0, 'T'}, {"broker", 1, 0, 'B'}, {"client-id", 1, 0, 'c'},
        {"telemetry", 1, 0, 'Y'}, {"deadline", 1, 0, 'D'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'a': {
            const char *colon = strrchr(optarg, ':');
            if (!colon || (size_t)(colon - optarg) >= sizeof opt.host) usage();
            memcpy(opt.host, optarg, (size_t)(colon - optarg));
            opt.host[colon - optarg] = 0;
            opt.port = atoi(colon + 1);
            break;
        }
        case 't': opt.topic = optarg; break;
        case 'g': opt.group = optarg; break;
        case 'n': opt.in_flight = atoi(optarg); break;
        case 'b': opt.batch = atoi(optarg); break;
        case 'i': opt.invisible = atof(optarg); break;
        case 'l': opt.long_poll = atof(optarg); break;
        case 's': opt.seconds = atof(optarg); break;
        case 'w': opt.warmup = atof(optarg); break;
        case 'T': opt.timeout = atof(optarg); break;
        case 'B': opt.broker = optarg; break;
        case 'c': opt.client_id = optarg; break;
        case 'Y': opt.telemetry = optarg; break;
        case 'D': opt.deadline = atof(optarg); break;
        default: usage();
        }
    }
    if (opt.in_flight < 1 || opt.in_flight > MAX_SLOTS || opt.batch < 1 || opt.seconds <= 0) usage();
    snprintf(authority, sizeof authority, "%s:%d", opt.host, opt.port);
    snprintf(receive_timeout, sizeof receive_timeout, "%lldm", (long long)((opt.deadline + opt.long_poll) * 1000));
    snprintf(ack_timeout, sizeof ack_timeout, "%lldm", (long long)(opt.deadline * 1000));
    build_requests();

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1) die("bad address %s", opt.host);
    sock = socket(AF_INET, SOCK_STREAM, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect %s: %s", authority, strerror(errno));
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, send_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, data_cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, header_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, close_cb);
    nghttp2_session_client_new(&session, cb, NULL);
    nghttp2_session_callbacks_del(cb);
    /* windows large enough that a batch's answer never waits for a WINDOW_UPDATE */
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1024},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, 1 << 30);

    if (opt.telemetry) open_telemetry();
    t_start = last_progress = now_ns();
    active = opt.in_flight;
    for (int i = 0; i < opt.in_flight; i++) {
        slots[i].index = i;
        submit(&slots[i], K_RECEIVE);
    }
    while (active > 0) {
        pump();
        uint64_t t = now_ns();
        if (phase == P_MEASURE && t - t_window >= (uint64_t)(opt.seconds * 1e9)) end_window(t);
        if (t - last_progress > (uint64_t)(opt.timeout * 1e9)) die("no answer for %.0f s", opt.timeout);
    }
    if (phase == P_WARMUP) die("caught up during the warmup (%lld messages): fill the topic first", warm_msgs);
    double secs = (t_end - t_window) / 1e9;
    printf("{\"msgs\": %lld, \"seconds\": %.6f, \"msgs_per_s\": %.1f, \"receives\": %lld, \"acks\": %lld, "
           "\"empty_receives\": %lld, \"in_flight\": %d, \"batch\": %d, "
           "\"receive_p50_us\": %.1f, \"receive_p99_us\": %.1f, \"ack_p50_us\": %.1f, \"ack_p99_us\": %.1f, "
           "\"cpu_us_per_msg\": %.3f, \"caught_up\": %s}\n",
           msgs, secs, secs > 0 ? msgs / secs : 0.0, receives, acks, empty_receives, opt.in_flight, opt.batch,
           hist_q(&h_receive, 0.5), hist_q(&h_receive, 0.99), hist_q(&h_ack, 0.5), hist_q(&h_ack, 0.99),
           msgs ? 1e6 * cpu_window / msgs : 0.0, empty_receives ? "true" : "false");
    nghttp2_session_del(session);
    close(sock);
    return 0;
}
