// llama.cpp's own token ids for a list of texts, through node-llama-cpp's
// prebuilt CPU build (pinned in package.json): the peer the pre-tokenizers
// are checked against (tests/ref/check_pretok_llamacpp.py).
// Usage: node llamacpp_tokenize.mjs MODEL.gguf IN.json OUT.json
// IN.json is a JSON array of strings; OUT.json gets an array of id arrays,
// one per string: no BOS, special tokens parsed (subq tokenize --no-bos).
// Only the vocabulary is loaded.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync, writeFileSync} from "node:fs";

const [modelPath, inPath, outPath] = process.argv.slice(2);
const texts = JSON.parse(readFileSync(inPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0, vocabOnly: true});
const out = texts.map((t) => Array.from(model.tokenize(t, true)));
writeFileSync(outPath, JSON.stringify(out));
await model.dispose();
await llama.dispose();
