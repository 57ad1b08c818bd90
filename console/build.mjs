// Builds the console into ingest-api/internal/console/dist, which the Go
// binary embeds: one script and one style sheet, named by their content
// hash, and the page that loads them (no inline script or style, as the
// Content-Security-Policy demands).
import * as esbuild from 'esbuild';
import { mkdirSync, rmSync, writeFileSync, readFileSync, readdirSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { dirname, join, basename } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'ingest-api', 'internal', 'console', 'dist');
const assets = join(out, 'assets');
rmSync(assets, { recursive: true, force: true });
mkdirSync(assets, { recursive: true });

const result = await esbuild.build({
  entryPoints: { app: join(here, 'src', 'main.js') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2020'],
  outdir: assets,
  entryNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});

const names = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = names.find((n) => n.endsWith('.js'));
const css = names.find((n) => n.endsWith('.css'));
if (!js || !css) throw new Error(`build produced ${names.join(', ')}`);
const page = readFileSync(join(here, 'src', 'index.html'), 'utf8')
  .replace('{{script}}', `/console/assets/${js}`)
  .replace('{{style}}', `/console/assets/${css}`);
writeFileSync(join(out, 'index.html'), page);

let raw = 0, gz = 0;
for (const n of readdirSync(assets)) {
  const b = readFileSync(join(assets, n));
  raw += b.length;
  gz += gzipSync(b).length;
}
const sizes = { js, css, bytes: raw, gzipBytes: gz };
writeFileSync(join(out, 'sizes.json'), JSON.stringify(sizes, null, 2) + '\n');
console.log(`console: ${js} + ${css}: ${(raw / 1024).toFixed(1)} KiB, ${(gz / 1024).toFixed(1)} KiB gzipped`);
