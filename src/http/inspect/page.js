(function () {
  "use strict";
  // The buckets the server selected (see the /json document), rendered
  // here as text nodes: a key is never markup.
  var data = JSON.parse(document.getElementById("paceline-data").textContent);
  var form = document.getElementById("filter");
  var table = document.getElementById("buckets");
  var status = document.getElementById("status");
  var TEXT = { limiter: true, key: true };
  var VALUE = {
    limiter: function (r) { return r.limiter; },
    key: function (r) { return r.order; },
    rate: function (r) { return r.per_second; },
    burst: function (r) { return r.burst; },
    fill: function (r) { return r.fill; },
    next_free: function (r) { return r.next_free; },
    idle: function (r) { return r.idle; },
    refused: function (r) { return r.refused; }
  };

  function field(name) { return form.elements[name]; }

  // A fill bound as the server reads it: empty is none, else a number >= 0.
  function bound(name) {
    var v = field(name).value.trim();
    if (v === "") return null;
    var x = Number(v);
    return isFinite(x) && x >= 0 ? x : NaN;
  }

  function state() {
    var sort = field("sort").value || "key";
    return {
      prefix: field("prefix").value,
      limiter: field("limiter").value || null,
      fill_gt: bound("fill_gt"),
      fill_lt: bound("fill_lt"),
      at_rest: field("at_rest").checked,
      sort: VALUE[sort] ? sort : "key",
      order: field("order").value || (TEXT[sort] ? "asc" : "desc"),
      limit: Number(field("limit").value) || data.query.limit
    };
  }

  // The server's order: by code unit here, by byte there; the two agree
  // except for characters beyond U+FFFF against U+E000..U+FFFF.
  function cmp(a, b) { return a < b ? -1 : a > b ? 1 : 0; }

  // A key's place as the server sorts keys: IP addresses first, IPv4 then
  // IPv6, each by number (fixed-width hex here), then other keys by text.
  // The addresses read are exactly those Rust's IpAddr parses.
  function v4(text) {
    var m = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/.exec(text);
    if (!m || m.slice(1).some(function (d) { return d > 255; })) return null;
    return m.slice(1).map(function (d) { return (256 + Number(d)).toString(16).slice(1); }).join("");
  }
  function v6(text) {
    var halves = text.split("::");
    if (halves.length > 2) return null;
    var parts = halves.map(function (half, i) {
      var out = "";
      var groups = half === "" ? [] : half.split(":");
      for (var g = 0; g < groups.length; g++) {
        // Four bytes of IPv4 may end the address, in the place of two groups.
        var quad = i === halves.length - 1 && g === groups.length - 1 ? v4(groups[g]) : null;
        if (quad === null && !/^[0-9a-fA-F]{1,4}$/.test(groups[g])) return null;
        out += quad === null ? ("000" + groups[g].toLowerCase()).slice(-4) : quad;
      }
      return out;
    });
    if (parts.indexOf(null) >= 0) return null;
    var zeros = 32 - parts.join("").length;
    if (halves.length === 1 ? zeros !== 0 : zeros < 4) return null;
    return parts[0] + new Array(zeros + 1).join("0") + (parts[1] || "");
  }
  function keyOrder(key) {
    var a = v4(key);
    if (a !== null) return "04" + a + " " + key;
    a = v6(key);
    return a !== null ? "06" + a + " " + key : "1" + key;
  }
  data.buckets.forEach(function (r) { r.order = keyOrder(r.key); });

  // Whether bucket r passes the filters of s, but for the one on rest.
  function keeps(s, r) {
    return r.key.indexOf(s.prefix) === 0 &&
      (s.limiter === null || r.limiter === s.limiter) &&
      (s.fill_gt === null || r.fill > s.fill_gt) &&
      (s.fill_lt === null || r.fill < s.fill_lt);
  }

  function select(s) {
    var rows = data.buckets.filter(function (r) { return keeps(s, r) && (s.at_rest || r.fill > 0); });
    var value = VALUE[s.sort];
    var sign = s.order === "desc" ? -1 : 1;
    rows.sort(function (a, b) {
      return sign * cmp(value(a), value(b)) || cmp(a.limiter, b.limiter) || cmp(a.order, b.order);
    });
    return rows.slice(0, s.limit);
  }

  // How many buckets at rest the view leaves out: the server's count for
  // the filters it ran, counted here when the rows loaded hold them all;
  // null when neither is known.
  function resting(s) {
    var q = data.query;
    if (s.at_rest) return 0;
    if (s.prefix === q.prefix && s.limiter === q.limiter && s.fill_gt === q.fill_gt &&
        s.fill_lt === q.fill_lt) return data.at_rest;
    if (!q.at_rest || data.matched > data.shown) return null;
    return data.buckets.filter(function (r) { return r.fill === 0 && keeps(s, r); }).length;
  }

  function duration(secs) {
    if (secs === null) return "";
    if (secs < 0.0005) return "0";
    if (secs < 1) return Math.round(secs * 1000) + " ms";
    if (secs < 60) return (Math.round(secs * 10) / 10) + " s";
    if (secs < 3600) return (Math.round(secs / 6) / 10) + " min";
    return (Math.round(secs / 360) / 10) + " h";
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function fillCell(tr, fill) {
    var td = cell(tr, "", "");
    var box = document.createElement("div");
    box.className = "fill";
    var bar = document.createElement("span");
    bar.className = "bar";
    var i = document.createElement("i");
    i.style.width = Math.min(Math.max(fill, 0), 1) * 100 + "%";
    i.className = Math.round(fill * 100) >= 100 ? "hot" : fill > 0.5 ? "warm" : "";
    bar.appendChild(i);
    var pct = document.createElement("span");
    pct.textContent = Math.round(fill * 100) + " %";
    box.appendChild(bar);
    box.appendChild(pct);
    td.appendChild(box);
  }

  // Whether the rows loaded cover the view asked for, or the server must
  // be asked again (a wider filter, or rows left out by the cap).
  function covered(s) {
    var q = data.query;
    return s.prefix.indexOf(q.prefix) === 0 &&
      (q.limiter === null || s.limiter === q.limiter) &&
      (q.fill_gt === null || (s.fill_gt !== null && s.fill_gt >= q.fill_gt)) &&
      (q.fill_lt === null || (s.fill_lt !== null && s.fill_lt <= q.fill_lt)) &&
      (q.at_rest || !s.at_rest) &&
      (data.matched === data.shown || (s.sort === q.sort && s.order === q.order));
  }

  function mirror(s) {
    var p = new URLSearchParams();
    if (s.prefix) p.set("prefix", s.prefix);
    if (s.limiter) p.set("limiter", s.limiter);
    if (field("fill_gt").value.trim()) p.set("fill_gt", field("fill_gt").value.trim());
    if (field("fill_lt").value.trim()) p.set("fill_lt", field("fill_lt").value.trim());
    if (s.at_rest) p.set("at_rest", "1");
    p.set("sort", s.sort);
    p.set("order", s.order);
    if (s.limit !== data.query.limit || field("limit").defaultValue !== String(s.limit)) p.set("limit", s.limit);
    var qs = p.toString();
    history.replaceState(null, "", location.pathname + (qs ? "?" + qs : ""));
    links(qs);
  }

  // The mount point is wherever the page is: /limits or /limits/.
  function links(qs) {
    var base = location.pathname.replace(/\/$/, "");
    document.getElementById("json-link").href = base + "/json" + (qs ? "?" + qs : "");
    document.getElementById("metrics-link").href = base + "/metrics";
  }

  function render() {
    var s = state();
    var tbody = table.tBodies[0];
    var rows = isNaN(s.fill_gt) || isNaN(s.fill_lt) ? [] : select(s);
    var fresh = document.createElement("tbody");
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      cell(tr, r.limiter, "limiter");
      cell(tr, r.key, "key");
      // A key counted by window: its window, count and end for a rate.
      cell(tr, r.window ? "per " + r.window.window + ": " + r.window.count +
        " counted, ends in " + duration(r.window.ends) : r.rate, "");
      cell(tr, String(r.burst), "");
      fillCell(tr, r.fill);
      cell(tr, duration(r.next_free), r.next_free === 0 ? "zero" : "");
      cell(tr, duration(r.idle), "");
      cell(tr, String(r.refused), r.refused === 0 ? "zero" : "");
      fresh.appendChild(tr);
    });
    table.replaceChild(fresh, tbody);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      var col = th.getAttribute("data-col");
      th.setAttribute("aria-sort", col === s.sort ? (s.order === "desc" ? "descending" : "ascending") : "none");
    });
    status.className = "";
    if (isNaN(s.fill_gt) || isNaN(s.fill_lt)) {
      status.textContent = "A fill bound is a number from 0 up, such as 0.5.";
      status.className = "warn";
      return;
    }
    var text = rows.length + " bucket" + (rows.length === 1 ? "" : "s") + " shown";
    if (data.matched > data.shown) {
      text += "; the server matched " + data.matched + " and sent the first " + data.shown;
    }
    var rest = resting(s);
    if (rest) text += "; " + rest + " more at rest, not listed (tick “At rest too” to list them)";
    if (!covered(s)) {
      text += ". The filter goes beyond the rows loaded: press Enter (or Reload) to ask the server.";
      status.className = "warn";
    } else {
      text += ".";
    }
    status.textContent = text;
    mirror(s);
  }

  function sortBy(col) {
    var s = state();
    field("order").value = s.sort === col ? (s.order === "asc" ? "desc" : "asc") : (TEXT[col] ? "asc" : "desc");
    field("sort").value = col;
    render();
  }

  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    var col = th.getAttribute("data-col");
    th.addEventListener("click", function () { sortBy(col); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(col); }
    });
  });
  form.addEventListener("input", render);

  // The limiters' totals.
  var ltbody = document.getElementById("limiters").tBodies[0];
  data.limiters.forEach(function (l) {
    var tr = document.createElement("tr");
    var blank = function (v) { return v === undefined || v === null ? "" : String(v); };
    cell(tr, l.name, "limiter");
    cell(tr, l.kind, "");
    cell(tr, blank(l.rate), "");
    cell(tr, blank(l.burst), "");
    cell(tr, l.kind === "keyed" ? l.keys + " / " + l.max_keys : "", "");
    cell(tr, blank(l.admitted), "");
    cell(tr, blank(l.refused), "");
    cell(tr, blank(l.pruned), "");
    cell(tr, blank(l.evicted), "");
    ltbody.appendChild(tr);
  });

  // The limits in force, each with the layer it came from.
  var ftbody = document.getElementById("in-force").tBodies[0];
  data.limiters.forEach(function (l) {
    (l.limits || []).forEach(function (f) {
      var tr = document.createElement("tr");
      cell(tr, l.name, "limiter");
      cell(tr, f.key === null ? "(default)" : f.key, "key");
      cell(tr, f.rate, "");
      cell(tr, String(f.burst), "");
      // No layer: the limit as built, or as a call set it.
      cell(tr, f.layer === null ? "(no layer)" : f.layer, "");
      ftbody.appendChild(tr);
    });
    if (l.overrides > (l.limits || []).length - 1) {
      var more = document.createElement("tr");
      cell(more, l.name, "limiter");
      cell(more, "\u2026 " + (l.overrides - l.limits.length + 1) + " more overrides", "");
      ftbody.appendChild(more);
    }
  });

  links(location.search.replace(/^\?/, ""));
  render();
})();
