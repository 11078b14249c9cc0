;; The 24 -> 16 kHz polyphase FIR of realtime/resample.ts, in WebAssembly
;; SIMD (four taps per instruction): the OpenAI endpoint's clients send 24 kHz,
;; and this filter was most of that endpoint's CPU beyond the native stream's
;; (docs/benchmarks.md, issue 25). Compiled into realtime/resampleKernel.ts by
;; `npm run build:wasm`; a unit test checks that the two agree.
;;
;; Memory, laid out by the caller:
;;   [0, 96)    phase 0 taps, reversed (24 f32): output m with m even
;;   [96, 192)  phase 1 taps, reversed: m odd
;;   inPtr      the filter history (24 samples) then the chunk, i16, padded to 8
;;   fPtr       the same samples as f32
;;   oPtr       the output, i16
(module
  (memory (export "memory") 1)

  ;; Output m (m0 <= m < m0 + count) reads the 24 input samples ending at
  ;; floor(3m / 2) - base, base being the input index of the history's first sample.
  (func (export "run")
    (param $inPtr i32) (param $len i32) (param $fPtr i32) (param $oPtr i32)
    (param $m0 i32) (param $base i32) (param $count i32)
    (local $i i32) (local $o i32) (local $m i32) (local $x i32) (local $t i32)
    (local $acc v128) (local $v f32)

    ;; i16 -> f32, eight samples at a time.
    (block $converted
      (loop $convert
        (br_if $converted (i32.ge_u (local.get $i) (local.get $len)))
        (v128.store
          (i32.add (local.get $fPtr) (i32.shl (local.get $i) (i32.const 2)))
          (f32x4.convert_i32x4_s (i32x4.extend_low_i16x8_s
            (v128.load (i32.add (local.get $inPtr) (i32.shl (local.get $i) (i32.const 1)))))))
        (v128.store offset=16
          (i32.add (local.get $fPtr) (i32.shl (local.get $i) (i32.const 2)))
          (f32x4.convert_i32x4_s (i32x4.extend_high_i16x8_s
            (v128.load (i32.add (local.get $inPtr) (i32.shl (local.get $i) (i32.const 1)))))))
        (local.set $i (i32.add (local.get $i) (i32.const 8)))
        (br $convert)))

    (block $done
      (loop $output
        (br_if $done (i32.ge_u (local.get $o) (local.get $count)))
        (local.set $m (i32.add (local.get $m0) (local.get $o)))
        ;; $x: address of the oldest of the 24 samples; $t: the phase's taps.
        (local.set $x (i32.add (local.get $fPtr) (i32.shl
          (i32.sub
            (i32.sub (i32.shr_u (i32.mul (local.get $m) (i32.const 3)) (i32.const 1)) (local.get $base))
            (i32.const 23))
          (i32.const 2))))
        (local.set $t (i32.mul (i32.and (local.get $m) (i32.const 1)) (i32.const 96)))
        (local.set $acc (f32x4.mul (v128.load (local.get $t)) (v128.load (local.get $x))))
        (local.set $acc (f32x4.add (local.get $acc)
          (f32x4.mul (v128.load offset=16 (local.get $t)) (v128.load offset=16 (local.get $x)))))
        (local.set $acc (f32x4.add (local.get $acc)
          (f32x4.mul (v128.load offset=32 (local.get $t)) (v128.load offset=32 (local.get $x)))))
        (local.set $acc (f32x4.add (local.get $acc)
          (f32x4.mul (v128.load offset=48 (local.get $t)) (v128.load offset=48 (local.get $x)))))
        (local.set $acc (f32x4.add (local.get $acc)
          (f32x4.mul (v128.load offset=64 (local.get $t)) (v128.load offset=64 (local.get $x)))))
        (local.set $acc (f32x4.add (local.get $acc)
          (f32x4.mul (v128.load offset=80 (local.get $t)) (v128.load offset=80 (local.get $x)))))
        (local.set $v (f32.nearest (f32.add
          (f32.add (f32x4.extract_lane 0 (local.get $acc)) (f32x4.extract_lane 1 (local.get $acc)))
          (f32.add (f32x4.extract_lane 2 (local.get $acc)) (f32x4.extract_lane 3 (local.get $acc))))))
        ;; Clipped at full scale, not wrapped.
        (i32.store16
          (i32.add (local.get $oPtr) (i32.shl (local.get $o) (i32.const 1)))
          (i32.trunc_sat_f32_s (f32.min (f32.const 32767) (f32.max (f32.const -32768) (local.get $v)))))
        (local.set $o (i32.add (local.get $o) (i32.const 1)))
        (br $output)))))
