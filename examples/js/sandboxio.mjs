// sandboxio from Node with nats.js v3: the same program as the JavaScript
// example of docs/protocol.md. It learns its tenant token from the quota op,
// follows a streamed process's live output, has the router replay the
// stored output (attach) and merges both by Sbx-Seq, as a tenant without
// JetStream must.
//
//   npm install @nats-io/transport-node
//   node examples/js/sandboxio.mjs
//
import { connect } from "@nats-io/transport-node";   // credsAuthenticator for a creds file

const nc = await connect({ servers: "nats://127.0.0.1:4222" });

async function call(op, body, timeout = 90_000) {
  const m = await nc.request(`sbx.api.v1.${op}`, JSON.stringify(body), { timeout });
  if (m.headers?.get("Nats-Service-Error-Code")) throw new SandboxioError(m.json().error);
  return m.json();
}
// The SBX code stays in the message and on the error: branch on err.code, never on text.
class SandboxioError extends Error {
  constructor(e) {
    super(`${e.code} ${e.name}: ${e.message}`);
    this.name = "SandboxioError";
    Object.assign(this, { code: e.code, sbxName: e.name, retryable: e.retryable, details: e.details ?? {} });
  }
}
const bytes = (r, name) =>
  r.encoding === "base64" ? Buffer.from(r[name], "base64") : Buffer.from(r[name], "utf8");

let tenant = "_";
try { tenant = (await call("quota", {})).tenant; } catch { /* older router: open */ }

const sb = await call("create", { timeout_s: 300 });
try {
  const r = await call("exec", { sandbox_id: sb.sandbox_id, cmd: ["python3", "-c", "print(6*7)"] });
  console.log(r.exit_code, bytes(r, "stdout").toString());

  // Streamed exec: live copy subscribed first, then the replay, merged by Sbx-Seq.
  const pid = "p" + Math.random().toString(36).slice(2, 12);
  const nonce = Math.random().toString(36).slice(2, 12);
  const live = nc.subscribe(`sbx.live.${tenant}.${sb.sandbox_id}.${pid}.>`);
  await call("exec", {
    sandbox_id: sb.sandbox_id, process_id: pid, stream: true,
    cmd: ["sh", "-c", "for i in 1 2 3; do echo $i; sleep 1; done"],
  });
  const replay = nc.subscribe(`sbx.replay.${tenant}.${nonce}`);
  await call("attach", { sandbox_id: sb.sandbox_id, process_id: pid, nonce });

  const expect = { stdout: 1, stderr: 1 };
  const held = new Map();          // "stream:seq" -> data, live chunks ahead of the replay
  let exit = null, replaying = true;
  const deliver = (kind, seq, data) => { process.stdout.write(data); expect[kind] = seq + 1; };
  const drain = (kind) => {
    while (held.has(`${kind}:${expect[kind]}`)) {
      const k = `${kind}:${expect[kind]}`;
      deliver(kind, expect[kind], held.get(k));
      held.delete(k);
    }
  };
  const onMsg = (m) => {
    if (m.headers?.get("Sbx-Replay-End")) {
      replaying = false;
      for (const k of [...held.keys()].sort((a, b) => Number(a.split(":")[1]) - Number(b.split(":")[1]))) {
        const [kind, s] = k.split(":"); const seq = Number(s);
        if (seq > expect[kind]) console.log(`gap: ${kind} ${expect[kind]}..${seq - 1} lost`);
        if (seq >= expect[kind]) deliver(kind, seq, held.get(k));
      }
      held.clear();
      return;
    }
    const subject = m.headers?.get("Sbx-Subject") || m.subject;
    const kind = subject.split(".").pop();
    if (kind === "exit") { exit ??= m; return; }
    const seq = Number(m.headers.get("Sbx-Seq"));
    if (seq === expect[kind]) { deliver(kind, seq, m.data); drain(kind); }
    else if (seq > expect[kind]) held.set(`${kind}:${seq}`, m.data);
  };
  await new Promise((resolve) => {
    const pump = async (sub) => { for await (const m of sub) { onMsg(m); if (exit && !replaying) resolve(); } };
    pump(live); pump(replay);
  });
  console.log("exit", exit.headers.get("Sbx-Exit-Code"), exit.json().sbx_error ?? "");
  live.unsubscribe(); replay.unsubscribe();
} catch (e) {
  console.error("failed:", e.message, e.retryable ? "(retryable)" : "");
} finally {
  console.log(await call("kill", { sandbox_id: sb.sandbox_id }));
  await nc.close();
}
