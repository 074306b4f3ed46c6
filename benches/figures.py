#!/usr/bin/env python3
"""Turns the `TIME`/`RATIO`/`RATE` lines of `cargo bench --bench core` into
the figures table in docs/figures.md and an SVG chart (issue 12 item 6).

    cargo bench --bench core | tee /tmp/bench.txt
    cargo bench --bench scale | tee /tmp/scale.txt
    python3 benches/figures.py /tmp/bench.txt /tmp/scale.txt --readme docs/figures.md --svg benches/figures.svg

Several runs may be passed (files or `-` for stdin); each ratio's median
over the runs is shown, and every run's value beside it. The table
is written between `<!-- figures:begin -->` and `<!-- figures:end -->`.

`--groups eddsa,es256` keeps the ratios of those groups only (the second
column of `LABELS`), and `--marker NAME` writes between `<!-- NAME:begin -->`
and `<!-- NAME:end -->` instead: how docs/figures.md's "Asymmetric access
tokens" table is made from benches/runs/asym*.txt.
"""
import argparse
import statistics
import sys

LABELS = {
    "sign_over_floor": ("`Keyring::sign` / pre-keyed HMAC floor", "hs256"),
    "sign_speedup_over_jsonwebtoken": ("`jsonwebtoken::encode` / `Keyring::sign`", "hs256"),
    "verify_over_floor": ("`Keyring::verify_with` (borrowed) / floor", "hs256"),
    "verify_speedup_over_jsonwebtoken": ("`jsonwebtoken::decode` / `Keyring::verify_with`", "hs256"),
    "verify_owned_over_floor": ("`Keyring::verify` (owned claims) / floor", "hs256"),
    "verify_owned_speedup_over_jsonwebtoken": ("`jsonwebtoken::decode` / `Keyring::verify`", "hs256"),
    "bearer_over_bare_verify_memory": ("`verify_bearer` with grant / bare verify, memory, 1 grant", "engine"),
    "bearer_over_bare_verify_redb": ("`verify_bearer` with grant / bare verify, redb, 1 grant", "engine"),
    "redirect_speedup_over_url": ("`url` parse + join / `SafePath::new`", "redirect"),
    "eddsa_sign_over_floor": ("EdDSA `Keyring::sign_ref_with` / `ed25519-dalek` sign", "eddsa"),
    "eddsa_sign_speedup_over_jsonwebtoken": ("EdDSA `jsonwebtoken::encode` / `Keyring::sign_ref_with`", "eddsa"),
    "eddsa_verify_over_floor": ("EdDSA `Keyring::verify_with` (borrowed) / `ed25519-dalek` `verify_strict`", "eddsa"),
    "eddsa_verify_speedup_over_jsonwebtoken": ("EdDSA `jsonwebtoken::decode` / `Keyring::verify_with`", "eddsa"),
    "es256_sign_over_floor": ("ES256 `Keyring::sign_ref_with` / `p256` sign", "es256"),
    "es256_sign_speedup_over_jsonwebtoken": ("ES256 `jsonwebtoken::encode` / `Keyring::sign_ref_with`", "es256"),
    "es256_verify_over_floor": ("ES256 `Keyring::verify_with` (borrowed) / `p256` verify", "es256"),
    "es256_verify_speedup_over_jsonwebtoken": ("ES256 `jsonwebtoken::decode` / `Keyring::verify_with`", "es256"),
    "eddsa_bearer_over_bare_verify_memory": ("EdDSA `verify_bearer` with grant / bare verify, memory, 1 grant", "eddsa_bearer"),
    "eddsa_resource_server_over_verify_bearer": ("EdDSA resource server (published key set, no store) / `verify_bearer`", "eddsa_bearer"),
    "bearer_over_bare_verify_memory_1m": ("`verify_bearer` with grant / bare verify, memory, 1 000 000 grants", "scale"),
    "scale_bare_jwt_verify_1m_over_10k": ("bare verify, 1 000 000 / 10 000 grants", "scale"),
    "scale_bearer_1m_over_10k": ("`verify_bearer`, 1 000 000 / 10 000 grants", "scale"),
    "scale_refresh_1m_over_10k": ("refresh rotation, 1 000 000 / 10 000 grants", "scale"),
    "scale_decide_1m_over_10k": ("consent (`decide` in a caller's txn), 1 000 000 / 10 000 grants", "scale"),
    "scale_exchange_1m_over_10k": ("code exchange (`token` in a caller's txn), 1 000 000 / 10 000 grants", "scale"),
}


def read_runs(paths):
    runs = []
    for path in paths:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        run = {"time": {}, "ratio": {}, "rate": {}}
        for line in text.splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "TIME" and len(parts) == 3:
                run["time"][parts[1]] = float(parts[2])
            elif parts[0] == "RATIO" and len(parts) >= 5:
                num = parts[5] if len(parts) > 5 else ""
                den = parts[6] if len(parts) > 6 else ""
                run["ratio"][parts[1]] = (float(parts[2]), parts[3], float(parts[4]), num, den)
            elif parts[0] == "RATE" and len(parts) == 5:
                run["rate"][parts[1]] = (float(parts[2]), parts[3], float(parts[4]))
        if run["ratio"]:
            runs.append(run)
    if not runs:
        sys.exit("figures.py: no RATIO lines in the input")
    return runs


def fmt_ns(ns):
    return f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.0f} ns"


def met(value, op, target):
    if op == "le":
        return value <= target
    if op == "ge":
        return value >= target
    return None


def rows(runs, groups=None):
    out = []
    # Every ratio any run measured (`--bench core` and `--bench scale` runs
    # report different ones), in the order first seen.
    names = list(dict.fromkeys(n for r in runs for n in r["ratio"]))
    if groups is not None:
        names = [n for n in names if LABELS.get(n, (n, ""))[1] in groups]
    for name in names:
        values = [r["ratio"][name][0] for r in runs if name in r["ratio"]]
        _, op, target, num, den = next(r["ratio"][name] for r in runs if name in r["ratio"])
        med = statistics.median(values)
        times = lambda k: statistics.median([r["time"][k] for r in runs if k in r["time"]]) if k else None
        out.append(
            {
                "name": name,
                "label": LABELS.get(name, (name, ""))[0],
                "value": med,
                "values": values,
                "op": op,
                "target": target,
                "num": num,
                "den": den,
                "num_ns": times(num),
                "den_ns": times(den),
                "met": met(med, op, target),
            }
        )
    return out


def table(runs, groups=None):
    lines = [
        "| ratio | measured (median of the runs that measured it; each run) | target | met | numerator | denominator (floor or peer) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows(runs, groups):
        target = {"le": f"≤ {r['target']}×", "ge": f"≥ {r['target']}×"}.get(r["op"], "—")
        ok = {True: "yes", False: "**no**", None: "—"}[r["met"]]
        each = ", ".join(f"{v:.2f}" for v in r["values"])
        lines.append(
            f"| {r['label']} | **{r['value']:.2f}×** ({each}) | {target} | {ok} "
            f"| {fmt_ns(r['num_ns'])} | {fmt_ns(r['den_ns'])} |"
        )
    rates = list(dict.fromkeys(n for r in runs for n in r["rate"])) if groups is None else []
    for name in rates:
        _, op, target = next(r["rate"][name] for r in runs if name in r["rate"])
        vals = [r["rate"][name][0] for r in runs if name in r["rate"]]
        med = statistics.median(vals)
        ok = "yes" if met(med, op, target) else "**no**"
        lines.append(
            f"| refresh rotation, memory store (per second, one core) | **{med:,.0f}/s** "
            f"({', '.join(f'{v:,.0f}' for v in vals)}) | ≥ {target:,.0f}/s | {ok} | | |"
        )
    return "\n".join(lines) + "\n"


def svg(runs):
    """One bar per ratio: the share of its target's budget used (a bar
    beyond the line misses the target)."""
    data = [r for r in rows(runs) if r["op"] in ("le", "ge")]
    width, bar, gap, left, top = 940, 22, 12, 330, 40
    scale = 300.0  # pixels for "exactly at target"
    height = top + len(data) * (bar + gap) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="14">Portcullis hot path: share of each target used (line = target; shorter is better)</text>',
        f'<line x1="{left + scale}" y1="{top - 8}" x2="{left + scale}" y2="{height - 20}" stroke="#c00" stroke-dasharray="4 3"/>',
    ]
    for i, r in enumerate(data):
        share = r["value"] / r["target"] if r["op"] == "le" else r["target"] / r["value"]
        y = top + i * (bar + gap)
        colour = "#2a7" if share <= 1 else "#d64"
        w = min(share, 1.6) * scale
        label = r["label"].replace("`", "")
        shown = f"{r['value']:.2f}× ({'≤' if r['op'] == 'le' else '≥'} {r['target']}×)"
        parts.append(f'<text x="10" y="{y + 15}">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 15}">{shown}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="bench output files, or - for stdin")
    ap.add_argument("--readme", help="README to update between the figures markers")
    ap.add_argument("--svg", help="where to write the chart")
    ap.add_argument("--groups", help="comma-separated groups: only their ratios")
    ap.add_argument("--marker", default="figures", help="the README's markers: <!-- MARKER:begin -->")
    args = ap.parse_args()
    runs = read_runs(args.runs)
    groups = set(args.groups.split(",")) if args.groups else None
    md = table(runs, groups)
    if args.readme:
        text = open(args.readme, encoding="utf-8").read()
        begin, end = f"<!-- {args.marker}:begin -->\n", f"<!-- {args.marker}:end -->"
        a, b = text.index(begin) + len(begin), text.index(end)
        open(args.readme, "w", encoding="utf-8").write(text[:a] + md + text[b:])
    if args.svg:
        open(args.svg, "w", encoding="utf-8").write(svg(runs))
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
