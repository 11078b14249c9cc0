/**
 * Silero VAD v5 (16 kHz) rewritten as a plain batched ONNX graph of matrix
 * products, from the weights of the shipped model file.
 *
 * Why: the shipped graph is exported from PyTorch with control flow (an `If`
 * per sample rate, shape tests, the LSTM's weights re-sliced on every call)
 * and 1-D convolutions over 1 to 4 time steps. ONNX Runtime runs a
 * convolution image by image, so a batch of N streams costs N small matrix
 * products per layer and batching barely helps beyond amortising the call.
 * The same network as matrix products over all N x T rows at once lets one
 * GEMM per layer serve the whole batch.
 *
 * The network (silero v5, 16 kHz branch), per window of 576 samples:
 * - reflect-pad 64 samples on the right (640), frames of 256 every 128 (4);
 * - STFT as a product with the model's 258 x 256 basis; magnitude of the
 *   129 complex bins;
 * - 4 convolutions (kernel 3, padding 1; strides 1, 2, 2, 1) with ReLU:
 *   129 -> 128 -> 64 -> 64 -> 128 channels over 4 -> 4 -> 2 -> 1 -> 1 steps,
 *   each written as its taps side by side times one weight matrix;
 * - one LSTM cell (128), state [h, c] in and out;
 * - ReLU, 1 x 1 convolution to one channel, sigmoid: the speech probability.
 * The framing and padding are done by the caller (`frameWindow`); the graph
 * takes frames [N, 4, 256] and state [2, N, 128], gives `output` [N, 1] and
 * `stateN` [2, N, 128]. Only the order of the sums differs from the shipped
 * graph (probabilities agree to ~1e-6; flags checked in
 * test/bench/realtime/silero-batch.ts and test/vad/batch.test.ts).
 */
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';

// ---- ONNX models through onnx-proto (ONNX's protobuf schema, compiled by protobufjs) ---------------

const { onnx } = onnxProto;
type Tensor = OnnxTypes.ITensorProto;
type Graph = OnnxTypes.IGraphProto;
type ValueInfo = OnnxTypes.IValueInfoProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;

interface Weight {
  dims: number[];
  data: Float32Array;
}

/** A float tensor's dimensions and values (raw_data or float_data). */
function tensorOf(t: Tensor): Weight {
  if (t.dataType !== FLOAT) throw new Error('silero graph: expected a float tensor');
  const dims = (t.dims ?? []).map(Number);
  const raw = t.rawData;
  const data =
    raw && raw.length > 0
      ? new Float32Array(raw.slice().buffer, 0, raw.length / 4)
      : Float32Array.from(t.floatData ?? []);
  return { dims, data };
}

/** Every initializer and `Constant` tensor of the model, subgraphs included, by output name. */
function constants(model: Uint8Array): Map<string, Tensor> {
  const found = new Map<string, Tensor>();
  const walkGraph = (g: Graph) => {
    for (const t of g.initializer ?? []) found.set(t.name ?? '', t);
    for (const node of g.node ?? []) {
      for (const attr of node.attribute ?? []) {
        if (node.opType === 'Constant' && attr.t) found.set(node.output?.[0] ?? '', attr.t);
        if (attr.g) walkGraph(attr.g);
      }
    }
  };
  const { graph } = onnx.ModelProto.decode(model);
  if (!graph) throw new Error('silero graph: no graph in the model file');
  walkGraph(graph);
  return found;
}

function tensorProto(name: string, dims: number[], data: Float32Array | BigInt64Array): Tensor {
  return {
    name,
    dims,
    dataType: data instanceof Float32Array ? FLOAT : onnx.TensorProto.DataType.INT64,
    rawData: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  };
}

function valueInfo(name: string, dims: (number | string)[]): ValueInfo {
  const dim = dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d }));
  return { name, type: { tensorType: { elemType: FLOAT, shape: { dim } } } };
}

class GraphBuilder {
  private readonly nodes: OnnxTypes.INodeProto[] = [];
  private readonly inits: Tensor[] = [];
  private n = 0;

  init(name: string, dims: number[], data: Float32Array | BigInt64Array): string {
    this.inits.push(tensorProto(name, dims, data));
    return name;
  }

  ints(values: number[]): string {
    return this.init(`c${this.n++}`, [values.length], BigInt64Array.from(values.map(BigInt)));
  }

  op(
    type: string,
    inputs: string[],
    attrs: Record<string, number | number[]> = {},
    output = `t${this.n++}`,
  ): string {
    const { INT, INTS } = onnx.AttributeProto.AttributeType;
    const attribute = Object.entries(attrs).map(([name, v]) =>
      Array.isArray(v) ? { name, ints: v, type: INTS } : { name, i: v, type: INT },
    );
    this.nodes.push({ input: inputs, output: [output], name: output, opType: type, attribute });
    return output;
  }

  slice(x: string, start: number, end: number, axis: number, step = 1): string {
    return this.op('Slice', [x, this.ints([start]), this.ints([end]), this.ints([axis]), this.ints([step])]);
  }

  model(input: ValueInfo[], output: ValueInfo[]): Uint8Array {
    return onnx.ModelProto.encode({
      irVersion: 8,
      producerName: 'stt-service',
      graph: { node: this.nodes, name: 'silero_vad_v5_batched', initializer: this.inits, input, output },
      opsetImport: [{ domain: '', version: 17 }],
    }).finish();
  }
}

// ---- the batched graph -------------------------------------------------------------------------------

export const FRAMES = 4;
export const FRAME = 256;
const HOP = 128;
const PAD = 64;
const BINS = 129;
const PREFIX = 'If_0_then_branch__Inline_0__';

/** Weight [out, in, k] of a 1-D convolution, taps side by side: [taps.length * in, out]. */
function taps(w: Weight, which: number[]): Float32Array {
  const [out, inp, k] = w.dims;
  const m = new Float32Array(which.length * inp * out);
  which.forEach((tap, j) => {
    for (let c = 0; c < inp; c++)
      for (let o = 0; o < out; o++) m[(j * inp + c) * out + o] = w.data[(o * inp + c) * k + tap];
  });
  return m;
}

/** The batched graph (ONNX bytes) built from the shipped silero v5 model file. */
export function batchedSileroModel(original: Uint8Array): Uint8Array {
  const consts = constants(original);
  const get = (name: string, dims: number[]): Weight => {
    const t = consts.get(PREFIX + name);
    if (!t) throw new Error(`silero graph: ${name} not found (not the silero v5 model?)`);
    const w = tensorOf(t);
    if (w.dims.join('x') !== dims.join('x') || w.data.length !== dims.reduce((a, b) => a * b, 1)) {
      throw new Error(`silero graph: ${name} is ${w.dims.join('x')}, expected ${dims.join('x')}`);
    }
    return w;
  };
  const basis = get('stft.forward_basis_buffer', [2 * BINS, 1, FRAME]);
  const enc = [
    [get('encoder.0.reparam_conv.weight', [128, BINS, 3]), get('encoder.0.reparam_conv.bias', [128])],
    [get('encoder.1.reparam_conv.weight', [64, 128, 3]), get('encoder.1.reparam_conv.bias', [64])],
    [get('encoder.2.reparam_conv.weight', [64, 64, 3]), get('encoder.2.reparam_conv.bias', [64])],
    [get('encoder.3.reparam_conv.weight', [128, 64, 3]), get('encoder.3.reparam_conv.bias', [128])],
  ];
  const wih = get('decoder.rnn.weight_ih', [512, 128]);
  const whh = get('decoder.rnn.weight_hh', [512, 128]);
  const bih = get('decoder.rnn.bias_ih', [512]);
  const bhh = get('decoder.rnn.bias_hh', [512]);
  const dw = get('decoder.decoder.2.weight', [1, 128, 1]);
  const db = get('decoder.decoder.2.bias', [1]);

  const g = new GraphBuilder();
  // STFT: frames [N,4,256] x basis^T [256,258].
  const bt = new Float32Array(FRAME * 2 * BINS);
  for (let c = 0; c < 2 * BINS; c++)
    for (let k = 0; k < FRAME; k++) bt[k * 2 * BINS + c] = basis.data[c * FRAME + k];
  const spec = g.op('MatMul', ['frames', g.init('stft_basis_t', [FRAME, 2 * BINS], bt)]);
  const re = g.slice(spec, 0, BINS, 2);
  const im = g.slice(spec, BINS, 2 * BINS, 2);
  const mag = g.op('Sqrt', [g.op('Add', [g.op('Mul', [re, re]), g.op('Mul', [im, im])])]);
  const padTime = (x: string) => g.op('Pad', [x, g.ints([0, 1, 0, 0, 1, 0])]);
  const dense = (x: string, i: number, w: Float32Array, rows: number, cols: number) =>
    g.op('Relu', [
      g.op('Add', [
        g.op('MatMul', [x, g.init(`enc${i}_w`, [rows, cols], w)]),
        g.init(`enc${i}_b`, [cols], enc[i][1].data),
      ]),
    ]);
  // enc0: stride 1 over 4 steps: taps t-1, t, t+1.
  const p0 = padTime(mag);
  const e0 = dense(
    g.op('Concat', [g.slice(p0, 0, 4, 1), g.slice(p0, 1, 5, 1), g.slice(p0, 2, 6, 1)], { axis: 2 }),
    0,
    taps(enc[0][0], [0, 1, 2]),
    3 * BINS,
    128,
  );
  // enc1: stride 2, 4 -> 2 steps.
  const p1 = padTime(e0);
  const e1 = dense(
    g.op('Concat', [g.slice(p1, 0, 4, 1, 2), g.slice(p1, 1, 5, 1, 2), g.slice(p1, 2, 6, 1, 2)], { axis: 2 }),
    1,
    taps(enc[1][0], [0, 1, 2]),
    384,
    64,
  );
  // enc2: stride 2, 2 -> 1 step: taps 1 and 2 see steps 0 and 1 (tap 0 sees padding).
  const e2 = dense(g.op('Reshape', [e1, g.ints([-1, 128])]), 2, taps(enc[2][0], [1, 2]), 128, 64);
  // enc3: one step: only the middle tap sees data.
  const e3 = dense(e2, 3, taps(enc[3][0], [1]), 64, 128);
  // LSTM cell, gates reordered (i, f, o | g) so that one sigmoid covers three of them.
  const H = 128;
  const order = [0, 1, 3, 2]; // PyTorch gate blocks: i, f, g, o
  const wg = new Float32Array(2 * H * 4 * H);
  const bg = new Float32Array(4 * H);
  order.forEach((src, dst) => {
    for (let u = 0; u < H; u++) {
      const row = src * H + u;
      const col = dst * H + u;
      for (let j = 0; j < H; j++) {
        wg[j * 4 * H + col] = wih.data[row * H + j];
        wg[(H + j) * 4 * H + col] = whh.data[row * H + j];
      }
      bg[col] = bih.data[row] + bhh.data[row];
    }
  });
  const h = g.op('Gather', ['state', g.init('zero', [], BigInt64Array.from([0n]))], { axis: 0 });
  const c = g.op('Gather', ['state', g.init('one', [], BigInt64Array.from([1n]))], { axis: 0 });
  const gates = g.op('Add', [
    g.op('MatMul', [g.op('Concat', [e3, h], { axis: 1 }), g.init('lstm_w', [2 * H, 4 * H], wg)]),
    g.init('lstm_b', [4 * H], bg),
  ]);
  const sig = g.op('Sigmoid', [g.slice(gates, 0, 3 * H, 1)]);
  const cand = g.op('Tanh', [g.slice(gates, 3 * H, 4 * H, 1)]);
  const c1 = g.op('Add', [
    g.op('Mul', [g.slice(sig, H, 2 * H, 1), c]),
    g.op('Mul', [g.slice(sig, 0, H, 1), cand]),
  ]);
  const h1 = g.op('Mul', [g.slice(sig, 2 * H, 3 * H, 1), g.op('Tanh', [c1])]);
  const axis0 = g.ints([0]);
  g.op('Concat', [g.op('Unsqueeze', [h1, axis0]), g.op('Unsqueeze', [c1, axis0])], { axis: 0 }, 'stateN');
  const logit = g.op('Add', [
    g.op('MatMul', [g.op('Relu', [h1]), g.init('dec_w', [H, 1], Float32Array.from(dw.data))]),
    g.init('dec_b', [1], db.data),
  ]);
  g.op('Sigmoid', [logit], {}, 'output');
  return g.model(
    [valueInfo('frames', ['N', FRAMES, FRAME]), valueInfo('state', [2, 'N', H])],
    [valueInfo('output', ['N', 1]), valueInfo('stateN', [2, 'N', H])],
  );
}

/**
 * The model input of one window (576 samples) as the batched graph wants it:
 * reflect-padded by 64 on the right (as silero's STFT does), 4 frames of 256
 * every 128 samples, written at `out[at .. at + 1024)`.
 */
export function frameWindow(x: Float32Array, out: Float32Array, at: number): void {
  const n = x.length;
  if (n + PAD !== (FRAMES - 1) * HOP + FRAME) throw new Error(`silero graph: window input of ${n} samples`);
  for (let f = 0; f < FRAMES; f++) {
    const start = f * HOP;
    const o = at + f * FRAME;
    const inside = Math.min(FRAME, n - start);
    out.set(x.subarray(start, start + inside), o);
    // Reflection of the last samples (the edge sample itself is not repeated).
    for (let k = inside; k < FRAME; k++) out[o + k] = x[2 * (n - 1) - (start + k)];
  }
}

/** Floats of one window's model input. */
export const FRAMED_INPUT = FRAMES * FRAME;
