// llama.cpp's own logits for a token sequence, through node-llama-cpp's
// prebuilt CPU build (pinned in package.json): the peer the families are
// checked against (tests/ref/check_llamacpp.py).
// Usage: node llamacpp_logits.mjs MODEL.gguf OUT.f32 [--ctx N] TOKEN [TOKEN ...]
// Writes the logits after each token, [n_tokens][n_vocab] little-endian f32
// (the layout of `subq logits -o`), evaluated as one batch with the KV cache
// in f16 and flash attention off, in a context of N tokens (default: the
// tokens and 8 more; llama.cpp rounds it up to a multiple of 256, the size
// Phi-3's LongRoPE chooses its factors by).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {writeFileSync} from "node:fs";

const [modelPath, outPath, ...rest] = process.argv.slice(2);
let contextSize = 0;
if (rest[0] === "--ctx") {
    contextSize = parseInt(rest[1], 10);
    rest.splice(0, 2);
}
const tokens = rest.map((t) => parseInt(t, 10));
if (!(contextSize > 0)) contextSize = tokens.length + 8;
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const ctx = await model.createContext({contextSize, batchSize: 512, threads: 2, flashAttention: false});
if (ctx.contextSize < contextSize) throw new Error(`asked for a context of ${contextSize} tokens, got ${ctx.contextSize}`);
const res = await ctx.getSequence().controlledEvaluate(tokens.map((t) => [t, {generateNext: {logits: true}}]));
const out = new Float32Array(tokens.length * nVocab);
res.forEach((r, p) => {
    for (const [tok, v] of r.next.logits) out[p * nVocab + tok] = v;
});
writeFileSync(outPath, Buffer.from(out.buffer));
await ctx.dispose();
await model.dispose();
await llama.dispose();
