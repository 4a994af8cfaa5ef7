/* MD5 (RFC 1321) of up to eight messages at once, one per 32-bit lane of AVX2 registers.
 *
 * Why: a ReceiveMessage answer carries each message's body MD5 (the 5.x Message's body_digest,
 * as the Java proxy sends it), and OpenSSL's MD5 of a 1 KiB body was about half of the front's
 * per-message cost. MD5 is one serial chain per message, so it cannot be made faster per message;
 * eight messages of a pop side by side cost about what two cost one after the other.
 *
 * md5_many(ptrs, lens, n, out) writes the 16-byte digest of each message into out[16*i]. Lanes
 * are filled eight messages at a time; a message's whole 64-byte blocks are read in place, its
 * last one or two blocks (the tail, the 0x80 byte, zeros and the bit length) from a copy made
 * here. A lane whose message has ended runs on with a zero block and keeps its state (blend by a
 * mask). Where the CPU has no AVX2 (or the compiler is not GCC/Clang on x86-64), md5_many returns
 * 0 and the caller digests each message itself. Checked against hashlib on random messages of
 * every length around the block edges by tests/test_receive_popped.py. */
#ifndef BROKER_MD5_MB_H
#define BROKER_MD5_MB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BROKER_MD5_MB 1

static const uint32_t MD5_MB_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const int MD5_MB_S[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

/* One 64-byte block of each of eight lanes; blocks[l] the lane's block (16 little-endian words). */
__attribute__((target("avx2")))
static void md5_mb_block(__m256i st[4], const uint8_t *const blocks[8], __m256i active)
{
    __m256i m[16];
    __m256i a = st[0], b = st[1], c = st[2], d = st[3], f, t;
    const __m256i ones = _mm256_set1_epi32(-1);
    int i, g;
    for (i = 0; i < 16; i++) {
        uint32_t w[8];
        int l;
        for (l = 0; l < 8; l++)
            memcpy(&w[l], blocks[l] + 4 * i, 4);
        m[i] = _mm256_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3], (int)w[4], (int)w[5], (int)w[6],
                                 (int)w[7]);
    }
    for (i = 0; i < 64; i++) {
        if (i < 16) {
            f = _mm256_or_si256(_mm256_and_si256(b, c), _mm256_andnot_si256(b, d));
            g = i;
        } else if (i < 32) {
            f = _mm256_or_si256(_mm256_and_si256(d, b), _mm256_andnot_si256(d, c));
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = _mm256_xor_si256(_mm256_xor_si256(b, c), d);
            g = (3 * i + 5) & 15;
        } else {
            f = _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, ones)));
            g = (7 * i) & 15;
        }
        t = _mm256_add_epi32(_mm256_add_epi32(a, f), _mm256_add_epi32(_mm256_set1_epi32((int)MD5_MB_K[i]), m[g]));
        {
            const int s = MD5_MB_S[i];
            t = _mm256_or_si256(_mm256_sll_epi32(t, _mm_cvtsi32_si128(s)), _mm256_srl_epi32(t, _mm_cvtsi32_si128(32 - s)));
        }
        a = d;
        d = c;
        c = b;
        b = _mm256_add_epi32(b, t);
    }
    st[0] = _mm256_blendv_epi8(st[0], _mm256_add_epi32(st[0], a), active);
    st[1] = _mm256_blendv_epi8(st[1], _mm256_add_epi32(st[1], b), active);
    st[2] = _mm256_blendv_epi8(st[2], _mm256_add_epi32(st[2], c), active);
    st[3] = _mm256_blendv_epi8(st[3], _mm256_add_epi32(st[3], d), active);
}

/* Up to eight messages (lanes) to the end. */
__attribute__((target("avx2")))
static void md5_mb_lanes(const uint8_t *const *ptrs, const size_t *lens, int lanes, uint8_t *out)
{
    static const uint8_t zero_block[64] = {0};
    uint8_t tails[8][128];
    size_t whole[8], total[8], most = 0, blk;
    const uint8_t *blocks[8];
    __m256i st[4];
    int l;
    st[0] = _mm256_set1_epi32(0x67452301);
    st[1] = _mm256_set1_epi32((int)0xefcdab89);
    st[2] = _mm256_set1_epi32((int)0x98badcfe);
    st[3] = _mm256_set1_epi32(0x10325476);
    for (l = 0; l < 8; l++) {
        if (l < lanes) {
            size_t n = lens[l], rest = n % 64, tail_len = rest + 9 <= 64 ? 64 : 128;
            uint64_t bits = (uint64_t)n * 8;
            whole[l] = n / 64;
            memset(tails[l], 0, sizeof tails[l]);
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
    for (blk = 0; blk < most; blk++) {
        int32_t on[8];
        for (l = 0; l < 8; l++) {
            if (blk < whole[l])
                blocks[l] = ptrs[l] + 64 * blk;
            else if (blk < total[l])
                blocks[l] = tails[l] + 64 * (blk - whole[l]);
            else
                blocks[l] = zero_block;
            on[l] = blk < total[l] ? -1 : 0;
        }
        md5_mb_block(st, blocks, _mm256_loadu_si256((const __m256i *)on));
    }
    {
        uint32_t words[4][8];
        int k;
        for (k = 0; k < 4; k++)
            _mm256_storeu_si256((__m256i *)words[k], st[k]);
        for (l = 0; l < lanes; l++)
            for (k = 0; k < 4; k++)
                memcpy(out + 16 * l + 4 * k, &words[k][l], 4);  /* little-endian words */
    }
}

/* The digests of n messages into out (16 bytes each): 1, or 0 where AVX2 is missing (nothing
 * written; the caller digests them itself). */
static int md5_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint8_t *out)
{
    size_t i;
    if (!__builtin_cpu_supports("avx2"))
        return 0;
    for (i = 0; i < n; i += 8)
        md5_mb_lanes(ptrs + i, lens + i, (int)(n - i < 8 ? n - i : 8), out + 16 * i);
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
