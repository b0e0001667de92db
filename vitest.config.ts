import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Native addons and rank processes: isolate test files in forked workers, one at
    // a time, so multi-rank suites do not fight over the machine's cores.
    pool: 'forks',
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
    include: ['test/**/*.test.ts'],
    reporters: ['default'],
  },
});
