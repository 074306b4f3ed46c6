// Judges the conformance suite's results (the checks.json of each scenario
// under DIR) against expected-failures.json: every check must pass, or fail
// (or warn) exactly where that file says why. A check listed there that now
// passes is reported too, so the list never goes stale.
//
// Usage: node judge.mjs DIR
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2];
const expected = JSON.parse(readFileSync(new URL("./expected-failures.json", import.meta.url), "utf8"));
let bad = 0;
let passed = 0;
let known = 0;
for (const run of readdirSync(dir)) {
  const file = join(dir, run, "checks.json");
  if (!existsSync(file)) continue;
  const scenario = run.replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT.*$/, "");
  const allowed = expected[scenario] ?? {};
  const seen = new Set();
  for (const check of JSON.parse(readFileSync(file, "utf8"))) {
    seen.add(check.id);
    if (check.status === "SUCCESS" || check.status === "INFO" || check.status === "SKIPPED") {
      passed += 1;
      if (allowed[check.id]) {
        console.error(`${scenario}: ${check.id} passes now: remove it from expected-failures.json`);
        bad += 1;
      }
    } else if (allowed[check.id]) {
      known += 1;
      console.log(`${scenario}: ${check.id} ${check.status} (expected: ${allowed[check.id]})`);
    } else {
      bad += 1;
      console.error(`${scenario}: ${check.id} ${check.status}: ${check.errorMessage ?? check.description}`);
    }
  }
  for (const id of Object.keys(allowed)) {
    if (!seen.has(id)) {
      console.error(`${scenario}: ${id} did not run: remove it from expected-failures.json`);
      bad += 1;
    }
  }
}
console.log(`conformance: ${passed} passed, ${bad} failed, ${known} expected failures`);
process.exit(bad === 0 && passed > 0 ? 0 : 1);
