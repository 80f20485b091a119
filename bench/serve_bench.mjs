// Benchmark driver for subq serve (Node's built-in http and fetch; no packages).
//   node serve_bench.mjs load BASE_URL N CONC          requests/s and time to first token
//   node serve_bench.mjs cache BASE_URL DOC_FILE   prefill saved by the prompt cache:
//        the document, then 10 follow-up questions
// Prints one JSON object.
import { readFileSync } from "node:fs";
import http from "node:http";

const [mode, base] = process.argv.slice(2, 4);

// One request without a time limit (a long prefill may take minutes; fetch gives up after 300 s).
const agent = new http.Agent({ keepAlive: true });
function post(body) {
  const t0 = performance.now();
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(base + "/v1/completions", {
      method: "POST", agent, headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) },
    }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        const j = JSON.parse(text);
        if (res.statusCode !== 200) reject(new Error(text));
        else resolve({ ms: performance.now() - t0, ...j });
      });
    });
    req.on("error", reject);
    req.end(data);
  });
}

// Time from sending a streaming request to its first text chunk.
async function ttft(body) {
  const t0 = performance.now();
  const r = await fetch(base + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ...body, stream: true }),
  });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let first = null, buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    if (first === null && /"text":"[^"]/.test(buf)) first = performance.now() - t0;
  }
  return first;
}

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

if (mode === "load") {
  const n = +process.argv[4], conc = +process.argv[5];
  const prompts = ["Once upon a time", "Tom and Lily", "The big red ball", "One day, a little bird"];
  let next = 0;
  const lat = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, async () => {
    while (next < n) {
      const i = next++;
      const r = await post({ prompt: prompts[i % 4], max_tokens: 16, temperature: 0.8, seed: i });
      lat.push(r.ms);
    }
  }));
  const wall = (performance.now() - t0) / 1e3;
  const firsts = [];
  for (let i = 0; i < 20; i++) firsts.push(await ttft({ prompt: prompts[i % 4], max_tokens: 16, seed: i }));
  console.log(JSON.stringify({
    requests: n, concurrency: conc, max_tokens: 16, seconds: +wall.toFixed(3), requests_per_s: +(n / wall).toFixed(1),
    latency_ms_p50: +pct(lat, 0.5).toFixed(1), latency_ms_p95: +pct(lat, 0.95).toFixed(1),
    ttft_ms_p50: +pct(firsts, 0.5).toFixed(1), ttft_ms_p95: +pct(firsts, 0.95).toFixed(1),
  }));
  agent.destroy();
} else if (mode === "cache") {
  const doc = readFileSync(process.argv[4], "utf8");
  const q = (i) => `\n\nQuestion ${i + 1}: what happens in part ${i + 1} of the text above?\nAnswer:`;
  const first = await post({ prompt: doc, max_tokens: 0, temperature: 0 });
  const follow = [];
  for (let i = 0; i < 10; i++) follow.push(await post({ prompt: doc + q(i), max_tokens: 8, temperature: 0 }));
  // without the cache: the same follow-up prefilled in full (one measured; ten cost ten times that)
  const cold = await post({ prompt: doc + q(0), max_tokens: 8, temperature: 0, cache_prompt: false });
  const sum = (xs, f) => xs.reduce((a, x) => a + f(x), 0);
  console.log(JSON.stringify({
    doc_tokens: first.usage.prompt_tokens, doc_prefill_ms: +first.timings.prompt_ms.toFixed(0),
    followups: 10,
    followup_prompt_tokens: sum(follow, (r) => r.usage.prompt_tokens),
    followup_cached_tokens: sum(follow, (r) => r.usage.prompt_tokens_details.cached_tokens),
    followup_prefilled_tokens: sum(follow, (r) => r.timings.prompt_n),
    followup_prefill_ms: +sum(follow, (r) => r.timings.prompt_ms).toFixed(0),
    followup_total_ms: +sum(follow, (r) => r.ms).toFixed(0),
    uncached_followup_prefill_ms: +cold.timings.prompt_ms.toFixed(0),
    uncached_followup_prefilled_tokens: cold.timings.prompt_n,
    prefill_saved_ms_10_followups: +(10 * cold.timings.prompt_ms - sum(follow, (r) => r.timings.prompt_ms)).toFixed(0),
  }));
  agent.destroy();
}
