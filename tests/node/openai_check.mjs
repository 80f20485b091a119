// Drives subq serve with the official openai client: completions and chat
// completions, streamed and not. Usage: node openai_check.mjs BASE_URL API_KEY SPEC.json
// SPEC: {"completions": [{"prompt", "max_tokens", "temperature", "top_p", "top_k", "seed"}, ...],
//        "chat": [{"messages", ...}, ...]}
// Prints {"completions": [{"text", "stream_text", "usage", "finish"}...], "chat": [...]} as JSON.
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const [base, key, specPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, "utf8"));
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });

async function one(kind, req) {
  const api = kind === "chat" ? client.chat.completions : client.completions;
  const whole = await api.create({ model: "subq", ...req });
  const choice = whole.choices[0];
  const text = kind === "chat" ? choice.message.content : choice.text;
  let streamed = "";
  let finish = null;
  const stream = await api.create({ model: "subq", ...req, stream: true });
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed += kind === "chat" ? (c.delta.content ?? "") : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, stream_text: streamed, usage: whole.usage, finish: choice.finish_reason, stream_finish: finish };
}

const out = { completions: [], chat: [] };
for (const r of spec.completions ?? []) out.completions.push(await one("completions", r));
for (const r of spec.chat ?? []) out.chat.push(await one("chat", r));
process.stdout.write(JSON.stringify(out));
