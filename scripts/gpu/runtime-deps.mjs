// Prints the node_modules paths (from package-lock.json) of the package's runtime
// dependencies and everything they pull in, as Node would resolve them: the
// "dependencies" of package.json less the build-time ones (the addon's build and
// the TypeScript runner). scripts/gpu/prepare.sh packs exactly these.
import { readFileSync } from 'node:fs';
const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')).packages;
const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
const buildOnly = new Set(['cmake-js', 'node-addon-api', 'tsx']);
const seen = new Set();
// Resolves `name` as Node would from the package at `from` (node_modules nesting).
function resolve(from, name) {
  let dir = from;
  for (;;) {
    const p = (dir ? dir + '/' : '') + 'node_modules/' + name;
    if (lock[p]) return p;
    if (!dir) return undefined;
    const i = dir.lastIndexOf('/node_modules/');
    dir = i < 0 ? '' : dir.slice(0, i);
  }
}
function walk(p) {
  if (seen.has(p)) return;
  seen.add(p);
  const e = lock[p];
  for (const d of Object.keys({ ...e.dependencies, ...e.optionalDependencies })) {
    const r = resolve(p, d);
    if (r) walk(r);
  }
}
for (const d of Object.keys(pkg.dependencies)) if (!buildOnly.has(d)) walk(resolve('', d));
console.log([...seen].join('\n'));
