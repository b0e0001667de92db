/**
 * The import graph of src/ as the TypeScript compiler parses it, and the cycles in
 * it. Type-only imports count: a type cycle still ties modules together (one cannot
 * be read, moved or published without the other), and it turns into a load-order
 * cycle the day someone adds a value import along the same edge.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export type Graph = Map<string, string[]>;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.m?ts$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** A relative specifier ('./x.js') to the .ts file it names, or undefined outside the tree. */
function resolveSpecifier(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  const stem = base.replace(/\.(m?js)$/, '');
  for (const candidate of [`${stem}.ts`, `${stem}.mts`, join(base, 'index.ts')]) {
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** Static imports and re-exports (value and type), plus `import('...')` types. */
function specifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier)) {
      out.push(node.moduleSpecifier.text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) &&
        ts.isStringLiteral(node.argument.literal)) {
      out.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** Edges between files under `root`, keyed by path relative to `root`. */
export function importGraph(root: string): Graph {
  const graph: Graph = new Map();
  for (const file of sourceFiles(root)) {
    const targets = new Set<string>();
    for (const spec of specifiers(file)) {
      const target = resolveSpecifier(file, spec);
      if (target && target.startsWith(root)) targets.add(relative(root, target));
    }
    graph.set(relative(root, file), [...targets].sort());
  }
  return graph;
}

/** Every strongly connected component with more than one file (or a self-import), as a readable cycle. */
export function cycles(graph: Graph): string[][] {
  // Tarjan's algorithm, iterative enough for a tree of a few hundred files.
  let index = 0;
  const indices = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const strong = (v: string): void => {
    indices.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indices.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, indices.get(w)!));
      }
    }
    if (low.get(v) === indices.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(pathThrough(graph, component));
    }
  };
  for (const v of [...graph.keys()].sort()) if (!indices.has(v)) strong(v);
  return found;
}

/** One concrete loop a -> b -> ... -> a inside a strongly connected component. */
function pathThrough(graph: Graph, component: string[]): string[] {
  const members = new Set(component);
  const start = [...component].sort()[0]!;
  // Breadth-first from start's successors back to start, staying in the component.
  const prev = new Map<string, string>();
  const queue = [start];
  while (queue.length) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (!members.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let u = v; u !== start; u = prev.get(u)!) path.splice(1, 0, u);
        return [...path, start];
      }
      if (!prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return component;
}
