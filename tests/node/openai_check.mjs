// Drives subq serve with the official openai client: the model's id from
// models.list and models.retrieve, completions and chat completions, streamed
// and not, and the errors of a model the server does not run and of a field
// it does not implement. Usage: node openai_check.mjs BASE_URL API_KEY SPEC.json
// SPEC: {"completions": [{"prompt", "max_tokens", "temperature", "top_p", "top_k", "seed"}, ...],
//        "chat": [{"messages", ...}, ...]}
// Prints {"model", "retrieved", "completions": [{"text", "stream_text", "usage", "finish"}...], "chat": [...],
//         "errors": [{"status", "param", "code", "type"}...]} as JSON.
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const [base, key, specPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, "utf8"));
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });

const model = (await client.models.list()).data[0].id;
const retrieved = (await client.models.retrieve(model)).id;

async function one(kind, req) {
  const api = kind === "chat" ? client.chat.completions : client.completions;
  const whole = await api.create({ model, ...req });
  const choice = whole.choices[0];
  const text = kind === "chat" ? choice.message.content : choice.text;
  let streamed = "";
  let finish = null;
  const stream = await api.create({ model, ...req, stream: true });
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed += kind === "chat" ? (c.delta.content ?? "") : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, stream_text: streamed, usage: whole.usage, finish: choice.finish_reason, stream_finish: finish };
}

// a refused request: the client's error, as the server shaped it
async function refused(call) {
  try {
    await call();
    return { status: 200 };
  } catch (e) {
    return { status: e.status, param: e.param ?? null, code: e.code ?? null, type: e.type ?? null };
  }
}

const out = { model, retrieved, completions: [], chat: [], errors: [] };
for (const r of spec.completions ?? []) out.completions.push(await one("completions", r));
for (const r of spec.chat ?? []) out.chat.push(await one("chat", r));
const msgs = [{ role: "user", content: "Hi" }];
out.errors.push(await refused(() => client.models.retrieve("no-such-model")));
out.errors.push(await refused(() => client.chat.completions.create({ model: "no-such-model", messages: msgs })));
out.errors.push(await refused(() => client.chat.completions.create({ model, messages: msgs, logit_bias: { 5: 10 } })));
out.errors.push(await refused(() => client.chat.completions.create({
  model, messages: msgs, tools: [{ type: "function", function: { name: "f", parameters: {} } }] })));
process.stdout.write(JSON.stringify(out));
