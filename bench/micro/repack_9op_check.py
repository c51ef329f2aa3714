#!/usr/bin/env python3
"""Host check of the 9-instruction e2m1 -> bf16 decode that a re-packed weight layout would allow
(docs/PERF.md v53; timing-only kernel on branch exp/decode-9op-timing). Today's decode
(e2m1_quad_bf16_raw) turns a word of 8 nibbles into 4 bf16x2 registers, out[j] = raw(nibble j) |
raw(nibble j + 4) << 16, raw(c) = sign << 15 | (c & 7) << 6 (value e2m1 * 2^-126), in 13 integer ops.
With the word's bits permuted offline (below), 9 ops give the same registers. Checks that the
re-pack is a bit permutation and that the decode is exact for every code in every slot and for
random words. Usage: python3 bench/micro/repack_9op_check.py"""
import random

S = 0x81C081C0
M32 = 0xFFFFFFFF


def rotl(x, n):
    n %= 32
    return ((x << n) | (x >> (32 - n))) & M32 if n else x


# bit t (0 = mantissa, 1 = E0, 2 = E1, 3 = sign) of the weight in register j, half h -> its bit in the packed word
POS = {}
for j in range(4):
    for h in range(2):
        for t in range(4):
            s = (15 if t == 3 else 6 + t) + 16 * h  # where the decode must put it
            r = [0, 4, 10][j] if j < 3 else (14 if s in (8, 24) else 6)  # the rotation that moves it there
            POS[(j, h, t)] = (s - r) & 31


def raw(code):
    return ((code & 8) << 12) | ((code & 7) << 6)


def repack(nibbles):  # nibbles[e], e = 0..7 (e in bits 4e..4e+3 of the original word)
    w = 0
    for j in range(4):
        for h in range(2):
            n = nibbles[j + 4 * h]
            for t in range(4):
                if n >> t & 1:
                    w |= 1 << POS[(j, h, t)]
    return w


def decode9(w):  # LOP3; IMAD.SHL + LOP3; SHF.L.W + LOP3; IMAD.SHL + SHF.L.W + LOP3 + LOP3
    o0 = w & S
    o1 = ((w << 4) & M32) & S
    o2 = rotl(w, 10) & S
    o3 = (((w << 6) & M32) & 0x80C080C0) | (rotl(w, 14) & 0x01000100)
    return [o0, o1, o2, o3]


def expected(nibbles):
    return [raw(nibbles[j]) | raw(nibbles[j + 4]) << 16 for j in range(4)]


def main():
    assert sorted(POS.values()) == list(range(32)), "the re-pack is not a bit permutation"
    bad = 0
    for e in range(8):
        for c in range(16):
            n = [0] * 8
            n[e] = c
            bad += decode9(repack(n)) != expected(n)
    rng = random.Random(2026)
    for _ in range(200_000):
        n = [rng.randrange(16) for _ in range(8)]
        bad += decode9(repack(n)) != expected(n)
    print(f"9-op decode: {bad} mismatches (every code in every slot, 200000 random words)")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
