// cadence 1.x's RunStore, driven call by call for `tools/differential_cadence1x.py`.
// argv: <cadence-1x-src dir>. One JSON command per stdin line, one JSON answer per line:
//   {"open": {"consumerRoot", "stateBase"}, "now"}  -> {"ok": {"databasePath", "rootHash"}}
//   {"call": name, "args": [...], "now", "ids": [...], "write": kind}
//       -> {"json": JSON.stringify(value)} | {"undefined": true}
//          | {"error": {"code", "errcode", "message", "name"}},
//          each with "writes" (calls of the write callback) and "drawn" (ids asked for)
//   {"close": true}                                  -> {"ok": true}
// "now" is the store's clock for the call (the driver's fake clock, in milliseconds).
// "ids" are the ids that randomUUID hands out during the call, in order: the run ids and
// lease tokens that cadence-store made for the same call, so that both journals hash the
// same payloads; a draw past them gets a real random UUID (and the driver sees it differ).
// "write" is the host callback of the *_atomically calls: "count" (only counted), "sql"
// (an INSERT into a missing host table: the database refuses it) or "throw".
import crypto from "node:crypto";
import { syncBuiltinESMExports } from "node:module";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import path from "node:path";

const realRandomUUID = crypto.randomUUID.bind(crypto);
let queuedIds = [];
let drawn = 0;
// run-store.ts imports randomUUID from node:crypto: patch the builtin's export before it
// is imported, so its run ids and lease tokens are the ones the driver hands out
crypto.randomUUID = () => {
  drawn += 1;
  return queuedIds.length > 0 ? queuedIds.shift() : realRandomUUID();
};
syncBuiltinESMExports();

const source = process.argv[2];
const { RunStore } = await import(pathToFileURL(path.join(source, "run-store.ts")).href);
const { resolveStateRoot } = await import(pathToFileURL(path.join(source, "state-root.ts")).href);

let store;
let now = 0;
const answer = (value) => process.stdout.write(JSON.stringify(value) + "\n");

let writes = 0;
function hostWrite(kind) {
  return (database) => {
    writes += 1;
    if (kind === "sql") database.exec("INSERT INTO differential_missing_host_table VALUES (1)");
    if (kind === "throw") throw new Error("host-write-refused");
  };
}

function invoke(name, args, write) {
  switch (name) {
    case "bindDeliveryAtomically":
    case "bindDeliveriesAtomically":
    case "transitionAtomically":
      return store[name](args[0], hostWrite(write));
    default:
      return store[name](...args);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  if (typeof command.now === "number") now = command.now;
  queuedIds = Array.isArray(command.ids) ? [...command.ids] : [];
  drawn = 0;
  writes = 0;
  try {
    if (command.open) {
      const root = resolveStateRoot({
        consumerRoot: command.open.consumerRoot,
        xdgStateHome: command.open.stateBase,
      });
      store = RunStore.open(root, { now: () => now });
      answer({ ok: { databasePath: root.databasePath, rootHash: root.consumerRootHash } });
    } else if (command.close) {
      store?.close();
      store = undefined;
      answer({ ok: true });
    } else if (command.call) {
      const value = invoke(command.call, command.args ?? [], command.write);
      answer(
        value === undefined
          ? { undefined: true, writes, drawn }
          : { json: JSON.stringify(value), writes, drawn },
      );
    } else {
      answer({ fatal: `unknown command ${line}` });
    }
  } catch (error) {
    const isError = error instanceof Error;
    answer({
      error: {
        code: typeof error?.code === "string" ? error.code : null,
        errcode: typeof error?.errcode === "number" ? error.errcode : null,
        message: isError ? error.message : String(error),
        name: isError ? error.name : typeof error,
      },
      writes,
      drawn,
    });
  }
}
store?.close();
