// Builds the UI into pkg/atc/webui/dist: hashed asset names (cached for a
// year), an index.html that names them (never cached), and sources.sha256,
// the hash of what the bundle was built from, which a Go test compares.
import * as esbuild from 'esbuild';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const web = dirname(fileURLToPath(import.meta.url));
const out = join(web, '..', 'pkg', 'atc', 'webui', 'dist');

// sourceHash must match webui's Go test: every file under src/, plus
// package.json, package-lock.json and this script, by path then content.
export function sourceHash() {
  const files = ['package.json', 'package-lock.json', 'build.mjs'];
  const walk = (dir) => {
    for (const e of readdirSync(join(web, dir), { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else files.push(p);
    }
  };
  walk('src');
  files.sort();
  const h = createHash('sha256');
  for (const f of files) {
    h.update(f.split('\\').join('/') + '\n');
    h.update(createHash('sha256').update(readFileSync(join(web, f))).digest('hex') + '\n');
  }
  return h.digest('hex');
}

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });
const result = await esbuild.build({
  entryPoints: [join(web, 'src', 'main.jsx')],
  bundle: true,
  minify: true,
  format: 'esm',
  // Resource icons (the whole Material Design set) are a chunk of their
  // own, loaded by the pages that show one (src/icons.js).
  splitting: true,
  chunkNames: '[name]-[hash]',
  target: ['es2020'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: join(out, 'assets'),
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'linked',
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((f) => relative(out, join(web, f)).split('\\').join('/'));
// The entry's bundle (the icons' chunk is another .js).
const entry = Object.keys(result.metafile.outputs).find((f) => result.metafile.outputs[f].entryPoint);
const js = relative(out, join(web, entry)).split('\\').join('/');
const css = outputs.find((f) => f.endsWith('.css'));
writeFileSync(join(out, 'index.html'), `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Porter</title>
<link rel="icon" href="/favicon.ico">
<link rel="stylesheet" href="/${css}">
<script type="module" src="/${js}"></script>
</head>
<body>
<div id="app"></div>
</body>
</html>
`);
// Browsers ask for /favicon.ico on their own: it is served at that path.
copyFileSync(join(web, 'src', 'favicon.ico'), join(out, 'favicon.ico'));
writeFileSync(join(out, 'sources.sha256'), sourceHash() + '\n');
console.log(`web: built ${outputs.join(', ')}`);
