#!/usr/bin/env python3
"""Every link to a heading in the crate's built docs lands on one.

rustdoc checks that an intra-doc link names an item, not that its
`#fragment` names a heading there: a renamed heading leaves a link that
opens the page at its top. This reads `target/doc/paceline` (after
`cargo doc`) and fails, listing them, on links whose fragment is no `id`
in the page they point to. Fragments rustdoc writes itself (`#method.x`,
source line numbers) are its own to keep, and skipped.
"""
import html
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "target/doc/paceline"
ids = {}


def ids_of(path):
    if path not in ids:
        try:
            with open(path, encoding="utf-8") as f:
                ids[path] = set(re.findall(r'\sid="([^"]+)"', f.read()))
        except OSError:
            ids[path] = None
    return ids[path]


broken = []
for folder, _, files in os.walk(ROOT):
    for name in files:
        if not name.endswith(".html"):
            continue
        page = os.path.join(folder, name)
        with open(page, encoding="utf-8") as f:
            hrefs = re.findall(r'href="([^"#]*)#([^"]+)"', f.read())
        for path, fragment in hrefs:
            fragment = html.unescape(fragment)
            # rustdoc's own anchors: items (`method.x`) and source lines.
            if path.startswith(("http:", "https:")) or "." in fragment or fragment[0].isdigit():
                continue
            target = os.path.normpath(os.path.join(folder, path)) if path else page
            known = ids_of(target)
            if known is not None and fragment not in known:
                broken.append(f"{page}: {path}#{fragment}")

if not os.path.isdir(ROOT):
    sys.exit(f"{ROOT} not found: run cargo doc first")
for line in sorted(set(broken)):
    print(line)
sys.exit(f"{len(set(broken))} links to a heading that is not there" if broken else 0)
