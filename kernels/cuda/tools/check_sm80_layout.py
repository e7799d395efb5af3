#!/usr/bin/env python3
"""Model check (no GPU): the sm80 kernel's ldmatrix addresses (fwd_kernel.cuh) deliver exactly the
mma.m16n8k16 fragments the PTX ISA specifies (9.7.14.5.8), and the 16-byte chunk swizzle
(fwd_traits.cuh) keeps every 8-lane ldmatrix phase on 8 distinct bank groups.
The model of ldmatrix: lanes 8i..8i+7 give the row addresses of matrix i; lane t gets
(row t/4, cols 2(t%4), +1), or with .trans (rows 2(t%4), +1, col t/4). Run: python3 tools/check_sm80_layout.py"""
# Model check of the sm80 kernel's ldmatrix addressing against the mma.m16n8k16 fragment spec.
def ldm(addr_of_lane, trans):
    # addr_of_lane(L) -> (row, chunk) of the 8-element row vector lane L points at.
    # returns regs[t][i] = [(row, col) elem0, elem1]
    out = {}
    for t in range(32):
        regs = []
        for i in range(4):
            if not trans:
                r, c = addr_of_lane(8 * i + t // 4)
                regs.append([(r, 8 * c + 2 * (t % 4)), (r, 8 * c + 2 * (t % 4) + 1)])
            else:
                elems = []
                for e in range(2):
                    r, c = addr_of_lane(8 * i + 2 * (t % 4) + e)
                    elems.append((r, 8 * c + t // 4))
                regs.append(elems)
        out[t] = regs
    return out

ok = True
warp = 1
for kk in range(4):
    # Q as A (rows = query rows, cols = head dim)
    q = ldm(lambda L: (warp * 16 + (L % 8) + 8 * ((L // 8) % 2), 2 * kk + L // 16), False)
    for t in range(32):
        g, tq = t // 4, t % 4
        spec = [[(warp*16+g, 16*kk+2*tq), (warp*16+g, 16*kk+2*tq+1)],
                [(warp*16+g+8, 16*kk+2*tq), (warp*16+g+8, 16*kk+2*tq+1)],
                [(warp*16+g, 16*kk+2*tq+8), (warp*16+g, 16*kk+2*tq+9)],
                [(warp*16+g+8, 16*kk+2*tq+8), (warp*16+g+8, 16*kk+2*tq+9)]]
        ok &= q[t] == spec
    # K as B for key blocks 2nb2, 2nb2+1: B[k=d][n=key]; element (key row, d col)
    for nb2 in range(4):
        k = ldm(lambda L: (nb2 * 16 + (L % 8) + 8 * (L // 16), 2 * kk + (L // 8) % 2), False)
        for t in range(32):
            g, tq = t // 4, t % 4
            # b0 = (k=2t..2t+1, n=g), b1 = (k=2t+8.., n=g); stored as (key, d)
            spec = [[(16*nb2+g, 16*kk+2*tq), (16*nb2+g, 16*kk+2*tq+1)],
                    [(16*nb2+g, 16*kk+2*tq+8), (16*nb2+g, 16*kk+2*tq+9)],
                    [(16*nb2+8+g, 16*kk+2*tq), (16*nb2+8+g, 16*kk+2*tq+1)],
                    [(16*nb2+8+g, 16*kk+2*tq+8), (16*nb2+8+g, 16*kk+2*tq+9)]]
            ok &= k[t] == spec
    # V as B (trans) for d blocks 2db2, 2db2+1: B[k=key][n=d]; stored as (key row, d col)
    for db2 in range(4):
        v = ldm(lambda L: (16 * kk + (L % 8) + 8 * ((L // 8) % 2), 2 * db2 + L // 16), True)
        for t in range(32):
            g, tq = t // 4, t % 4
            spec = [[(16*kk+2*tq, 16*db2+g), (16*kk+2*tq+1, 16*db2+g)],
                    [(16*kk+2*tq+8, 16*db2+g), (16*kk+2*tq+9, 16*db2+g)],
                    [(16*kk+2*tq, 16*db2+8+g), (16*kk+2*tq+1, 16*db2+8+g)],
                    [(16*kk+2*tq+8, 16*db2+8+g), (16*kk+2*tq+9, 16*db2+8+g)]]
            ok &= v[t] == spec
print("sm80 ldmatrix/mma layout model:", "OK" if ok else "MISMATCH")

# Swizzle: conflict-free ldmatrix phases (8 lanes -> 8 distinct 16-byte bank groups), D=64/128/256
def swz(row, chunk, d): return row * d + ((chunk ^ (row & 7)) << 3)
for d in (64, 128, 256):
    for base_row in range(0, 64, 8):
        for chunk in range(d // 8):
            banks = {(swz(base_row + j, chunk, d) * 2 // 16) % 8 for j in range(8)}
            assert len(banks) == 8, (d, base_row, chunk)
print("swizzle conflict-free: OK")
