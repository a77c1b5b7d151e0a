// Line charts drawn as inline SVG (no chart library: nothing may be fetched at run time).
// Series colours come from the stylesheet (.series-0, .series-1, ...).

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) {
    if (child) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= value) return step * power;
  }
  return 10 * power;
}

// times: ISO strings (x axis); series: [{name, values: [number|null]}]; format: y labels.
function lineChart(title, times, series, { format = fmtInt, chart = "" } = {}) {
  const width = 720, height = 220, left = 56, right = 12, top = 14, bottom = 34;
  const plotW = width - left - right, plotH = height - top - bottom;
  const all = series.flatMap((s) => s.values).filter((v) => typeof v === "number");
  const max = niceMax(Math.max(0, ...all));
  const n = times.length;
  const x = (i) => left + (n <= 1 ? plotW / 2 : (i * plotW) / (n - 1));
  const y = (v) => top + plotH - (v / max) * plotH;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    "aria-label": title, "data-chart": chart, "data-points": n });
  for (let k = 0; k <= 4; k++) {
    const value = (max * k) / 4;
    root.append(svg("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), class: "grid" }));
    root.append(svg("text", { x: left - 6, y: y(value) + 4, class: "axis", "text-anchor": "end" },
      format(Number.isInteger(value) ? value : Number(value.toFixed(2)))));
  }
  if (n) {
    const labels = n === 1 ? [0] : [0, Math.floor((n - 1) / 2), n - 1];
    for (const i of labels) {
      root.append(svg("text", { x: x(i), y: height - 10, class: "axis",
        "text-anchor": i === 0 && n > 1 ? "start" : i === n - 1 && n > 1 ? "end" : "middle" },
      fmtTime(times[i]).slice(5, 16)));
    }
  }
  series.forEach((s, index) => {
    const points = [];
    s.values.forEach((v, i) => { if (typeof v === "number") points.push([x(i), y(v), v, i]); });
    const cls = `series-${index % 6}`;
    if (points.length > 1) {
      root.append(svg("polyline", { points: points.map(([px, py]) => `${px},${py}`).join(" "),
        class: `line ${cls}` }));
    }
    for (const [px, py, v, i] of points) {
      root.append(svg("circle", { cx: px, cy: py, r: n <= 1 ? 4 : 2.5, class: `dot ${cls}` },
        svg("title", {}, `${s.name} ${format(v)} at ${fmtTime(times[i])}`)));
    }
  });
  const legend = h("div", { class: "legend" }, series.map((s, index) =>
    h("span", { class: `key series-${index % 6}` }, s.name)));
  return h("figure", { class: "chart-box" }, h("figcaption", {}, title), root, legend);
}
