/* Big-endian loads and stores at unaligned addresses: RocketMQ's on-disk and wire
 * integers are Java ByteBuffer order. memcpy keeps them legal on any alignment and
 * compiles to a single mov + bswap. */
#ifndef BROKER_BYTESEX_H
#define BROKER_BYTESEX_H
#include <stdint.h>
#include <string.h>

static inline void put_be16(uint8_t *p, uint16_t v) { v = __builtin_bswap16(v); memcpy(p, &v, 2); }
static inline void put_be32(uint8_t *p, uint32_t v) { v = __builtin_bswap32(v); memcpy(p, &v, 4); }
static inline void put_be64(uint8_t *p, uint64_t v) { v = __builtin_bswap64(v); memcpy(p, &v, 8); }
static inline uint16_t get_be16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v); }
static inline uint32_t get_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
static inline uint64_t get_be64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
#endif
