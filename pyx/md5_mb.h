/* MD5 (RFC 1321) of many messages at once, one per 32-bit lane of AVX2 registers, sixteen a pass.
 *
 * Why: a ReceiveMessage answer carries each message's body MD5 (the 5.x Message's body_digest,
 * as the Java proxy sends it), and OpenSSL's MD5 of a 1 KiB body was about half of the front's
 * per-message cost. MD5 is one serial chain per message, so it cannot be made faster per message;
 * messages side by side can: eight in the lanes of one set of registers, and two such groups
 * advanced step by step together, so that one group's step runs while the other's waits on its
 * chain (one group alone left most of the CPU's vector pipes idle: 0.39 -> 0.25 us a 1 KiB body,
 * bench/md5_micro.py and docs/grpc-front.md, issue 32, md5).
 *
 * md5_many(ptrs, lens, n, out) writes the 16-byte digest of each message into out[16*i]. Lanes
 * are filled sixteen messages at a time (a pass of eight or fewer takes one group); a message's
 * whole 64-byte blocks are read in place, its last one or two blocks (the tail, the 0x80 byte,
 * zeros and the bit length) from a copy made here. A lane whose message has ended runs on with a
 * zero block and keeps its state (blend by a mask). Where the CPU has no AVX2 (or the compiler is
 * not GCC/Clang on x86-64), md5_many returns 0 and the caller digests each message itself.
 * Checked against hashlib on messages of every length around the block edges, 1 to 40 a call, by
 * tests/test_receive_popped.py. */
#ifndef BROKER_MD5_MB_H
#define BROKER_MD5_MB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BROKER_MD5_MB 1

/* The 16 words of eight lanes' blocks, word i of every lane into m[i]: two 8x8 transposes of
 * 32-bit words (unpack and 128-bit permutes), not 128 scalar loads put together lane by lane. */
__attribute__((target("avx2")))
static inline void md5_mb_words(__m256i m[16], const uint8_t *const blocks[8])
{
    int h;
    for (h = 0; h < 2; h++) {
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(blocks[0] + 32 * h));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(blocks[1] + 32 * h));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(blocks[2] + 32 * h));
        __m256i r3 = _mm256_loadu_si256((const __m256i *)(blocks[3] + 32 * h));
        __m256i r4 = _mm256_loadu_si256((const __m256i *)(blocks[4] + 32 * h));
        __m256i r5 = _mm256_loadu_si256((const __m256i *)(blocks[5] + 32 * h));
        __m256i r6 = _mm256_loadu_si256((const __m256i *)(blocks[6] + 32 * h));
        __m256i r7 = _mm256_loadu_si256((const __m256i *)(blocks[7] + 32 * h));
        __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1);
        __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3);
        __m256i t4 = _mm256_unpacklo_epi32(r4, r5), t5 = _mm256_unpackhi_epi32(r4, r5);
        __m256i t6 = _mm256_unpacklo_epi32(r6, r7), t7 = _mm256_unpackhi_epi32(r6, r7);
        __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        m[8 * h + 0] = _mm256_permute2x128_si256(u0, u4, 0x20);
        m[8 * h + 1] = _mm256_permute2x128_si256(u1, u5, 0x20);
        m[8 * h + 2] = _mm256_permute2x128_si256(u2, u6, 0x20);
        m[8 * h + 3] = _mm256_permute2x128_si256(u3, u7, 0x20);
        m[8 * h + 4] = _mm256_permute2x128_si256(u0, u4, 0x31);
        m[8 * h + 5] = _mm256_permute2x128_si256(u1, u5, 0x31);
        m[8 * h + 6] = _mm256_permute2x128_si256(u2, u6, 0x31);
        m[8 * h + 7] = _mm256_permute2x128_si256(u3, u7, 0x31);
    }
}

/* RFC 1321's step, a = b + ((a + f(b, c, d) + x + k) <<< s), for two groups of eight lanes at once
 * (state a0..d0 and a1..d1, words m0 and m1): the two groups' chains are independent, so the CPU
 * runs one group's step while the other waits on its dependent adds (one group alone is bound by
 * the chain's latency, ~6 cycles a step, with most vector pipes idle). The part that does not
 * depend on b, the step's newest value, is added first: a + x + k, then for G (b & d) | (c & ~d)
 * written as the sum (c & ~d) + (b & d) (the two never share a bit), so only the last and, the
 * add, the rotate (two shifts and an or: AVX2 has no rotate) and the add of b wait on b. */
#define MD5_MB_ROT(t, s) _mm256_or_si256(_mm256_slli_epi32(t, s), _mm256_srli_epi32(t, 32 - (s)))
/* MD5_MB_HOLD(t_): the sum made before b is known, held as one value. In the two groups' block it
 * is an empty asm that keeps GCC from reassociating the adds (it added f first and the rest after:
 * two adds after b, not one; the two groups then ran barely faster than one, 0.35 against 0.38 us
 * a body). In the one group's block it is nothing: there GCC's own order measured as fast as
 * the held one or faster (0.37 / 0.37 against 0.43 us a body). */
#define MD5_MB_XK(a, m, x, k) _mm256_add_epi32(a, _mm256_add_epi32(m[x], _mm256_set1_epi32((int)(k))))
#define MD5_MB_F1(a, b, c, d, m, x, k, s)                                                                \
    do {                                                                                             \
        __m256i t_ = MD5_MB_XK(a, m, x, k);                                                          \
        MD5_MB_HOLD(t_);                                                                             \
        t_ = _mm256_add_epi32(t_, _mm256_xor_si256(d, _mm256_and_si256(b, _mm256_xor_si256(c, d)))); \
        a = _mm256_add_epi32(b, MD5_MB_ROT(t_, s));                                                  \
    } while (0)
#define MD5_MB_G1(a, b, c, d, m, x, k, s)                                                                \
    do {                                                                                             \
        __m256i t_ = _mm256_add_epi32(MD5_MB_XK(a, m, x, k), _mm256_andnot_si256(d, c));              \
        MD5_MB_HOLD(t_);                                                                             \
        t_ = _mm256_add_epi32(t_, _mm256_and_si256(b, d));                                           \
        a = _mm256_add_epi32(b, MD5_MB_ROT(t_, s));                                                  \
    } while (0)
#define MD5_MB_H1(a, b, c, d, m, x, k, s)                                                                \
    do {                                                                                             \
        __m256i t_ = MD5_MB_XK(a, m, x, k);                                                          \
        MD5_MB_HOLD(t_);                                                                             \
        t_ = _mm256_add_epi32(t_, _mm256_xor_si256(b, _mm256_xor_si256(c, d)));                      \
        a = _mm256_add_epi32(b, MD5_MB_ROT(t_, s));                                                  \
    } while (0)
#define MD5_MB_I1(a, b, c, d, m, x, k, s)                                                                \
    do {                                                                                             \
        __m256i t_ = MD5_MB_XK(a, m, x, k);                                                          \
        MD5_MB_HOLD(t_);                                                                             \
        t_ = _mm256_add_epi32(t_, _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, ones)))); \
        a = _mm256_add_epi32(b, MD5_MB_ROT(t_, s));                                                  \
    } while (0)
#define MD5_MB_F2(a, b, c, d, x, k, s) do { MD5_MB_F1(a##0, b##0, c##0, d##0, m0, x, k, s); MD5_MB_F1(a##1, b##1, c##1, d##1, m1, x, k, s); } while (0)
#define MD5_MB_G2(a, b, c, d, x, k, s) do { MD5_MB_G1(a##0, b##0, c##0, d##0, m0, x, k, s); MD5_MB_G1(a##1, b##1, c##1, d##1, m1, x, k, s); } while (0)
#define MD5_MB_H2(a, b, c, d, x, k, s) do { MD5_MB_H1(a##0, b##0, c##0, d##0, m0, x, k, s); MD5_MB_H1(a##1, b##1, c##1, d##1, m1, x, k, s); } while (0)
#define MD5_MB_I2(a, b, c, d, x, k, s) do { MD5_MB_I1(a##0, b##0, c##0, d##0, m0, x, k, s); MD5_MB_I1(a##1, b##1, c##1, d##1, m1, x, k, s); } while (0)

#define MD5_MB_HOLD(v) ((void)0)
/* One 64-byte block of each of eight lanes (a pass of eight or fewer messages); blocks[l] the lane's
 * block (16 little-endian words), active the lanes whose state takes the block. */
__attribute__((target("avx2")))
static void md5_mb_block1(__m256i st[4], const uint8_t *const blocks[8], __m256i active)
{
    __m256i m[16];
    __m256i a = st[0], b = st[1], c = st[2], d = st[3];
    const __m256i ones = _mm256_set1_epi32(-1);
    md5_mb_words(m, blocks);
    MD5_MB_F1(a, b, c, d, m, 0, 0xd76aa478, 7);
    MD5_MB_F1(d, a, b, c, m, 1, 0xe8c7b756, 12);
    MD5_MB_F1(c, d, a, b, m, 2, 0x242070db, 17);
    MD5_MB_F1(b, c, d, a, m, 3, 0xc1bdceee, 22);
    MD5_MB_F1(a, b, c, d, m, 4, 0xf57c0faf, 7);
    MD5_MB_F1(d, a, b, c, m, 5, 0x4787c62a, 12);
    MD5_MB_F1(c, d, a, b, m, 6, 0xa8304613, 17);
    MD5_MB_F1(b, c, d, a, m, 7, 0xfd469501, 22);
    MD5_MB_F1(a, b, c, d, m, 8, 0x698098d8, 7);
    MD5_MB_F1(d, a, b, c, m, 9, 0x8b44f7af, 12);
    MD5_MB_F1(c, d, a, b, m, 10, 0xffff5bb1, 17);
    MD5_MB_F1(b, c, d, a, m, 11, 0x895cd7be, 22);
    MD5_MB_F1(a, b, c, d, m, 12, 0x6b901122, 7);
    MD5_MB_F1(d, a, b, c, m, 13, 0xfd987193, 12);
    MD5_MB_F1(c, d, a, b, m, 14, 0xa679438e, 17);
    MD5_MB_F1(b, c, d, a, m, 15, 0x49b40821, 22);
    MD5_MB_G1(a, b, c, d, m, 1, 0xf61e2562, 5);
    MD5_MB_G1(d, a, b, c, m, 6, 0xc040b340, 9);
    MD5_MB_G1(c, d, a, b, m, 11, 0x265e5a51, 14);
    MD5_MB_G1(b, c, d, a, m, 0, 0xe9b6c7aa, 20);
    MD5_MB_G1(a, b, c, d, m, 5, 0xd62f105d, 5);
    MD5_MB_G1(d, a, b, c, m, 10, 0x02441453, 9);
    MD5_MB_G1(c, d, a, b, m, 15, 0xd8a1e681, 14);
    MD5_MB_G1(b, c, d, a, m, 4, 0xe7d3fbc8, 20);
    MD5_MB_G1(a, b, c, d, m, 9, 0x21e1cde6, 5);
    MD5_MB_G1(d, a, b, c, m, 14, 0xc33707d6, 9);
    MD5_MB_G1(c, d, a, b, m, 3, 0xf4d50d87, 14);
    MD5_MB_G1(b, c, d, a, m, 8, 0x455a14ed, 20);
    MD5_MB_G1(a, b, c, d, m, 13, 0xa9e3e905, 5);
    MD5_MB_G1(d, a, b, c, m, 2, 0xfcefa3f8, 9);
    MD5_MB_G1(c, d, a, b, m, 7, 0x676f02d9, 14);
    MD5_MB_G1(b, c, d, a, m, 12, 0x8d2a4c8a, 20);
    MD5_MB_H1(a, b, c, d, m, 5, 0xfffa3942, 4);
    MD5_MB_H1(d, a, b, c, m, 8, 0x8771f681, 11);
    MD5_MB_H1(c, d, a, b, m, 11, 0x6d9d6122, 16);
    MD5_MB_H1(b, c, d, a, m, 14, 0xfde5380c, 23);
    MD5_MB_H1(a, b, c, d, m, 1, 0xa4beea44, 4);
    MD5_MB_H1(d, a, b, c, m, 4, 0x4bdecfa9, 11);
    MD5_MB_H1(c, d, a, b, m, 7, 0xf6bb4b60, 16);
    MD5_MB_H1(b, c, d, a, m, 10, 0xbebfbc70, 23);
    MD5_MB_H1(a, b, c, d, m, 13, 0x289b7ec6, 4);
    MD5_MB_H1(d, a, b, c, m, 0, 0xeaa127fa, 11);
    MD5_MB_H1(c, d, a, b, m, 3, 0xd4ef3085, 16);
    MD5_MB_H1(b, c, d, a, m, 6, 0x04881d05, 23);
    MD5_MB_H1(a, b, c, d, m, 9, 0xd9d4d039, 4);
    MD5_MB_H1(d, a, b, c, m, 12, 0xe6db99e5, 11);
    MD5_MB_H1(c, d, a, b, m, 15, 0x1fa27cf8, 16);
    MD5_MB_H1(b, c, d, a, m, 2, 0xc4ac5665, 23);
    MD5_MB_I1(a, b, c, d, m, 0, 0xf4292244, 6);
    MD5_MB_I1(d, a, b, c, m, 7, 0x432aff97, 10);
    MD5_MB_I1(c, d, a, b, m, 14, 0xab9423a7, 15);
    MD5_MB_I1(b, c, d, a, m, 5, 0xfc93a039, 21);
    MD5_MB_I1(a, b, c, d, m, 12, 0x655b59c3, 6);
    MD5_MB_I1(d, a, b, c, m, 3, 0x8f0ccc92, 10);
    MD5_MB_I1(c, d, a, b, m, 10, 0xffeff47d, 15);
    MD5_MB_I1(b, c, d, a, m, 1, 0x85845dd1, 21);
    MD5_MB_I1(a, b, c, d, m, 8, 0x6fa87e4f, 6);
    MD5_MB_I1(d, a, b, c, m, 15, 0xfe2ce6e0, 10);
    MD5_MB_I1(c, d, a, b, m, 6, 0xa3014314, 15);
    MD5_MB_I1(b, c, d, a, m, 13, 0x4e0811a1, 21);
    MD5_MB_I1(a, b, c, d, m, 4, 0xf7537e82, 6);
    MD5_MB_I1(d, a, b, c, m, 11, 0xbd3af235, 10);
    MD5_MB_I1(c, d, a, b, m, 2, 0x2ad7d2bb, 15);
    MD5_MB_I1(b, c, d, a, m, 9, 0xeb86d391, 21);
    st[0] = _mm256_blendv_epi8(st[0], _mm256_add_epi32(st[0], a), active);
    st[1] = _mm256_blendv_epi8(st[1], _mm256_add_epi32(st[1], b), active);
    st[2] = _mm256_blendv_epi8(st[2], _mm256_add_epi32(st[2], c), active);
    st[3] = _mm256_blendv_epi8(st[3], _mm256_add_epi32(st[3], d), active);
}

#undef MD5_MB_HOLD
#define MD5_MB_HOLD(v) __asm__("" : "+x"(v))
/* The same for sixteen lanes, two groups of eight side by side; blocks[g][l] group g's lane l's
 * block, active[g] group g's lanes that take it. */
__attribute__((target("avx2")))
static void md5_mb_block2(__m256i st[2][4], const uint8_t *const blocks[2][8], const __m256i active[2])
{
    __m256i m0[16], m1[16];
    __m256i a0 = st[0][0], b0 = st[0][1], c0 = st[0][2], d0 = st[0][3];
    __m256i a1 = st[1][0], b1 = st[1][1], c1 = st[1][2], d1 = st[1][3];
    const __m256i ones = _mm256_set1_epi32(-1);
    int g;
    md5_mb_words(m0, blocks[0]);
    md5_mb_words(m1, blocks[1]);
    MD5_MB_F2(a, b, c, d, 0, 0xd76aa478, 7);
    MD5_MB_F2(d, a, b, c, 1, 0xe8c7b756, 12);
    MD5_MB_F2(c, d, a, b, 2, 0x242070db, 17);
    MD5_MB_F2(b, c, d, a, 3, 0xc1bdceee, 22);
    MD5_MB_F2(a, b, c, d, 4, 0xf57c0faf, 7);
    MD5_MB_F2(d, a, b, c, 5, 0x4787c62a, 12);
    MD5_MB_F2(c, d, a, b, 6, 0xa8304613, 17);
    MD5_MB_F2(b, c, d, a, 7, 0xfd469501, 22);
    MD5_MB_F2(a, b, c, d, 8, 0x698098d8, 7);
    MD5_MB_F2(d, a, b, c, 9, 0x8b44f7af, 12);
    MD5_MB_F2(c, d, a, b, 10, 0xffff5bb1, 17);
    MD5_MB_F2(b, c, d, a, 11, 0x895cd7be, 22);
    MD5_MB_F2(a, b, c, d, 12, 0x6b901122, 7);
    MD5_MB_F2(d, a, b, c, 13, 0xfd987193, 12);
    MD5_MB_F2(c, d, a, b, 14, 0xa679438e, 17);
    MD5_MB_F2(b, c, d, a, 15, 0x49b40821, 22);
    MD5_MB_G2(a, b, c, d, 1, 0xf61e2562, 5);
    MD5_MB_G2(d, a, b, c, 6, 0xc040b340, 9);
    MD5_MB_G2(c, d, a, b, 11, 0x265e5a51, 14);
    MD5_MB_G2(b, c, d, a, 0, 0xe9b6c7aa, 20);
    MD5_MB_G2(a, b, c, d, 5, 0xd62f105d, 5);
    MD5_MB_G2(d, a, b, c, 10, 0x02441453, 9);
    MD5_MB_G2(c, d, a, b, 15, 0xd8a1e681, 14);
    MD5_MB_G2(b, c, d, a, 4, 0xe7d3fbc8, 20);
    MD5_MB_G2(a, b, c, d, 9, 0x21e1cde6, 5);
    MD5_MB_G2(d, a, b, c, 14, 0xc33707d6, 9);
    MD5_MB_G2(c, d, a, b, 3, 0xf4d50d87, 14);
    MD5_MB_G2(b, c, d, a, 8, 0x455a14ed, 20);
    MD5_MB_G2(a, b, c, d, 13, 0xa9e3e905, 5);
    MD5_MB_G2(d, a, b, c, 2, 0xfcefa3f8, 9);
    MD5_MB_G2(c, d, a, b, 7, 0x676f02d9, 14);
    MD5_MB_G2(b, c, d, a, 12, 0x8d2a4c8a, 20);
    MD5_MB_H2(a, b, c, d, 5, 0xfffa3942, 4);
    MD5_MB_H2(d, a, b, c, 8, 0x8771f681, 11);
    MD5_MB_H2(c, d, a, b, 11, 0x6d9d6122, 16);
    MD5_MB_H2(b, c, d, a, 14, 0xfde5380c, 23);
    MD5_MB_H2(a, b, c, d, 1, 0xa4beea44, 4);
    MD5_MB_H2(d, a, b, c, 4, 0x4bdecfa9, 11);
    MD5_MB_H2(c, d, a, b, 7, 0xf6bb4b60, 16);
    MD5_MB_H2(b, c, d, a, 10, 0xbebfbc70, 23);
    MD5_MB_H2(a, b, c, d, 13, 0x289b7ec6, 4);
    MD5_MB_H2(d, a, b, c, 0, 0xeaa127fa, 11);
    MD5_MB_H2(c, d, a, b, 3, 0xd4ef3085, 16);
    MD5_MB_H2(b, c, d, a, 6, 0x04881d05, 23);
    MD5_MB_H2(a, b, c, d, 9, 0xd9d4d039, 4);
    MD5_MB_H2(d, a, b, c, 12, 0xe6db99e5, 11);
    MD5_MB_H2(c, d, a, b, 15, 0x1fa27cf8, 16);
    MD5_MB_H2(b, c, d, a, 2, 0xc4ac5665, 23);
    MD5_MB_I2(a, b, c, d, 0, 0xf4292244, 6);
    MD5_MB_I2(d, a, b, c, 7, 0x432aff97, 10);
    MD5_MB_I2(c, d, a, b, 14, 0xab9423a7, 15);
    MD5_MB_I2(b, c, d, a, 5, 0xfc93a039, 21);
    MD5_MB_I2(a, b, c, d, 12, 0x655b59c3, 6);
    MD5_MB_I2(d, a, b, c, 3, 0x8f0ccc92, 10);
    MD5_MB_I2(c, d, a, b, 10, 0xffeff47d, 15);
    MD5_MB_I2(b, c, d, a, 1, 0x85845dd1, 21);
    MD5_MB_I2(a, b, c, d, 8, 0x6fa87e4f, 6);
    MD5_MB_I2(d, a, b, c, 15, 0xfe2ce6e0, 10);
    MD5_MB_I2(c, d, a, b, 6, 0xa3014314, 15);
    MD5_MB_I2(b, c, d, a, 13, 0x4e0811a1, 21);
    MD5_MB_I2(a, b, c, d, 4, 0xf7537e82, 6);
    MD5_MB_I2(d, a, b, c, 11, 0xbd3af235, 10);
    MD5_MB_I2(c, d, a, b, 2, 0x2ad7d2bb, 15);
    MD5_MB_I2(b, c, d, a, 9, 0xeb86d391, 21);
    {
        __m256i r0[4] = {a0, b0, c0, d0}, r1[4] = {a1, b1, c1, d1};
        for (g = 0; g < 4; g++) {
            st[0][g] = _mm256_blendv_epi8(st[0][g], _mm256_add_epi32(st[0][g], r0[g]), active[0]);
            st[1][g] = _mm256_blendv_epi8(st[1][g], _mm256_add_epi32(st[1][g], r1[g]), active[1]);
        }
    }
}

#ifndef MD5_MB_AHEAD
#define MD5_MB_AHEAD 2
#endif

/* Up to sixteen messages (lanes: eight in group 0, then group 1) to the end. */
__attribute__((target("avx2")))
static void md5_mb_lanes(const uint8_t *const *ptrs, const size_t *lens, int lanes, uint8_t *out)
{
    static const uint8_t zero_block[64] = {0};
    uint8_t tails[16][128];
    size_t whole[16], total[16], most = 0, blk;
    const uint8_t *blocks[2][8];
    __m256i st[2][4], active[2];
    int l;
    for (l = 0; l < 2; l++) {
        st[l][0] = _mm256_set1_epi32(0x67452301);
        st[l][1] = _mm256_set1_epi32((int)0xefcdab89);
        st[l][2] = _mm256_set1_epi32((int)0x98badcfe);
        st[l][3] = _mm256_set1_epi32(0x10325476);
    }
    for (l = 0; l < 16; l++) {
        if (l < lanes) {
            size_t n = lens[l], rest = n % 64, tail_len = rest + 9 <= 64 ? 64 : 128;
            uint64_t bits = (uint64_t)n * 8;
            whole[l] = n / 64;
            memset(tails[l] + rest, 0, tail_len - rest);
            if (rest)
                memcpy(tails[l], ptrs[l] + 64 * whole[l], rest);
            tails[l][rest] = 0x80;
            memcpy(tails[l] + tail_len - 8, &bits, 8);  /* little-endian bit length */
            total[l] = whole[l] + tail_len / 64;
        } else {
            whole[l] = total[l] = 0;
        }
        if (total[l] > most)
            most = total[l];
    }
    /* the bodies' blocks asked of memory MD5_MB_AHEAD blocks before they are read: a pop's bodies
     * are mostly not in the caches (sixteen streams at once, in the commit log's mapped pages) */
    for (l = 0; l < lanes; l++) {
        size_t b;
        for (b = 0; b < MD5_MB_AHEAD && b < whole[l]; b++)
            _mm_prefetch((const char *)(ptrs[l] + 64 * b), _MM_HINT_T0);
    }
    for (blk = 0; blk < most; blk++) {
        int32_t on[16];
        for (l = 0; l < lanes; l++)
            if (blk + MD5_MB_AHEAD < whole[l])
                _mm_prefetch((const char *)(ptrs[l] + 64 * (blk + MD5_MB_AHEAD)), _MM_HINT_T0);
        for (l = 0; l < 16; l++) {
            const uint8_t *p;
            if (blk < whole[l])
                p = ptrs[l] + 64 * blk;
            else if (blk < total[l])
                p = tails[l] + 64 * (blk - whole[l]);
            else
                p = zero_block;
            blocks[l >> 3][l & 7] = p;
            on[l] = blk < total[l] ? -1 : 0;
        }
        active[0] = _mm256_loadu_si256((const __m256i *)on);
        active[1] = _mm256_loadu_si256((const __m256i *)(on + 8));
        if (lanes > 8)
            md5_mb_block2(st, blocks, active);
        else
            md5_mb_block1(st[0], blocks[0], active[0]);
    }
    {
        uint32_t words[2][4][8];
        int g, k;
        for (g = 0; g < 2; g++)
            for (k = 0; k < 4; k++)
                _mm256_storeu_si256((__m256i *)words[g][k], st[g][k]);
        for (l = 0; l < lanes; l++)
            for (k = 0; k < 4; k++)
                memcpy(out + 16 * l + 4 * k, &words[l >> 3][k][l & 7], 4);  /* little-endian words */
    }
}

/* The digests of n messages into out (16 bytes each): 1, or 0 where AVX2 is missing (nothing
 * written; the caller digests them itself). */
static int md5_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint8_t *out)
{
    size_t i;
    if (!__builtin_cpu_supports("avx2"))
        return 0;
    for (i = 0; i < n; i += 16)
        md5_mb_lanes(ptrs + i, lens + i, (int)(n - i < 16 ? n - i : 16), out + 16 * i);
    return 1;
}
#else
static int md5_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint8_t *out)
{
    (void)ptrs; (void)lens; (void)n; (void)out;
    return 0;
}
#endif

#endif
