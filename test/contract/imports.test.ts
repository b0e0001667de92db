/**
 * Layering of the sources. TypeScript: no import cycle anywhere in src/ (type-only
 * imports included), and native/contract.ts, the typed native surface, imports
 * nothing but errors.ts. C++: native/core includes nothing outside core (no backend:
 * gloo, cuda, nccl, nvml, io, kernels; not the addon entry), and only the entry in
 * native/addon/ registers the backends.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cycles, importGraph, type Graph } from './import-graph.js';

const root = join(import.meta.dirname, '..', '..');

/** `#include "..."` lines of each file in native/<dir>, resolved against the including file. */
function includes(dir: string): { file: string; target: string }[] {
  const base = join(root, 'native', dir);
  const out: { file: string; target: string }[] = [];
  for (const name of readdirSync(base)) {
    if (!/\.(h|cpp|cu)$/.test(name)) continue;
    const text = readFileSync(join(base, name), 'utf8');
    for (const m of text.matchAll(/^\s*#\s*include\s+"([^"]+)"/gm)) {
      out.push({ file: `native/${dir}/${name}`, target: relative(root, resolve(base, m[1]!)) });
    }
  }
  return out;
}

describe('TypeScript import graph', () => {
  const graph = importGraph(join(root, 'src'));

  it('reads the tree (the checker finds the edges it should)', () => {
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get('comm/communicator.ts')).toContain('native.ts');
    expect(graph.get('native.ts')).toContain('native/contract.ts');
  });

  it('has no import cycle in src/', () => {
    expect(cycles(graph).map((c) => c.join(' -> '))).toEqual([]);
  });

  it('finds a cycle, type-only or not, when there is one', () => {
    const fake: Graph = new Map([
      ['a.ts', ['b.ts']], ['b.ts', ['c.ts']], ['c.ts', ['a.ts']], ['d.ts', ['a.ts']], ['e.ts', ['e.ts']],
    ]);
    expect(cycles(fake).map((c) => c.join(' -> ')).sort()).toEqual(['a.ts -> b.ts -> c.ts -> a.ts', 'e.ts -> e.ts']);
  });

  it('keeps native/contract.ts a leaf: it imports errors.ts (types) and nothing else', () => {
    expect(graph.get('native/contract.ts')).toEqual(['errors.ts']);
    expect(graph.get('errors.ts')).toEqual([]);
    // native.ts is its one re-exporter: every other file imports the surface from one of the two.
    const reexporters = [...graph.keys()].filter((f) =>
      /export\s+(?:type\s+)?(?:\*|\{[^}]*\})\s+from\s+['"][^'"]*native\/contract\.js['"]/.test(readFileSync(join(root, 'src', f), 'utf8')));
    expect(reexporters).toEqual(['native.ts']);
  });
});

describe('native include layering', () => {
  it('native/core includes only native/core', () => {
    expect(includes('core').length).toBeGreaterThan(10);
    expect(includes('cuda').some((i) => i.target === 'native/core/errors.h' || i.target === 'native/core/js_errors.h')).toBe(true);
    const outside = includes('core').filter((i) => !i.target.startsWith('native/core/'));
    expect(outside.map((i) => `${i.file} includes ${i.target}`)).toEqual([]);
  });

  it('the addon entry (native/addon/addon.cpp) is the one place that includes every backend', () => {
    const targets = includes('addon').map((i) => i.target.split('/')[1]);
    expect(new Set(targets)).toEqual(new Set(['core', 'cuda', 'gloo', 'io', 'kernels']));
    for (const dir of ['gloo', 'cuda', 'io', 'nccl', 'nvml', 'kernels']) {
      expect(includes(dir).filter((i) => i.target.startsWith('native/addon/'))).toEqual([]);
    }
  });
});
