// paco-data annotate: the page. Plain JavaScript, no build step, nothing remote.
// Keyboard first: 1-9 pick candidates best first, = ties the last pick with the one before,
// Backspace undoes, Esc clears, Enter submits, S skips. The mouse drags cards (pointer events).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const VIEWS = ["key-view", "name-view", "annotate-view", "done-view", "progress-view"];
  const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$/;
  const STORAGE_KEY = "paco-annotate-annotator";

  const state = {
    config: null,
    annotator: null,
    view: null, // the instance on screen (from the server)
    ranking: [], // tie groups of candidate indices, best first
    history: [], // earlier rankings, for undo
    started: 0,
    busy: false,
  };

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, options = {}) {
    let response;
    try {
      response = await fetch(path, {
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        ...options,
      });
    } catch (_) {
      throw new ApiError(0, "unreachable",
        "Cannot reach the annotation server (is `paco-data annotate` still running?). " +
        "Nothing was stored; your ranking is kept: press Enter to try again.");
    }
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (!response.ok) {
      const e = body && body.error ? body.error : {};
      throw new ApiError(response.status, e.code || "http",
        e.message || `The server answered ${response.status}.`);
    }
    return body;
  }

  // ------------------------------------------------------------------ small helpers
  function showOnly(id) {
    for (const v of VIEWS) $(v).hidden = v !== id;
    document.body.dataset.view = id;
  }

  function say(text, kind = "info") {
    const m = $("message");
    m.textContent = text || "";
    m.className = kind === "error" ? "message error" : "message";
    m.hidden = !text;
    m.dataset.kind = kind;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(x, digits = 2) {
    return x === null || x === undefined ? "–" : Number(x).toFixed(digits);
  }

  function pct(a, b) {
    return b ? `${Math.round((100 * a) / b)}%` : "–";
  }

  function ago(iso) {
    if (!iso) return "–";
    const seconds = (Date.now() - Date.parse(iso)) / 1000;
    if (!(seconds >= 0) || seconds < 60) return "just now";
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    return iso.replace("T", " ").slice(0, 19);
  }

  // ------------------------------------------------------------------ start-up
  async function start() {
    const params = new URLSearchParams(location.search);
    try {
      state.config = await api("/api/config");
    } catch (err) {
      say(err.message, "error");
      return;
    }
    $("work-name").textContent = state.config.work_name ? `· ${state.config.work_name}` : "";
    $("name-rule").textContent = `(${state.config.annotator_rule})`;
    if (state.config.needs_key && !state.config.authorized) {
      const key = params.get("key");
      if (key && (await unlock(key))) {
        params.delete("key");
        history.replaceState(null, "", location.pathname + (params.size ? `?${params}` : ""));
      } else {
        showOnly("key-view");
        $("key-input").focus();
        return;
      }
    }
    route();
  }

  async function unlock(key) {
    try {
      await api("/api/session", { method: "POST", body: JSON.stringify({ key }) });
      state.config.authorized = true;
      say("");
      return true;
    } catch (err) {
      say(err.message, "error");
      return false;
    }
  }

  function pickAnnotator() {
    const params = new URLSearchParams(location.search);
    const candidates = [params.get("annotator"), localStorage.getItem(STORAGE_KEY),
      state.config.annotator];
    for (const name of candidates) {
      if (name && NAME_PATTERN.test(name)) return name;
    }
    return null;
  }

  function setAnnotator(name) {
    state.annotator = name;
    localStorage.setItem(STORAGE_KEY, name);
    $("annotator-name").textContent = name;
    const params = new URLSearchParams(location.search);
    if (params.get("annotator") !== name) {
      params.set("annotator", name);
      history.replaceState(null, "", `${location.pathname}?${params}`);
    }
  }

  function route() {
    const progress = location.pathname === "/progress";
    $("nav-annotate").classList.toggle("active", !progress);
    $("nav-progress").classList.toggle("active", progress);
    const name = pickAnnotator();
    if (name) setAnnotator(name);
    if (progress) {
      loadProgress();
    } else if (!name) {
      askName();
    } else {
      loadNext();
    }
  }

  function askName() {
    showOnly("name-view");
    $("name-input").value = state.annotator || "";
    $("name-input").focus();
  }

  function submitName() {
    const name = $("name-input").value.trim();
    if (!NAME_PATTERN.test(name)) {
      say(`"${name}" is not a usable name: ${state.config.annotator_rule}.`, "error");
      return;
    }
    say("");
    setAnnotator(name);
    if (location.pathname === "/progress") loadProgress();
    else loadNext();
  }

  // ------------------------------------------------------------------ annotation screen
  async function loadNext(after) {
    let query = `/api/next?annotator=${encodeURIComponent(state.annotator)}`;
    if (after) query += `&after=${encodeURIComponent(after)}`;
    try {
      const res = await api(query);
      if (res.done) showDone();
      else render(res.instance);
    } catch (err) {
      handleLoadError(err);
    }
  }

  function handleLoadError(err) {
    if (err.status === 401) {
      showOnly("key-view");
      $("key-input").focus();
    }
    say(err.message, "error");
  }

  function showDone() {
    state.view = null;
    document.body.dataset.instance = "";
    $("position").textContent = "all ranked";
    showOnly("done-view");
  }

  function render(view) {
    state.view = view;
    state.ranking = [];
    state.history = [];
    state.started = performance.now();
    document.body.dataset.instance = view.instance_id;
    showOnly("annotate-view");
    $("position").textContent =
      `instance ${view.index} of ${view.total} · you ranked ${view.ranked_by_you}`;
    $("reference-img").src = view.reference.url;
    $("reference-img").parentElement.classList.remove("broken");
    $("reference-text").textContent = view.reference.text;
    $("category").textContent = view.category;
    $("prompt-id").textContent = `prompt ${view.prompt_id}`;
    $("theme").textContent = view.theme;
    const criteria = $("criteria");
    criteria.replaceChildren();
    for (const dim of view.criteria) {
      for (const item of dim.items) {
        const row = el("div", "criterion");
        row.append(el("b", "", `${dim.dimension} · ${item.title}`), el("span", "", item.text));
        criteria.append(row);
      }
    }
    const box = $("candidates");
    box.replaceChildren();
    view.candidates.forEach((c, i) => {
      const card = el("figure", "card candidate");
      card.dataset.index = String(i);
      card.dataset.id = c.id;
      const img = el("img");
      img.src = c.url;
      img.alt = `candidate ${i + 1}`;
      img.draggable = false;
      img.addEventListener("error", () => card.classList.add("broken"));
      card.append(el("span", "badge", String(i + 1)), img, el("figcaption", "muted", c.text));
      box.append(card);
    });
    $("reference-img").onerror = () => $("reference-img").parentElement.classList.add("broken");
    if (view.problems.length) say(view.problems.join(" "), "error");
    else if (view.already_ranked) say("You have ranked this instance already.", "error");
    else say("");
    drawRanking();
  }

  function groupOf(i) {
    return state.ranking.findIndex((g) => g.includes(i));
  }

  function change(next) {
    state.history.push(state.ranking);
    state.ranking = next.filter((g) => g.length).map((g) => [...g].sort((a, b) => a - b));
    drawRanking();
  }

  function pick(i) {
    if (!state.view || i >= state.view.candidates.length) return;
    if (groupOf(i) >= 0) {
      say(`Candidate ${i + 1} is placed already (Backspace undoes).`, "error");
      return;
    }
    say("");
    change([...state.ranking.map((g) => [...g]), [i]]);
  }

  function tie() {
    if (state.ranking.length < 2) {
      say("Pick two candidates first; = ties the last pick with the one before it.", "error");
      return;
    }
    const groups = state.ranking.map((g) => [...g]);
    const last = groups.pop();
    groups[groups.length - 1].push(...last);
    change(groups);
  }

  function undo() {
    if (!state.history.length) return;
    state.ranking = state.history.pop();
    drawRanking();
  }

  function clear() {
    if (state.ranking.length) change([]);
  }

  // Move candidate i: into a gap (a new group at position `at`), onto a group (tie), or back.
  function place(i, target) {
    const kept = state.ranking.map((g) => g.filter((x) => x !== i));
    if (target.type === "group") {
      kept[target.at].push(i);
    } else if (target.type === "gap") {
      const at = kept.slice(0, target.at).filter((g) => g.length).length;
      const groups = kept.filter((g) => g.length);
      groups.splice(at, 0, [i]);
      change(groups);
      return;
    }
    change(kept);
  }

  function drawRanking() {
    const list = $("ranking");
    list.replaceChildren();
    const gap = (at) => {
      const g = el("li", "gap");
      g.dataset.at = String(at);
      return g;
    };
    state.ranking.forEach((group, k) => {
      list.append(gap(k));
      const li = el("li", group.length > 1 ? "group tied" : "group");
      li.dataset.at = String(k);
      li.append(el("span", "place", `#${k + 1}`));
      group.forEach((i, j) => {
        if (j) li.append(el("span", "eq", "="));
        const chip = el("div", "chip");
        chip.dataset.index = String(i);
        const img = el("img");
        img.src = state.view.candidates[i].url;
        img.alt = `candidate ${i + 1}`;
        img.draggable = false;
        chip.append(img, el("span", "num", String(i + 1)));
        li.append(chip);
      });
      list.append(li);
    });
    list.append(gap(state.ranking.length));
    if (!state.ranking.length) {
      list.append(el("li", "hint", "Press 1–9 for the best candidate first, or drag cards here."));
    }
    for (const card of document.querySelectorAll(".candidate")) {
      const k = groupOf(Number(card.dataset.index));
      card.classList.toggle("placed", k >= 0);
      let tag = card.querySelector(".rank-of");
      if (k >= 0) {
        if (!tag) card.append((tag = el("span", "rank-of")));
        tag.textContent = `#${k + 1}`;
      } else if (tag) {
        tag.remove();
      }
    }
    const left = state.view ? state.view.candidates.length - state.ranking.flat().length : 0;
    $("submit").disabled = left > 0;
    document.body.dataset.ranking = JSON.stringify(state.ranking);
  }

  async function submit() {
    if (state.busy || !state.view) return;
    const view = state.view;
    const left = view.candidates.length - state.ranking.flat().length;
    if (left > 0) {
      say(`Place every candidate first: ${left} left.`, "error");
      return;
    }
    state.busy = true;
    const body = {
      annotator: state.annotator,
      instance_id: view.instance_id,
      ranking: state.ranking.map((g) => g.map((i) => view.candidates[i].id)),
      seconds: Math.min(86400, Math.round((performance.now() - state.started) / 100) / 10),
    };
    try {
      const res = await api("/api/rankings", { method: "POST", body: JSON.stringify(body) });
      if (res.done) showDone();
      else render(res.next);
      say(`Saved your ranking of instance ${view.index}.`);
    } catch (err) {
      let text = err.message;
      if (err.code === "already_ranked" || err.code === "stale_instance") {
        text += " Press S for the next instance.";
      }
      say(text, "error");
    } finally {
      state.busy = false;
    }
  }

  function skip() {
    if (state.view) loadNext(state.view.instance_id);
  }

  // ------------------------------------------------------------------ keyboard
  document.addEventListener("keydown", (e) => {
    if (e.target.closest && e.target.closest("input")) {
      if (e.key === "Enter") {
        e.preventDefault();
        if (e.target.id === "name-input") submitName();
        if (e.target.id === "key-input") unlock($("key-input").value).then((ok) => ok && route());
      }
      return;
    }
    if ($("annotate-view").hidden || e.ctrlKey || e.metaKey || e.altKey) return;
    const digit = /^[1-9]$/.test(e.key) ? Number(e.key) : null;
    if (digit !== null) pick(digit - 1);
    else if (e.key === "=" || e.key === "+" || e.key === "t") tie();
    else if (e.key === "Backspace") undo();
    else if (e.key === "Escape") clear();
    else if (e.key === "Enter") submit();
    else if (e.key === "s" || e.key === "S") skip();
    else return;
    e.preventDefault();
  });

  // ------------------------------------------------------------------ mouse: drag and drop
  let drag = null;

  function dropTarget(x, y) {
    const node = document.elementFromPoint(x, y);
    if (!node) return null;
    const gap = node.closest(".gap");
    if (gap) return { type: "gap", at: Number(gap.dataset.at) };
    const group = node.closest(".group");
    if (group) return { type: "group", at: Number(group.dataset.at) };
    if (node.closest("#ranking")) return { type: "gap", at: state.ranking.length };
    if (node.closest("#candidates")) return { type: "pool" };
    return null;
  }

  function highlight(target) {
    for (const n of document.querySelectorAll(".over")) n.classList.remove("over");
    if (!target) return;
    if (target.type === "group") {
      document.querySelector(`.group[data-at="${target.at}"]`)?.classList.add("over");
    } else if (target.type === "gap") {
      const gap = document.querySelector(`.gap[data-at="${target.at}"]`);
      (gap || $("ranking")).classList.add("over");
      $("ranking").classList.add("over");
    }
  }

  document.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || !state.view || $("annotate-view").hidden) return;
    const node = e.target.closest(".candidate, .chip");
    if (!node) return;
    e.preventDefault();
    drag = { index: Number(node.dataset.index), chip: node.classList.contains("chip"),
      x: e.clientX, y: e.clientY, ghost: null };
  });

  document.addEventListener("pointermove", (e) => {
    if (!drag) return;
    if (!drag.ghost) {
      if (Math.hypot(e.clientX - drag.x, e.clientY - drag.y) < 5) return;
      drag.ghost = el("div", "card ghost");
      const img = el("img");
      img.src = state.view.candidates[drag.index].url;
      drag.ghost.append(img);
      document.body.append(drag.ghost);
    }
    drag.ghost.style.transform = `translate(${e.clientX - 48}px, ${e.clientY - 48}px)`;
    highlight(dropTarget(e.clientX, e.clientY));
  });

  document.addEventListener("pointerup", (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    highlight(null);
    if (!d.ghost) {
      // A click: a card is picked next, a chip goes back to the candidates.
      if (d.chip) place(d.index, { type: "pool" });
      else pick(d.index);
      return;
    }
    d.ghost.remove();
    const target = dropTarget(e.clientX, e.clientY);
    if (target) {
      say("");
      place(d.index, target);
    }
  });

  // ------------------------------------------------------------------ progress page
  async function loadProgress() {
    showOnly("progress-view");
    let p;
    try {
      p = await api("/api/progress");
    } catch (err) {
      handleLoadError(err);
      return;
    }
    $("position").textContent = "";
    const a = p.agreement;
    const stats = [
      [`${p.ranked} / ${p.instances}`, `instances ranked (${pct(p.ranked, p.instances)})`],
      [String(p.rankings), `rankings by ${p.annotators.length} annotator(s)`],
      [fmt(a.kendall_w_mean), `Kendall's W, mean over ${a.instances_multi_annotated} instances`],
      [fmt(a.pairwise_agreement), `pairwise agreement, ${a.pairwise_comparisons} comparisons`],
    ];
    const summary = $("summary");
    summary.replaceChildren();
    for (const [value, what] of stats) {
      const box = el("div", "stat");
      box.append(el("div", "value", value), el("div", "what", what));
      summary.append(box);
    }
    const rows = $("annotators-table").querySelector("tbody");
    rows.replaceChildren();
    for (const r of p.annotators) {
      const tr = el("tr");
      tr.dataset.annotator = r.annotator;
      const who = el("td", "", r.annotator);
      if (!r.in_store) who.append(el("span", "muted small", " · from a ranking file"));
      tr.append(
        who, el("td", "num", String(r.rankings)),
        el("td", "num", pct(r.rankings, p.instances)), el("td", "num", fmt(r.median_seconds, 1)),
        el("td", "num", fmt(r.agreement_with_others)), el("td", "", ago(r.last)));
      rows.append(tr);
    }
    const cats = $("categories-table").querySelector("tbody");
    cats.replaceChildren();
    for (const c of p.categories) {
      const tr = el("tr");
      tr.dataset.category = c.category;
      const meter = el("span", "meter");
      const fill = el("span");
      fill.style.width = pct(c.ranked, c.instances).replace("–", "0%");
      meter.append(fill);
      const ranked = el("td");
      ranked.append(meter, document.createTextNode(`${c.ranked} (${pct(c.ranked, c.instances)})`));
      tr.append(el("td", "", c.category), el("td", "num", String(c.instances)), ranked,
        el("td", "num", String(c.rankings)), el("td", "num", String(c.multi_annotated)),
        el("td", "num", fmt(c.kendall_w_mean)));
      cats.append(tr);
    }
    document.body.dataset.progress = "loaded";
  }

  // ------------------------------------------------------------------ buttons
  document.addEventListener("DOMContentLoaded", () => {
    $("undo").addEventListener("click", undo);
    $("tie").addEventListener("click", tie);
    $("clear").addEventListener("click", clear);
    $("skip").addEventListener("click", skip);
    $("submit").addEventListener("click", submit);
    $("change-annotator").addEventListener("click", askName);
    $("name-submit").addEventListener("click", submitName);
    $("key-submit").addEventListener("click", () =>
      unlock($("key-input").value).then((ok) => ok && route()));
    start();
  });
})();
