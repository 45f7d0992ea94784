// The pipeline graph's model and layout, as Concourse draws it (pure: no
// DOM, unit-tested in web/test/graphmodel.test.mjs).
import dagre from '@dagrejs/dagre';

// graphModel is the nodes and edges of the jobs shown (shown: their names;
// all jobs when null) and the resources they use:
//   - a job's put draws an output node of the resource (job -> output);
//   - an input with passed: goes through the resource: from the upstream
//     job's output node when it puts the resource, else from a
//     "constrained input" node of the resource the upstream job feeds;
//     an upstream job outside the shown group keeps its constrained node,
//     with no edge into it, as Concourse does, so the input never vanishes;
//   - an input without passed: comes from the resource's own input node.
// Node ids: job:J, out:J:R, via:J:R (J the upstream job), in:R.
export function graphModel(jobs, resources, shown) {
  const byName = new Map(resources.map((r) => [r.name, r]));
  const names = shown ? new Set(shown) : new Set(jobs.map((j) => j.name));
  const visible = jobs.filter((j) => names.has(j.name));
  const nodes = new Map();
  const edges = new Map();
  const node = (id, n) => { if (!nodes.has(id)) nodes.set(id, { id, ...n }); return nodes.get(id); };
  const edge = (from, to, kind, trigger) => {
    const key = from + '->' + to;
    const e = edges.get(key);
    if (e) { e.trigger = e.trigger || trigger; return; }
    edges.set(key, { key, from, to, kind, trigger });
  };
  for (const j of visible) node('job:' + j.name, { kind: 'job', name: j.name, item: j });
  for (const j of visible) {
    for (const out of j.outputs || []) {
      const id = `out:${j.name}:${out.resource}`;
      node(id, { kind: 'resource', role: 'output', name: out.resource, item: byName.get(out.resource) });
      edge('job:' + j.name, id, 'output', false);
    }
  }
  for (const j of visible) {
    for (const inp of j.inputs || []) {
      const trigger = !!inp.trigger;
      if (!inp.passed || inp.passed.length === 0) {
        const id = 'in:' + inp.resource;
        node(id, { kind: 'resource', role: 'input', name: inp.resource, item: byName.get(inp.resource) });
        edge(id, 'job:' + j.name, 'input', trigger);
        continue;
      }
      for (const up of inp.passed) {
        let from = `out:${up}:${inp.resource}`;
        if (!nodes.has(from)) {
          from = `via:${up}:${inp.resource}`;
          const outside = !names.has(up);
          const n = node(from, { kind: 'resource', role: 'constrained', name: inp.resource, item: byName.get(inp.resource), upstream: up, outside });
          if (!outside) edge('job:' + up, n.id, 'passed', false);
        }
        edge(from, 'job:' + j.name, 'passed', trigger);
      }
    }
  }
  return { nodes: [...nodes.values()], edges: [...edges.values()] };
}

// nodeSize is a node's box: wide enough for its name (and a resource's icon).
export function nodeSize(n) {
  if (n.kind === 'job') return { width: Math.max(110, n.name.length * 8 + 24), height: 36 };
  return { width: Math.max(90, n.name.length * 7 + 44), height: 26 };
}

// layout places the model left to right with dagre; it returns the nodes
// with x, y (their centres), width and height, the edges with their
// points, and the drawing's size.
export function layout(model) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 14, ranksep: 60, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of model.nodes) g.setNode(n.id, { ...nodeSize(n) });
  for (const e of model.edges) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const nodes = model.nodes.map((n) => ({ ...n, ...g.node(n.id) }));
  const edges = model.edges.map((e) => ({ ...e, points: g.edge(e.from, e.to).points }));
  const { width, height } = g.graph();
  return { nodes, edges, width, height };
}

// zoomAt scales the view t ({k, x, y}: screen = graph * k + (x, y)) by
// factor around the screen point (px, py), which stays where it is; the
// scale stays within [min, max].
export function zoomAt(t, factor, px, py, min = 0.1, max = 4) {
  const k = Math.min(max, Math.max(min, t.k * factor));
  const f = k / t.k;
  return { k, x: px - (px - t.x) * f, y: py - (py - t.y) * f };
}

// fit is the view that shows a drawing of width x height whole in a
// view of w x h, never larger than its own size: where the graph starts,
// and where reset goes back to.
export function fit(width, height, w, h) {
  const k = Math.max(0.1, Math.min(1, w / width, h / height));
  return { k, x: 0, y: 0 };
}
