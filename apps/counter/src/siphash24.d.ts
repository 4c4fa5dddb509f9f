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

/** The package's WebAssembly module: each call instantiates it anew, with a memory of its own. */
declare module "siphash24/siphash24.js" {
  function instantiate(): {
    readonly memory: WebAssembly.Memory;
    /** SipHash-2-4 of `length` bytes at `at` (24 or later), under the 16-byte key at 8..23, into bytes 0..7. */
    siphash(at: number, length: number): void;
  };
  export default instantiate;
}
