/** Types of `siphash24` (SipHash-2-4 in WebAssembly, with a JavaScript fallback), which ships none. */
declare module "siphash24" {
  /**
   * SipHash-2-4 of `data` under a 16-byte `key`, written into `out` (8 bytes, the 64-bit result in
   * little-endian order, as in the reference implementation) and returned. `noAssert` skips the
   * length checks of `key` and `out`.
   */
  function siphash24(data: Uint8Array, key: Uint8Array, out?: Uint8Array, noAssert?: boolean): Uint8Array;
  export default siphash24;
}
