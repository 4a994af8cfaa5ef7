/* The commit-log record and consume-queue entry layouts (RocketMQ 4.x; docs/formats.md §1-§2),
 * in one place: every kernel reads them from here (record.pxd), and the codec re-exports them to
 * the Python side (broker.kernels.codec). */
#ifndef BROKER_RECORD_H
#define BROKER_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define RECORD_MESSAGE_MAGIC 0xDAA320A7u   /* a v1 record */
#define RECORD_BLANK_MAGIC 0xCBD43194u     /* a segment's closing blank: [remaining int32][this] */
#define RECORD_FIXED_LEN_V4 91             /* fixed part with IPv4 born and store hosts */
#define RECORD_FIXED_LEN_NO_HOSTS 75       /* the same without the two hosts (8 or 20 bytes each) */
#define RECORD_END_FILE_MIN_BLANK 8
#define RECORD_SYSFLAG_BORNHOST_V6 0x10
#define RECORD_SYSFLAG_STOREHOST_V6 0x20
#define RECORD_SYSFLAG_TRANSACTION 0xC     /* prepared 0x4, commit 0x8, rollback 0xC */
#define RECORD_MAX_TOPIC_LEN 127           /* a signed byte: longer topics are MESSAGE_ILLEGAL in 4.x */
#define RECORD_MAX_PROPS_LEN 32767         /* a signed short */
#define RECORD_STORETIMESTAMP_POS_V4 56    /* with an IPv4 born host */
#define CQ_UNIT 20                         /* a consume-queue entry: offset int64, size int32, tag int64 */

/* A record's length from its variable parts and host lengths (8: IPv4, 20: IPv6). */
static inline ptrdiff_t record_length_of(ptrdiff_t born_len, ptrdiff_t store_len, ptrdiff_t body_len,
                                         ptrdiff_t topic_len, ptrdiff_t props_len) {
    return RECORD_FIXED_LEN_NO_HOSTS + born_len + store_len + body_len + topic_len + props_len;
}

#endif
