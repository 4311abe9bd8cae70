// cadence 1.x's `verifyIntegrity`, timed inside Node 24, for `python -m benchmarks.verify`.
// argv: <cadence-1x-src dir>. Reads one JSON command per stdin line, answers one JSON line:
//   {"create": {"consumerRoot", "stateBase"}} -> {"databasePath"} (an empty 1.x store)
//   {"open": {"consumerRoot", "stateBase"}}   -> {"opened": true}
//   {"verify": runId}                         -> {"seconds", "sequence"}
//   {"memory": true}                          -> {"maxRssMb" (peak so far), "heapUsedMb"}
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import path from "node:path";

const source = process.argv[2];
const { RunStore } = await import(pathToFileURL(path.join(source, "run-store.ts")).href);
const { resolveStateRoot } = await import(pathToFileURL(path.join(source, "state-root.ts")).href);

let store;
// VmHWM, this process's peak RSS: resourceUsage().maxRSS is the kernel's ru_maxrss,
// which Linux carries over from the parent across fork and exec
const peakRssMb = () => {
  const status = readFileSync("/proc/self/status", "utf8").match(/^VmHWM:\s+(\d+) kB/m);
  return status ? Number(status[1]) / 1024 : process.resourceUsage().maxRSS / 1024;
};
const answer = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const root = ({ consumerRoot, stateBase }) =>
  resolveStateRoot({ consumerRoot, xdgStateHome: stateBase });

for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  try {
    if (command.create) {
      const created = RunStore.open(root(command.create));
      created.close();
      answer({ databasePath: root(command.create).databasePath });
    } else if (command.open) {
      store = RunStore.open(root(command.open));
      answer({ opened: true });
    } else if (command.verify) {
      const started = process.hrtime.bigint();
      const projection = store.verifyIntegrity(command.verify);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      answer({ seconds, sequence: projection.sequence });
    } else if (command.memory) {
      answer({ maxRssMb: peakRssMb(), heapUsedMb: process.memoryUsage().heapUsed / 2 ** 20 });
    } else {
      answer({ error: `unknown command ${line}` });
    }
  } catch (error) {
    answer({ error: String(error?.stack ?? error) });
  }
}
store?.close();
