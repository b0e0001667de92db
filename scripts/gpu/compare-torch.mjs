// Reads one GPU-machine run's logs (scripts/gpu/run.sh's $OUT) and prints, per
// collective and size, nccl-node bench's time beside torch.distributed's on the same
// NCCL library in the same run (torch_baseline.py, alternating with the bench round
// by round): the median over rounds of each, their ratio, and the spread of the
// per-round ratios. A markdown table, then one JSON line (--json FILE: all of it).
// torch's all_reduce and broadcast are in place, so those rows take nccl-node's
// in-place column; the others (all_gather_into_tensor, reduce_scatter_tensor,
// all_to_all_single) are out of place.
//   node scripts/gpu/compare-torch.mjs DIR [--json FILE]
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) throw new Error('usage: compare-torch.mjs DIR [--json FILE]');
const jsonAt = process.argv.indexOf('--json');
const COLLS = ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'alltoall'];
const IN_PLACE = new Set(['all_reduce', 'broadcast']);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const jsonl = (f) => readFileSync(f, 'utf8').trim().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));

const rounds = [];
for (let r = 1; existsSync(join(dir, `torch-baseline-r${r}.jsonl`)); r++) rounds.push(r);
if (!rounds.length) throw new Error(`${dir}: no torch-baseline-r1.jsonl`);
const times = new Map(); // `${coll}/${bytes}` -> {ours: [], torch: []}, one entry per round
const at = (coll, bytes) => times.get(`${coll}/${bytes}`) ?? times.set(`${coll}/${bytes}`, { coll, bytes, ours: [], torch: [] }).get(`${coll}/${bytes}`);
let torchInfo, torchLatency = [];
for (const r of rounds) {
  const lines = jsonl(join(dir, `torch-baseline-r${r}.jsonl`));
  torchInfo ??= lines[0];
  for (const l of lines) if (l.coll) at(l.coll, l.bytes).torch.push(l.us); else if (l.median) torchLatency.push(l.median);
  for (const coll of COLLS) {
    const bench = JSON.parse(readFileSync(join(dir, `bench-${coll}-r${r}.json`), 'utf8'));
    // nccl-tests rounds all_gather and alltoall sizes down to 16 bytes: 8 B is 0 there.
    for (const x of bench.results) if (x.size > 0) at(coll, x.size).ours.push((IN_PLACE.has(coll) ? x.in_place : x.out_of_place).time);
  }
}
const rows = [...times.values()].filter((t) => t.ours.length === rounds.length && t.torch.length === rounds.length).map((t) => {
  const perRound = t.ours.map((o, i) => o / t.torch[i]);
  return { coll: t.coll, bytes: t.bytes, placement: IN_PLACE.has(t.coll) ? 'in place' : 'out of place', ncclNodeUs: median(t.ours), torchUs: median(t.torch),
    ratio: median(t.ours) / median(t.torch), roundRatios: { min: Math.min(...perRound), max: Math.max(...perRound) } };
}).sort((a, b) => COLLS.indexOf(a.coll) - COLLS.indexOf(b.coll) || a.bytes - b.bytes);
const fmtBytes = (b) => (b >= 1 << 20 ? `${b / (1 << 20)} MiB` : b >= 1024 ? `${b / 1024} KiB` : `${b} B`);
console.log(`${rounds.length} rounds; medians over rounds\n`);
console.log('| Collective | Size | nccl-node µs | torch µs | ratio | per-round ratios |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.coll} (${r.placement}) | ${fmtBytes(r.bytes)} | ${r.ncclNodeUs.toFixed(1)} | ${r.torchUs.toFixed(1)} | ${r.ratio.toFixed(2)} | ${r.roundRatios.min.toFixed(2)}-${r.roundRatios.max.toFixed(2)} |`);
}
const smoke = jsonl(join(dir, 'smoke.jsonl'));
const ours = smoke.find((c) => c.check === 'awaited-latency');
const ratios = rows.map((r) => r.ratio);
const summary = {
  rounds: rounds.length,
  torch: torchInfo,
  ratios: { min: Math.min(...ratios), median: median(ratios), max: Math.max(...ratios), slower: rows.filter((r) => r.ratio > 1).length,
    slowerEveryRound: rows.filter((r) => r.roundRatios.min > 1).length, of: rows.length },
  awaitedLatencyUs: { ncclNode: ours?.median, torch: torchLatency.length ? median(torchLatency) : undefined },
  checks: smoke.map((c) => ({ check: c.check, ok: c.ok })),
};
console.log(`\n${JSON.stringify(summary)}`);
if (jsonAt > 0) writeFileSync(process.argv[jsonAt + 1], JSON.stringify({ ...summary, rows }, null, 2) + '\n');
