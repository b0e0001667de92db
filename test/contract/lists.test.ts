/**
 * The numeric lists native code and TypeScript share, read from the C++ headers
 * and compared with the TypeScript lists: error codes (in order: the number crosses
 * between ranks), op kinds, NCCL group flags, dtypes and reduction ops. A header
 * edit without the matching TypeScript edit (or the reverse) fails here.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DTYPE_CODE, REDUCE_OP_CODE } from '../../src/dtypes.js';
import { ERROR_CODES } from '../../src/errors.js';
import { GroupFlag as NcclCommGroupFlag } from '../../src/comm/nccl/nccl-comm.js';
import { GroupFlag, OpKind } from '../../src/native/contract.js';

const root = join(import.meta.dirname, '..', '..');
const header = (path: string): string => readFileSync(join(root, path), 'utf8');

function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/[^\n]*/g, '');
}

/** The enumerators of `enum [class] name [: type] { ... }` with their values, C++'s implicit numbering included. */
function enumValues(text: string, name: string): Record<string, number> {
  const m = new RegExp(`enum\\s+(?:class\\s+)?${name}\\s*(?::\\s*[\\w:]+\\s*)?\\{([^}]*)\\}`).exec(stripComments(text));
  if (!m) throw new Error(`enum ${name} not found`);
  const out: Record<string, number> = {};
  let next = 0;
  for (const item of m[1]!.split(',').map((s) => s.trim()).filter(Boolean)) {
    const [, id, value] = /^(\w+)\s*(?:=\s*(-?\d+))?$/.exec(item) ?? [];
    if (!id) throw new Error(`enum ${name}: cannot read "${item}"`);
    next = value === undefined ? next : Number(value);
    out[id] = next++;
  }
  return out;
}

/** The codes of NCCL_NODE_ERROR_CODES(X), in order. */
function errorCodes(text: string): string[] {
  const m = /#define NCCL_NODE_ERROR_CODES\(X\)((?:[^\n]*\\\n)*[^\n]*)/.exec(text);
  if (!m) throw new Error('NCCL_NODE_ERROR_CODES not found');
  return [...m[1]!.matchAll(/X\(\s*\w+\s*,\s*"([A-Z_]+)"\s*\)/g)].map((x) => x[1]!);
}

const lowerFirst = (s: string): string => s[0]!.toLowerCase() + s.slice(1);
const rename = (values: Record<string, number>, f: (s: string) => string): Record<string, number> =>
  Object.fromEntries(Object.entries(values).map(([k, v]) => [f(k), v]));

describe('native and TypeScript lists agree', () => {
  it('error codes: native/core/errors.h NCCL_NODE_ERROR_CODES = src/errors.ts ERROR_CODES, in order', () => {
    expect(errorCodes(header('native/core/errors.h'))).toEqual([...ERROR_CODES]);
  });

  it('op kinds: native/core/op.h OpKind and op.cpp names = contract OpKind', () => {
    const op = header('native/core/op.h');
    expect(rename(enumValues(op, 'OpKind'), lowerFirst)).toEqual(OpKind);
    expect(Number(/kNumOpKinds\s*=\s*(\d+)/.exec(op)?.[1])).toBe(Object.keys(OpKind).length);
    const names = /names\[\]\s*=\s*\{([^}]*)\}/.exec(header('native/core/op.cpp'))?.[1] ?? '';
    expect([...names.matchAll(/"(\w+)"/g)].map((x) => x[1])).toEqual(Object.keys(OpKind));
  });

  it('group flags: native/core/op.h Op::Group = contract GroupFlag (and nccl-comm.ts uses the same)', () => {
    expect(rename(enumValues(header('native/core/op.h'), 'Group'), lowerFirst)).toEqual(GroupFlag);
    expect(NcclCommGroupFlag).toBe(GroupFlag);
  });

  it('dtypes and reduction ops: native/core/dtype.h = src/dtypes.ts', () => {
    const dtype = header('native/core/dtype.h');
    expect(rename(enumValues(dtype, 'DType'), (s) => s.toLowerCase())).toEqual(DTYPE_CODE);
    expect(rename(enumValues(dtype, 'RedOp'), (s) => s.toLowerCase())).toEqual(REDUCE_OP_CODE);
  });

  it('the readers see an edit: a renamed, reordered or renumbered entry no longer matches', () => {
    const errors = header('native/core/errors.h');
    expect(errorCodes(errors.replace('"ERR_CHECKSUM"', '"ERR_CHECKSUMS"'))).not.toEqual([...ERROR_CODES]);
    expect(errorCodes(errors.replace(/(X\(Timeout[^\n]*\n)(\s*X\(CommDestroyed[^\n]*\n)/, '$2$1'))).not.toEqual([...ERROR_CODES]);
    const op = header('native/core/op.h').replace('Split = 11', 'Split = 12');
    expect(rename(enumValues(op, 'OpKind'), lowerFirst)).not.toEqual(OpKind);
    expect(enumValues('enum class E : int { A, B = 5, C };', 'E')).toEqual({ A: 0, B: 5, C: 6 });
  });
});
