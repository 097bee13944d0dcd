// The clickboost dashboard: polls the admin JSON routes (GET /models, /replicas and
// /models/{name}/stats) every POLL_MS and redraws. No library: the chart is SVG drawn here, and
// nothing is asked of another origin (the page's Content-Security-Policy forbids it).
"use strict";

(() => {
  const POLL_MS = 2000;
  const MINUTES = 60; // of per-minute history in the chart
  const KEY = "clickboost-admin-key"; // sessionStorage: kept for this tab only
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  // -- DOM helpers (text only, never HTML: names and parameters are user data) -----------------------

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v !== null && v !== undefined) e.setAttribute(k, v);
    }
    e.append(...children.filter((c) => c !== null && c !== undefined).map((c) => (c instanceof Node ? c : String(c))));
    return e;
  }

  function svg(tag, attrs = {}, text = null) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== null) e.textContent = text;
    return e;
  }

  // -- formats ---------------------------------------------------------------------------------------

  const int = (n) => n.toLocaleString("en-US");
  const pct = (x) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)} %`);
  const clock = (t) => new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
  const hhmm = (t) => clock(t).slice(0, 5);

  function secs(s) {
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 7200) return `${(s / 60).toFixed(1)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
  }

  function describe(config) {
    const params = Object.entries(config.params || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
    const input = config.hashing_bits !== undefined ? `hashed 2^${config.hashing_bits}` : `d=${config.n_features}`;
    const k = config.labels ? config.labels.length : config.n_labels;
    return `${config.learner}${params.length ? ` (${params.join(", ")})` : ""} · ${input} · K=${k}`;
  }

  // -- fetching --------------------------------------------------------------------------------------

  class AuthError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function get(path) {
    const key = sessionStorage.getItem(KEY);
    const r = await fetch(path, { headers: key ? { "X-API-Key": key } : {}, cache: "no-store" });
    let body = null;
    try {
      body = await r.json();
    } catch {
      body = null;
    }
    const detail = body && typeof body.detail === "string" ? body.detail : r.statusText;
    if (r.status === 401 || r.status === 403) throw new AuthError(r.status, detail);
    if (!r.ok) throw Object.assign(new Error(`${path}: ${r.status} ${detail}`), { status: r.status });
    return body;
  }

  // -- rendering -------------------------------------------------------------------------------------

  function field(name, label, value, title = null) {
    return [el("dt", { title }, label), el("dd", { "data-field": name }, value)];
  }

  function group(label) {
    return el("div", { class: "group" }, label);
  }

  function numbers(s) {
    const c = s.counts;
    return el(
      "dl",
      { class: "numbers" },
      group("traffic"),
      ...field("version", "version", int(s.version), "event-log position applied by this replica"),
      ...field("decisions_per_second", "decisions/s", s.decisions_per_second.toFixed(2), "last 5 minutes"),
      ...field("decisions", "decisions", int(c.decisions)),
      ...field("clicks", "clicks", int(c.clicks)),
      ...field("no_clicks", "no clicks", int(c.no_clicks)),
      ...field("expired", "expired", int(c.expired), "given the default reward after the reward window"),
      ...field("pending", "pending", int(c.pending), "awaiting feedback"),
      group("click rate"),
      ...field("ctr", "click rate (all time)", pct(c.ctr), "clicks / (clicks + no clicks)"),
      ...field("mean_reward", "mean reward (all time)", pct(c.mean_reward), `over every feedback: a click counts 1, a graded reward its value (${int(c.graded)} graded)`),
      ...field("ctr_ceiling", "ceiling under exploration", pct(s.ctr_ceiling), "1 - exploration: the best click rate this exploration allows when one label is right"),
      ...field("exploration", "exploration (24 h)", pct(s.exploration), "mean probability of showing another label than the top one"),
      group(`on replica ${s.replica}`),
      ...field("lag_events", "apply lag", `${int(s.apply.lag_events)} events`, `log position ${s.apply.log_position}`),
      ...field("lag_seconds", "last event applied after", secs(s.apply.lag_seconds)),
      ...field(
        "checkpoint",
        "checkpoint",
        s.checkpoint.position ? `v${int(s.checkpoint.position)}, ${int(s.checkpoint.events_since)} events ago` : "none yet",
      ),
      ...field("checkpoint_age", "checkpoint round", `${secs(s.checkpoint.seconds_since)} ago`),
      ...field("state_bytes", "model memory", bytes(s.memory.state_bytes), `counted against the budget: ${bytes(s.memory.budget_bytes)}`),
      ...field("max_model_bytes", "budget per model", bytes(s.memory.max_model_bytes)),
    );
  }

  function chart(all) {
    // From the first minute with traffic (a young model's history fills the chart), at least 10.
    const first = all.findIndex((m) => m.decisions + m.clicks + m.no_clicks + m.expired > 0);
    if (first < 0) return el("p", { class: "muted" }, `No traffic in the last ${all.length} minutes.`);
    const minutes = all.slice(Math.max(Math.min(first, all.length - 10), 0));
    const W = 640;
    const H = 210;
    const left = 40;
    const right = 56;
    const top = 10;
    const bottom = 22;
    const pw = W - left - right;
    const ph = H - top - bottom;
    const n = minutes.length;
    const bw = pw / n;
    const x = (i) => left + (i + 0.5) * bw;
    const y = (v) => top + (1 - v) * ph;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
    const maxD = Math.max(...minutes.map((m) => m.decisions), 0);
    // decisions per minute: bars on their own scale (right axis)
    minutes.forEach((m, i) => {
      if (m.decisions > 0) {
        const h = (m.decisions / maxD) * ph;
        root.append(svg("rect", { class: "bar", x: left + i * bw + 0.5, y: top + ph - h, width: Math.max(bw - 1, 0.5), height: h }));
      }
    });
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      root.append(svg("line", { class: "axis", x1: left, x2: left + pw, y1: y(v), y2: y(v) }));
      root.append(svg("text", { class: "label", x: left - 4, y: y(v) + 3, "text-anchor": "end" }, `${100 * v} %`));
    }
    root.append(svg("text", { class: "label", x: left + pw + 4, y: top + 8 }, `${int(maxD)}/min`));
    root.append(svg("text", { class: "label", x: left + pw + 4, y: top + ph }, "0"));
    const line = (cls, values) => {
      let d = "";
      let pen = false;
      values.forEach((v, i) => {
        if (v === null) {
          pen = false;
          return;
        }
        d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      });
      if (d) root.append(svg("path", { class: cls, d }));
    };
    line("ceiling", minutes.map((m) => (m.exploration === null ? null : 1 - m.exploration)));
    line("cumulative", minutes.map((m) => m.cumulative_ctr));
    minutes.forEach((m, i) => {
      if (m.ctr !== null) root.append(svg("circle", { class: "minute", cx: x(i), cy: y(m.ctr), r: 2.5 }));
    });
    // Graded rewards (issue 38): the minute's mean reward beside its click rate, once any arrived.
    const graded = minutes.some((m) => m.graded > 0);
    if (graded) {
      line("reward", minutes.map((m) => m.mean_reward));
      minutes.forEach((m, i) => {
        if (m.mean_reward === null) return;
        const [cx, cy] = [x(i), y(m.mean_reward)];
        root.append(svg("rect", { class: "reward-point", x: cx - 2.5, y: cy - 2.5, width: 5, height: 5 }));
      });
    }
    const ticks = [0, Math.floor(n / 2), n - 1];
    for (const i of ticks) {
      root.append(svg("text", { class: "label", x: x(i), y: H - 6, "text-anchor": "middle" }, hhmm(minutes[i].start)));
    }
    const caption = el(
      "figcaption",
      {},
      el("span", { class: "k-minute" }, "click rate per minute"),
      el("span", { class: "k-cumulative" }, "cumulative click rate (24 h)"),
      el("span", { class: "k-ceiling" }, "ceiling under exploration"),
      graded ? el("span", { class: "k-reward" }, "mean reward per minute") : null,
      el("span", { class: "k-bar" }, "decisions per minute"),
    );
    return el("figure", {}, root, caption);
  }

  function evaluation(job) {
    const when = `started ${clock(job.created_at)}, ${int(job.events)} logged decisions`;
    if (job.state !== "done") {
      const what = job.state === "failed" ? `failed: ${job.error}` : "running…";
      return el("p", { class: "muted", "data-job": job.id }, `${when}: ${what}`);
    }
    // One row per policy, one column per estimator (ips / snips / dr for fixed policies, replay for learners).
    const estimators = [...new Set(Object.values(job.results).flatMap((r) => Object.keys(r)))];
    const head = el("tr", {}, el("th", {}, "policy"), ...estimators.map((e) => el("th", { class: "num" }, e)));
    const rows = Object.entries(job.results).map(([policy, by]) =>
      el(
        "tr",
        { "data-policy": policy },
        el("td", {}, policy === "logged" ? "logged (what was served)" : policy),
        ...estimators.map((name) => {
          const e = by[name];
          if (!e) return el("td", { class: "num muted" }, "–");
          // intervals come clipped to [0, 1]; an estimate on too few effective events says so (its warning)
          const interval = `${pct(e.low)} – ${pct(e.high)}`;
          const title = `95 % interval ${interval}, n = ${e.n}, effective sample size ${e.ess.toFixed(1)}`;
          return el(
            "td",
            { class: e.warning ? "num cannot-tell" : "num", title: e.warning ? `${title}\n${e.warning}` : title },
            pct(e.value),
            el("span", { class: "muted" }, ` (${interval})`),
            e.warning ? " !" : null,
          );
        }),
      ),
    );
    return el(
      "table",
      { class: "evaluations", "data-job": job.id },
      el("caption", {}, `Estimated click rate of each policy on this model's decision log (${when}); 95 % intervals; ! too few effective events to tell (hover for the effective sample size)`),
      el("thead", {}, head),
      el("tbody", {}, ...rows),
    );
  }

  function evaluations(jobs) {
    if (!jobs.length) {
      return [el("p", { class: "muted" }, "None on this replica yet (POST /models/{name}/evaluations).")];
    }
    return jobs.map(evaluation);
  }

  function slots(rows) {
    // A page model's reward per slot (issue 53), from its decision log's recent slot decisions.
    if (!rows) return [];
    if (!rows.length) return [el("p", { class: "muted" }, "No pages in the last 15 minutes.")];
    const head = el("tr", {}, ...["slot", "decisions", "answered", "expired", "mean reward"].map((h, i) => el("th", { class: i ? "num" : null }, h)));
    const body = rows.map((r) =>
      el(
        "tr",
        { "data-slot": r.slot },
        el("td", {}, `#${r.slot}`),
        el("td", { class: "num" }, int(r.decisions)),
        el("td", { class: "num" }, int(r.answered)),
        el("td", { class: "num" }, int(r.expired)),
        el("td", { class: "num" }, pct(r.mean_reward)),
      ),
    );
    return [el("h3", {}, "Reward per slot (last 15 minutes, decision log)"), el("table", { class: "slots" }, head, ...body)];
  }

  function model(s) {
    return el(
      "article",
      { class: "model", "data-model": s.name },
      el("h2", {}, s.name, el("span", { class: "learner" }, describe(s.config))),
      s.failure ? el("p", { class: "failure" }, s.failure) : null,
      el("div", { class: "columns" }, numbers(s), chart(s.minutes)),
      ...slots(s.slots),
      el("h3", {}, "Off-policy evaluation (latest, this replica)"),
      ...evaluations(s.evaluations),
    );
  }

  function replicaRow(r, self) {
    const models = Object.entries(r.models).map(([name, m]) =>
      el("span", { class: m.lag > 0 ? "tag bad" : "tag", "data-model": name }, `${name} v${int(m.version)} (lag ${int(m.lag)})`),
    );
    return el(
      "tr",
      { class: r.stale ? "stale" : null, "data-replica": r.id },
      el("td", {}, r.id, r.id === self ? el("span", { class: "muted" }, " (this page)") : null),
      el("td", {}, r.host),
      el("td", { class: "num" }, r.pid),
      el("td", {}, secs(Math.max(Date.now() / 1000 - r.started_at, 0))),
      el("td", { "data-field": "seen" }, `${secs(r.seen_seconds_ago)} ago`, r.stale ? el("span", { class: "tag bad" }, " stale") : null),
      el("td", { "data-field": "group" }, r.group === null ? "–" : `${r.group} (${r.placement})`),
      el("td", {}, ...models.flatMap((m) => [m, " "])),
    );
  }

  // Model placement: the models other replica groups hold, with links to their replicas' dashboards.
  function elsewhere(models) {
    if (!models || !models.length) return null;
    const link = (url) => (/^https?:\/\//.test(url) ? el("a", { href: `${url}/dashboard` }, url) : url);
    const items = models.map((m) =>
      el(
        "li",
        {},
        el("strong", {}, m.name),
        " — ",
        ...Object.entries(m.groups).flatMap(([g, urls], i) => [
          i ? "; " : "",
          `group ${g}: `,
          ...urls.flatMap((u, j) => [j ? ", " : "", link(u)]),
        ]),
      ),
    );
    return el("div", { id: "elsewhere" }, el("p", { class: "hint" }, "Held by other replica groups:"), el("ul", {}, ...items));
  }

  function render(replicas, stats, others) {
    $("replica-rows").replaceChildren(...replicas.replicas.map((r) => replicaRow(r, replicas.answered_by)));
    $("placement-warning").hidden = replicas.placement_agrees;
    const cards = stats.filter((s) => s !== null).map(model);
    const none = el("p", { class: "muted" }, "No model yet (PUT /models/{name}).");
    $("models").replaceChildren(...(cards.length ? cards : others && others.length ? [] : [none]), ...[elsewhere(others)].filter(Boolean));
  }

  // -- polling and the key form ------------------------------------------------------------------------

  let timer = null;
  let round = 0;

  function status(text, error = false) {
    $("status").textContent = text;
    $("status").className = error ? "error" : "";
  }

  function locked(e) {
    // Nothing stays on the page once the server refuses: the data is cleared, not just hidden.
    $("content").hidden = true;
    $("replica-rows").replaceChildren();
    $("models").replaceChildren();
    const stored = sessionStorage.getItem(KEY) !== null;
    $("key-message").textContent =
      e.status === 403 ? e.message : stored ? `The key was refused: ${e.message}` : "This server needs its admin key.";
    $("key-form").hidden = false;
    $("forget-key").hidden = !stored;
    status(`locked (${e.status})`, true);
  }

  async function poll() {
    const mine = ++round;
    clearTimeout(timer);
    try {
      const [list, replicas] = await Promise.all([get("models"), get("replicas")]);
      const stats = await Promise.all(
        list.models.map((m) =>
          get(`models/${encodeURIComponent(m.name)}/stats?minutes=${MINUTES}`).catch((e) => {
            if (e.status === 404) return null; // deleted meanwhile
            throw e;
          }),
        ),
      );
      if (mine !== round) return;
      render(replicas, stats, list.elsewhere);
      $("key-form").hidden = true;
      $("content").hidden = false;
      $("forget-key").hidden = sessionStorage.getItem(KEY) === null;
      status(`updated ${clock(Date.now() / 1000)} · every ${POLL_MS / 1000} s · answered by replica ${replicas.answered_by}`);
    } catch (e) {
      if (mine !== round) return;
      if (e instanceof AuthError) locked(e);
      else status(`cannot reach the service (${e.message}); retrying`, true);
    } finally {
      if (mine === round) timer = setTimeout(poll, POLL_MS);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, $("key").value);
      $("key").value = "";
      poll();
    });
    $("forget-key").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      poll();
    });
    poll();
  });
})();
