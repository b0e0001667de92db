/**
 * nccl-node/bench: the pieces of `nccl-node bench` a script can use on its own —
 * comparing two JSON results, and nccl-tests' exact text layout and printf
 * conversions (for tools that print or parse nccl-tests-style reports).
 */
export { compareDocs, compareFiles, type Comparison } from './compare.js';
export { fixed, expo, general, getFloatStr, padLeft, padRight } from './printf.js';
export {
  NCCL_TESTS_VERSION,
  headerLines,
  tableHeader,
  rankLine,
  rowPreamble,
  rowBody,
  perIterBody,
  footerLines,
  type ParamsLine,
  type RankLine,
  type Measurement,
  type IterStatsUs,
} from './text-format.js';
export { JSON_FILE_VERSION } from './result-files.js';
export { EXIT as BENCH_EXIT_CODES } from './rank.js';
export { allReduceSweep, type SweepOptions, type SweepResult, type SweepRow } from './sweep.js';
