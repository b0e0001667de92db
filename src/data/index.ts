/** Token corpora for training (docs/data.md): prepare, read, and deterministic resumable batches. */
export { prepare, loadTokenizer, TOKENIZERS, type PrepareOptions, type Tokenizer, type TokenizerName } from './prepare.js';
export { TokenDataset, type TokenArray } from './dataset.js';
export { DataLoader, epochOrder, type Batch, type LoaderOptions, type LoaderState } from './loader.js';
export { readIndex, fingerprintOf, indexSchema, type DatasetIndex, type TokenDType } from './index-file.js';
