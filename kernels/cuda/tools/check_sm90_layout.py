#!/usr/bin/env python3
"""Model check (no GPU) of the sm90 kernel's shared-memory addressing (src/sm90/).

Models, from the PTX ISA (9.7.9.27 tensor copies, 9.7.15.5.1 matrix descriptors) and
CUTLASS's canonical GMMA layouts (cute/atom/mma_traits_sm90_gmma.hpp):
  * TMA with CU_TENSOR_MAP_SWIZZLE_128B writes box element (row r, column c < 64) of a box
    whose smem start is 1024-B aligned at start + r*128 + c*2 with address bits [4,7)
    XOR-ed by bits [7,10).
  * wgmma reads through a descriptor (start, LBO, SBO, 128-B swizzle) the element of
      K-major  (row mn, k < 16):  start + (mn%8)*128 + (mn//8)*SBO + k*2
      MN-major (k < 16, n):       start + (k%8)*128 + (k//8)*SBO + (n//64)*LBO + (n%64)*2
    and applies the same XOR to the resulting address.
Checks, for every head dim and key tile of the traits: the Q/K/V descriptors issue_qk and
issue_pv build address exactly the elements TMA placed; the epilogue's staging writes and
reads agree and are bank-conflict free; the S->P register mapping matches the A fragment.
Run: python3 tools/check_sm90_layout.py
"""


def swz(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def check(D, BN, stages):
    BM = 128
    qreg, kvreg = BM * 128, BN * 128
    base = 0  # 1024-aligned
    offK = (D // 64) * qreg
    offV = offK + stages * (D // 64) * kvreg
    stage_bytes = (D // 64) * kvreg

    def tma_q(row, col):  # Q[row][col] as TMA lays it out
        return swz(base + (col // 64) * qreg + row * 128 + (col % 64) * 2)

    def tma_kv(off, s, key, col):
        return swz(base + off + s * stage_bytes + (col // 64) * kvreg + key * 128 + (col % 64) * 2)

    def desc_kmajor(start, sbo, mn, k):
        return swz(start + (mn % 8) * 128 + (mn // 8) * sbo + k * 2)

    def desc_mnmajor(start, lbo, sbo, k, n):
        return swz(start + (k % 8) * 128 + (k // 8) * sbo + (n // 64) * lbo + (n % 64) * 2)

    for s in range(stages):
        for wg in range(2):
            for kk in range(D // 16):  # issue_qk
                qa = base + (kk // 4) * qreg + wg * 64 * 128 + (kk % 4) * 32
                ka = base + offK + s * stage_bytes + (kk // 4) * kvreg + (kk % 4) * 32
                for m in range(64):
                    for k in range(16):
                        assert desc_kmajor(qa, 1024, m, k) == tma_q(wg * 64 + m, 16 * kk + k), ("Q", D, kk, m, k)
                for n in range(BN):
                    for k in range(16):
                        assert desc_kmajor(ka, 1024, n, k) == tma_kv(offK, s, n, 16 * kk + k), ("K", D, kk, n, k)
        for kk in range(BN // 16):  # issue_pv: B[k = key][n = d]
            va = base + offV + s * stage_bytes + kk * 16 * 128
            for k in range(16):
                for n in range(D):
                    assert desc_mnmajor(va, kvreg, 1024, k, n) == tma_kv(offV, s, 16 * kk + k, n), ("V", D, kk, k, n)

    # epilogue staging: write (fragment) and read (16-byte chunks) agree; writes conflict-free
    for wg in range(2):
        written = {}
        for warp in range(4):
            for i in range(0, D // 2, 2):
                banks = []
                for lane in range(32):
                    hf = (i // 2) % 2
                    r = wg * 64 + warp * 16 + lane // 4 + 8 * hf
                    col = 8 * (i // 4) + 2 * (lane % 4)
                    region, chunk = col // 64, (col % 64) // 8
                    addr = region * qreg + r * 128 + ((chunk ^ (r % 8)) * 16) + (col % 8) * 2
                    written[(r, col)] = addr
                    banks.append((addr // 4) % 32)
                assert len(set(banks)) == 32, ("epilogue bank conflict", D, i)
        for r in range(wg * 64, wg * 64 + 64):
            for c in range(D // 8):
                addr = (c // 8) * qreg + r * 128 + (((c % 8) ^ (r % 8)) * 16)
                for e in range(0, 8, 2):
                    assert written[(r, 8 * c + e)] == addr + 2 * e, ("epilogue read", D, r, c)

    # S accumulator -> P A-fragments: a[kk][q] = (s[8kk+2q], s[8kk+2q+1])
    for lane in range(32):
        for kk in range(BN // 16):
            for q in range(4):
                for e in range(2):
                    i = 8 * kk + 2 * q + e
                    acc = (lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + (i % 2))
                    # A fragment (m64nNk16, registers): a0,a1 (r, 2t..) a2,a3 (r+8, 2t..) a4,a5 (r, 2t+8..) a6,a7 (r+8, 2t+8..)
                    j = 2 * q + e
                    a = (lane // 4 + 8 * ((j // 2) % 2), 16 * kk + 2 * (lane % 4) + 8 * (j // 4) + (j % 2))
                    assert acc == a, ("P fragment", kk, q, e)


for D, BN, stages in ((64, 128, 3), (128, 128, 2), (128, 176, 2), (256, 64, 2)):
    check(D, BN, stages)
    print(f"D={D} kBlockN={BN} stages={stages}: descriptors match TMA placement, epilogue OK, P fragment OK")
