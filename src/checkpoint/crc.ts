/**
 * CRC32C of a concatenation from the CRCs of its parts: a shard's whole-file
 * digest follows from its header's CRC and the per-piece CRCs the native writer
 * already computed, without a second pass over the data.
 *
 * crc(A ‖ B) = crc(A) · x^(8·|B|) ⊕ crc(B) in GF(2)[x] mod the Castagnoli polynomial
 * (the pre- and post-inversion cancel out). Polynomials are kept bit-reflected, as
 * CRC32C stores them: bit 31 is x^0.
 */
const POLY = 0x82f63b78;
const ONE = 0x80000000;

/** a · b mod P. */
function mulmod(a: number, b: number): number {
  let product = 0;
  let term = b >>> 0;
  for (let bit = ONE; bit !== 0; bit >>>= 1) {
    if (a & bit) product ^= term;
    term = term & 1 ? (term >>> 1) ^ POLY : term >>> 1;
  }
  return product >>> 0;
}

/** x^(8·bytes) mod P, by squaring. */
function shiftFor(bytes: number): number {
  let result = ONE;
  let power = ONE >>> 8; // x^8
  for (let n = bytes; n > 0; n = Math.floor(n / 2)) {
    if (n % 2) result = mulmod(result, power);
    power = mulmod(power, power);
  }
  return result;
}

/** CRC32C of A ‖ B, given crc(A), crc(B) and B's length in bytes. */
export function crc32cCombine(crcA: number, crcB: number, lengthB: number): number {
  return (mulmod(shiftFor(lengthB), crcA) ^ crcB) >>> 0;
}

/** CRC32C of parts laid back to back. */
export function crc32cConcat(parts: readonly { crc: number; bytes: number }[]): number {
  return parts.reduce((acc, p) => crc32cCombine(acc, p.crc, p.bytes), 0);
}
