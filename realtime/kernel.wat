;; The OpenAI endpoint's per-frame arithmetic, in WebAssembly SIMD: its
;; clients send 24 kHz PCM in base64 text frames, and decoding and resampling
;; them was that endpoint's CPU beyond the native stream's (docs/benchmarks.md,
;; issue 25). Compiled into realtime/kernelBinary.ts by `npm run build:wasm`; a
;; unit test checks that the two agree. realtime/kernel.ts loads it and lays
;; out its memory:
;;   [0, 48)    phase 0 taps of the filter, reversed (24 i16, Q15): output m with m even
;;   [48, 96)   phase 1 taps, reversed: m odd
;;   [192, 448) the base64 alphabet: each byte's 6-bit value, 255 outside it
;;   above      per call, regions the caller names
(module
  (memory (export "memory") 1)

  ;; ---- base64 -------------------------------------------------------------
  ;; Decodes $n characters at $src (a multiple of 4, no padding) into 3n/4
  ;; bytes at $dst (which may be written up to 4 bytes further); returns 1 if
  ;; every character is in the standard alphabet, else 0 (the output is then
  ;; meaningless). Sixteen characters per step: each byte's nibbles index
  ;; two tables whose AND is zero only for the alphabet's 64 characters, a
  ;; third table (by high nibble, '/' apart) gives what to add to reach its
  ;; 6-bit value, and the values are packed four into three bytes.
  (func (export "b64") (param $src i32) (param $n i32) (param $dst i32) (result i32)
    (local $end i32) (local $v v128) (local $hi v128) (local $bad v128) (local $w i32) (local $ok i32)
    (local $a i32) (local $b i32) (local $c i32) (local $d i32)
    (local.set $end (i32.add (local.get $src) (local.get $n)))
    (block $simdDone
      (loop $simd
        (br_if $simdDone (i32.gt_u (i32.add (local.get $src) (i32.const 16)) (local.get $end)))
        (local.set $v (v128.load (local.get $src)))
        (local.set $hi (i8x16.shr_u (local.get $v) (i32.const 4)))
        (local.set $bad (v128.or (local.get $bad) (v128.and
          (i8x16.swizzle
            (v128.const i8x16 0x15 0x11 0x11 0x11 0x11 0x11 0x11 0x11 0x11 0x11 0x13 0x1a 0x1b 0x1b 0x1b 0x1a)
            (v128.and (local.get $v) (v128.const i8x16 15 15 15 15 15 15 15 15 15 15 15 15 15 15 15 15)))
          (i8x16.swizzle
            (v128.const i8x16 0x10 0x10 0x01 0x02 0x04 0x08 0x04 0x08 0x10 0x10 0x10 0x10 0x10 0x10 0x10 0x10)
            (local.get $hi)))))
        ;; '+' +19, '/' +16, digits +4, capitals -65, small letters -71.
        (local.set $v (i8x16.add (local.get $v) (i8x16.swizzle
          (v128.const i8x16 0 16 19 4 -65 -65 -71 -71 0 0 0 0 0 0 0 0)
          (i8x16.add (local.get $hi) (i8x16.eq (local.get $v) (v128.const i8x16 47 47 47 47 47 47 47 47 47 47 47 47 47 47 47 47))))))
        ;; Pairs of 6-bit values into 12 bits, pairs of those into 24, then three bytes each, big end first.
        (local.set $v (v128.or
          (i16x8.shl (v128.and (local.get $v) (v128.const i16x8 0xff 0xff 0xff 0xff 0xff 0xff 0xff 0xff)) (i32.const 6))
          (i16x8.shr_u (local.get $v) (i32.const 8))))
        (local.set $v (v128.or
          (i32x4.shl (v128.and (local.get $v) (v128.const i32x4 0xffff 0xffff 0xffff 0xffff)) (i32.const 12))
          (i32x4.shr_u (local.get $v) (i32.const 16))))
        (v128.store (local.get $dst)
          (i8x16.shuffle 2 1 0 6 5 4 10 9 8 14 13 12 0 0 0 0 (local.get $v) (local.get $v)))
        (local.set $src (i32.add (local.get $src) (i32.const 16)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 12)))
        (br $simd)))
    ;; The last groups of four, through the alphabet's table (255, outside it, sets bits 6 and 7).
    (local.set $ok (i32.eqz (v128.any_true (local.get $bad))))
    (block $done
      (loop $group
        (br_if $done (i32.ge_u (local.get $src) (local.get $end)))
        (local.set $a (i32.load8_u offset=192 (i32.load8_u (local.get $src))))
        (local.set $b (i32.load8_u offset=192 (i32.load8_u offset=1 (local.get $src))))
        (local.set $c (i32.load8_u offset=192 (i32.load8_u offset=2 (local.get $src))))
        (local.set $d (i32.load8_u offset=192 (i32.load8_u offset=3 (local.get $src))))
        (if (i32.and (i32.or (i32.or (local.get $a) (local.get $b)) (i32.or (local.get $c) (local.get $d)))
                     (i32.const 0xc0))
          (then (local.set $ok (i32.const 0))))
        (local.set $w (i32.or
          (i32.or (i32.shl (local.get $a) (i32.const 18)) (i32.shl (local.get $b) (i32.const 12)))
          (i32.or (i32.shl (local.get $c) (i32.const 6)) (local.get $d))))
        (i32.store8 (local.get $dst) (i32.shr_u (local.get $w) (i32.const 16)))
        (i32.store8 offset=1 (local.get $dst) (i32.shr_u (local.get $w) (i32.const 8)))
        (i32.store8 offset=2 (local.get $dst) (local.get $w))
        (local.set $src (i32.add (local.get $src) (i32.const 4)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 3)))
        (br $group)))
    (local.get $ok))

  ;; ---- 24 -> 16 kHz ---------------------------------------------------------
  ;; The polyphase FIR of realtime/resample.ts in fixed point: 16-bit samples
  ;; times 16-bit taps (Q15), eight products per instruction, four outputs per
  ;; step. Output m (m0 <= m < m0 + count, m0 being 0 or 1) reads the 24 input
  ;; samples at $inPtr ending at floor(3m / 2) - base. Writes whole steps: up to
  ;; 3 outputs past $count, reading up to 5 samples past the input.
  (func (export "run")
    (param $inPtr i32) (param $oPtr i32) (param $m0 i32) (param $base i32) (param $count i32)
    (local $o i32) (local $m i32) (local $x i32) (local $t i32)
    (local $a0 v128) (local $a1 v128) (local $a2 v128) (local $b0 v128) (local $b1 v128) (local $b2 v128)
    (local $y0 v128) (local $y1 v128) (local $y2 v128) (local $y3 v128) (local $s v128)
    ;; $a: the taps of outputs m0, m0 + 2, ...; $b: of m0 + 1, m0 + 3, ... (phase 0 at 0, phase 1 at 48).
    (local.set $t (i32.mul (i32.and (local.get $m0) (i32.const 1)) (i32.const 48)))
    (local.set $a0 (v128.load (local.get $t)))
    (local.set $a1 (v128.load offset=16 (local.get $t)))
    (local.set $a2 (v128.load offset=32 (local.get $t)))
    (local.set $t (i32.sub (i32.const 48) (local.get $t)))
    (local.set $b0 (v128.load (local.get $t)))
    (local.set $b1 (v128.load offset=16 (local.get $t)))
    (local.set $b2 (v128.load offset=32 (local.get $t)))
    (local.set $base (i32.add (local.get $base) (i32.const 23)))
    (block $done
      (loop $step
        (br_if $done (i32.ge_u (local.get $o) (local.get $count)))
        (local.set $m (i32.add (local.get $m0) (local.get $o)))
        ;; Output m + 0: three dot products of eight, summed lane-wise.
        (local.set $x (i32.add (local.get $inPtr) (i32.shl
          (i32.sub (i32.shr_u (i32.mul (local.get $m) (i32.const 3)) (i32.const 1)) (local.get $base))
          (i32.const 1))))
        (local.set $y0 (i32x4.add
          (i32x4.add
            (i32x4.dot_i16x8_s (v128.load (local.get $x)) (local.get $a0))
            (i32x4.dot_i16x8_s (v128.load offset=16 (local.get $x)) (local.get $a1)))
          (i32x4.dot_i16x8_s (v128.load offset=32 (local.get $x)) (local.get $a2))))
        ;; Output m + 1: three dot products of eight, summed lane-wise.
        (local.set $x (i32.add (local.get $inPtr) (i32.shl
          (i32.sub (i32.shr_u (i32.mul (i32.add (local.get $m) (i32.const 1)) (i32.const 3)) (i32.const 1)) (local.get $base))
          (i32.const 1))))
        (local.set $y1 (i32x4.add
          (i32x4.add
            (i32x4.dot_i16x8_s (v128.load (local.get $x)) (local.get $b0))
            (i32x4.dot_i16x8_s (v128.load offset=16 (local.get $x)) (local.get $b1)))
          (i32x4.dot_i16x8_s (v128.load offset=32 (local.get $x)) (local.get $b2))))
        ;; Output m + 2: three dot products of eight, summed lane-wise.
        (local.set $x (i32.add (local.get $inPtr) (i32.shl
          (i32.sub (i32.shr_u (i32.mul (i32.add (local.get $m) (i32.const 2)) (i32.const 3)) (i32.const 1)) (local.get $base))
          (i32.const 1))))
        (local.set $y2 (i32x4.add
          (i32x4.add
            (i32x4.dot_i16x8_s (v128.load (local.get $x)) (local.get $a0))
            (i32x4.dot_i16x8_s (v128.load offset=16 (local.get $x)) (local.get $a1)))
          (i32x4.dot_i16x8_s (v128.load offset=32 (local.get $x)) (local.get $a2))))
        ;; Output m + 3: three dot products of eight, summed lane-wise.
        (local.set $x (i32.add (local.get $inPtr) (i32.shl
          (i32.sub (i32.shr_u (i32.mul (i32.add (local.get $m) (i32.const 3)) (i32.const 3)) (i32.const 1)) (local.get $base))
          (i32.const 1))))
        (local.set $y3 (i32x4.add
          (i32x4.add
            (i32x4.dot_i16x8_s (v128.load (local.get $x)) (local.get $b0))
            (i32x4.dot_i16x8_s (v128.load offset=16 (local.get $x)) (local.get $b1)))
          (i32x4.dot_i16x8_s (v128.load offset=32 (local.get $x)) (local.get $b2))))
        ;; The four outputs' lanes summed: [y0 y1 y2 y3].
        (local.set $y0 (i32x4.add
          (i8x16.shuffle 0 1 2 3 16 17 18 19 4 5 6 7 20 21 22 23 (local.get $y0) (local.get $y1))
          (i8x16.shuffle 8 9 10 11 24 25 26 27 12 13 14 15 28 29 30 31 (local.get $y0) (local.get $y1))))
        (local.set $y2 (i32x4.add
          (i8x16.shuffle 0 1 2 3 16 17 18 19 4 5 6 7 20 21 22 23 (local.get $y2) (local.get $y3))
          (i8x16.shuffle 8 9 10 11 24 25 26 27 12 13 14 15 28 29 30 31 (local.get $y2) (local.get $y3))))
        (local.set $s (i32x4.add
          (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23 (local.get $y0) (local.get $y2))
          (i8x16.shuffle 8 9 10 11 12 13 14 15 24 25 26 27 28 29 30 31 (local.get $y0) (local.get $y2))))
        ;; Q15 back to samples, rounded, clipped at full scale (not wrapped) by the saturating narrow.
        (local.set $s (i32x4.shr_s
          (i32x4.add (local.get $s) (v128.const i32x4 16384 16384 16384 16384)) (i32.const 15)))
        (i64.store
          (i32.add (local.get $oPtr) (i32.shl (local.get $o) (i32.const 1)))
          (i64x2.extract_lane 0 (i16x8.narrow_i32x4_s (local.get $s) (local.get $s))))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))
        (br $step)))))
