// The status page: reads the admin API (/v1, with the login cookie) and refreshes
// itself. Every value is put in the page as text (never as HTML).
"use strict";

const EVERY = 5000; // ms between two refreshes of what is cheap to read
const SLOW_EVERY = 15000; // ms between two reads of the queue (counted for every viewer at most every 10 s: a pass over the deliveries not yet final) and the reputation windows (24 h of minutes)
const MINUTES = 60; // the rate chart's history

class SignedOut extends Error {}

const $ = (id) => document.getElementById(id);
let timer = null;
let slowReadAt = 0;
let campaignsSeen = []; // as /v1/campaigns last gave them
let campaignsRouted = true; // false once /v1/campaigns answered 404: asked again with the slow reads

async function get(path) {
  const answer = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (answer.status === 401) throw new SignedOut();
  if (answer.status === 404 && path.startsWith("/v1/campaigns")) return null;
  if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
  return answer.json();
}

// el("td", {class: "n"}, "12") -> <td class="n">12</td>; children are nodes or text.
function el(tag, attrs = {}, ...children) {
  const made = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) made.setAttribute(name, value);
  }
  for (const child of children) {
    made.append(child instanceof Node ? child : String(child ?? ""));
  }
  return made;
}

// A table of rows (arrays of cells: a number is right-aligned), or a note when none.
function table(into, heads, rows, none, rowAttrs = () => ({})) {
  if (!rows.length) {
    into.replaceChildren(el("p", { class: "empty" }, none));
    return;
  }
  const body = rows.map((cells, i) =>
    el("tr", rowAttrs(i), ...cells.map((c) => (typeof c === "number" ? el("td", { class: "n" }, c.toLocaleString("en")) : el("td", {}, c)))),
  );
  into.replaceChildren(el("table", {}, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))), el("tbody", {}, ...body)));
}

function badge(text, kind = text) {
  return el("span", { class: `badge ${kind}` }, text);
}

function age(iso, now = Date.now()) {
  if (!iso) return "-";
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

// A section shown from its read: data-filled on it, and a mark "filled:ID" the first time.
function filled(id) {
  const section = $(id);
  if (section.dataset.filled === undefined) performance.mark(`filled:${id}`);
  section.dataset.filled = "";
}

// --- the sections ---------------------------------------------------------------

function showQueue(overview) {
  filled("queue");
  const now = Date.parse(overview.now); // the server's clock: ages read right from a browser whose clock is off
  const total = overview.total;
  $("queue-total").textContent = total.total.toLocaleString("en");
  $("queue-total").dataset.total = total.total;
  $("queue-oldest").textContent = age(total.oldest, now);
  $("queue-read").textContent = `(counted ${new Date(now).toLocaleTimeString("en-GB")})`;
  $("queue-states").replaceChildren(
    ...Object.entries(total.states).map(([state, n]) => el("li", { "data-state": state, "data-count": n }, `${state} ${n.toLocaleString("en")}`)),
  );
  const states = (counted) => Object.entries(counted).map(([state, n]) => `${state} ${n.toLocaleString("en")}`).join(", ");
  table(
    $("queue-groups"),
    ["provider group", "deliveries", "by state", "oldest", "next due"],
    overview.groups.map((g) => [g.key, g.total, states(g.states), age(g.oldest, now), g.next_due ? new Date(g.next_due).toLocaleTimeString("en-GB") : "-"]),
    "Nothing queued.",
    (i) => ({ "data-group": overview.groups[i].key, "data-count": overview.groups[i].total }),
  );
}

function showRate(rate) {
  filled("rate");
  const first = Date.parse(rate.since);
  const delivered = new Array(MINUTES).fill(0);
  const deferred = new Array(MINUTES).fill(0);
  const bounced = new Array(MINUTES).fill(0);
  for (const m of rate.minutes) {
    const i = Math.round((Date.parse(m.minute) - first) / 60000);
    if (i >= 0 && i < MINUTES) {
      delivered[i] = m.delivered;
      deferred[i] = m.deferred;
      bounced[i] = m.bounced;
    }
  }
  const last = delivered.length >= 2 ? delivered[delivered.length - 2] : 0; // the last whole minute
  $("rate-now").textContent = last.toLocaleString("en");
  $("rate-hour").textContent = delivered.reduce((a, b) => a + b, 0).toLocaleString("en");
  const top = Math.max(1, ...delivered, ...deferred, ...bounced);
  const svg = "http://www.w3.org/2000/svg";
  const lines = [
    ["delivered", delivered],
    ["deferred", deferred],
    ["bounced", bounced],
  ].map(([name, counts]) => {
    const line = document.createElementNS(svg, "polyline");
    line.setAttribute("class", name);
    line.setAttribute("points", counts.map((n, i) => `${(i * 600) / (MINUTES - 1)},${100 - (n * 96) / top}`).join(" "));
    return line;
  });
  const title = document.createElementNS(svg, "title");
  title.textContent = `at most ${top.toLocaleString("en")} per minute`;
  $("rate-chart").replaceChildren(title, ...lines);
}

// A campaign as GET /v1/campaigns gives it: {name, tenant, state: active|paused|cancelled,
// and its counts: deliveries (or total), queued, deferred, held, unknown, delivered,
// bounced, failed, cancelled, suppressed, done, per_minute, ends_at}; the counts may
// be under "progress" instead.
function counts(c) {
  const p = c.progress || c;
  const total = p.deliveries ?? p.total ?? 0;
  const waiting = ["queued", "deferred", "held", "unknown", "leased"].reduce((n, k) => n + (p[k] || 0), 0);
  return { ...p, total, waiting, done: p.done ?? waiting === 0 };
}

function campaignLabel(c) {
  const p = counts(c);
  if (c.state === "paused") return "PAUSED";
  if (c.state === "cancelled") return "CANCELLED";
  if (!p.total) return "IDLE";
  return p.done ? "DONE" : "SENDING";
}

function showCampaigns(answer) {
  filled("campaigns");
  $("campaigns").hidden = answer === null;
  if (answer === null) return;
  const found = Array.isArray(answer) ? answer : answer.campaigns || [];
  table(
    $("campaign-list"),
    ["campaign", "tenant", "", "progress", "delivered", "bounced", "deferred", "waiting", "total", "/min", "ends"],
    found.map((c) => {
      const p = counts(c);
      const share = (n) => `${p.total ? ((100 * (n || 0)) / p.total).toFixed(2) : 0}%`;
      const bar = el("div", { class: "bar", title: `${share(p.delivered)} delivered` });
      for (const [part, n] of [["delivered", p.delivered], ["bounced", (p.bounced || 0) + (p.failed || 0)], ["deferred", p.deferred]]) {
        const piece = el("span", { class: part });
        piece.style.width = share(n);
        bar.append(piece);
      }
      const ends = p.ends_at ? new Date(p.ends_at).toLocaleTimeString("en-GB") : "-";
      return [c.name, c.tenant, badge(campaignLabel(c)), bar, p.delivered || 0, p.bounced || 0, p.deferred || 0, p.waiting, p.total, p.per_minute ?? "-", ends];
    }),
    "No campaign.",
    (i) => ({ "data-campaign": found[i].name, "data-tenant": found[i].tenant, "data-label": campaignLabel(found[i]) }),
  );
}

function showHeld(suspended, accounts, campaigns) {
  filled("held");
  const items = [];
  for (const c of campaigns.filter((c) => c.state === "paused")) {
    items.push(el("li", { "data-campaign": `${c.tenant}:${c.name}` }, badge("PAUSED"), ` campaign ${c.name} of ${c.tenant}${c.reason ? `: ${c.reason}` : ""}`));
  }
  for (const t of suspended.paused_tenants) {
    const auto = t.paused_by === "auto";
    items.push(el("li", { "data-tenant": t.tenant }, badge(auto ? "AUTO-PAUSED" : "PAUSED", auto ? "auto" : "PAUSED"), ` tenant ${t.tenant} for ${age(t.paused_at)}: ${t.paused_reason}`));
  }
  for (const s of suspended.suspensions) {
    items.push(el("li", { "data-suspended": `${s.kind}:${s.key}` }, badge("SUSPENDED", "PAUSED"), ` ${s.kind} ${s.key}: ${s.reason}${s.until ? ` (until ${new Date(s.until).toLocaleString("en-GB")})` : ""}`));
  }
  for (const r of suspended.reroutes) {
    items.push(el("li", { "data-rerouted": r.provider }, badge("REROUTED", "PAUSED"), ` ${r.provider} to pool ${r.pool}: ${r.reason}`));
  }
  for (const a of accounts.accounts.filter((a) => a.state !== "active")) {
    items.push(el("li", { "data-account": a.name }, badge(a.state.toUpperCase(), "PAUSED"), ` account ${a.name}${a.reason ? `: ${a.reason}` : ""}`));
  }
  $("held-list").replaceChildren(...(items.length ? items : [el("li", { class: "empty" }, "Nothing paused or suspended.")]));
}

function showBuckets(answer) {
  filled("buckets");
  table(
    $("bucket-list"),
    ["group", "source", "rate /s", "sessions", "in flight", "nodes"],
    answer.buckets.map((b) => [b.group, b.source, Number(b.rate), b.sessions, b.in_flight, b.nodes]),
    "No bucket yet.",
  );
}

function showWarmup(answer) {
  filled("warmup");
  table(
    $("warmup-list"),
    ["address", "provider", "day", "sent", "deferred", "complaints"],
    answer.warmup.map((w) => [w.address, w.provider, w.day, w.sent, w.deferred, w.complaints]),
    "No address warming.",
  );
}

function showAccounts(answer) {
  filled("accounts");
  table(
    $("account-list"),
    ["account", "pool", "state", "health", "today", "sending"],
    answer.accounts.map((a) => [a.name, a.pool, a.state, a.health === null || a.health === undefined ? "-" : Number(a.health), a.daily_cap ? `${a.today} / ${a.daily_cap}` : a.today, a.sending ? "yes" : "no"]),
    "No sending account.",
  );
}

function showReputation(answer, suspended) {
  filled("reputation");
  const auto = new Set(suspended.paused_tenants.filter((t) => t.paused_by === "auto").map((t) => t.tenant));
  const rate = (n, of) => (of ? `${((100 * n) / of).toFixed(2)}%` : "-");
  table(
    $("reputation-list"),
    ["tenant", "", "delivered 1h", "bounced", "complaints", "24h"],
    answer.windows.map((w) => {
      const h = w["1h"];
      const sent = h.delivered + h.bounced;
      return [w.key, auto.has(w.key) ? badge("AUTO-PAUSED", "auto") : "", h.delivered, rate(h.bounced, sent), rate(h.complained, h.delivered), w["24h"].delivered];
    }),
    "Nothing counted in the last 24 hours.",
  );
}

function showNodes(answer) {
  filled("nodes");
  const now = Date.parse(answer.now);
  table(
    $("node-list"),
    ["node", "host", "", "heartbeat", "delivers", "started"],
    answer.nodes.map((n) => [n.id, `${n.hostname} (${n.pid})`, badge(n.live ? "live" : "down"), `${age(n.heartbeat_at, now)} ago`, n.delivers ? "yes" : "no", `${age(n.started_at, now)} ago`]),
    "No node registered.",
  );
}

// --- refreshing ---------------------------------------------------------------

async function refresh() {
  timer = null;
  const now = Date.now();
  const slow = now - slowReadAt >= SLOW_EVERY;
  // The slow reads go out with the others; each is shown when it comes, the rest without waiting for them.
  const overview = slow ? get("/v1/queue/overview") : null;
  const reputation = slow ? get("/v1/reputation?scope=tenant") : null;
  for (const read of [overview, reputation]) read?.catch(() => {}); // awaited below, unless a read before failed
  try {
    const [suspended, accounts, buckets, warmup, nodes, rate, campaigns] = await Promise.all([
      get("/v1/suspensions"),
      get("/v1/accounts"),
      get("/v1/buckets"),
      get("/v1/warmup"),
      get("/v1/nodes"),
      get(`/v1/rate?minutes=${MINUTES}`),
      campaignsRouted || slow ? get("/v1/campaigns") : undefined,
    ]);
    if (campaigns !== undefined) {
      campaignsRouted = campaigns !== null;
      campaignsSeen = campaigns === null ? [] : Array.isArray(campaigns) ? campaigns : campaigns.campaigns || [];
      showCampaigns(campaigns);
    }
    showHeld(suspended, accounts, campaignsSeen);
    showBuckets(buckets);
    showWarmup(warmup);
    showAccounts(accounts);
    showNodes(nodes);
    showRate(rate);
    signedIn(true);
    if (slow) {
      await Promise.all([overview.then(showQueue), reputation.then((r) => showReputation(r, suspended))]);
      slowReadAt = now;
    }
    $("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
  } catch (error) {
    if (error instanceof SignedOut) {
      signedIn(false);
      return;
    }
    $("updated").textContent = `not updated: ${error.message}`;
  }
  timer = setTimeout(refresh, EVERY);
}

function signedIn(yes) {
  $("status").hidden = !yes;
  $("logout").hidden = !yes;
  $("login").hidden = yes;
  if (!yes) {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    $("token").focus();
  }
}

async function logIn(event) {
  event.preventDefault();
  const error = $("login-error");
  const answer = await fetch("/page/login", { method: "POST", body: new URLSearchParams({ token: $("token").value }) });
  if (answer.ok) {
    error.hidden = true;
    $("token").value = "";
    slowReadAt = 0;
    refresh();
    return;
  }
  error.textContent = answer.status === 401 ? "Wrong token." : `Refused (${answer.status}).`;
  error.hidden = false;
}

async function logOut() {
  await fetch("/page/logout", { method: "POST" });
  signedIn(false);
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", logIn);
  $("logout").addEventListener("click", logOut);
  refresh();
});
