// Validate glTF/GLB files with the Khronos glTF-Validator (npm `gltf-validator`, a JS library with
// no CLI). Usage: node .ci/validate_gltf.mjs FILE...  (.gltf with external resources works too)
// Prints one JSON summary line per file; exits 1 if any file has an error, 2 if the validator
// module cannot be loaded (install: `npm install -g gltf-validator`).
// Ignored: only errors about `KHR_gaussian_splatting:*` attribute semantics, which validator
// 2.0.0-dev.3.10 does not know (shared/research/tiles-formats.md §0, §5).
import { createRequire } from 'node:module';
import { execSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
// Resolution order: NODE_PATH / node_modules above this script (the e2e harness sets NODE_PATH),
// the CI cache `$HOME/.cache/kiln-ci/node/node_modules`, then the global npm root.
function loadValidator() {
  const candidates = [
    () => require('gltf-validator'),
    () => require(path.join(os.homedir(), '.cache/kiln-ci/node/node_modules/gltf-validator')),
    () => require(path.join(execSync('npm root -g', { encoding: 'utf8' }).trim(), 'gltf-validator')),
  ];
  let last;
  for (const load of candidates) {
    try {
      return load();
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

let validator;
try {
  validator = loadValidator();
} catch (e) {
  console.error(`gltf-validator not found (${e.message}); run: npm install -g gltf-validator`);
  process.exit(2);
}

const isSplatSemantic = (m) =>
  m.severity === 0 && /KHR_gaussian_splatting:/.test(`${m.message} ${m.pointer ?? ''}`);

let failed = 0;
for (const file of process.argv.slice(2)) {
  let bytes;
  try {
    bytes = new Uint8Array(fs.readFileSync(file));
  } catch (e) {
    console.log(JSON.stringify({ file, errors: 1, messages: [{ code: 'IO', message: e.message }] }));
    failed += 1;
    continue;
  }
  const dir = path.dirname(file);
  const report = await validator.validateBytes(bytes, {
    uri: path.basename(file),
    maxIssues: 1000,
    externalResourceFunction: (uri) =>
      new Promise((resolve, reject) => {
        fs.readFile(path.join(dir, decodeURIComponent(uri)), (err, data) =>
          err ? reject(err.toString()) : resolve(new Uint8Array(data)),
        );
      }),
  });
  const errors = report.issues.messages.filter((m) => m.severity === 0 && !isSplatSemantic(m));
  console.log(
    JSON.stringify({
      file,
      errors: errors.length,
      warnings: report.issues.numWarnings,
      infos: report.issues.numInfos,
      triangles: report.info?.totalTriangleCount,
      messages: report.issues.messages.filter((m) => m.severity <= 1),
    }),
  );
  if (errors.length > 0) failed += 1;
}
process.exit(failed > 0 ? 1 : 0);
