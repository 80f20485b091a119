#!/usr/bin/env node
// Peer comparison in the same run: llama.cpp and subq on the same GGUF file
// with the same thread count, prefill and decode tok/s at each length, and
// the ratio subq / llama.cpp.
//
// llama.cpp runs through the npm package node-llama-cpp (pinned in
// bench/package.json; its prebuilt CPU build, no compiler, works offline once
// installed). Once:    npm --prefix bench install   (bench/node_modules is git-ignored;
//                      `npm ci` refuses: the lock holds only this platform's prebuilt)
// Then:                node bench/peer_llamacpp.mjs [--model FILE] [--threads 2]
//                          [--lengths 512,8192] [--n-decode 16] [--json OUT.json]
//                          [--subq-decode full,exact]
// Default model: $TMPDIR/subq-qwen3-0.6b-q8_0.gguf, written by
// `subq synth --shape qwen3-0.6b --type q8_0` when missing (the file
// bench/sparse_speed.sh uses). Run on an otherwise idle machine; the load
// (uptime) is printed before and after.
//
// What is timed, for each length L (same for both unless noted):
//   prefill L   llama.cpp: L random token ids into an empty sequence (batches of
//               512, KV cache f16, flash attention off), wall time.
//               subq: `subq bench --prefill-ctx L --attn full` (batches of 512).
//   decode @L   one-token steps after L tokens are in the KV cache (one untimed
//               warm-up step for llama.cpp, then --n-decode timed ones), after
//               the real prefill of L tokens, for both.
// With --subq-decode KINDS (e.g. full,exact,hnsw) subq runs no prefill: its
// decode rows come from `subq bench --ctx L --attn KINDS` (KV cache and
// indexes filled synthetically, random d_search = 128 projections, K = 128,
// sink 4, tail 16, search keys f16: the sparse decode table of
// BENCHMARKS.md), beside llama.cpp's decode after its real prefill of L
// tokens. Decode speed does not depend on the cached values; a real 32K
// prefill in subq takes 6-20 minutes here.
// Second use, a correctness cross-check of subq's forward pass (RoPE scaling
// included) against llama.cpp on small models:
//   node bench/peer_llamacpp.mjs --greedy-check A.gguf [B.gguf ...] [--n-gen 100]
// llama.cpp generates greedily from a fixed random prompt; `subq logits` of
// prompt + generation must put its argmax on every token llama.cpp chose
// (printed: agreements, and subq's logit margin at each disagreement).
//
import {execFileSync, spawnSync} from "node:child_process";
import {existsSync, readFileSync, writeFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..");
const subqBin = process.env.SUBQ_BIN || join(repo, "build", "subq");

function die(msg) {
    console.error(`peer_llamacpp: error: ${msg}`);
    process.exit(1);
}

function parseArgs(argv) {
    const o = {
        model: join(process.env.TMPDIR || tmpdir(), "subq-qwen3-0.6b-q8_0.gguf"),
        threads: 2, lengths: [512, 8192], nDecode: 16, json: null, greedy: null, nGen: 100, subqDecode: null,
    };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = argv[i + 1];
        const need = () => { if (v === undefined) die(`${a} needs a value`); i++; return v; };
        const posInt = (s) => { const n = Number(s); if (!Number.isInteger(n) || n < 1) die(`${a}: '${s}' is not a positive integer`); return n; };
        if (a === "--model" || a === "-m") o.model = need();
        else if (a === "--threads" || a === "-t") o.threads = posInt(need());
        else if (a === "--lengths") o.lengths = need().split(",").map(posInt);
        else if (a === "--n-decode" || a === "-n") o.nDecode = posInt(need());
        else if (a === "--json") o.json = need();
        else if (a === "--n-gen") o.nGen = posInt(need());
        else if (a === "--subq-decode") o.subqDecode = need().split(",");
        else if (a === "--greedy-check") {
            o.greedy = [];
            while (argv[i + 1] !== undefined && !argv[i + 1].startsWith("--")) o.greedy.push(argv[++i]);
            if (!o.greedy.length) die("--greedy-check needs model files");
        }
        else if (a === "--help" || a === "-h") {
            console.log("usage: node bench/peer_llamacpp.mjs [--model FILE] [--threads N] [--lengths 512,8192] " +
                        "[--n-decode N] [--json OUT] [--subq-decode full,exact]\n(see the header of this file)");
            process.exit(0);
        } else die(`unknown option '${a}'`);
    }
    return o;
}

const uptime = () => execFileSync("uptime", {encoding: "utf8"}).trim();

/* subq bench --prefill-ctx --json: a real prefill of each length, then decode at that real context */
function runSubq(o) {
    const args = o.subqDecode
        ? ["bench", "-m", o.model, "-t", String(o.threads), "--kv", "f16", "--prefill", "0", "--ctx", o.lengths.join(","),
           "--attn", o.subqDecode.join(","), "--random-search", "128", "--topk", "128", "--search-f16",
           "-n", String(o.nDecode), "--json"]
        : ["bench", "-m", o.model, "-t", String(o.threads), "--kv", "f16", "--prefill-ctx", o.lengths.join(","),
           "--attn", "full", "-n", String(o.nDecode), "--json"];
    console.error(`peer_llamacpp: ${subqBin} ${args.join(" ")}`);
    const r = spawnSync(subqBin, args, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
    if (r.status !== 0) die(`subq bench failed: ${r.stderr.trim()}`);
    return {args, out: JSON.parse(r.stdout)};
}

/* {prefill: {L: tok/s}, decode: {L: tok/s}} from subq bench's JSON (full
 * attention rows); with --subq-decode, decode rows {"L attn": tok/s} only */
function subqFigures(j) {
    const prefill = {}, decode = {};
    if (!Array.isArray(j.prefill)) {  // subq bench --ctx: decode rows only
        for (const d of j.decode) decode[`${d.ctx} ${d.attn}`] = d.decode_tok_s;
        return {prefill, decode};
    }
    for (const p of j.prefill) if (p.attn === "full") {
        prefill[p.n_tokens] = p.tok_s;
        decode[p.n_tokens] = p.decode_tok_s;
    }
    return {prefill, decode};
}

async function loadLlama(o) {
    let lib;
    try {
        lib = await import("node-llama-cpp");
    } catch (e) {
        die(`node-llama-cpp is not installed (${e.code || e.message}); run: npm --prefix bench install`);
    }
    const {getLlama, LlamaLogLevel} = lib;
    return getLlama({gpu: false, build: "never", maxThreads: o.threads, logLevel: LlamaLogLevel.error});
}

/* 64-bit LCG token ids in [lo, n) */
function tokenSource(seed, lo, n) {
    let x = BigInt(seed);
    return () => {
        x = (x * 6364136223846793005n + 1442695040888963407n) & 0xFFFFFFFFFFFFFFFFn;
        return lo + Number((x >> 33n) % BigInt(n - lo));
    };
}

const modelInfo = (path) =>
    JSON.parse(execFileSync(subqBin, ["info", "-m", path, "--json"], {encoding: "utf8", maxBuffer: 1 << 26}));

async function greedyCheck(o) {
    const llama = await loadLlama(o);
    let allAgree = true;
    for (const path of o.greedy) {
        const md = modelInfo(path).metadata;
        const nVocab = md["tokenizer.ggml.tokens"].n, bos = md["tokenizer.ggml.bos_token_id"];
        const next = tokenSource(3, 3, nVocab);
        const prompt = [bos, ...Array.from({length: 40}, next)];
        const model = await llama.loadModel({modelPath: path, gpuLayers: 0});
        const ctx = await model.createContext({contextSize: prompt.length + o.nGen + 8, batchSize: 512,
                                               threads: o.threads, flashAttention: false});
        const gen = [];
        for await (const t of ctx.getSequence().evaluate(prompt, {temperature: 0})) {
            gen.push(t);
            if (gen.length >= o.nGen) break;
        }
        await ctx.dispose();
        await model.dispose();
        const seq = [...prompt, ...gen], out = join(tmpdir(), `peer_greedy_${process.pid}.f32`);
        execFileSync(subqBin, ["logits", "-m", path, "--tokens", seq.join(" "), "--force", "-o", out]);
        const buf = readFileSync(out);
        const lg = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
        const misses = [];
        gen.forEach((t, j) => {
            const row = lg.subarray((prompt.length - 1 + j) * nVocab, (prompt.length + j) * nVocab);
            let best = 0;
            for (let v = 1; v < nVocab; v++) if (row[v] > row[best]) best = v;
            if (best !== t) misses.push(`step ${j}: margin ${(row[best] - row[t]).toFixed(4)}`);
        });
        allAgree &&= misses.length === 0;
        console.log(`${path}: llama.cpp greedy ${gen.length} tokens (stops at EOS), subq argmax agrees on ` +
                    `${gen.length - misses.length}${misses.length ? "; " + misses.slice(0, 5).join(", ") : ""}`);
    }
    await llama.dispose();
    process.exit(allAgree ? 0 : 1);
}

async function runLlamaCpp(o) {
    const llama = await loadLlama(o);
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const maxLen = Math.max(...o.lengths);
    const context = await model.createContext({
        contextSize: maxLen + o.nDecode + 8, batchSize: 512, threads: {ideal: o.threads, min: o.threads},
        flashAttention: false, sequences: 1,
    });
    const seq = context.getSequence();
    const nextTok = tokenSource(7, 0, o.nVocab);  // random ids, as subq bench's prefill batch
    const prefill = {}, decode = {};
    for (const L of o.lengths) {
        await seq.clearHistory();
        const toks = Array.from({length: L}, nextTok);
        console.error(`peer_llamacpp: llama.cpp prefill ${L} tokens...`);
        let t0 = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(toks);
        prefill[L] = L / ((performance.now() - t0) / 1e3);
        console.error(`peer_llamacpp: llama.cpp decode at ${L}...`);
        await seq.evaluateWithoutGeneratingNewTokens([nextTok()]);  // warm-up step, untimed
        t0 = performance.now();
        for (let s = 0; s < o.nDecode; s++) await seq.evaluateWithoutGeneratingNewTokens([nextTok()]);
        decode[L] = o.nDecode / ((performance.now() - t0) / 1e3);
    }
    const release = llama.llamaCppRelease;
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    return {prefill, decode, release};
}

const o = parseArgs(process.argv.slice(2));
if (!existsSync(subqBin)) die(`${subqBin} is missing; build with make build (or set SUBQ_BIN)`);
if (o.greedy) await greedyCheck(o);
if (!existsSync(o.model)) {
    console.error(`peer_llamacpp: writing ${o.model} (subq synth --shape qwen3-0.6b --type q8_0)...`);
    execFileSync(subqBin, ["synth", "--shape", "qwen3-0.6b", "--type", "q8_0", "-o", o.model], {stdio: "inherit"});
}
const info = modelInfo(o.model);
o.nVocab = info.metadata["tokenizer.ggml.tokens"].n;
const loadBefore = uptime();
const subq = runSubq(o);
const sq = subqFigures(subq.out);
const lc = await runLlamaCpp(o);
const loadAfter = uptime();

const fmt = (x) => (x === undefined ? "n/a" : x.toFixed(2));
const ratio = (a, b) => (a === undefined || b === undefined ? "n/a" : (a / b).toFixed(3));
const rows = [];
for (const L of o.lengths) {
    rows.push({what: `prefill ${L}`, L, subq: sq.prefill[L], llamacpp: lc.prefill[L]});
    if (!o.subqDecode) rows.push({what: `decode @${L}`, L, subq: sq.decode[L], llamacpp: lc.decode[L]});
    else for (const k of o.subqDecode)  // llama.cpp: dense decode after its real prefill
        rows.push({what: `decode @${L} ${k}`, L, attn: k, subq: sq.decode[`${L} ${k}`], llamacpp: lc.decode[L]});
}
console.log(`model ${o.model} (${subq.out.arch}, rope: ${info.rope}), ${o.threads} threads, KV f16`);
const nlcVersion = JSON.parse(readFileSync(join(repo, "bench", "node_modules", "node-llama-cpp", "package.json"))).version;
console.log(`llama.cpp: node-llama-cpp ${nlcVersion} prebuilt CPU build (llama.cpp ${lc.release.repo} ${lc.release.release})`);
console.log(`subq: ${subqBin} ${subq.args.join(" ")}`);
console.log(`load before: ${loadBefore}`);
console.log(`load after:  ${loadAfter}`);
console.log(`${"tok/s".padEnd(20)} ${"subq".padStart(10)} ${"llama.cpp".padStart(10)} ${"subq/llama.cpp".padStart(15)}`);
for (const r of rows)
    console.log(`${r.what.padEnd(20)} ${fmt(r.subq).padStart(10)} ${fmt(r.llamacpp).padStart(10)} ${ratio(r.subq, r.llamacpp).padStart(15)}`);
if (o.json) {
    writeFileSync(o.json, JSON.stringify({model: o.model, threads: o.threads, kv_type: "f16", load_before: loadBefore,
        load_after: loadAfter, llamacpp_release: lc.release, subq_args: subq.args,
        rows: rows.map((r) => ({...r, ratio: r.subq !== undefined && r.llamacpp ? r.subq / r.llamacpp : null}))}, null, 1) + "\n");
}
