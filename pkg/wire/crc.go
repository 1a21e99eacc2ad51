package wire

import "hash/crc32"

// castagnoli is the CRC32C table (hardware accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC32C continues a CRC32C over more bytes.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// CombineCRC32C returns the CRC32C of a‖b from crcA = CRC32C(a), crcB =
// CRC32C(b) and len(b), without reading either: a relocation's chunks are
// checked once each and their sums combined into the payload's, and a
// message's sum is made from the sum of its bulk bytes. (zlib's
// crc32_combine, for the Castagnoli polynomial: O(log lenB) steps.)
func CombineCRC32C(crcA, crcB uint32, lenB int64) uint32 {
	lenB = max(lenB, 0)
	return multModP(xPow8N(uint64(lenB)), crcA) ^ crcB
}

// castagnoliReversed is the CRC32C polynomial, bit-reversed as hash/crc32 uses it.
const castagnoliReversed = 0x82f63b78

// multModP is a·b modulo the polynomial, both reflected (bit 31 is x⁰).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo the polynomial.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x¹
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// xPow8N is x^(8n) modulo the polynomial: appending n zero bytes.
func xPow8N(n uint64) uint32 {
	p := uint32(1) << 31 // x⁰
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2n[k], p)
		}
	}
	return p
}
