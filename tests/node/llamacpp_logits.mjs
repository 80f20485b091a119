// llama.cpp's own logits for a token sequence, through node-llama-cpp's
// prebuilt CPU build (pinned in package.json): the peer the families are
// checked against (tests/ref/check_llamacpp.py).
// Usage: node llamacpp_logits.mjs MODEL.gguf OUT.f32 TOKEN [TOKEN ...]
// Writes the logits after each token, [n_tokens][n_vocab] little-endian f32
// (the layout of `subq logits -o`), evaluated as one batch with the KV cache
// in f16 and flash attention off.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {writeFileSync} from "node:fs";

const [modelPath, outPath, ...rest] = process.argv.slice(2);
const tokens = rest.map((t) => parseInt(t, 10));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const ctx = await model.createContext({contextSize: tokens.length + 8, batchSize: 512, threads: 2,
                                       flashAttention: false});
const res = await ctx.getSequence().controlledEvaluate(tokens.map((t) => [t, {generateNext: {logits: true}}]));
const out = new Float32Array(tokens.length * nVocab);
res.forEach((r, p) => {
    for (const [tok, v] of r.next.logits) out[p * nVocab + tok] = v;
});
writeFileSync(outPath, Buffer.from(out.buffer));
await ctx.dispose();
await model.dispose();
await llama.dispose();
